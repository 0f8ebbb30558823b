//! Which pod labels, annotations and conditions the index keeps: the union of what the loaded
//! plugins declare in their `plugin-info` and `condition-keys` (`*` keeps all). Network
//! readiness conditions are always kept (see [`crate::input::network_ready`]).

use std::collections::BTreeSet;

use crate::intern::Name;

/// A set of label or annotation keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySet {
    All,
    Only(BTreeSet<String>),
}

impl Default for KeySet {
    fn default() -> Self {
        KeySet::Only(BTreeSet::new())
    }
}

impl KeySet {
    pub fn only<S: Into<String>>(keys: impl IntoIterator<Item = S>) -> Self {
        KeySet::Only(keys.into_iter().map(Into::into).collect())
    }

    /// A plugin's declared keys, where `*` means all.
    pub fn declared(keys: &[String]) -> Self {
        if keys.iter().any(|k| k == "*") {
            KeySet::All
        } else {
            KeySet::only(keys.iter().cloned())
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        match self {
            KeySet::All => true,
            KeySet::Only(keys) => keys.contains(key),
        }
    }

    pub fn union(&mut self, other: &KeySet) {
        match (&mut *self, other) {
            (KeySet::All, _) => {}
            (_, KeySet::All) => *self = KeySet::All,
            (KeySet::Only(mine), KeySet::Only(theirs)) => mine.extend(theirs.iter().cloned()),
        }
    }

    /// Whether every key of `other` is in this set.
    pub fn covers(&self, other: &KeySet) -> bool {
        match (self, other) {
            (KeySet::All, _) => true,
            (KeySet::Only(_), KeySet::All) => false,
            (KeySet::Only(mine), KeySet::Only(theirs)) => theirs.is_subset(mine),
        }
    }
}

/// Label or annotation entries a pod record keeps, sorted by key.
///
/// A list, not a map: a pod keeps one or two entries, and a `BTreeMap` node holds room for
/// eleven (about 540 bytes a pod, 80 MB at 150 000 pods).
pub type Entries = Box<[(Name, Name)]>;

/// The label and annotation keys, and the condition types, the index keeps of each pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    pub labels: KeySet,
    pub annotations: KeySet,
    /// Condition types besides network readiness, which is always kept.
    pub conditions: KeySet,
}

impl Keys {
    pub fn all() -> Self {
        Keys {
            labels: KeySet::All,
            annotations: KeySet::All,
            conditions: KeySet::All,
        }
    }

    pub fn union(&mut self, other: &Keys) {
        self.labels.union(&other.labels);
        self.annotations.union(&other.annotations);
        self.conditions.union(&other.conditions);
    }

    /// Whether records kept with these keys hold everything `other` asks for.
    pub fn covers(&self, other: &Keys) -> bool {
        self.labels.covers(&other.labels)
            && self.annotations.covers(&other.annotations)
            && self.conditions.covers(&other.conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unions_and_coverage() {
        let mut keys = Keys {
            labels: KeySet::only(["app"]),
            ..Keys::default()
        };
        let zone = Keys {
            labels: KeySet::only(["zone"]),
            annotations: KeySet::declared(&["*".to_owned()]),
            conditions: KeySet::only(["Scheduled"]),
        };
        assert!(!keys.covers(&zone));
        keys.union(&zone);
        assert!(keys.covers(&zone));
        assert_eq!(keys.labels, KeySet::only(["app", "zone"]));
        assert_eq!(keys.annotations, KeySet::All);
        assert_eq!(keys.conditions, KeySet::only(["Scheduled"]));
        assert!(Keys::all().covers(&keys));
    }
}
