//! The per-Service bookkeeping, in one place under one lock: why the next reconcile runs
//! ([`Scopes`]), what the slice cache should show after this controller's writes
//! ([`Expectations`]), failures, refusals and reported problems ([`ServiceState`]), and the
//! policy's last decision per pod ([`Remembered`]).
//!
//! A reconcile calls [`Book::begin`] and [`Book::finish`]; a Service deleted or no longer
//! managed is [`Book::forget`]-ten, so nothing of it stays behind.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::runtime::reflector::ObjectRef;

use super::{
    decide::Remembered,
    expectations::Expectations,
    scope::{Scopes, Taken},
    state::{ServiceState, Services},
};

/// Every Service's bookkeeping.
#[derive(Debug, Default)]
pub struct Book {
    pub scopes: Scopes,
    pub expectations: Expectations,
    states: Services,
    remembered: HashMap<ObjectRef<Service>, Remembered>,
}

/// What a reconcile starts from.
#[derive(Debug)]
pub struct Begun {
    pub taken: Taken,
    /// The policy's decisions of the Service's last reconcile, if any.
    pub remembered: Option<Remembered>,
}

impl Book {
    /// Starts a reconcile of `service` whose slices in the cache are `existing`. `None` when
    /// the cache is behind this controller's own writes: their watch events are on their way
    /// and trigger the reconcile again, which then takes the pending changes.
    pub fn begin(
        &mut self,
        service: &ObjectRef<Service>,
        existing: &[Arc<EndpointSlice>],
    ) -> Option<Begun> {
        let namespace = service.namespace.as_deref().unwrap_or_default();
        if self
            .expectations
            .cache_is_stale(namespace, &service.name, existing)
        {
            return None;
        }
        Some(Begun {
            taken: self.scopes.take(service),
            remembered: self.remembered.remove(service),
        })
    }

    /// Ends a reconcile that decided: keeps its decisions for the next one.
    pub fn remember(&mut self, service: &ObjectRef<Service>, remembered: Remembered) {
        self.remembered.insert(service.clone(), remembered);
    }

    /// The Service's last decisions, if it remembers them.
    pub fn remembered(&self, service: &ObjectRef<Service>) -> Option<&Remembered> {
        self.remembered.get(service)
    }

    /// Whether the Service's last decisions included `pod`.
    pub fn included(&self, service: &ObjectRef<Service>, pod: &str) -> bool {
        self.remembered
            .get(service)
            .is_some_and(|r| r.included.contains_key(pod))
    }

    /// The Service's slices may differ from its last plan (a write failed or was held back):
    /// its next reconcile plans everything, whatever triggers it.
    pub fn replan(&mut self, service: &ObjectRef<Service>) {
        self.scopes.everything_changed(service.clone());
    }

    pub fn state(&mut self, service: &ObjectRef<Service>) -> &mut ServiceState {
        self.states.get(service)
    }

    pub fn peek(&self, service: &ObjectRef<Service>) -> Option<&ServiceState> {
        self.states.peek(service)
    }

    /// A reconcile succeeded: the failure it recovered from, if any.
    pub fn succeeded(&mut self, service: &ObjectRef<Service>) -> Option<String> {
        self.states.succeeded(service)
    }

    /// Services whose last reconcile failed.
    pub fn failing(&self) -> Vec<ObjectRef<Service>> {
        self.states.failing()
    }

    /// Services with bookkeeping for which `pick` holds.
    pub fn known(&self, pick: impl Fn(&ObjectRef<Service>) -> bool) -> Vec<ObjectRef<Service>> {
        let mut known = self.states.known(&pick);
        known.extend(self.remembered.keys().filter(|k| pick(k)).cloned());
        known.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        known.dedup();
        known
    }

    /// Forgets everything about a Service that is gone or no longer managed.
    pub fn forget(&mut self, service: &ObjectRef<Service>) {
        self.states.forget(service);
        self.scopes.forget(service);
        self.remembered.remove(service);
        self.expectations.forget(
            service.namespace.as_deref().unwrap_or_default(),
            &service.name,
        );
    }
}

/// The shared book.
#[derive(Debug, Default, Clone)]
pub struct SharedBook(Arc<Mutex<Book>>);

impl SharedBook {
    /// A poisoned lock is still used: every update of the book is complete before it can
    /// panic, so what it holds is consistent.
    pub fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::scope::Scope;

    fn svc(name: &str) -> ObjectRef<Service> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn a_stale_cache_leaves_the_pending_changes_for_later() {
        let mut book = Book::default();
        book.expectations
            .applied("ns", "web", "web-ipv4-0", Some(2), false);
        book.scopes.everything_changed(svc("web"));
        let stored: Arc<EndpointSlice> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-ipv4-0", "generation": 1}, "addressType": "IPv4"}))
            .unwrap(),
        );
        assert!(
            book.begin(&svc("web"), std::slice::from_ref(&stored))
                .is_none()
        );
        let begun = book
            .begin(&svc("web"), &[])
            .expect("the slice is gone: go on");
        assert_eq!(begun.taken.scope, Scope::Full);
    }

    #[test]
    fn a_forgotten_service_leaves_nothing_behind() {
        let mut book = Book::default();
        book.state(&svc("web")).failed("x".into());
        book.scopes.everything_changed(svc("web"));
        book.remember(&svc("web"), Remembered::default());
        book.expectations
            .deleted("ns", "web", "web-ipv4-0", Some("u".into()));
        assert_eq!(book.known(|_| true), vec![svc("web")]);
        book.forget(&svc("web"));
        assert!(book.known(|_| true).is_empty());
        assert!(book.failing().is_empty());
        let begun = book.begin(&svc("web"), &[]).expect("no expectations left");
        assert!(begun.remembered.is_none());
        assert_eq!(begun.taken.changed_at, None, "nothing pending");
    }
}
