//! The per-Service bookkeeping, in one place under one lock: why the next reconcile runs
//! ([`Scopes`]), what the slice cache should show after this controller's writes
//! ([`Expectations`]), failures, refusals and reported findings ([`ServiceState`]), the
//! policy's last decisions ([`Remembered`]) and the pod screen's answers ([`Answer`]).
//!
//! Its API is named after what happens: the watches tell it that a pod, a slice or anything
//! else changed; a reconcile [`Book::begin`]s, records what it wrote, and remembers what it
//! decided; a Service deleted or no longer managed is [`Book::forget`]-ten, so nothing of it
//! stays behind.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube_core::ResourceExt;
use nad_model::service_ref::ServiceRef;

use super::{
    decide::{Answer, Remembered},
    expectations::Expectations,
    findings::Finding,
    scope::{Scopes, Taken},
    slices::Changes,
    state::Services,
};
use crate::validate::{self, Violation};

/// Every Service's bookkeeping.
#[derive(Debug, Default)]
pub struct Book {
    scopes: Scopes,
    expectations: Expectations,
    states: Services,
    remembered: HashMap<ServiceRef, Remembered>,
    answered: HashMap<ServiceRef, Vec<Answer>>,
    /// The slice events of Services whose write is in flight, held until its answer tells
    /// its own echo from anyone else's change (the echo may come first).
    in_flight: HashMap<ServiceRef, Vec<(EndpointSlice, bool)>>,
}

/// What a reconcile starts from.
#[derive(Debug)]
pub struct Begun {
    pub taken: Taken,
    /// The policy's decisions of the Service's last reconcile, if any.
    pub remembered: Option<Remembered>,
    /// The pod screen's answers since.
    pub answered: Vec<Answer>,
}

/// What a reconcile wrote.
#[derive(Debug, Default)]
pub struct Wrote<'a> {
    /// Slices applied, with the generation the API server gave them.
    pub applied: &'a [(String, Option<i64>)],
    pub deleted: &'a [String],
    /// Some writes were not made: their slices changed since they were planned.
    pub outdated: bool,
}

/// What a slice event shows that tells an echo: its name, generation and uid.
fn seen(slice: &EndpointSlice) -> EndpointSlice {
    let meta = &slice.metadata;
    EndpointSlice {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: meta.name.clone(),
            generation: meta.generation,
            uid: meta.uid.clone(),
            ..Default::default()
        },
        address_type: slice.address_type.clone(),
        ..Default::default()
    }
}

fn namespace(service: &ServiceRef) -> &str {
    &service.namespace
}

/// What the watches tell.
impl Book {
    /// A pod of the Service's namespace, on its network, changed at `at`.
    pub fn pod_changed(&mut self, service: ServiceRef, pod: &str, at: Timestamp) {
        self.scopes.pod_changed(service, pod, at);
    }

    /// The pod screen found that a change of `pod` moves the Service: with the policy's
    /// answer when it gave one, for the reconcile to reuse.
    pub fn screened(
        &mut self,
        service: ServiceRef,
        pod: &str,
        at: Timestamp,
        answer: Option<Answer>,
    ) {
        if let Some(answer) = answer {
            let answers = self.answered.entry(service.clone()).or_default();
            answers.retain(|a| a.pod.name != answer.pod.name);
            answers.push(answer);
        }
        self.scopes.pod_changed(service, pod, at);
    }

    /// Something other than its pods changed for the Service (itself, a node, its network,
    /// its plugin, a failure to recover from): its next reconcile plans everything.
    pub fn input_changed(&mut self, service: ServiceRef) {
        self.scopes.everything_changed(service);
    }

    /// A watch event of one of the Service's slices (`listed`: from a relist): whether the
    /// Service must reconcile. The echo of this controller's own write adds nothing to check,
    /// and only wakes a reconcile that waits for it; anything else (a hand edit, a deletion
    /// by someone else) makes the Service place its decisions again.
    pub fn slice_event(
        &mut self,
        service: ServiceRef,
        slice: &EndpointSlice,
        deleted: bool,
        listed: bool,
    ) -> bool {
        if !listed && let Some(held) = self.in_flight.get_mut(&service) {
            held.push((seen(slice), deleted));
            return false;
        }
        let own = !listed
            && self
                .expectations
                .met(namespace(&service), &service.name, slice, deleted);
        if own {
            return self.scopes.is_pending(&service);
        }
        self.scopes.slices_changed(service);
        true
    }

    /// Whether a change of `pod` reconciles the Service at once rather than being screened:
    /// the Service includes the pod, or remembers no decisions to screen against.
    pub fn reconciles_at_once(&self, service: &ServiceRef, pod: &str) -> bool {
        self.remembered
            .get(service)
            .is_none_or(|r| r.included.contains_key(pod))
    }
}

/// What a reconcile does.
impl Book {
    /// Starts a reconcile of `service` whose slices in the cache are `existing`. `None` when
    /// the cache is behind this controller's own writes: their watch events are on their way
    /// and trigger the reconcile again, which then takes the pending changes.
    pub fn begin(
        &mut self,
        service: &ServiceRef,
        existing: &[Arc<EndpointSlice>],
    ) -> Option<Begun> {
        if self
            .expectations
            .cache_is_stale(namespace(service), &service.name, existing)
        {
            self.scopes.wait_for_cache(service.clone());
            return None;
        }
        Some(Begun {
            taken: self.scopes.take(service),
            // Taken, not copied: while the reconcile runs, every change of the Service's pods
            // reconciles it again rather than being screened, since the reconcile may have
            // read the pod before it changed.
            remembered: self.remembered.remove(service),
            answered: self.answered.remove(service).unwrap_or_default(),
        })
    }

    /// Keeps a reconcile's decisions for the next one.
    pub fn remember(&mut self, service: &ServiceRef, remembered: Remembered) {
        self.remembered.insert(service.clone(), remembered);
    }

    /// Drops from `changes` the slices that must not be sent: exactly what the API refused
    /// before, or what this controller's own check of the API's rules refuses (returned, by
    /// name, with the rules they break). Slices to delete need no refusal remembered.
    pub fn hold_back(
        &mut self,
        service: &ServiceRef,
        changes: &mut Changes,
    ) -> Vec<(String, Vec<Violation>)> {
        let state = self.states.get(service);
        let mut refused_now = Vec::new();
        changes.apply.retain(|slice| {
            if state.was_refused(slice) {
                tracing::debug!(slice = %slice.name_any(), "not sent again: the API refused this content before");
                return false;
            }
            let violations = validate::slice(slice);
            if violations.is_empty() {
                return true;
            }
            state.refused(slice);
            refused_now.push((slice.name_any(), violations));
            false
        });
        for seen in &changes.delete {
            state.accepted(&seen.name);
        }
        refused_now
    }

    /// A reconcile is about to write the Service's slices: the slice events until
    /// [`Self::wrote`] are held (see [`Self::slice_event`]).
    pub fn writing(&mut self, service: &ServiceRef) {
        self.in_flight.insert(service.clone(), Vec::new());
    }

    /// The writes a reconcile made over `existing`: what the cache should show next. True when
    /// a slice event held meanwhile was not their echo (someone else changed the slices): the
    /// Service must reconcile again, as nothing else will trigger it.
    pub fn wrote(
        &mut self,
        service: &ServiceRef,
        existing: &[Arc<EndpointSlice>],
        wrote: &Wrote<'_>,
    ) -> bool {
        let (namespace, name) = (namespace(service), service.name.as_str());
        let seen = |slice: &str| existing.iter().find(|s| s.name_any() == slice);
        for (slice, generation) in wrote.applied {
            let created = seen(slice).is_none();
            self.expectations
                .applied(namespace, name, slice, *generation, created);
        }
        for slice in wrote.deleted {
            let uid = seen(slice).and_then(|s| s.uid());
            self.expectations.deleted(namespace, name, slice, uid);
        }
        let state = self.states.get(service);
        for (slice, _) in wrote.applied {
            state.accepted(slice);
        }
        if wrote.outdated {
            self.replan(service);
        }
        let held = self.in_flight.remove(service).unwrap_or_default();
        let mut foreign = false;
        for (slice, deleted) in held {
            if !self.expectations.met(namespace, name, &slice, deleted) {
                self.scopes.slices_changed(service.clone());
                foreign = true;
            }
        }
        foreign
    }

    /// The API server refused `slice` as sent: it is not sent again while it is the same.
    pub fn refused(&mut self, service: &ServiceRef, slice: &EndpointSlice) {
        self.states.get(service).refused(slice);
    }

    /// The findings of this reconcile: returns those not reported before.
    pub fn report(
        &mut self,
        service: &ServiceRef,
        findings: impl IntoIterator<Item = Finding>,
    ) -> Vec<Finding> {
        self.states.get(service).report(findings)
    }

    /// `finding` was reported but did not reach the operator: the Service's next reconcile plans
    /// everything (so finds it again, whatever triggers it) and reports it again.
    pub fn untold(&mut self, service: &ServiceRef, finding: &Finding) {
        self.states.get(service).untold(finding);
        self.replan(service);
    }

    /// A reconcile planned: whether pods wait for their nodes (then it runs again soon), and
    /// whether its slices may differ from the plan (a write held back).
    pub fn planned(&mut self, service: &ServiceRef, node_retry: bool, held_back: bool) {
        self.states.get(service).node_retry = node_retry;
        if held_back {
            self.replan(service);
        }
    }

    /// Whether the Service's last plan had pods waiting for their nodes.
    pub fn node_retry(&self, service: &ServiceRef) -> bool {
        self.states.peek(service).is_some_and(|s| s.node_retry)
    }

    /// A reconcile failed with `error`: its next one plans everything. True when the failure
    /// is new (to be reported).
    pub fn failed(&mut self, service: &ServiceRef, error: String) -> bool {
        self.replan(service);
        self.states.get(service).failed(error)
    }

    /// A reconcile succeeded: the failure it recovered from, if any.
    pub fn succeeded(&mut self, service: &ServiceRef) -> Option<String> {
        self.states.succeeded(service)
    }

    /// The Service's failures in a row (at least 1 after a failure), and whether the last
    /// repeated the one before.
    pub fn failures(&self, service: &ServiceRef) -> (u32, bool) {
        self.states
            .peek(service)
            .map_or((1, false), |s| (s.failures, s.is_repeat()))
    }

    /// The Service's slices may differ from its last plan (a write failed or was held back):
    /// its next reconcile plans everything, whatever triggers it.
    pub fn replan(&mut self, service: &ServiceRef) {
        self.scopes.everything_changed(service.clone());
    }

    /// Forgets everything about a Service that is gone or no longer managed.
    pub fn forget(&mut self, service: &ServiceRef) {
        self.states.forget(service);
        self.scopes.forget(service);
        self.remembered.remove(service);
        self.answered.remove(service);
        self.in_flight.remove(service);
        self.expectations.forget(namespace(service), &service.name);
    }
}

/// What the recovery and the Service watch ask.
impl Book {
    /// Services whose last reconcile failed.
    pub fn failing(&self) -> Vec<ServiceRef> {
        self.states.failing()
    }

    /// Services with bookkeeping for which `pick` holds.
    pub fn known(&self, pick: impl Fn(&ServiceRef) -> bool) -> Vec<ServiceRef> {
        let mut known = self.states.known(&pick);
        known.extend(self.remembered.keys().filter(|k| pick(k)).cloned());
        known.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        known.dedup();
        known
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
    use crate::{decide::PolicyId, scope::Scope};

    fn svc(name: &str) -> ServiceRef {
        ServiceRef::new("ns", name)
    }

    fn slice(generation: i64) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-ipv4-0", "generation": generation, "uid": "u"},
            "addressType": "IPv4"}))
        .unwrap()
    }

    fn wrote_web_ipv4_0(book: &mut Book) {
        let applied = [("web-ipv4-0".to_owned(), Some(2))];
        let wrote = Wrote {
            applied: &applied,
            ..Wrote::default()
        };
        book.wrote(&svc("web"), &[Arc::new(slice(1))], &wrote);
    }

    #[test]
    fn a_stale_cache_leaves_the_pending_changes_for_later() {
        let mut book = Book::default();
        wrote_web_ipv4_0(&mut book);
        book.input_changed(svc("web"));
        let stored = Arc::new(slice(1));
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
    fn the_echo_of_an_own_write_reconciles_only_a_service_that_waits_for_it() {
        let mut book = Book::default();
        wrote_web_ipv4_0(&mut book);
        assert!(
            !book.slice_event(svc("web"), &slice(2), false, false),
            "nothing waits: the echo costs no reconcile"
        );
        assert!(
            book.begin(&svc("web"), &[Arc::new(slice(2))]).is_some(),
            "the echo met the expectation"
        );

        wrote_web_ipv4_0(&mut book);
        assert!(book.begin(&svc("web"), &[Arc::new(slice(1))]).is_none());
        assert!(
            book.slice_event(svc("web"), &slice(2), false, false),
            "a reconcile waits for this echo"
        );
        assert!(
            book.slice_event(svc("web"), &slice(3), false, false),
            "someone else's write"
        );
        assert!(
            book.slice_event(svc("web"), &slice(2), false, true),
            "a relist shows it: no one can tell whose it is"
        );
    }

    #[test]
    fn an_echo_that_comes_before_the_writes_answer_costs_no_reconcile() {
        let mut book = Book::default();
        book.writing(&svc("web"));
        assert!(
            !book.slice_event(svc("web"), &slice(2), false, false),
            "held"
        );
        let applied = [("web-ipv4-0".to_owned(), Some(2))];
        let wrote = Wrote {
            applied: &applied,
            ..Wrote::default()
        };
        assert!(
            !book.wrote(&svc("web"), &[Arc::new(slice(1))], &wrote),
            "it was the write's own echo"
        );
        assert!(!book.scopes.is_pending(&svc("web")));

        book.writing(&svc("web"));
        assert!(
            !book.slice_event(svc("web"), &slice(9), false, false),
            "held"
        );
        let applied = [("web-ipv4-0".to_owned(), Some(3))];
        let wrote = Wrote {
            applied: &applied,
            ..Wrote::default()
        };
        assert!(
            book.wrote(&svc("web"), &[Arc::new(slice(2))], &wrote),
            "someone else's change came meanwhile: reconcile again"
        );
        let begun = book.begin(&svc("web"), &[Arc::new(slice(9))]).unwrap();
        assert!(begun.taken.slices_changed);
    }

    #[test]
    fn a_pod_change_during_a_reconcile_reconciles_again_unscreened() {
        let mut book = Book::default();
        assert!(
            book.reconciles_at_once(&svc("web"), "a"),
            "nothing remembered"
        );
        let included = [(
            "a".to_owned(),
            nad_model::decision::Conditions {
                ready: true,
                serving: true,
                terminating: false,
            },
        )];
        book.remember(
            &svc("web"),
            Remembered {
                by: None,
                included: included.into_iter().collect(),
            },
        );
        assert!(book.reconciles_at_once(&svc("web"), "a"), "included");
        assert!(!book.reconciles_at_once(&svc("web"), "b"), "screened");
        let begun = book.begin(&svc("web"), &[]).unwrap();
        assert!(
            book.reconciles_at_once(&svc("web"), "b"),
            "the reconcile may have read b before it changed"
        );
        book.remember(&svc("web"), begun.remembered.unwrap());
        assert!(!book.reconciles_at_once(&svc("web"), "b"));
    }

    #[test]
    fn a_screened_answer_goes_to_the_next_reconcile_only() {
        let mut book = Book::default();
        let pod = crate::observe::tests::pod("a", "ns", None, None);
        let answer = Answer {
            pod,
            by: PolicyId {
                name: "default".into(),
                hash: "h".into(),
                config: 0,
            },
            decision: nad_model::decision::Decision::Exclude(String::new()),
        };
        book.screened(svc("web"), "a", Timestamp::UNIX_EPOCH, Some(answer));
        let begun = book.begin(&svc("web"), &[]).unwrap();
        assert_eq!(begun.answered.len(), 1);
        assert_eq!(begun.taken.scope, Scope::Pods(["a".to_owned()].into()));
        assert!(book.begin(&svc("web"), &[]).unwrap().answered.is_empty());
    }

    #[test]
    fn a_forgotten_service_leaves_nothing_behind() {
        let mut book = Book::default();
        book.failed(&svc("web"), "x".into());
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
