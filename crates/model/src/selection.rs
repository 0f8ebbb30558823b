//! The pod labels a policy declares that every pod it includes for a Service has (WIT 1.4
//! `candidate-labels`): the host then asks it about the candidates that have them only.

use crate::pod::PodRecord;

/// Label equalities, all of which a pod must have; none selects every pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Selection {
    /// Sorted by key, then value; without repeats.
    labels: Vec<(String, String)>,
}

impl Selection {
    /// The equalities `labels`, in any order.
    pub fn new(labels: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut labels: Vec<(String, String)> = labels.into_iter().collect();
        labels.sort();
        labels.dedup();
        Selection { labels }
    }

    /// No claim: every candidate.
    pub fn everything() -> Self {
        Selection::default()
    }

    pub fn is_everything(&self) -> bool {
        self.labels.is_empty()
    }

    /// The equalities, sorted by key.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// Only the equalities whose keys `keep` says the pod records hold (the others could not
    /// be checked, so they select nothing out).
    pub fn retain_keys(mut self, keep: impl Fn(&str) -> bool) -> Self {
        self.labels.retain(|(key, _)| keep(key));
        self
    }

    /// Whether `pod` has every label of the selection.
    pub fn admits(&self, pod: &PodRecord) -> bool {
        let labels = pod.labels();
        self.labels.iter().all(|(key, value)| {
            labels
                .binary_search_by(|(k, _)| (**k).cmp(key.as_str()))
                .is_ok_and(|i| *labels[i].1 == **value)
        })
    }
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.labels.is_empty() {
            return f.write_str("every pod");
        }
        for (i, (key, value)) in self.labels.iter().enumerate() {
            let and = if i == 0 { "" } else { ", " };
            write!(f, "{and}{key}={value:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{keys::Keys, pod::PodRecord};

    fn pod(labels: serde_json::Value) -> PodRecord {
        let pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": labels},
        }))
        .unwrap();
        PodRecord::from_pod(&pod, &Keys::all())
    }

    fn selection(labels: &[(&str, &str)]) -> Selection {
        Selection::new(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn a_pod_is_admitted_with_every_label_of_the_selection() {
        let web = pod(serde_json::json!({"app": "web", "tier": "a"}));
        assert!(selection(&[]).admits(&web));
        assert!(selection(&[("app", "web")]).admits(&web));
        assert!(selection(&[("tier", "a"), ("app", "web")]).admits(&web));
        assert!(!selection(&[("app", "db")]).admits(&web));
        assert!(!selection(&[("app", "web"), ("zone", "x")]).admits(&web));
        // Two values for one key: no pod has both.
        assert!(!selection(&[("app", "web"), ("app", "db")]).admits(&web));
        assert!(!selection(&[("app", "")]).admits(&pod(serde_json::json!({}))));
        assert!(selection(&[("app", "")]).admits(&pod(serde_json::json!({"app": ""}))));
    }

    #[test]
    fn equalities_are_kept_sorted_once_and_shown_in_that_order() {
        let s = selection(&[("tier", "a"), ("app", "web"), ("tier", "a")]);
        assert_eq!(s.to_string(), r#"app="web", tier="a""#);
        assert_eq!(
            s.clone().retain_keys(|k| k == "app").to_string(),
            r#"app="web""#
        );
        assert!(s.retain_keys(|_| false).is_everything());
        assert_eq!(Selection::everything().to_string(), "every pod");
    }
}
