//! Why a Service is about to be reconciled: only because pods of its namespace changed, or for
//! anything else (its own change, its slices, a node, a plugin, a timer).
//!
//! A pod event concerns every Service on the pod's network, because any of their policies may
//! include the pod. With many Services per network that makes most reconciles pointless: a pod
//! that stays excluded moves no endpoint. A reconcile caused by pod changes alone therefore
//! first asks the policy about just those pods (one small call) and skips the full plan when
//! none of them is published or becomes included.

use std::collections::{BTreeSet, HashMap, hash_map::Entry};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only these pods (names, in the Service's namespace) changed since the last reconcile.
    Pods(BTreeSet<String>),
    /// Anything may have changed: plan everything.
    Full,
}

/// The pending scope of each Service's next reconcile.
#[derive(Debug, Default)]
pub struct Scopes {
    pending: HashMap<ObjectRef<Service>, Scope>,
}

impl Scopes {
    /// A pod of the Service's namespace, on its network, changed.
    pub fn pod_changed(&mut self, service: ObjectRef<Service>, pod: &str) {
        match self.pending.entry(service) {
            Entry::Vacant(entry) => {
                entry.insert(Scope::Pods(BTreeSet::from([pod.to_owned()])));
            }
            Entry::Occupied(mut entry) => {
                if let Scope::Pods(pods) = entry.get_mut() {
                    pods.insert(pod.to_owned());
                }
            }
        }
    }

    /// The Service's slices changed by this controller's own write: no new input, so the
    /// reconcile it causes has nothing to check unless something else is pending.
    pub fn own_write(&mut self, service: ObjectRef<Service>) {
        self.pending
            .entry(service)
            .or_insert_with(|| Scope::Pods(BTreeSet::new()));
    }

    /// Something other than its pods changed for the Service.
    pub fn everything_changed(&mut self, service: ObjectRef<Service>) {
        self.pending.insert(service, Scope::Full);
    }

    /// The Service is gone: nothing of it stays pending.
    pub fn forget(&mut self, service: &ObjectRef<Service>) {
        self.pending.remove(service);
    }

    /// The scope of the reconcile that starts now; a reconcile nobody asked for (a timer, a
    /// retry) plans everything.
    pub fn take(&mut self, service: &ObjectRef<Service>) -> Scope {
        self.pending.remove(service).unwrap_or(Scope::Full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(name: &str) -> ObjectRef<Service> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn pod_changes_add_up_until_the_reconcile_takes_them() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a");
        scopes.pod_changed(svc("web"), "b");
        scopes.pod_changed(svc("web"), "a");
        scopes.pod_changed(svc("other"), "c");
        assert_eq!(
            scopes.take(&svc("web")),
            Scope::Pods(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(
            scopes.take(&svc("web")),
            Scope::Full,
            "nothing pending: a timer or retry"
        );
        assert_eq!(
            scopes.take(&svc("other")),
            Scope::Pods(BTreeSet::from(["c".to_owned()]))
        );
    }

    #[test]
    fn any_other_change_makes_the_next_reconcile_full() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a");
        scopes.everything_changed(svc("web"));
        scopes.pod_changed(svc("web"), "b");
        assert_eq!(scopes.take(&svc("web")), Scope::Full);
    }

    #[test]
    fn a_forgotten_service_has_nothing_pending() {
        let mut scopes = Scopes::default();
        scopes.pod_changed(svc("web"), "a");
        scopes.forget(&svc("web"));
        assert!(scopes.pending.is_empty());
    }

    #[test]
    fn an_own_write_adds_nothing_to_check() {
        let mut scopes = Scopes::default();
        scopes.own_write(svc("web"));
        assert_eq!(scopes.take(&svc("web")), Scope::Pods(BTreeSet::new()));
        scopes.pod_changed(svc("web"), "a");
        scopes.own_write(svc("web"));
        assert_eq!(
            scopes.take(&svc("web")),
            Scope::Pods(BTreeSet::from(["a".to_owned()]))
        );
        scopes.everything_changed(svc("web"));
        scopes.own_write(svc("web"));
        assert_eq!(scopes.take(&svc("web")), Scope::Full);
    }
}
