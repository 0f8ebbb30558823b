//! Every outcome of the step, and every branch of `decide`, with a table of answers as the
//! policy: no Wasm, no API.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use serde_json::json;

use super::*;
use crate::{
    decide::{Answer, Pods, PolicyId, Screened, screen},
    observe::{self, tests::pod},
};
use nad_model::{
    candidate::Candidate,
    decision::{Conditions, Decision},
    input::service_record::ServiceRecord,
    keys::Keys,
    pod::PodRecord,
    selection::Selection,
};

const READY: Conditions = Conditions {
    ready: true,
    serving: true,
    terminating: false,
};

/// A policy that includes the pods named in `included` and excludes the others, and notes
/// whom it was asked about.
struct Table {
    id: PolicyId,
    per_pod: bool,
    included: Vec<&'static str>,
    /// No one can decide (an unknown plugin under `keep`).
    unknown: bool,
    asked: Vec<Vec<String>>,
    /// The labels it declares every pod it includes has.
    selection: Selection,
    /// Its first call fails under `fallback`: from then on the policy `fallback` decides,
    /// which includes every pod and declares no labels.
    falls_back: bool,
}

impl Table {
    fn per_pod(included: &[&'static str]) -> Self {
        Table {
            id: id("table"),
            per_pod: true,
            included: included.to_vec(),
            unknown: false,
            asked: Vec::new(),
            selection: Selection::everything(),
            falls_back: false,
        }
    }

    /// Declares that every pod it includes has label `app` = `value`.
    fn selecting(mut self, value: &str) -> Self {
        self.selection = Selection::new([("app".to_owned(), value.to_owned())]);
        self
    }

    fn whole_set(included: &[&'static str]) -> Self {
        Table {
            per_pod: false,
            ..Table::per_pod(included)
        }
    }
}

/// The table's plugin is not loaded.
#[derive(Debug, PartialEq)]
struct Unknown;

impl Policy for Table {
    type Error = Unknown;

    fn id(&self) -> Result<PolicyId, Unknown> {
        if self.unknown {
            return Err(Unknown);
        }
        Ok(self.id.clone())
    }

    fn per_pod(&self) -> bool {
        self.per_pod
    }

    fn selection(&mut self, _: &ServiceTarget) -> Result<Arc<Selection>, Unknown> {
        self.id()?;
        Ok(Arc::new(self.selection.clone()))
    }

    fn decide(&mut self, _: &ServiceTarget, pods: Pods<'_>) -> Result<Vec<Decision>, Unknown> {
        self.id()?;
        self.asked
            .push(pods.iter().map(|c| c.name().to_owned()).collect());
        if std::mem::take(&mut self.falls_back) {
            self.id = id("fallback");
            self.selection = Selection::everything();
            self.included = vec!["a", "b", "c", "d"];
        }
        Ok(pods
            .iter()
            .map(|c| match self.included.contains(&c.name()) {
                true => Decision::Include(READY),
                false => Decision::Exclude("not in the table".into()),
            })
            .collect())
    }
}

fn id(name: &str) -> PolicyId {
    PolicyId {
        name: name.into(),
        hash: "h".into(),
        config: 0,
    }
}

/// The admission of `service`, from its record as the Service store keeps it.
fn admitted(service: &Service) -> Result<Arc<ServiceTarget>, Release> {
    admit(&ServiceRecord::from(service))
}

fn service(annotations: serde_json::Value) -> Service {
    let mut all = json!({"isim.dev/network": "macvlan"});
    for (k, v) in annotations.as_object().unwrap() {
        all[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "team-a", "uid": "svc-uid", "annotations": all},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap()
}

fn target() -> Arc<ServiceTarget> {
    admitted(&service(json!({}))).unwrap()
}

fn record(name: &str, host: u8) -> Arc<PodRecord> {
    let status = format!(r#"[{{"name":"team-a/macvlan","ips":["192.168.2.{host}"]}}]"#);
    pod(name, "team-a", Some(&status), None)
}

/// The pods `a`, `b` and `c`, candidates of the Service.
fn pods() -> Vec<Arc<PodRecord>> {
    vec![record("a", 1), record("b", 2), record("c", 3)]
}

fn observation(pods: &[Arc<PodRecord>], names: &[&str]) -> Observation {
    let named = pods.iter().filter(|p| names.contains(&&*p.name));
    observe::candidates(&target(), named, |_| Some(None))
}

fn taken(scope: Scope) -> Taken {
    Taken {
        scope,
        slices_changed: false,
        changed_at: None,
    }
}

fn changed(pods: &[&str]) -> Taken {
    taken(Scope::Pods(pods.iter().map(|p| (*p).to_owned()).collect()))
}

/// A snapshot of the Service over `pods`, with `existing` slices, for a reconcile that takes
/// `taken`; its candidates may be observed.
fn snapshot(pods: &[Arc<PodRecord>], existing: Vec<Arc<EndpointSlice>>, taken: Taken) -> Snapshot {
    let names: Vec<&str> = match &taken.scope {
        Scope::Pods(names) => names.iter().map(String::as_str).collect(),
        Scope::Full => Vec::new(),
    };
    let changed = observation(pods, &names);
    let every: Vec<&str> = pods.iter().map(|p| &*p.name).collect();
    let all = observation(pods, &every);
    Snapshot {
        target: target(),
        existing,
        taken,
        remembered: None,
        answered: Vec::new(),
        changed,
        candidates: Candidates::of(all),
        missing: None,
    }
}

/// As [`snapshot`], but observing every candidate fails the test.
fn without_candidates(snapshot: Snapshot) -> Snapshot {
    Snapshot {
        candidates: Candidates::lazy(|| panic!("the candidates were observed")),
        ..snapshot
    }
}

fn remembered(included: &[&str]) -> Option<Remembered> {
    Some(Remembered {
        by: Some(id("table")),
        included: included.iter().map(|p| ((*p).into(), READY)).collect(),
    })
}

/// The slices a full plan of `included` writes, as stored.
fn published(included: &[&'static str]) -> Vec<Arc<EndpointSlice>> {
    let step = step(
        snapshot(&pods(), vec![], taken(Scope::Full)),
        &mut Table::per_pod(included),
        100,
    );
    let Ok(Step::Write(plan)) = step else {
        panic!("{step:?}")
    };
    plan.changes
        .write
        .into_iter()
        .map(|mut s| {
            s.metadata.resource_version = Some("1".into());
            s.metadata.uid = Some("u".into());
            Arc::new(s)
        })
        .collect()
}

fn addresses(plan: &Plan) -> BTreeMap<String, bool> {
    plan.changes
        .write
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .map(|e| {
            let pod = e.target_ref.as_ref().and_then(|t| t.name.clone()).unwrap();
            (pod, e.conditions.as_ref().unwrap().ready.unwrap())
        })
        .collect()
}

fn written(step: Result<Step, Unknown>) -> Box<Plan> {
    match step {
        Ok(Step::Write(plan)) => plan,
        other => panic!("expected a write, got {other:?}"),
    }
}

fn included(remembered: &Option<Remembered>) -> Vec<String> {
    let mut pods: Vec<String> = remembered
        .as_ref()
        .unwrap()
        .included
        .iter()
        .map(|(pod, _)| pod.to_owned())
        .collect();
    pods.sort();
    pods
}

#[test]
fn a_service_is_admitted_unless_unannotated_invalid_or_deleting() {
    assert!(admitted(&service(json!({}))).is_ok());
    let mut plain = service(json!({}));
    plain.metadata.annotations = None;
    assert_eq!(admitted(&plain), Err(Release::Unmanaged));
    let mut selector = service(json!({}));
    selector.spec.as_mut().unwrap().selector = Some([("app".into(), "web".into())].into());
    assert!(matches!(admitted(&selector), Err(Release::Invalid(p)) if !p.is_empty()));
    let mut deleting = service(json!({}));
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
    );
    assert_eq!(admitted(&deleting), Err(Release::Deleting));
}

#[test]
fn a_full_plan_asks_about_every_candidate_once_and_remembers_the_included() {
    let mut policy = Table::per_pod(&["a", "c"]);
    let plan = written(step(
        snapshot(&pods(), vec![], taken(Scope::Full)),
        &mut policy,
        100,
    ));
    assert_eq!(policy.asked, [["a", "b", "c"]]);
    assert_eq!(
        addresses(&plan),
        BTreeMap::from([("a".into(), true), ("c".into(), true)])
    );
    assert_eq!(plan.verdicts.excluded.len(), 1);
    assert_eq!(included(&plan.remembered), ["a", "c"]);
    assert_eq!(plan.remembered.as_ref().unwrap().by, Some(id("table")));
    assert!(plan.findings.is_empty() && plan.problems().is_empty() && !plan.node_retry());
}

#[test]
fn only_this_controllers_own_writes_change_nothing_and_ask_nothing() {
    let mut policy = Table::per_pod(&["a"]);
    let mut snap = without_candidates(snapshot(&pods(), vec![], changed(&[])));
    snap.remembered = remembered(&["a"]);
    let step = step(snap, &mut policy, 100).unwrap();
    assert!(matches!(&step, Step::Unchanged { remembered } if included(remembered) == ["a"]));
    assert!(policy.asked.is_empty());
}

#[test]
fn a_changed_pod_that_stays_out_moves_nothing_and_is_remembered_so() {
    let mut policy = Table::per_pod(&["a"]);
    let mut snap = without_candidates(snapshot(&pods(), vec![], changed(&["b"])));
    snap.remembered = remembered(&["a", "b"]);
    let Ok(Step::Unchanged { remembered }) = step(snap, &mut policy, 100) else {
        panic!()
    };
    assert_eq!(policy.asked, [["b"]], "the changed pod alone");
    assert_eq!(included(&remembered), ["a"], "b left the memory");
}

#[test]
fn a_changed_pod_that_is_included_is_planned_with_the_others_remembered() {
    let mut policy = Table::per_pod(&["a", "b"]);
    let mut snap = snapshot(&pods(), published(&["a"]), changed(&["b"]));
    snap.remembered = remembered(&["a"]);
    let plan = written(step(snap, &mut policy, 100));
    assert_eq!(policy.asked, [["b"]], "a is remembered, c never asked");
    assert_eq!(
        addresses(&plan),
        BTreeMap::from([("a".into(), true), ("b".into(), true)])
    );
    assert_eq!(included(&plan.remembered), ["a", "b"]);
}

#[test]
fn memory_of_another_policy_is_not_used() {
    let mut policy = Table::per_pod(&["a", "b"]);
    let mut snap = snapshot(&pods(), published(&["a"]), changed(&["a"]));
    snap.remembered = Some(Remembered {
        by: Some(id("before")),
        ..remembered(&["a"]).unwrap()
    });
    let plan = written(step(snap, &mut policy, 100));
    assert_eq!(
        policy.asked,
        [vec!["a", "b", "c"]],
        "a published pod changed: all asked"
    );
    assert_eq!(included(&plan.remembered), ["a", "b"]);
}

#[test]
fn a_whole_set_policy_is_asked_about_every_candidate_when_a_published_pod_changes() {
    let mut policy = Table::whole_set(&["a"]);
    let mut snap = snapshot(&pods(), published(&["a", "b"]), changed(&["b"]));
    snap.remembered = remembered(&["a", "b"]);
    let plan = written(step(snap, &mut policy, 100));
    assert_eq!(
        policy.asked,
        [["a", "b", "c"]],
        "one call, no partial answer first"
    );
    assert_eq!(addresses(&plan), BTreeMap::from([("a".into(), true)]));
}

#[test]
fn a_whole_set_policy_asked_about_an_excluded_pod_keeps_no_memory() {
    let mut policy = Table::whole_set(&["a"]);
    let mut snap = without_candidates(snapshot(&pods(), vec![], changed(&["c"])));
    snap.remembered = remembered(&["a"]);
    let Ok(Step::Unchanged { remembered }) = step(snap, &mut policy, 100) else {
        panic!()
    };
    assert_eq!(policy.asked, [["c"]]);
    assert!(
        remembered.is_none(),
        "a partial answer of a whole-set policy"
    );
}

#[test]
fn the_screens_answer_about_the_same_record_is_not_asked_again() {
    let pods = pods();
    let mut policy = Table::per_pod(&["a", "b"]);
    let mut snap = snapshot(&pods, published(&["a"]), changed(&["b"]));
    snap.remembered = remembered(&["a"]);
    snap.answered = vec![Answer {
        pod: pods[1].clone(),
        by: id("table"),
        decision: Decision::Include(READY),
    }];
    let plan = written(step(snap, &mut policy, 100));
    assert!(policy.asked.is_empty(), "{:?}", policy.asked);
    assert_eq!(included(&plan.remembered), ["a", "b"]);

    // The pod changed again since (another record): the answer is stale.
    let mut snap = snapshot(&pods, published(&["a"]), changed(&["b"]));
    snap.remembered = remembered(&["a"]);
    snap.answered = vec![Answer {
        pod: record("b", 2),
        by: id("table"),
        decision: Decision::Include(READY),
    }];
    written(step(snap, &mut policy, 100));
    assert_eq!(policy.asked, [["b"]]);
}

#[test]
fn a_slice_changed_by_someone_else_is_placed_again_from_memory() {
    let mut policy = Table::per_pod(&["a", "b"]);
    let mut existing = published(&["a", "b"]);
    let mut edited = (*existing[0]).clone();
    edited.endpoints.as_mut().unwrap().truncate(1);
    existing[0] = Arc::new(edited);
    let mut snap = snapshot(&pods(), existing, changed(&[]));
    snap.taken.slices_changed = true;
    snap.remembered = remembered(&["a", "b"]);
    let plan = written(step(snap, &mut policy, 100));
    assert!(policy.asked.is_empty(), "no input changed");
    assert_eq!(
        addresses(&plan),
        BTreeMap::from([("a".into(), true), ("b".into(), true)])
    );
}

#[test]
fn slices_as_planned_need_no_write() {
    let mut policy = Table::per_pod(&["a"]);
    let plan = written(step(
        snapshot(&pods(), published(&["a"]), taken(Scope::Full)),
        &mut policy,
        100,
    ));
    assert!(plan.changes.is_empty());
    assert_eq!(plan.changes.unchanged, 1);
}

#[test]
fn a_missing_network_keeps_the_slices_it_had_when_nothing_is_on_it() {
    let missing = Missing {
        network: "team-a/macvlan".into(),
        closest: Some("team-a/macvlan2".into()),
    };
    let mut snap = snapshot(&[], published(&["a"]), taken(Scope::Full));
    snap.missing = Some(missing.clone());
    let Ok(Step::NetworkMissing(plan)) = step(snap, &mut Table::per_pod(&["a"]), 100) else {
        panic!()
    };
    assert!(plan.changes.is_empty());
    assert_eq!(plan.problems(), BTreeSet::from([Reason::NetworkNotFound]));
    assert_eq!(plan.findings, [Finding::NetworkNotFound(missing.clone())]);

    // With endpoints on it, they are published, and the network still reported.
    let mut snap = snapshot(&pods(), vec![], taken(Scope::Full));
    snap.missing = Some(missing);
    let plan = written(step(snap, &mut Table::per_pod(&["a"]), 100));
    assert_eq!(addresses(&plan).len(), 1);
    assert_eq!(plan.problems(), BTreeSet::from([Reason::NetworkNotFound]));
}

#[test]
fn input_problems_are_found_and_counted() {
    let duplicate = pod(
        "d",
        "team-a",
        Some(r#"[{"name":"team-a/macvlan","ips":["192.168.2.1"]}]"#),
        Some("ghost"),
    );
    let mut pods = pods();
    pods.push(duplicate.clone());
    let all = observe::candidates(&target(), &pods, |node| (node != "ghost").then_some(None));
    let mut snap = snapshot(&pods, vec![], taken(Scope::Full));
    snap.candidates = Candidates::of(all);
    snap.target = admitted(&service(
        json!({"isim.dev/probe": "{\"periodSeconds\": 0}"}),
    ))
    .unwrap();
    let plan = written(step(snap, &mut Table::per_pod(&["a", "d"]), 100));
    assert!(plan.node_retry(), "d waits for its node");
    assert_eq!(plan.problems(), BTreeSet::from([Reason::InvalidProbe]));
    assert!(matches!(&plan.findings[0], Finding::PodSkipped { pod, .. } if pod == "d"));

    // On a known node, d claims a's address: the older pod keeps it.
    let all = observe::candidates(&target(), &pods, |_| Some(None));
    let mut snap = snapshot(&pods, vec![], taken(Scope::Full));
    snap.candidates = Candidates::of(all);
    let plan = written(step(snap, &mut Table::per_pod(&["a", "d"]), 100));
    assert_eq!(plan.problems(), BTreeSet::from([Reason::DuplicateAddress]));
    assert_eq!(addresses(&plan).len(), 1);
}

#[test]
fn a_policy_that_cannot_decide_fails_the_step() {
    let mut policy = Table::per_pod(&["a"]);
    policy.unknown = true;
    let step = step(
        snapshot(&pods(), vec![], taken(Scope::Full)),
        &mut policy,
        100,
    );
    assert_eq!(step.unwrap_err(), Unknown);
}

fn candidate(name: &str) -> Candidate {
    observation(&pods(), &[name]).candidates.remove(0)
}

#[test]
fn the_screen_lets_through_only_a_pod_that_is_included_now() {
    let mut policy = Table::per_pod(&["a"]);
    assert!(matches!(
        screen(&mut policy, &target(), &candidate("b")),
        Screened::Still
    ));
    let a = candidate("a");
    let Screened::Moves(Some(answer)) = screen(&mut policy, &target(), &a) else {
        panic!()
    };
    assert!(Arc::ptr_eq(&answer.pod, &a.pod));
    assert_eq!(answer.by, id("table"));
    assert_eq!(answer.decision, Decision::Include(READY));
    assert_eq!(policy.asked, [["b"], ["a"]]);

    policy.unknown = true;
    assert!(matches!(
        screen(&mut policy, &target(), &candidate("b")),
        Screened::Moves(None)
    ));
}

/// A candidate of the Service with label `app` when `app` is given.
fn labelled(name: &str, host: u8, app: Option<&str>) -> Arc<PodRecord> {
    let status = format!(r#"[{{"name":"team-a/macvlan","ips":["192.168.2.{host}"]}}]"#);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                     "labels": app.map(|v| json!({"app": v})).unwrap_or(json!({})),
                     "annotations": {"k8s.v1.cni.cncf.io/network-status": status}},
        "spec": {"containers": []},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    Arc::new(PodRecord::from_pod(&pod, &Keys::all()))
}

/// `a` and `c` have `app=web`, `b` has `app=db`, `d` no `app`.
fn labelled_pods() -> Vec<Arc<PodRecord>> {
    vec![
        labelled("a", 1, Some("web")),
        labelled("b", 2, Some("db")),
        labelled("c", 3, Some("web")),
        labelled("d", 4, None),
    ]
}

/// The candidate `name` of [`labelled_pods`].
fn labelled_candidate(name: &str) -> Candidate {
    observation(&labelled_pods(), &[name]).candidates.remove(0)
}

#[test]
fn a_selecting_policy_is_asked_about_the_pods_with_its_labels_only_and_decides_the_same() {
    for per_pod in [true, false] {
        let table = |included| match per_pod {
            true => Table::per_pod(included),
            false => Table::whole_set(included),
        };
        let full = || snapshot(&labelled_pods(), vec![], taken(Scope::Full));
        let mut every = table(&["a", "c"]);
        let before = written(step(full(), &mut every, 100));
        let mut selecting = table(&["a", "c"]).selecting("web");
        let after = written(step(full(), &mut selecting, 100));
        assert_eq!(every.asked, [["a", "b", "c", "d"]]);
        assert_eq!(selecting.asked, [["a", "c"]], "b and d have no app=web");
        assert_eq!(addresses(&after), addresses(&before));
        assert_eq!(after.verdicts.included, before.verdicts.included);
        assert_eq!(included(&after.remembered), ["a", "c"]);
        assert_eq!(after.changes.write, before.changes.write);
        // Only the pods asked about are among the excluded; the others were never asked.
        assert_eq!(after.verdicts.excluded, []);
        assert_eq!(after.verdicts.selection.to_string(), r#"app="web""#);
    }
}

#[test]
fn a_selection_no_candidate_matches_asks_nothing_and_publishes_nothing() {
    let mut policy = Table::per_pod(&["a"]).selecting("cache");
    let plan = written(step(
        snapshot(&labelled_pods(), vec![], taken(Scope::Full)),
        &mut policy,
        100,
    ));
    assert!(policy.asked.is_empty(), "{:?}", policy.asked);
    assert!(addresses(&plan).is_empty());
}

#[test]
fn a_changed_pod_without_the_selected_labels_is_excluded_without_asking() {
    let pods = labelled_pods();
    let mut policy = Table::per_pod(&["a", "c"]).selecting("web");
    let mut snap = without_candidates(snapshot(&pods, vec![], changed(&["b"])));
    snap.remembered = remembered(&["a", "b", "c"]);
    let Ok(Step::Unchanged { remembered: kept }) = step(snap, &mut policy, 100) else {
        panic!()
    };
    assert!(policy.asked.is_empty(), "{:?}", policy.asked);
    assert_eq!(included(&kept), ["a", "c"], "b left the memory");

    let mut snap = snapshot(&pods, vec![], changed(&["c", "d"]));
    snap.remembered = remembered(&["a"]);
    let plan = written(step(snap, &mut policy, 100));
    assert_eq!(policy.asked, [["c"]], "d has no app label");
    assert_eq!(included(&plan.remembered), ["a", "c"]);
}

#[test]
fn the_screen_lets_a_pod_without_the_selected_labels_pass_without_asking() {
    let mut policy = Table::per_pod(&["a", "b"]).selecting("web");
    assert!(matches!(
        screen(&mut policy, &target(), &labelled_candidate("b")),
        Screened::Still
    ));
    assert!(policy.asked.is_empty());
    assert!(matches!(
        screen(&mut policy, &target(), &labelled_candidate("a")),
        Screened::Moves(Some(_))
    ));
    assert_eq!(policy.asked, [["a"]]);
}

#[test]
fn a_policy_that_falls_back_during_a_selected_call_is_asked_again_about_every_candidate() {
    let mut policy = Table::per_pod(&["a"]).selecting("web");
    policy.falls_back = true;
    let plan = written(step(
        snapshot(&labelled_pods(), vec![], taken(Scope::Full)),
        &mut policy,
        100,
    ));
    assert_eq!(policy.asked, [vec!["a", "c"], vec!["a", "b", "c", "d"]]);
    assert_eq!(addresses(&plan).len(), 4, "the fallback includes every pod");
    assert_eq!(plan.remembered.as_ref().unwrap().by, Some(id("fallback")));
    assert!(plan.verdicts.selection.is_everything());
}

#[test]
fn a_policy_that_falls_back_on_a_changed_pod_decides_every_candidate_again() {
    let pods = labelled_pods();
    let mut policy = Table::per_pod(&["a"]).selecting("web");
    policy.falls_back = true;
    let mut snap = snapshot(&pods, published(&["a"]), changed(&["c"]));
    snap.remembered = remembered(&["a"]);
    let plan = written(step(snap, &mut policy, 100));
    assert_eq!(policy.asked, [vec!["c"], vec!["a", "b", "c", "d"]]);
    assert_eq!(included(&plan.remembered), ["a", "b", "c", "d"]);
    assert_eq!(plan.remembered.as_ref().unwrap().by, Some(id("fallback")));
}
