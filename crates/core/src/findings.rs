//! What a reconcile finds wrong with a Service's input: each finding is reported (logged, and
//! for some an Event) once when it appears, not on every reconcile while it lasts.

use super::{
    observe::Observation,
    plan::{Conflict, Desired, Dropped},
};
use crate::index::Missing;
use nad_model::reason::Reason;

/// Something wrong with a Service's input.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    /// The pod is attached to the network but cannot be used.
    PodSkipped { pod: String, reason: String },
    /// One address of a usable pod is left out.
    AddressLeftOut {
        pod: String,
        address: String,
        rule: &'static str,
        why: String,
    },
    /// Two pods list one address.
    DuplicateAddress(Conflict),
    /// An endpoint the API would refuse (a field other than its address).
    EndpointLeftOut {
        pod: String,
        address: String,
        violations: String,
    },
    /// The Service's network names no NetworkAttachmentDefinition.
    NetworkNotFound(Missing),
    /// The Service's probe annotation has bad values (each named).
    InvalidProbe { problems: Vec<String> },
}

impl Finding {
    /// The Service problem this finding counts as (the `service_problem` metric), if any: a
    /// pod or an address left out is the pod's problem, told in the log.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Finding::PodSkipped { .. } | Finding::AddressLeftOut { .. } => None,
            Finding::DuplicateAddress(_) => Some(Reason::DuplicateAddress),
            Finding::EndpointLeftOut { .. } => Some(Reason::EndpointLeftOut),
            Finding::NetworkNotFound(_) => Some(Reason::NetworkNotFound),
            Finding::InvalidProbe { .. } => Some(Reason::InvalidProbe),
        }
    }
}

impl From<Conflict> for Finding {
    fn from(c: Conflict) -> Self {
        Finding::DuplicateAddress(c)
    }
}

impl From<Dropped> for Finding {
    fn from(d: Dropped) -> Self {
        Finding::EndpointLeftOut {
            pod: d.pod,
            address: d.address.to_string(),
            violations: d
                .violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// Everything wrong with the Service's input: the pods and addresses its observation left
/// out, what its plan left out, its network if missing, its probe annotation's bad values.
pub fn of(
    observation: &Observation,
    desired: &Desired,
    missing: Option<&Missing>,
    probe: &[String],
) -> Vec<Finding> {
    observation
        .skipped
        .iter()
        .map(|s| Finding::PodSkipped {
            pod: s.pod.clone(),
            reason: s.reason.to_string(),
        })
        .chain(observation.ignored_ips.iter().flat_map(|ignored| {
            ignored.unusable.iter().map(|u| Finding::AddressLeftOut {
                pod: ignored.pod.clone(),
                address: u.value.clone(),
                rule: u.rule(),
                why: u.to_string(),
            })
        }))
        .chain(desired.conflicts.iter().cloned().map(Finding::from))
        .chain(desired.dropped.iter().cloned().map(Finding::from))
        .chain(missing.cloned().map(Finding::NetworkNotFound))
        .chain((!probe.is_empty()).then(|| Finding::InvalidProbe {
            problems: probe.to_vec(),
        }))
        .collect()
}
