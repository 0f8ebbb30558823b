//! Maps keyed by a pair of names (`(namespace, name)`, `(namespace, network)`) that are looked
//! up by borrowed names: a lookup on a per-event or per-reconcile path builds no owned key.

use std::hash::RandomState;

use hashbrown::Equivalent;

/// A map keyed by two owned names, found by [`Pair`].
pub type PairMap<V> = hashbrown::HashMap<(String, String), V, RandomState>;

/// Two borrowed names: hashes as `(String, String)` does, and compares equal to it.
#[derive(Debug, Clone, Copy, Hash)]
pub struct Pair<'a>(pub &'a str, pub &'a str);

impl Equivalent<(String, String)> for Pair<'_> {
    fn equivalent(&self, key: &(String, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

impl Pair<'_> {
    pub fn to_owned(self) -> (String, String) {
        (self.0.to_owned(), self.1.to_owned())
    }
}

/// The owned key a vacant entry is made with (`PairMap::entry_ref(&pair).or_default()`).
impl From<&Pair<'_>> for (String, String) {
    fn from(pair: &Pair<'_>) -> Self {
        Pair::to_owned(*pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_pair_finds_its_owned_key_and_no_other() {
        let mut map = PairMap::default();
        map.insert(("ns".to_owned(), "web".to_owned()), 1);
        map.insert(("nsw".to_owned(), "eb".to_owned()), 2);
        assert_eq!(map.get(&Pair("ns", "web")), Some(&1));
        assert_eq!(map.get(&Pair("nsw", "eb")), Some(&2));
        assert_eq!(map.get(&Pair("ns", "we")), None);
        assert_eq!(map.get(&Pair("web", "ns")), None);
        *map.entry_ref(&Pair("ns", "web")).or_default() += 10;
        *map.entry_ref(&Pair("ns", "new")).or_default() += 3;
        assert_eq!(map.get(&Pair("ns", "web")), Some(&11));
        assert_eq!(map.get(&Pair("ns", "new")), Some(&3));
    }
}
