//! What a reconcile tells the operator: Events and metrics of the decision, and the
//! Service's input problems, each once while it lasts.

use crate::reason::Reason;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;

use super::{Context, decide::Decided, observe::Observation, plan::Desired, state::Problem};
use crate::{
    index::Missing,
    input::target::{NETWORK_ANNOTATION, ServiceTarget},
    probe::spec as probe_spec,
};

/// What is wrong with the Service's `isim.dev/probe` annotation (nothing without it).
pub fn probe_problems(target: &ServiceTarget) -> Vec<String> {
    probe_spec::parse(
        target
            .annotations
            .get(probe_spec::ANNOTATION)
            .map(String::as_str),
    )
    .1
}

/// Publishes what `decide` found: a load failure of the Service's plugin, a fallback to the
/// built-in plugin, and the calls made (metrics).
pub async fn decided(ctx: &Context, service: &Service, decided: &Decided) {
    ctx.metrics.plugin_calls(&decided.calls);
    if let Some(warning) = &decided.load_warning {
        ctx.warn(service, Reason::PluginLoadFailed, "Load", warning.clone())
            .await;
    }
    if let Some(reason) = &decided.fell_back {
        let plugin = decided
            .calls
            .first()
            .map_or(crate::plugin::BUILT_IN, |c| c.plugin.as_str());
        ctx.metrics.plugin_fell_back(plugin);
        let note = format!(
            "{reason}; decided by the built-in default plugin instead (failure policy: fallback)"
        );
        ctx.warn(service, Reason::PluginFallback, "Evaluate", note)
            .await;
    }
}

/// Tells the operator about the Service's input problems, each once while it lasts: a log
/// line naming the pod, the address or field and the rule; a Warning Event for an address
/// two pods claim, and for a network that names no NetworkAttachmentDefinition.
pub async fn problems(
    ctx: &Context,
    service: &Service,
    key: &ObjectRef<Service>,
    (target, missing, probe): (&ServiceTarget, Option<&Missing>, &[String]),
    observation: &Observation,
    desired: &Desired,
) {
    let problems = observation
        .skipped
        .iter()
        .map(|s| Problem::PodSkipped {
            pod: s.pod.clone(),
            reason: s.reason.to_string(),
        })
        .chain(observation.ignored_ips.iter().flat_map(|ignored| {
            ignored.unusable.iter().map(|u| Problem::AddressLeftOut {
                pod: ignored.pod.clone(),
                address: u.value.clone(),
                rule: u.rule(),
                why: u.to_string(),
            })
        }))
        .chain(desired.conflicts.iter().cloned().map(Problem::from))
        .chain(desired.dropped.iter().cloned().map(Problem::from))
        .chain(missing.map(|m| Problem::NetworkNotFound {
            network: m.network.clone(),
            closest: m.closest.clone(),
        }))
        .chain((!probe.is_empty()).then(|| Problem::InvalidProbe {
            problems: probe.to_vec(),
        }));
    let new = ctx.book.lock().state(key).report(problems);
    let network = target.network.as_str();
    for problem in new {
        match problem {
            Problem::PodSkipped { pod, reason } => tracing::warn!(
                %pod, network, %reason,
                "pod left out; the Service's other endpoints stay published"
            ),
            Problem::AddressLeftOut {
                pod,
                address,
                rule,
                why,
            } => tracing::warn!(
                %pod, network, %address, rule, %why,
                "address left out; the pod's other addresses are published"
            ),
            Problem::EndpointLeftOut {
                pod,
                address,
                violations,
            } => tracing::error!(
                %pod, %address, %violations,
                "endpoint left out: the EndpointSlice API would refuse it (a bug: please report it)"
            ),
            Problem::DuplicateAddress(conflict) => {
                tracing::warn!(
                    address = %conflict.address, kept = %conflict.kept, left_out = %conflict.left_out,
                    network, "two pods list the same address; only the older one publishes it"
                );
                let note = format!(
                    "address {} on network {network} is listed by pods {} and {}; only {} (the older) \
                     publishes it. Give each pod its own address (check static IPAM settings)",
                    conflict.address, conflict.kept, conflict.left_out, conflict.kept
                );
                ctx.warn(service, Reason::DuplicateAddress, "Plan", note)
                    .await;
            }
            Problem::NetworkNotFound { network, closest } => {
                let missing = Missing { network, closest };
                tracing::warn!(%missing, "the Service's network does not exist; its EndpointSlices are kept");
                let fix = match &missing.closest {
                    Some(closest) => format!(
                        "set the annotation {NETWORK_ANNOTATION} to {closest}, or create the NetworkAttachmentDefinition"
                    ),
                    None => format!(
                        "create the NetworkAttachmentDefinition, or fix the annotation {NETWORK_ANNOTATION}"
                    ),
                };
                let note = format!(
                    "{}: {missing}: {fix}; its EndpointSlices are kept until then",
                    key.name
                );
                ctx.warn(service, Reason::NetworkNotFound, "Validate", note)
                    .await;
            }
            Problem::InvalidProbe { problems } => {
                tracing::warn!(problems = ?problems, "the Service's probe annotation has bad values; the network prober uses the default probe");
                let note = format!(
                    "{}: {}; the network prober uses the default probe (a TCP connect to each \
                     target port every 2s, 3 failures in a row) until it is fixed",
                    key.name,
                    problems.join("; ")
                );
                ctx.warn(service, Reason::InvalidProbe, "Validate", note)
                    .await;
            }
        }
    }
}
