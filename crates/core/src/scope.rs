//! Why a Service is about to be reconciled: only because pods of its namespace changed, or for
//! anything else (its own change, its slices, a node, a plugin, a timer).
//!
//! A pod event concerns every Service on the pod's network, because any of their policies may
//! include the pod. With many Services per network that makes most reconciles pointless: a pod
//! that stays excluded moves no endpoint. A reconcile caused by pod changes alone therefore
//! first asks the policy about just those pods (one small call) and skips the full plan when
//! none of them is published or becomes included.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only these pods (names, in the Service's namespace) changed since the last reconcile.
    Pods(BTreeSet<String>),
    /// Anything may have changed: plan everything.
    Full,
}

/// What a reconcile takes: its scope, whether someone else changed the Service's slices, and
/// when the earliest change in it happened (for the slices' last-change-trigger-time; `None`
/// for a reconcile nobody asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub scope: Scope,
    /// The slices differ from what this controller wrote (a hand edit, a deletion, or a write
    /// whose echo came before its answer): place the decisions again. No input changed, so
    /// the decisions stand.
    pub slices_changed: bool,
    pub changed_at: Option<Timestamp>,
}

/// What waits for a Service's next reconcile: nothing (no one asked for it), or a scope, since
/// when, and whether its slices changed.
#[derive(Debug, Default)]
pub struct Pending(Option<Waiting>);

#[derive(Debug)]
struct Waiting {
    scope: Scope,
    slices_changed: bool,
    changed_at: Option<Timestamp>,
}

impl Waiting {
    fn new(scope: Scope, changed_at: Option<Timestamp>) -> Self {
        Waiting {
            scope,
            slices_changed: false,
            changed_at,
        }
    }

    fn changed(&mut self, at: Option<Timestamp>) {
        self.changed_at = match (self.changed_at, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Pending {
    /// A pod of the Service's namespace, on its network, changed at `at`.
    pub fn pod_changed(&mut self, pod: &str, at: Timestamp) {
        match &mut self.0 {
            None => {
                let pods = BTreeSet::from([pod.to_owned()]);
                self.0 = Some(Waiting::new(Scope::Pods(pods), Some(at)));
            }
            Some(waiting) => {
                waiting.changed(Some(at));
                if let Scope::Pods(pods) = &mut waiting.scope {
                    pods.insert(pod.to_owned());
                }
            }
        }
    }

    /// Whether a reconcile of the Service has something to take.
    pub fn is_pending(&self) -> bool {
        self.0.is_some()
    }

    /// A reconcile found the cache behind this controller's writes and took nothing: the
    /// watch event that brings the cache up to date triggers it again. Nothing pending (a
    /// timer, a retry) becomes a full plan, as the reconcile would have made.
    pub fn wait_for_cache(&mut self) {
        self.0
            .get_or_insert_with(|| Waiting::new(Scope::Full, None));
    }

    /// The Service's slices changed at `at`, not by this controller's last write.
    pub fn slices_changed(&mut self, at: Timestamp) {
        let waiting = self
            .0
            .get_or_insert_with(|| Waiting::new(Scope::Pods(BTreeSet::new()), None));
        waiting.slices_changed = true;
        waiting.changed(Some(at));
    }

    /// Something other than its pods changed for the Service at `at`.
    pub fn everything_changed(&mut self, at: Timestamp) {
        match &mut self.0 {
            None => self.0 = Some(Waiting::new(Scope::Full, Some(at))),
            Some(waiting) => {
                waiting.scope = Scope::Full;
                waiting.changed(Some(at));
            }
        }
    }

    /// The scope of the reconcile that starts now; a reconcile nobody asked for (a timer, a
    /// retry) plans everything.
    pub fn take(&mut self) -> Taken {
        match self.0.take() {
            Some(w) => Taken {
                scope: w.scope,
                slices_changed: w.slices_changed,
                changed_at: w.changed_at,
            },
            None => Taken {
                scope: Scope::Full,
                slices_changed: false,
                changed_at: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn pod_changes_add_up_until_the_reconcile_takes_them() {
        let mut web = Pending::default();
        web.pod_changed("a", at(0));
        web.pod_changed("b", at(0));
        web.pod_changed("a", at(0));
        assert_eq!(
            web.take().scope,
            Scope::Pods(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(
            web.take().scope,
            Scope::Full,
            "nothing pending: a timer or retry"
        );
    }

    #[test]
    fn any_other_change_makes_the_next_reconcile_full() {
        let mut web = Pending::default();
        web.pod_changed("a", at(0));
        web.everything_changed(at(1));
        web.pod_changed("b", at(2));
        let taken = web.take();
        assert_eq!(taken.scope, Scope::Full);
        assert_eq!(taken.changed_at, Some(at(0)), "the earliest change");
    }

    #[test]
    fn a_reconcile_waiting_for_the_cache_keeps_what_is_pending_or_plans_in_full() {
        let mut web = Pending::default();
        assert!(!web.is_pending());
        web.wait_for_cache();
        assert!(web.is_pending());
        let taken = web.take();
        assert_eq!(taken.scope, Scope::Full);
        assert_eq!(taken.changed_at, None, "no input changed");
        web.pod_changed("a", at(0));
        web.wait_for_cache();
        assert_eq!(
            web.take().scope,
            Scope::Pods(BTreeSet::from(["a".to_owned()]))
        );
    }

    #[test]
    fn a_slice_changed_by_someone_else_keeps_the_pod_scope() {
        let mut web = Pending::default();
        web.slices_changed(at(4));
        let taken = web.take();
        assert_eq!(taken.scope, Scope::Pods(BTreeSet::new()));
        assert!(taken.slices_changed);
        assert_eq!(taken.changed_at, Some(at(4)));
        web.pod_changed("a", at(0));
        web.slices_changed(at(4));
        let taken = web.take();
        assert_eq!(taken.scope, Scope::Pods(BTreeSet::from(["a".to_owned()])));
        assert!(taken.slices_changed);
        assert!(!web.take().slices_changed, "a timer");
    }

    #[test]
    fn the_earliest_change_is_the_trigger_time() {
        let mut web = Pending::default();
        web.pod_changed("a", at(5));
        web.pod_changed("b", at(3));
        web.pod_changed("c", at(9));
        assert_eq!(web.take().changed_at, Some(at(3)));
        assert_eq!(web.take().changed_at, None, "a timer");
        web.everything_changed(at(7));
        let taken = web.take();
        assert_eq!(taken.scope, Scope::Full, "not only pods");
        assert_eq!(taken.changed_at, Some(at(7)));
    }
}
