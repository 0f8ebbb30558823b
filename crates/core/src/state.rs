//! What the controller remembers of each Service between reconciles: its failures (for backoff
//! and for logging each problem once), whether its slices are as last planned, what the API
//! refused, and which input problems its operator has already been told about.
//!
//! Pure state, one per Service in the [`crate::book::Book`].

use std::{
    collections::{BTreeSet, HashMap},
    hash::{Hash, Hasher},
};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_core::ResourceExt;

use super::findings::Finding;
use nad_model::labels::TRIGGER_TIME_ANNOTATION;

/// One Service's memory.
#[derive(Debug, Default)]
pub struct ServiceState {
    /// Consecutive failed reconciles.
    pub failures: u32,
    /// The last failure as reported; a repeat of it is not reported again.
    last_error: Option<String>,
    /// The last failure was the same as the one before.
    repeated: bool,
    /// Pods on nodes not in the cache yet: retry soon.
    pub node_retry: bool,
    /// Slices the API refused, by name: a fingerprint of the refused content.
    refused: HashMap<String, u64>,
    reported: BTreeSet<Finding>,
}

impl ServiceState {
    /// A reconcile failed with `error`: true when it is new (to be reported at warn).
    pub fn failed(&mut self, error: String) -> bool {
        self.failures += 1;
        let new = self.last_error.as_ref() != Some(&error);
        self.last_error = Some(error);
        self.repeated = !new;
        new
    }

    /// Whether the last failure repeated the one before (so is logged at debug only).
    pub fn is_repeat(&self) -> bool {
        self.failures > 0 && self.repeated
    }

    /// A reconcile succeeded: returns the failure it recovered from, if any.
    pub fn succeeded(&mut self) -> Option<String> {
        self.failures = 0;
        self.repeated = false;
        self.last_error.take()
    }

    /// The problems of this reconcile; returns those not reported before. Problems that went
    /// away are forgotten, so a problem that comes back is reported again.
    pub fn report(&mut self, findings: impl IntoIterator<Item = Finding>) -> Vec<Finding> {
        let now: BTreeSet<Finding> = findings.into_iter().collect();
        let new = now.difference(&self.reported).cloned().collect();
        self.reported = now;
        new
    }

    /// `finding` was reported but did not reach the operator (its Event was refused): the next
    /// reconcile that finds it reports it again.
    pub fn untold(&mut self, finding: &Finding) {
        self.reported.remove(finding);
    }

    /// The API refused `slice` as sent.
    pub fn refused(&mut self, slice: &EndpointSlice) {
        self.refused.insert(slice.name_any(), fingerprint(slice));
    }

    /// Whether `slice` is exactly what the API refused before (so not worth sending again).
    pub fn was_refused(&self, slice: &EndpointSlice) -> bool {
        self.refused
            .get(&slice.name_any())
            .is_some_and(|f| *f == fingerprint(slice))
    }

    /// `slice` was written (or is no longer wanted): forget any refusal of it.
    pub fn accepted(&mut self, slice: &str) {
        self.refused.remove(slice);
    }
}

/// A hash of a slice's content, stable within this process. The trigger time and the
/// resourceVersion it was planned against are left out: they are when and over what the write
/// was made, not what it holds.
fn fingerprint(slice: &EndpointSlice) -> u64 {
    let mut content = slice.clone();
    content.metadata.resource_version = None;
    if let Some(annotations) = content.metadata.annotations.as_mut() {
        annotations.remove(TRIGGER_TIME_ANNOTATION);
        if annotations.is_empty() {
            content.metadata.annotations = None;
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&content)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(pod: &str, reason: &str) -> Finding {
        Finding::PodSkipped {
            pod: pod.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn each_problem_is_reported_once_while_it_lasts() {
        let mut s = ServiceState::default();
        assert_eq!(
            s.report([skipped("a", "no IPs"), skipped("b", "no IPs")]),
            vec![skipped("a", "no IPs"), skipped("b", "no IPs")]
        );
        assert!(
            s.report([skipped("a", "no IPs"), skipped("b", "no IPs")])
                .is_empty()
        );
        assert_eq!(
            s.report([skipped("a", "bad JSON")]),
            vec![skipped("a", "bad JSON")],
            "a changed problem is new"
        );
        assert!(s.report([]).is_empty());
        assert_eq!(
            s.report([skipped("b", "no IPs")]),
            vec![skipped("b", "no IPs")],
            "a problem that comes back is reported again"
        );
        s.untold(&skipped("b", "no IPs"));
        assert_eq!(
            s.report([skipped("b", "no IPs")]),
            vec![skipped("b", "no IPs")],
            "a problem that was not told is reported again"
        );
        assert!(s.report([skipped("b", "no IPs")]).is_empty());
    }

    #[test]
    fn a_repeated_failure_is_not_new_and_success_clears_it() {
        let mut s = ServiceState::default();
        assert!(s.failed("connection refused".into()));
        assert!(!s.is_repeat());
        assert!(!s.failed("connection refused".into()));
        assert!(s.is_repeat());
        assert!(s.failed("503".into()));
        assert!(!s.is_repeat());
        assert_eq!(s.failures, 3);
        assert_eq!(s.succeeded().as_deref(), Some("503"));
        assert_eq!(s.failures, 0);
        assert_eq!(s.succeeded(), None);
    }

    #[test]
    fn a_refused_slice_is_known_until_its_content_changes() {
        let slice = |ip: &str| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-ipv4-0"}, "addressType": "IPv4",
                "endpoints": [{"addresses": [ip]}]}))
            .unwrap()
        };
        let mut s = ServiceState::default();
        assert!(!s.was_refused(&slice("10.0.0.1")));
        s.refused(&slice("10.0.0.1"));
        assert!(s.was_refused(&slice("10.0.0.1")));
        assert!(!s.was_refused(&slice("10.0.0.2")));
        let mut later = slice("10.0.0.1");
        later.metadata.annotations = Some(std::collections::BTreeMap::from([(
            TRIGGER_TIME_ANNOTATION.to_owned(),
            "2026-12-01T10:00:00Z".to_owned(),
        )]));
        assert!(
            s.was_refused(&later),
            "the same content caused by a later change"
        );
        later.metadata.resource_version = Some("43".into());
        assert!(
            s.was_refused(&later),
            "the same content over a later version of the slice"
        );
        s.accepted("web-ipv4-0");
        assert!(!s.was_refused(&slice("10.0.0.1")));
    }
}
