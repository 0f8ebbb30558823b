//! The per-Service bookkeeping, one page per Service under one lock: why its next reconcile
//! runs ([`Pending`]), what the slice cache should show after this controller's writes
//! ([`Expectations`]), its failures, refusals and reported findings ([`ServiceState`]), the
//! policy's last decisions ([`Remembered`]) and the pod screen's answers ([`Answer`]).
//!
//! Its API is named after what happens: the watches tell it that a pod, a slice or anything
//! else changed; a reconcile [`Book::begin`]s, holds the slice events while it is
//! [`Book::writing`], and [`Book::record`]s what it did in one call at its end; a Service
//! deleted is [`Book::forget`]-ten, so nothing of it stays behind. It reads no clock: whoever
//! tells it something tells it when.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube_core::ResourceExt;
use nad_model::service_ref::ServiceRef;

use super::{
    decide::{Answer, Remembered},
    expectations::Expectations,
    findings::Finding,
    scope::{Pending, Taken},
    slices::Changes,
    state::ServiceState,
};
use crate::validate::{self, Violation};

/// Every Service's bookkeeping.
#[derive(Debug, Default)]
pub struct Book {
    services: HashMap<ServiceRef, Page>,
}

/// All that is kept of one Service: its page.
#[derive(Debug, Default)]
struct Page {
    pending: Pending,
    expected: Expectations,
    state: ServiceState,
    remembered: Option<Remembered>,
    answered: Vec<Answer>,
    /// While a write is in flight: the slice events held until its answer tells its own echo
    /// from anyone else's change (the echo may come first).
    in_flight: Option<Vec<(EndpointSlice, bool)>>,
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

/// What one reconcile did, as the Book keeps it: recorded in one call at its end
/// ([`Book::record`]).
#[derive(Debug, Default)]
pub struct Entry {
    /// The Service is no longer this controller's: nothing of it is kept.
    pub released: bool,
    /// The policy's decisions, for the next reconcile to start from.
    pub remembered: Option<Remembered>,
    /// The plan's findings (`None`: nothing was planned, what was reported stands).
    pub findings: Option<Vec<Finding>>,
    /// Whether pods wait for their nodes (`None`: nothing was planned, the last plan's stands).
    pub node_retry: Option<bool>,
    /// What the writes did (`None`: nothing was sent).
    pub wrote: Option<Wrote>,
    /// Slices were held back (the API would refuse them): the slices differ from the plan.
    pub held_back: bool,
    /// The reconcile failed, with this error.
    pub failed: Option<String>,
}

/// What a reconcile's writes did.
#[derive(Debug, Default)]
pub struct Wrote {
    /// Slices applied, with the generation the API server gave them.
    pub applied: Vec<(String, Option<i64>)>,
    pub deleted: Vec<String>,
    /// Slices the API server refused as sent (`422`): not sent again while they are the same.
    pub refused: Vec<EndpointSlice>,
    /// Some writes were not made: their slices changed since they were planned.
    pub outdated: bool,
}

/// What the Book's record of a reconcile means for what follows it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The findings not reported before: to tell.
    pub new_findings: Vec<Finding>,
    /// The failure this success recovered from.
    pub recovered: Option<String>,
    /// The failure is not the one before (to report).
    pub new_failure: bool,
    /// A slice event held during the write was not its echo (someone else changed the
    /// slices): the Service must reconcile again, as nothing else will trigger it.
    pub foreign: bool,
    /// Pods of the Service wait for their nodes: reconcile again soon.
    pub node_retry: bool,
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

impl Book {
    fn page(&mut self, service: &ServiceRef) -> &mut Page {
        if !self.services.contains_key(service) {
            self.services.insert(service.clone(), Page::default());
        }
        self.services
            .get_mut(service)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }
}

/// What the watches tell.
impl Book {
    /// A pod of the Service's namespace, on its network, changed at `at`.
    pub fn pod_changed(&mut self, service: &ServiceRef, pod: &str, at: Timestamp) {
        self.page(service).pending.pod_changed(pod, at);
    }

    /// The pod screen found that a change of `pod` at `at` moves the Service: with the
    /// policy's answer when it gave one, for the reconcile to reuse.
    pub fn screened(
        &mut self,
        service: &ServiceRef,
        pod: &str,
        at: Timestamp,
        answer: Option<Answer>,
    ) {
        let page = self.page(service);
        if let Some(answer) = answer {
            page.answered.retain(|a| a.pod.name != answer.pod.name);
            page.answered.push(answer);
        }
        page.pending.pod_changed(pod, at);
    }

    /// Something other than its pods changed for the Service at `at` (itself, a node, its
    /// network, its plugin, a failure to recover from): its next reconcile plans everything.
    pub fn input_changed(&mut self, service: &ServiceRef, at: Timestamp) {
        self.page(service).pending.everything_changed(at);
    }

    /// A watch event of one of the Service's slices at `at` (`listed`: from a relist): whether
    /// the Service must reconcile. The echo of this controller's own write adds nothing to
    /// check, and only wakes a reconcile that waits for it; anything else (a hand edit, a
    /// deletion by someone else) makes the Service place its decisions again.
    pub fn slice_event(
        &mut self,
        service: &ServiceRef,
        slice: &EndpointSlice,
        deleted: bool,
        listed: bool,
        at: Timestamp,
    ) -> bool {
        let page = self.page(service);
        if !listed && let Some(held) = page.in_flight.as_mut() {
            held.push((seen(slice), deleted));
            return false;
        }
        if !listed && page.expected.met(slice, deleted) {
            return page.pending.is_pending();
        }
        page.pending.slices_changed(at);
        true
    }

    /// Whether a change of `pod` reconciles the Service at once rather than being screened:
    /// the Service includes the pod, or remembers no decisions to screen against.
    pub fn reconciles_at_once(&self, service: &ServiceRef, pod: &str) -> bool {
        self.services
            .get(service)
            .and_then(|p| p.remembered.as_ref())
            .is_none_or(|r| r.included.contains(pod))
    }
}

/// What a reconcile does.
impl Book {
    /// Starts a reconcile of `service` whose slices in the cache are `existing`, at `now`.
    /// `None` when the cache is behind this controller's own writes: their watch events are on
    /// their way and trigger the reconcile again, which then takes the pending changes.
    pub fn begin(
        &mut self,
        service: &ServiceRef,
        existing: &[Arc<EndpointSlice>],
        now: Timestamp,
    ) -> Option<Begun> {
        let page = self.page(service);
        if page.expected.cache_is_stale(existing, now) {
            page.pending.wait_for_cache();
            return None;
        }
        Some(Begun {
            taken: page.pending.take(),
            // Taken, not copied: while the reconcile runs, every change of the Service's pods
            // reconciles it again rather than being screened, since the reconcile may have
            // read the pod before it changed.
            remembered: page.remembered.take(),
            answered: std::mem::take(&mut page.answered),
        })
    }

    /// A reconcile is about to write `changes`: drops the slices that must not be sent
    /// (exactly what the API refused before, or what this controller's own check of the API's
    /// rules refuses: returned, by name, with the rules they break), and holds the Service's
    /// slice events until [`Self::record`] (see [`Self::slice_event`]) if anything is left to
    /// send.
    pub fn writing(
        &mut self,
        service: &ServiceRef,
        changes: &mut Changes,
    ) -> Vec<(String, Vec<Violation>)> {
        let page = self.page(service);
        let state = &mut page.state;
        let mut refused_now = Vec::new();
        changes.write.retain(|slice| {
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
        if !changes.is_empty() {
            page.in_flight = Some(Vec::new());
        }
        refused_now
    }

    /// Records what a reconcile of `service` over its slices `existing` did, at `at`: the one
    /// call a reconcile ends with. A released Service is forgotten.
    pub fn record(
        &mut self,
        service: &ServiceRef,
        existing: &[Arc<EndpointSlice>],
        entry: Entry,
        at: Timestamp,
    ) -> Recorded {
        if entry.released {
            self.forget(service);
            return Recorded::default();
        }
        let page = self.page(service);
        let mut recorded = Recorded::default();
        if let Some(remembered) = entry.remembered {
            page.remembered = Some(remembered);
        }
        if let Some(findings) = entry.findings {
            recorded.new_findings = page.state.report(findings);
        }
        if let Some(node_retry) = entry.node_retry {
            page.state.node_retry = node_retry;
        }
        let mut replan = entry.held_back;
        if let Some(wrote) = &entry.wrote {
            replan |= page.wrote(existing, wrote, at);
        }
        // Events held while the write was in flight: its echo, or someone else's change.
        let held = page.in_flight.take().unwrap_or_default();
        for (slice, deleted) in held {
            if !page.expected.met(&slice, deleted) {
                page.pending.slices_changed(at);
                recorded.foreign = true;
            }
        }
        match entry.failed {
            Some(error) => {
                replan = true;
                recorded.new_failure = page.state.failed(error);
            }
            None => recorded.recovered = page.state.succeeded(),
        }
        if replan {
            // The slices may differ from the plan: the next reconcile plans everything,
            // whatever triggers it.
            page.pending.everything_changed(at);
        }
        recorded.node_retry = page.state.node_retry;
        recorded
    }

    /// `finding` was reported but did not reach the operator (its Event was refused) at `at`:
    /// the Service's next reconcile plans everything (so finds it again, whatever triggers it)
    /// and reports it again.
    pub fn untold(&mut self, service: &ServiceRef, finding: &Finding, at: Timestamp) {
        let page = self.page(service);
        page.state.untold(finding);
        page.pending.everything_changed(at);
    }

    /// The Service's failures in a row (at least 1 after a failure), and whether the last
    /// repeated the one before.
    pub fn failures(&self, service: &ServiceRef) -> (u32, bool) {
        self.services
            .get(service)
            .map_or((1, false), |e| (e.state.failures, e.state.is_repeat()))
    }

    /// Forgets everything about a Service that is gone or no longer managed.
    pub fn forget(&mut self, service: &ServiceRef) {
        self.services.remove(service);
    }
}

impl Page {
    /// The writes a reconcile made over `existing` at `at`: what the cache should show next.
    /// True when the slices may differ from the plan (a write refused or outdated).
    fn wrote(&mut self, existing: &[Arc<EndpointSlice>], wrote: &Wrote, at: Timestamp) -> bool {
        let seen = |slice: &str| existing.iter().find(|s| s.name_any() == slice);
        for (slice, generation) in &wrote.applied {
            let created = seen(slice).is_none();
            self.expected.applied(slice, *generation, created, at);
            self.state.accepted(slice);
        }
        for slice in &wrote.deleted {
            let uid = seen(slice).and_then(|s| s.uid());
            self.expected.deleted(slice, uid);
        }
        for slice in &wrote.refused {
            self.state.refused(slice);
        }
        wrote.outdated || !wrote.refused.is_empty()
    }
}

/// What the recovery and the Service watch ask.
impl Book {
    /// Services whose last reconcile failed.
    pub fn failing(&self) -> Vec<ServiceRef> {
        let mut out: Vec<_> = self
            .services
            .iter()
            .filter(|(_, e)| e.state.failures > 0)
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    /// Services with bookkeeping for which `pick` holds.
    pub fn known(&self, pick: impl Fn(&ServiceRef) -> bool) -> Vec<ServiceRef> {
        let mut known: Vec<_> = self.services.keys().filter(|k| pick(k)).cloned().collect();
        known.sort();
        known
    }
}

/// The shared book, and how many times it was locked.
#[derive(Debug, Default, Clone)]
pub struct SharedBook {
    book: Arc<Mutex<Book>>,
    locked: Arc<AtomicU64>,
}

impl SharedBook {
    /// A poisoned lock is still used: every update of the book is complete before it can
    /// panic, so what it holds is consistent.
    pub fn lock(&self) -> MutexGuard<'_, Book> {
        self.locked.fetch_add(1, Ordering::Relaxed);
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many times the book was locked: what a change costs in turns at the one lock every
    /// watch and reconcile shares.
    pub fn times_locked(&self) -> u64 {
        self.locked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decide::PolicyId, scope::Scope};

    fn svc(name: &str) -> ServiceRef {
        ServiceRef::new("ns", name)
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn slice(generation: i64) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-ipv4-0", "generation": generation, "uid": "u"},
            "addressType": "IPv4"}))
        .unwrap()
    }

    fn applied(generation: i64) -> Entry {
        Entry {
            wrote: Some(Wrote {
                applied: vec![("web-ipv4-0".to_owned(), Some(generation))],
                ..Wrote::default()
            }),
            ..Entry::default()
        }
    }

    fn wrote_web_ipv4_0(book: &mut Book) {
        book.record(&svc("web"), &[Arc::new(slice(1))], applied(2), at(0));
    }

    fn remembered(included: &[&str]) -> Remembered {
        let ready = nad_model::decision::Conditions {
            ready: true,
            serving: true,
            terminating: false,
        };
        Remembered {
            by: None,
            included: included.iter().map(|p| ((*p).into(), ready)).collect(),
        }
    }

    #[test]
    fn a_stale_cache_leaves_the_pending_changes_for_later() {
        let mut book = Book::default();
        wrote_web_ipv4_0(&mut book);
        book.input_changed(&svc("web"), at(1));
        let stored = Arc::new(slice(1));
        assert!(
            book.begin(&svc("web"), std::slice::from_ref(&stored), at(1))
                .is_none()
        );
        let begun = book
            .begin(&svc("web"), &[], at(1))
            .expect("the slice is gone: go on");
        assert_eq!(begun.taken.scope, Scope::Full);
        assert_eq!(begun.taken.changed_at, Some(at(1)));
    }

    #[test]
    fn the_echo_of_an_own_write_reconciles_only_a_service_that_waits_for_it() {
        let mut book = Book::default();
        wrote_web_ipv4_0(&mut book);
        assert!(
            !book.slice_event(&svc("web"), &slice(2), false, false, at(1)),
            "nothing waits: the echo costs no reconcile"
        );
        assert!(
            book.begin(&svc("web"), &[Arc::new(slice(2))], at(1))
                .is_some(),
            "the echo met the expectation"
        );

        wrote_web_ipv4_0(&mut book);
        assert!(
            book.begin(&svc("web"), &[Arc::new(slice(1))], at(1))
                .is_none()
        );
        assert!(
            book.slice_event(&svc("web"), &slice(2), false, false, at(1)),
            "a reconcile waits for this echo"
        );
        assert!(
            book.slice_event(&svc("web"), &slice(3), false, false, at(1)),
            "someone else's write"
        );
        assert!(
            book.slice_event(&svc("web"), &slice(2), false, true, at(1)),
            "a relist shows it: no one can tell whose it is"
        );
    }

    #[test]
    fn an_echo_that_comes_before_the_writes_answer_costs_no_reconcile() {
        let mut book = Book::default();
        let mut changes = Changes {
            write: vec![slice(1)],
            ..Changes::default()
        };
        assert!(book.writing(&svc("web"), &mut changes).is_empty());
        assert!(
            !book.slice_event(&svc("web"), &slice(2), false, false, at(1)),
            "held"
        );
        let recorded = book.record(&svc("web"), &[Arc::new(slice(1))], applied(2), at(1));
        assert!(!recorded.foreign, "it was the write's own echo");
        assert!(!book.services[&svc("web")].pending.is_pending());

        book.writing(&svc("web"), &mut changes);
        assert!(
            !book.slice_event(&svc("web"), &slice(9), false, false, at(2)),
            "held"
        );
        let recorded = book.record(&svc("web"), &[Arc::new(slice(2))], applied(3), at(3));
        assert!(
            recorded.foreign,
            "someone else's change came meanwhile: reconcile again"
        );
        let begun = book
            .begin(&svc("web"), &[Arc::new(slice(9))], at(4))
            .unwrap();
        assert!(begun.taken.slices_changed);
        assert_eq!(begun.taken.changed_at, Some(at(3)));
    }

    #[test]
    fn a_write_with_nothing_left_to_send_holds_no_event() {
        let mut book = Book::default();
        assert!(
            book.writing(&svc("web"), &mut Changes::default())
                .is_empty()
        );
        assert!(
            book.slice_event(&svc("web"), &slice(9), false, false, at(1)),
            "not held: nothing is in flight"
        );
    }

    #[test]
    fn a_slice_the_api_would_refuse_is_held_back_and_replanned() {
        let mut book = Book::default();
        let mut bad = slice(1);
        bad.endpoints = Some(vec![k8s_openapi::api::discovery::v1::Endpoint {
            addresses: vec!["not-an-ip".into()],
            ..Default::default()
        }]);
        let mut changes = Changes {
            write: vec![bad.clone()],
            ..Changes::default()
        };
        let refused = book.writing(&svc("web"), &mut changes);
        assert_eq!(refused.len(), 1);
        assert!(changes.is_empty());
        let held_back = Entry {
            held_back: true,
            ..Entry::default()
        };
        book.record(&svc("web"), &[], held_back, at(1));
        assert_eq!(
            book.begin(&svc("web"), &[], at(2)).unwrap().taken.scope,
            Scope::Full
        );
        let mut again = Changes {
            write: vec![bad],
            ..Changes::default()
        };
        assert!(
            book.writing(&svc("web"), &mut again).is_empty(),
            "the same content is not checked (nor told) again"
        );
        assert!(again.is_empty(), "and not sent either");
    }

    #[test]
    fn a_slice_the_api_server_refused_is_not_sent_again_while_it_is_the_same() {
        let mut book = Book::default();
        let refused = Entry {
            wrote: Some(Wrote {
                refused: vec![slice(1)],
                ..Wrote::default()
            }),
            ..Entry::default()
        };
        book.record(&svc("web"), &[], refused, at(1));
        assert_eq!(
            book.begin(&svc("web"), &[], at(2)).unwrap().taken.scope,
            Scope::Full
        );
        let mut changes = Changes {
            write: vec![slice(1)],
            ..Changes::default()
        };
        book.writing(&svc("web"), &mut changes);
        assert!(changes.is_empty());
    }

    #[test]
    fn a_pod_change_during_a_reconcile_reconciles_again_unscreened() {
        let mut book = Book::default();
        assert!(
            book.reconciles_at_once(&svc("web"), "a"),
            "nothing remembered"
        );
        let remember = |r| Entry {
            remembered: Some(r),
            ..Entry::default()
        };
        book.record(&svc("web"), &[], remember(remembered(&["a"])), at(0));
        assert!(book.reconciles_at_once(&svc("web"), "a"), "included");
        assert!(!book.reconciles_at_once(&svc("web"), "b"), "screened");
        let begun = book.begin(&svc("web"), &[], at(1)).unwrap();
        assert!(
            book.reconciles_at_once(&svc("web"), "b"),
            "the reconcile may have read b before it changed"
        );
        book.record(&svc("web"), &[], remember(begun.remembered.unwrap()), at(1));
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
        book.screened(&svc("web"), "a", at(0), Some(answer));
        let begun = book.begin(&svc("web"), &[], at(1)).unwrap();
        assert_eq!(begun.answered.len(), 1);
        assert_eq!(begun.taken.scope, Scope::Pods(["a".to_owned()].into()));
        assert!(
            book.begin(&svc("web"), &[], at(1))
                .unwrap()
                .answered
                .is_empty()
        );
    }

    #[test]
    fn a_failure_is_recorded_new_once_then_recovered_from() {
        let mut book = Book::default();
        let failed = || Entry {
            failed: Some("503".into()),
            ..Entry::default()
        };
        assert!(book.record(&svc("web"), &[], failed(), at(0)).new_failure);
        assert!(!book.record(&svc("web"), &[], failed(), at(0)).new_failure);
        assert_eq!(book.failures(&svc("web")), (2, true));
        assert_eq!(book.failing(), vec![svc("web")]);
        assert_eq!(
            book.begin(&svc("web"), &[], at(1)).unwrap().taken.scope,
            Scope::Full,
            "a failure plans everything next"
        );
        let recorded = book.record(&svc("web"), &[], Entry::default(), at(1));
        assert_eq!(recorded.recovered.as_deref(), Some("503"));
        assert!(book.failing().is_empty());
    }

    #[test]
    fn findings_are_new_once_and_untold_ones_come_back() {
        let mut book = Book::default();
        let finding = Finding::PodSkipped {
            pod: "a".into(),
            reason: "no IPs".into(),
        };
        let planned = || Entry {
            findings: Some(vec![finding.clone()]),
            node_retry: Some(true),
            ..Entry::default()
        };
        let recorded = book.record(&svc("web"), &[], planned(), at(0));
        assert_eq!(recorded.new_findings, vec![finding.clone()]);
        assert!(recorded.node_retry);
        assert!(
            book.record(&svc("web"), &[], planned(), at(0))
                .new_findings
                .is_empty()
        );
        assert!(
            book.record(&svc("web"), &[], Entry::default(), at(0))
                .node_retry,
            "nothing planned: the last plan's stands"
        );
        book.untold(&svc("web"), &finding, at(1));
        assert_eq!(
            book.begin(&svc("web"), &[], at(2)).unwrap().taken.scope,
            Scope::Full
        );
        assert_eq!(
            book.record(&svc("web"), &[], planned(), at(2)).new_findings,
            vec![finding]
        );
    }

    #[test]
    fn a_released_or_forgotten_service_leaves_nothing_behind() {
        let mut book = Book::default();
        let failed = Entry {
            failed: Some("x".into()),
            remembered: Some(Remembered::default()),
            ..Entry::default()
        };
        book.record(&svc("web"), &[], failed, at(0));
        book.record(&svc("api"), &[Arc::new(slice(1))], applied(2), at(0));
        assert_eq!(book.known(|_| true), vec![svc("api"), svc("web")]);
        book.forget(&svc("web"));
        let released = Entry {
            released: true,
            ..Entry::default()
        };
        book.record(&svc("api"), &[], released, at(0));
        assert!(book.known(|_| true).is_empty());
        assert!(book.failing().is_empty());
        let begun = book
            .begin(&svc("api"), &[Arc::new(slice(1))], at(0))
            .expect("no expectations left");
        assert!(begun.remembered.is_none());
        assert_eq!(begun.taken.changed_at, None, "nothing pending");
    }
}
