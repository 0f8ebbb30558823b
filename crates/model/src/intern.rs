//! Values many pods share (namespaces, node and network names, label keys and values, a
//! template's kept labels and ports) kept once, so that a cached pod costs a pointer for each.

use std::{borrow::Borrow, collections::HashSet, hash::Hash, sync::Arc};

/// A shared string: a name, a key or a value that is the same for many pods.
pub type Name = Arc<str>;

/// Hands out one shared copy of each distinct value. Copies no one else holds any more are
/// dropped when the set has doubled since the last sweep, so it stays within twice what is
/// in use and each value costs its sweep once, amortized.
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    kept: HashSet<Arc<T>>,
    sweep_at: usize,
}

/// The least number of kept values at which a sweep runs.
const FIRST_SWEEP: usize = 1_024;

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            kept: HashSet::new(),
            sweep_at: FIRST_SWEEP,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The shared copy of `value` (a `&str`, a `Vec` for a list, a value itself).
    pub fn get<V: Borrow<T>>(&mut self, value: V) -> Arc<T>
    where
        Arc<T>: From<V>,
    {
        if let Some(kept) = self.kept.get(value.borrow()) {
            return kept.clone();
        }
        if self.kept.len() >= self.sweep_at {
            self.kept.retain(|kept| Arc::strong_count(kept) > 1);
            self.sweep_at = (self.kept.len() * 2).max(FIRST_SWEEP);
        }
        let kept = Arc::from(value);
        self.kept.insert(Arc::clone(&kept));
        kept
    }

    /// How many distinct values are kept (some of them perhaps no longer used).
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy() {
        let mut names = Interner::<str>::default();
        let a = names.get("team-a");
        let b = names.get(String::from("team-a").as_str());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &names.get("team-b")));
        assert_eq!(names.len(), 2);
        let mut lists = Interner::<[u16]>::default();
        assert!(Arc::ptr_eq(&lists.get(vec![1, 2]), &lists.get(&[1, 2][..])));
    }

    #[test]
    fn values_no_one_holds_are_swept_as_the_set_grows() {
        let mut names = Interner::<str>::default();
        let held: Vec<Name> = (0..10)
            .map(|i| names.get(format!("held-{i}").as_str()))
            .collect();
        for i in 0..5 * FIRST_SWEEP {
            names.get(format!("dropped-{i}").as_str());
        }
        assert!(
            names.len() <= 2 * FIRST_SWEEP,
            "kept {} values, most of them unused",
            names.len()
        );
        for (i, name) in held.iter().enumerate() {
            assert!(
                Arc::ptr_eq(name, &names.get(format!("held-{i}").as_str())),
                "a value in use is never swept"
            );
        }
    }
}
