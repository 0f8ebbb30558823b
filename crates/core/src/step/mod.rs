//! One reconcile of a managed Service as a pure step: what it reads, taken once
//! ([`Snapshot`]), and a policy in; what to do ([`Step`]) out. The reconcile, `plugin eval`
//! and the tests run this same step; only the reconcile acts on it (Events, metrics, the
//! bookkeeping, the one writer).

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube_core::Resource;

use super::{
    candidates::Observed,
    decide::{self, Answer, Policy, Question, Remembered, Verdicts},
    findings::{self, Finding},
    observe::Observation,
    plan::{self, Desired},
    scope::{Scope, Taken},
    slices::{self, Changes},
};
use crate::index::Missing;
use nad_model::input::service_record::ServiceRecord;
use nad_model::{
    input::target::{ServiceTarget, Target},
    probe as probe_spec,
    reason::Reason,
};

/// Why a Service's slices are not this controller's to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// It is not annotated (any more): its slices are removed.
    Unmanaged,
    /// It cannot be served (each problem named): its slices are removed.
    Invalid(Vec<String>),
    /// It is being deleted: the garbage collector removes its slices.
    Deleting,
}

/// The Service's target, or why it has none.
pub fn admit(service: &ServiceRecord) -> Result<Arc<ServiceTarget>, Release> {
    match service.target() {
        Target::Unmanaged => Err(Release::Unmanaged),
        Target::Invalid(problems) => Err(Release::Invalid(problems.clone())),
        Target::Managed(_) if service.meta().deletion_timestamp.is_some() => Err(Release::Deleting),
        Target::Managed(target) => Ok(target.clone()),
    }
}

/// The network's candidates, observed when the step needs them (often it does not).
pub struct Candidates(Box<dyn FnOnce() -> Arc<Observed> + Send>);

impl Candidates {
    pub fn lazy(observe: impl FnOnce() -> Arc<Observed> + Send + 'static) -> Self {
        Candidates(Box::new(observe))
    }

    pub fn of(observation: Observation) -> Self {
        Candidates::lazy(move || Observed::new(observation))
    }
}

/// What one reconcile of a managed Service reads.
pub struct Snapshot {
    pub target: Arc<ServiceTarget>,
    /// This controller's slices of the Service.
    pub existing: Vec<Arc<EndpointSlice>>,
    /// Why it runs: which pods changed, whether its slices changed, since when.
    pub taken: Taken,
    pub remembered: Option<Remembered>,
    /// The pod screen's answers about changed pods.
    pub answered: Vec<Answer>,
    /// For a pod-scoped reconcile: the changed pods among the candidates.
    pub changed: Observation,
    pub candidates: Candidates,
    /// The Service's network names no NetworkAttachmentDefinition.
    pub missing: Option<Missing>,
}

/// What a reconcile of a managed Service does.
#[derive(Debug)]
pub enum Step {
    /// Nothing to plan: only this controller's own writes changed, or the changed pods move
    /// no endpoint.
    Unchanged { remembered: Option<Remembered> },
    /// The network names no NetworkAttachmentDefinition and has no endpoint: the slices stay
    /// as they are (better the slices of the network it had than none). No changes.
    NetworkMissing(Box<Plan>),
    /// The writes that make the slices as planned (none when they are).
    Write(Box<Plan>),
}

/// A planned Service.
#[derive(Debug)]
pub struct Plan {
    pub target: Arc<ServiceTarget>,
    pub verdicts: Verdicts,
    pub desired: Desired,
    pub changes: Changes,
    pub findings: Vec<Finding>,
    pub remembered: Option<Remembered>,
    /// When the earliest change this plan applies happened.
    pub changed_at: Option<Timestamp>,
}

impl Plan {
    /// The Service problems of its input: its findings' reasons.
    pub fn problems(&self) -> BTreeSet<Reason> {
        self.findings.iter().filter_map(Finding::reason).collect()
    }

    /// Pods on nodes not known yet: try again soon.
    pub fn node_retry(&self) -> bool {
        self.verdicts.observation.needs_retry()
    }
}

/// Plans one Service: asks the policy about the pods that need it, turns the decisions into
/// endpoints and places them among the slices (with at most `max_endpoints` each). An error
/// when the policy gave no answer and its failure policy keeps the slices.
pub fn step<P: Policy + ?Sized>(
    snapshot: Snapshot,
    policy: &mut P,
    max_endpoints: usize,
) -> Result<Step, P::Error> {
    let Snapshot {
        target,
        existing,
        taken,
        remembered,
        answered,
        changed,
        candidates,
        missing,
    } = snapshot;
    if !taken.slices_changed && matches!(&taken.scope, Scope::Pods(pods) if pods.is_empty()) {
        return Ok(Step::Unchanged { remembered });
    }
    // Slices changed by someone else must be placed again even when no pod moves.
    let touches_published = taken.slices_changed
        || matches!(&taken.scope, Scope::Pods(pods) if publishes_any(&existing, pods));
    let question = Question {
        target: &target,
        scope: &taken.scope,
        remembered,
        changed: &changed,
        answered: &answered,
        touches_published,
    };
    let decided = decide::decide(policy, question, candidates.0)?;
    let Some(verdicts) = decided.verdicts else {
        return Ok(Step::Unchanged {
            remembered: decided.remembered,
        });
    };
    let desired = plan::desired(&target, &verdicts.included());
    let probe = probe_problems(&target);
    let findings = findings::of(&verdicts.observation, &desired, missing.as_ref(), &probe);
    let kept = missing.is_some() && desired.endpoint_count() == 0 && !existing.is_empty();
    let changes = if kept {
        Changes::default()
    } else {
        slices::place(
            &target,
            &desired,
            &existing,
            max_endpoints,
            taken.changed_at,
        )
    };
    let plan = Box::new(Plan {
        verdicts,
        desired,
        changes,
        findings,
        remembered: decided.remembered,
        changed_at: taken.changed_at,
        target,
    });
    Ok(if kept {
        Step::NetworkMissing(plan)
    } else {
        Step::Write(plan)
    })
}

/// What is wrong with the Service's `isim.dev/probe` annotation (nothing without it).
fn probe_problems(target: &ServiceTarget) -> Vec<String> {
    let annotation = target.annotations.get(probe_spec::ANNOTATION);
    probe_spec::parse(annotation).1
}

/// Whether the slices publish any of the `pods`.
fn publishes_any(existing: &[Arc<EndpointSlice>], pods: &BTreeSet<String>) -> bool {
    existing
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter_map(|e| e.target_ref.as_ref()?.name.as_deref())
        .any(|pod| pods.contains(pod))
}

#[cfg(test)]
mod tests;
