//! Why a Service is about to be reconciled: only because pods of its namespace changed, or for
//! anything else (its own change, its slices, a node, a plugin, a timer).
//!
//! A pod event concerns every Service on the pod's network, because any of their policies may
//! include the pod. With many Services per network that makes most reconciles pointless: a pod
//! that stays excluded moves no endpoint. A reconcile caused by pod changes alone therefore
//! first asks the policy about just those pods (one small call) and skips the full plan when
//! none of them is published or becomes included.

use std::collections::{BTreeSet, HashMap, hash_map::Entry};

use k8s_openapi::jiff::Timestamp;
use nad_model::service_ref::ServiceRef;

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

#[derive(Debug)]
struct Pending {
    scope: Scope,
    slices_changed: bool,
    changed_at: Option<Timestamp>,
}

impl Pending {
    fn new(scope: Scope, changed_at: Option<Timestamp>) -> Self {
        Pending {
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

/// The pending scope of each Service's next reconcile.
#[derive(Debug, Default)]
pub struct Scopes {
    pending: HashMap<ServiceRef, Pending>,
}

impl Scopes {
    /// A pod of the Service's namespace, on its network, changed at `at`.
    pub fn pod_changed(&mut self, service: ServiceRef, pod: &str, at: Timestamp) {
        match self.pending.entry(service) {
            Entry::Vacant(entry) => {
                let pods = BTreeSet::from([pod.to_owned()]);
                entry.insert(Pending::new(Scope::Pods(pods), Some(at)));
            }
            Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                pending.changed(Some(at));
                if let Scope::Pods(pods) = &mut pending.scope {
                    pods.insert(pod.to_owned());
                }
            }
        }
    }

    /// Whether a reconcile of the Service has something to take.
    pub fn is_pending(&self, service: &ServiceRef) -> bool {
        self.pending.contains_key(service)
    }

    /// A reconcile found the cache behind this controller's writes and took nothing: the
    /// watch event that brings the cache up to date triggers it again. Nothing pending (a
    /// timer, a retry) becomes a full plan, as the reconcile would have made.
    pub fn wait_for_cache(&mut self, service: ServiceRef) {
        self.pending
            .entry(service)
            .or_insert_with(|| Pending::new(Scope::Full, None));
    }

    /// The Service's slices changed, not by this controller's last write.
    pub fn slices_changed(&mut self, service: ServiceRef) {
        let pending = self
            .pending
            .entry(service)
            .or_insert_with(|| Pending::new(Scope::Pods(BTreeSet::new()), None));
        pending.slices_changed = true;
        pending.changed(Some(Timestamp::now()));
    }

    /// Something other than its pods changed for the Service.
    pub fn everything_changed(&mut self, service: ServiceRef) {
        let now = Timestamp::now();
        match self.pending.entry(service) {
            Entry::Vacant(entry) => {
                entry.insert(Pending::new(Scope::Full, Some(now)));
            }
            Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                pending.scope = Scope::Full;
                pending.changed(Some(now));
            }
        }
    }

    /// The Service is gone: nothing of it stays pending.
    pub fn forget(&mut self, service: &ServiceRef) {
        self.pending.remove(service);
    }

    /// The scope of the reconcile that starts now; a reconcile nobody asked for (a timer, a
    /// retry) plans everything.
    pub fn take(&mut self, service: &ServiceRef) -> Taken {
        match self.pending.remove(service) {
            Some(p) => Taken {
                scope: p.scope,
                slices_changed: p.slices_changed,
                changed_at: p.changed_at,
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

    fn svc(name: &str) -> ServiceRef {
        ServiceRef::new("ns", name)
    }

    #[test]
    fn pod_changes_add_up_until_the_reconcile_takes_them() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.pod_changed(svc("web"), "b", at(0));
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.pod_changed(svc("other"), "c", at(0));
        assert_eq!(
            scopes.take(&svc("web")).scope,
            Scope::Pods(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(
            scopes.take(&svc("web")).scope,
            Scope::Full,
            "nothing pending: a timer or retry"
        );
        assert_eq!(
            scopes.take(&svc("other")).scope,
            Scope::Pods(BTreeSet::from(["c".to_owned()]))
        );
    }

    #[test]
    fn any_other_change_makes_the_next_reconcile_full() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.everything_changed(svc("web"));
        scopes.pod_changed(svc("web"), "b", at(0));
        assert_eq!(scopes.take(&svc("web")).scope, Scope::Full);
    }

    #[test]
    fn a_forgotten_service_has_nothing_pending() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.forget(&svc("web"));
        assert!(scopes.pending.is_empty());
    }

    #[test]
    fn a_reconcile_waiting_for_the_cache_keeps_what_is_pending_or_plans_in_full() {
        let mut scopes = Scopes::default();
        assert!(!scopes.is_pending(&svc("web")));
        scopes.wait_for_cache(svc("web"));
        assert!(scopes.is_pending(&svc("web")));
        let taken = scopes.take(&svc("web"));
        assert_eq!(taken.scope, Scope::Full);
        assert_eq!(taken.changed_at, None, "no input changed");
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.wait_for_cache(svc("web"));
        assert_eq!(
            scopes.take(&svc("web")).scope,
            Scope::Pods(BTreeSet::from(["a".to_owned()]))
        );
    }

    #[test]
    fn a_slice_changed_by_someone_else_keeps_the_pod_scope() {
        let mut scopes = Scopes::default();
        scopes.slices_changed(svc("web"));
        let taken = scopes.take(&svc("web"));
        assert_eq!(taken.scope, Scope::Pods(BTreeSet::new()));
        assert!(taken.slices_changed && taken.changed_at.is_some());
        scopes.pod_changed(svc("web"), "a", at(0));
        scopes.slices_changed(svc("web"));
        let taken = scopes.take(&svc("web"));
        assert_eq!(taken.scope, Scope::Pods(BTreeSet::from(["a".to_owned()])));
        assert!(taken.slices_changed);
        assert!(!scopes.take(&svc("web")).slices_changed, "a timer");
    }

    #[test]
    fn the_earliest_change_is_the_trigger_time() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a", at(5));
        scopes.pod_changed(svc("web"), "b", at(3));
        scopes.pod_changed(svc("web"), "c", at(9));
        assert_eq!(scopes.take(&svc("web")).changed_at, Some(at(3)));
        assert_eq!(scopes.take(&svc("web")).changed_at, None, "a timer");
        scopes.everything_changed(svc("web"));
        let taken = scopes.take(&svc("web"));
        assert_eq!(taken.scope, Scope::Full, "not only pods");
        assert!(taken.changed_at.is_some());
    }
}
