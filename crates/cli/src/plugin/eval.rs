//! One evaluation of a plugin on a Service and its pods, as the controller makes it: the
//! candidates (and why each other pod is not one), the plugin's decision for each candidate,
//! what crossed the boundary, and the EndpointSlices that follow.
//!
//! `plugin eval` renders it (see [`super::render`]), `plugin test` compares it with a fixture's
//! expectations. Each candidate is asked about, so that each gets the plugin's own reason; a
//! plugin that declares the labels its Services select on is also asked as the controller asks
//! it (about the candidates with them only), and its claim must not change what it decides.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::bail;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{case::Case, source::Loaded};
use nad_plugin_policy::PluginPolicy;

use nad_core::{
    decide::Verdicts,
    observe::{self, Observation, SkipReason},
    plan::Desired,
    scope::{Scope, Taken},
    step::{self, Candidates, Snapshot, Step},
};
use nad_model::input::{
    device_network::DeviceNetwork,
    network_status::{self, StatusError},
    target::ServiceTarget,
};
use nad_model::{decision::Conditions, pod::PodRecord, selection::Selection};
use nad_plugin_runtime::wit;

/// Pod annotations the host itself reads: never expected among a plugin's declared keys.
const HOST_ANNOTATIONS: [&str; 2] = [network_status::ANNOTATION, "k8s.v1.cni.cncf.io/networks"];

/// Why a pod of the file never reached the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotCandidate {
    OtherNamespace,
    NoAnnotation,
    NotAttached,
    Unreadable,
    Unusable,
    NodeMissing,
}

impl NotCandidate {
    /// How `n` such pods are summed up: "3 have no network-status entry for shop/macvlan".
    fn summary(self, n: usize, target: &ServiceTarget) -> String {
        let (one, many) = match self {
            NotCandidate::OtherNamespace => (
                format!("is in another namespace than {}", target.namespace),
                format!("are in another namespace than {}", target.namespace),
            ),
            NotCandidate::NoAnnotation => {
                let what = format!("no {} annotation", network_status::ANNOTATION);
                (format!("has {what}"), format!("have {what}"))
            }
            NotCandidate::NotAttached => {
                let what = match DeviceNetwork::from_key(&target.network) {
                    Some(device) => format!("no device of {device}"),
                    None => format!("no network-status entry for {}", target.network),
                };
                (format!("has {what}"), format!("have {what}"))
            }
            NotCandidate::Unreadable => (
                "has a network-status annotation that is not a JSON list".to_owned(),
                "have a network-status annotation that is not a JSON list".to_owned(),
            ),
            NotCandidate::Unusable => {
                let what = match DeviceNetwork::from_key(&target.network) {
                    Some(device) => format!("no usable address on {device}"),
                    None => format!("an unusable network-status entry for {}", target.network),
                };
                (format!("has {what}"), format!("have {what}"))
            }
            NotCandidate::NodeMissing => (
                "is on a node the nodes file does not list".to_owned(),
                "are on nodes the nodes file does not list".to_owned(),
            ),
        };
        format!("{n} {}", if n == 1 { one } else { many })
    }
}

/// What became of one pod of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Include(Conditions),
    Exclude(String),
    /// Not a candidate, so the plugin was not asked: why.
    Skipped(NotCandidate, String),
}

#[derive(Debug, Clone)]
pub struct Row {
    pub namespace: String,
    pub name: String,
    pub verdict: Verdict,
}

/// Keys the candidates carry that the plugin does not declare, with how many pods carry each.
#[derive(Debug, Default, Clone)]
pub struct Undeclared {
    pub labels: BTreeMap<String, usize>,
    pub annotations: BTreeMap<String, usize>,
}

impl Undeclared {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// Everything one evaluation found.
pub struct Evaluation {
    pub target: Arc<ServiceTarget>,
    /// One per pod of the file, in its order.
    pub rows: Vec<Row>,
    pub candidates: usize,
    /// What crossed the boundary: the Service record, and each candidate's record in order.
    pub service_view: wit::Service,
    pub pod_views: Vec<wit::Pod>,
    pub undeclared: Undeclared,
    pub slices: Vec<EndpointSlice>,
    /// What the host left out after the plugin decided (address conflicts, endpoints the API
    /// would refuse) and addresses it could not use.
    pub notes: Vec<String>,
    /// Name mismatches and the like: worth the author's attention, not errors.
    pub warnings: Vec<String>,
    /// Pods per call and its duration (instantiation included).
    pub calls: Vec<(usize, Duration)>,
    /// For a plugin that declares the labels its Services select on (`candidate-labels`): the
    /// labels, and how many candidates the controller asks it about.
    pub selection: Option<(Arc<Selection>, usize)>,
}

impl Evaluation {
    /// "0 of 12 pods are candidates: 12 have no network-status entry for shop/macvlan".
    pub fn candidate_summary(&self) -> String {
        let total = self.rows.len();
        let mut reasons: BTreeMap<NotCandidate, usize> = BTreeMap::new();
        for row in &self.rows {
            if let Verdict::Skipped(why, _) = &row.verdict {
                *reasons.entry(*why).or_default() += 1;
            }
        }
        let mut text = format!(
            "{} of {total} {} {}",
            self.candidates,
            if total == 1 { "pod" } else { "pods" },
            if self.candidates == 1 {
                "is a candidate"
            } else {
                "are candidates"
            }
        );
        if !reasons.is_empty() {
            let parts: Vec<String> = reasons
                .iter()
                .map(|(why, n)| why.summary(*n, &self.target))
                .collect();
            text.push_str(": ");
            text.push_str(&parts.join(", "));
        }
        text
    }

    pub fn included(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Include(_)))
            .count()
    }
}

/// Runs the controller's own observation and [`step`] (decide, plan, placement) on `case`.
pub fn evaluate(loaded: &Loaded, case: &Case, max_endpoints: usize) -> anyhow::Result<Evaluation> {
    let target = &case.target;
    let zone = |name: &str| match &case.zones {
        Some(zones) => zones
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, z)| z.clone()),
        None => Some(None),
    };
    let observation = observe::candidates(target, &case.pods, zone);
    let mut notes = address_notes(&observation);
    let skipped_for_node: BTreeMap<&str, String> = observation
        .skipped
        .iter()
        .filter(|s| matches!(s.reason, SkipReason::NodeMissing { .. }))
        .map(|s| (s.pod.as_str(), s.reason.to_string()))
        .collect();
    let plugin = &loaded.configured.plugin;
    let pod_views: Vec<wit::Pod> = observation
        .candidates
        .iter()
        .map(|c| nad_plugin_runtime::pod_view(c, plugin))
        .collect();
    let undeclared = undeclared(&observation, plugin);
    let candidates = observation.candidates.len();
    let observed = Observation {
        candidates: observation.candidates,
        ..Observation::default()
    };
    // The plugin given decides, whatever plugin the Service names.
    let name = plugin_selected(target).unwrap_or(&loaded.name);
    // Every candidate asked about, so that each row gives the plugin's own reason.
    let mut policy = PluginPolicy::only(name, loaded.configured.clone()).asking_every_candidate();
    let plan = full_plan(target, observed.clone(), &mut policy, max_endpoints)?;
    let selection = if plugin.selects() {
        // As the controller asks: about the candidates the plugin's claim selects only.
        let mut selecting = PluginPolicy::only(name, loaded.configured.clone());
        let selected = full_plan(target, observed, &mut selecting, max_endpoints)?;
        check_claim(&plan.verdicts, &selected.verdicts)?;
        let asked = selected.verdicts.included.len() + selected.verdicts.excluded.len();
        Some((selected.verdicts.selection.clone(), asked))
    } else {
        None
    };
    let calls = policy
        .record()
        .calls
        .iter()
        .map(|c| (c.pods, c.elapsed))
        .collect();
    let rows = rows(case, &plan.verdicts, &skipped_for_node);
    notes.extend(plan_notes(&plan.desired));
    Ok(Evaluation {
        target: target.clone(),
        rows,
        candidates,
        service_view: nad_plugin_runtime::service_view(target),
        pod_views,
        undeclared,
        slices: plan.changes.write,
        notes,
        warnings: warnings(loaded, target),
        calls,
        selection,
    })
}

/// A full reconcile's plan of `target` by `policy`.
fn full_plan(
    target: &Arc<ServiceTarget>,
    observed: Observation,
    policy: &mut PluginPolicy,
    max_endpoints: usize,
) -> anyhow::Result<Box<step::Plan>> {
    match step::step(full(target, observed), policy, max_endpoints) {
        Ok(Step::Write(plan) | Step::NetworkMissing(plan)) => Ok(plan),
        Ok(Step::Unchanged { .. }) => bail!("a full plan of {} planned nothing", target.name),
        Err(e) => bail!("{e}"),
    }
}

/// Fails when the plugin's `candidate-labels` claim changes what it decides: the verdicts of
/// the candidates it selects (`selected`) must be those it gives when asked about every
/// candidate (`all`), and it must exclude every other one.
fn check_claim(all: &Verdicts, selected: &Verdicts) -> anyhow::Result<()> {
    let included = |v: &Verdicts| v.included.iter().copied().collect::<BTreeMap<_, _>>();
    let (all_in, selected_in) = (included(all), included(selected));
    if all_in == selected_in {
        return Ok(());
    }
    let shown = |d: Option<&Conditions>| match d {
        Some(c) => format!(
            "include ready={} serving={} terminating={}",
            c.ready, c.serving, c.terminating
        ),
        None => "exclude".to_owned(),
    };
    let differ: Vec<String> = all_in
        .keys()
        .chain(selected_in.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|i| all_in.get(i) != selected_in.get(i))
        .map(|i| {
            format!(
                "pod {}: {} when asked about every candidate, {} when asked about those it selects",
                all.observation.candidates[*i].name(),
                shown(all_in.get(i)),
                shown(selected_in.get(i)),
            )
        })
        .collect();
    bail!(
        "the plugin's candidate-labels claim ({}) changes its decisions, so the controller would \
         publish other endpoints than it decides: {}. Claim only labels every pod it includes \
         has, whatever the other candidates are",
        selected.selection,
        differ.join("; ")
    )
}

/// A full reconcile's snapshot of `target` over no slices, with `observed` as its candidates.
fn full(target: &Arc<ServiceTarget>, observed: Observation) -> Snapshot {
    Snapshot {
        target: target.clone(),
        existing: Vec::new(),
        taken: Taken {
            scope: Scope::Full,
            slices_changed: false,
            changed_at: None,
        },
        remembered: None,
        answered: Vec::new(),
        changed: Observation::default(),
        candidates: Candidates::of(observed),
        missing: None,
    }
}

/// Each pod of the file, in order, and what became of it.
fn rows(case: &Case, verdicts: &Verdicts, skipped_for_node: &BTreeMap<&str, String>) -> Vec<Row> {
    let target = &case.target;
    let mut decisions: BTreeMap<&str, Verdict> = BTreeMap::new();
    for (index, conditions) in &verdicts.included {
        let pod = verdicts.observation.candidates[*index].name();
        decisions.insert(pod, Verdict::Include(*conditions));
    }
    for (index, reason) in &verdicts.excluded {
        let pod = verdicts.observation.candidates[*index].name();
        decisions.insert(pod, Verdict::Exclude(reason.clone()));
    }
    case.pods
        .iter()
        .map(|pod| {
            let decided = (*pod.namespace == *target.namespace)
                .then(|| decisions.get(&*pod.name).cloned())
                .flatten();
            let verdict = decided.unwrap_or_else(|| {
                let (why, reason) = not_candidate(pod, target, skipped_for_node);
                Verdict::Skipped(why, reason)
            });
            Row {
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                verdict,
            }
        })
        .collect()
}

/// The addresses of usable pods that are left out.
fn address_notes(observation: &Observation) -> Vec<String> {
    observation
        .ignored_ips
        .iter()
        .flat_map(|ignored| {
            let pod = &ignored.pod;
            ignored
                .unusable
                .iter()
                .map(move |unusable| format!("pod {pod}: address left out: {unusable}"))
        })
        .collect()
}

/// What the plan left out: addresses two pods list, endpoints the API would refuse.
fn plan_notes(desired: &Desired) -> Vec<String> {
    let conflicts = desired.conflicts.iter().map(|conflict| {
        format!(
            "address {} is listed by pods {} and {}: only {} (the older) publishes it",
            conflict.address, conflict.kept, conflict.left_out, conflict.kept
        )
    });
    let dropped = desired.dropped.iter().map(|dropped| {
        let violations: Vec<String> = dropped.violations.iter().map(ToString::to_string).collect();
        format!(
            "pod {}: endpoint {} left out: {}",
            dropped.pod,
            dropped.address,
            violations.join("; ")
        )
    });
    conflicts.chain(dropped).collect()
}

/// The loaded plugin's warnings, and one when the Service selects another plugin.
fn warnings(loaded: &Loaded, target: &ServiceTarget) -> Vec<String> {
    let mut warnings = loaded.warnings.clone();
    if let Some(selected) = plugin_selected(target).filter(|s| *s != loaded.name) {
        warnings.push(format!(
            "Service {}/{} selects plugin {selected:?} ({}), not {:?}: the controller would \
             decide it with {selected}.wasm",
            target.namespace,
            target.name,
            nad_model::input::target::POLICY_ANNOTATION,
            loaded.name
        ));
    }
    warnings
}

/// The plugin the Service's annotation names, if any.
fn plugin_selected(target: &ServiceTarget) -> Option<&str> {
    nad_plugin_runtime::annotated(
        target
            .annotations
            .get(nad_model::input::target::POLICY_ANNOTATION),
    )
}

/// Why a pod of the file is not one of the Service's candidates.
fn not_candidate(
    pod: &PodRecord,
    target: &ServiceTarget,
    skipped_for_node: &BTreeMap<&str, String>,
) -> (NotCandidate, String) {
    if *pod.namespace != *target.namespace {
        return (
            NotCandidate::OtherNamespace,
            format!(
                "in namespace {}, not the Service's {}: a Service publishes pods of its own \
                 namespace only",
                pod.namespace, target.namespace
            ),
        );
    }
    if let Some(reason) = skipped_for_node.get(&*pod.name) {
        return (NotCandidate::NodeMissing, reason.clone());
    }
    if let Some(device) = DeviceNetwork::from_key(&target.network) {
        return match pod.attachment(&target.network) {
            Some(Err(e)) => (NotCandidate::Unusable, e.to_string()),
            Some(Ok(_)) => (
                NotCandidate::Unusable,
                "not a candidate (the host left it out)".to_owned(),
            ),
            None if pod.claims().is_empty() => (
                NotCandidate::NotAttached,
                format!(
                    "the pod names no ResourceClaim (spec.resourceClaims): it gets a device of \
                     {device} through a claim or a ResourceClaimTemplate"
                ),
            ),
            None => (
                NotCandidate::NotAttached,
                format!(
                    "none of its ResourceClaims ({}) has a device of {device} allocated and \
                     reserved for this pod",
                    pod.claims()
                        .iter()
                        .map(|c| &**c)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        };
    }
    match &pod.attachments {
        Err(e) => (NotCandidate::Unreadable, e.to_string()),
        Ok(_) => match pod.attachment(&target.network) {
            Some(Err(e)) => (NotCandidate::Unusable, e.to_string()),
            Some(Ok(_)) => (
                NotCandidate::Unusable,
                "not a candidate (the host left it out)".to_owned(),
            ),
            None if !pod
                .annotations()
                .iter()
                .any(|(k, _)| &**k == network_status::ANNOTATION) =>
            {
                (
                    NotCandidate::NoAnnotation,
                    format!(
                        "{} (Multus attached it to no secondary network)",
                        StatusError::Missing
                    ),
                )
            }
            None => {
                let networks: Vec<&str> = pod.networks().collect();
                (
                    NotCandidate::NotAttached,
                    format!(
                        "annotation {} has no entry for network {} (it lists: {})",
                        network_status::ANNOTATION,
                        target.network,
                        if networks.is_empty() {
                            "only the cluster network".to_owned()
                        } else {
                            networks.join(", ")
                        }
                    ),
                )
            }
        },
    }
}

/// Labels and annotations of the candidates that the plugin does not receive.
fn undeclared(observation: &Observation, plugin: &nad_plugin_runtime::Plugin) -> Undeclared {
    let mut found = Undeclared::default();
    for candidate in &observation.candidates {
        for (key, _) in candidate.pod.labels() {
            if !plugin.reads_label(key) {
                *found.labels.entry(key.to_string()).or_default() += 1;
            }
        }
        for (key, _) in candidate.pod.annotations() {
            if !plugin.reads_annotation(key) && !HOST_ANNOTATIONS.contains(&&**key) {
                *found.annotations.entry(key.to_string()).or_default() += 1;
            }
        }
    }
    found
}
