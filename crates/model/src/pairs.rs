//! String pairs kept compactly: a Service's labels or annotations as the controller keeps
//! them for as long as the Service exists.

use std::collections::BTreeMap;

/// Key and value pairs sorted by key, each key once, in one allocation of 32 bytes a pair
/// (plus the strings). A `BTreeMap<String, String>` allocates a node of 11 pairs, 544 bytes,
/// for a single label.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Pairs(Box<[(Box<str>, Box<str>)]>);

impl Pairs {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// The pairs, sorted by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The pairs as a map, as Kubernetes objects hold them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for Pairs {
    /// The last value given for a key stands, as in a map.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let map: BTreeMap<Box<str>, Box<str>> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Pairs(map.into_iter().collect())
    }
}

impl From<&BTreeMap<String, String>> for Pairs {
    fn from(map: &BTreeMap<String, String>) -> Self {
        Pairs(
            map.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
        )
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>, const N: usize> From<[(K, V); N]> for Pairs {
    fn from(pairs: [(K, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_sorted_by_key_and_the_last_value_of_a_key_stands() {
        let pairs: Pairs = [("b", "2"), ("a", "1"), ("b", "3")].into();
        assert_eq!(pairs.iter().collect::<Vec<_>>(), [("a", "1"), ("b", "3")]);
        assert_eq!(pairs.get("b"), Some("3"));
        assert_eq!(pairs.get("c"), None);
        assert_eq!(
            pairs.to_map(),
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "3".into())])
        );
        assert_eq!(Pairs::from(&pairs.to_map()), pairs);
        assert_eq!(Pairs::default().iter().len(), 0);
    }
}
