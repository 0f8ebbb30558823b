//! What a reconcile tells the operator: Events and metrics of the decision, and the
//! Service's input problems, each once while it lasts.

use k8s_openapi::api::core::v1::Service;
use nad_model::reason::Reason;

use std::collections::BTreeSet;

use nad_plugin_policy::Record;

use super::Context;
use crate::metrics::services::Problem;
use nad_core::findings::Finding;
use nad_model::input::target::{NETWORK_ANNOTATION, ServiceTarget};
use nad_model::service_ref::ServiceRef;

/// Publishes what happened while the policy decided: the calls made (metrics), a load
/// failure of the Service's plugin, a fallback to the built-in plugin. Returns the Service
/// problems they are.
pub async fn policy(ctx: &Context, service: &Service, record: &Record) -> BTreeSet<Problem> {
    ctx.metrics().plugin_calls(&record.calls);
    let mut problems = BTreeSet::new();
    if let Some(warning) = &record.load_warning {
        problems.insert(Problem::of_plugin(Reason::PluginLoadFailed, &record.plugin));
        ctx.warn(service, Reason::PluginLoadFailed, "Load", warning.clone())
            .await;
    }
    if let Some(reason) = &record.fell_back {
        problems.insert(Problem::of_plugin(Reason::PluginFallback, &record.plugin));
        let plugin = record
            .calls
            .first()
            .map_or(nad_plugin_runtime::BUILT_IN, |c| c.plugin.as_str());
        ctx.metrics().plugin_fell_back(plugin);
        let note = format!(
            "{reason}; decided by the built-in default plugin instead (failure policy: fallback)"
        );
        ctx.warn(service, Reason::PluginFallback, "Evaluate", note)
            .await;
    }
    problems
}

/// Tells the operator about the Service's findings, each once while it lasts (see [`told`]);
/// one whose Event the API refused is told again by the next reconcile.
pub async fn findings(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    target: &ServiceTarget,
    findings: Vec<Finding>,
) {
    let new = ctx.book().report(key, findings);
    let network = target.network.as_str();
    for problem in new {
        let Some((reason, action, note)) = told(&problem, network, &key.name) else {
            continue;
        };
        if !ctx.warn(service, reason, action, note).await {
            // Told again by the next reconcile, rather than never while the problem lasts.
            ctx.book().untold(key, &problem);
        }
    }
}

/// Logs `problem` (a log line naming the pod, the address or field and the rule); returns the
/// Warning Event that tells it on the Service, if it has one: an address two pods claim, a
/// network that names no NetworkAttachmentDefinition, a bad probe annotation.
fn told(problem: &Finding, network: &str, service: &str) -> Option<(Reason, &'static str, String)> {
    match problem {
        Finding::PodSkipped { pod, reason } => {
            tracing::warn!(
                %pod, network, %reason,
                "pod left out; the Service's other endpoints stay published"
            );
            None
        }
        Finding::AddressLeftOut {
            pod,
            address,
            rule,
            why,
        } => {
            tracing::warn!(
                %pod, network, %address, rule, %why,
                "address left out; the pod's other addresses are published"
            );
            None
        }
        Finding::EndpointLeftOut {
            pod,
            address,
            violations,
        } => {
            tracing::error!(
                %pod, %address, %violations,
                "endpoint left out: the EndpointSlice API would refuse it (a bug: please report it)"
            );
            None
        }
        Finding::DuplicateAddress(conflict) => {
            tracing::warn!(
                address = %conflict.address, kept = %conflict.kept, left_out = %conflict.left_out,
                network, "two pods list the same address; only the older one publishes it"
            );
            let note = format!(
                "address {} on network {network} is listed by pods {} and {}; only {} (the older) \
                 publishes it. Give each pod its own address (check static IPAM settings)",
                conflict.address, conflict.kept, conflict.left_out, conflict.kept
            );
            Some((Reason::DuplicateAddress, "Plan", note))
        }
        Finding::NetworkNotFound(missing) => {
            tracing::warn!(%missing, "the Service's network does not exist; its EndpointSlices are kept");
            let fix = match &missing.closest {
                Some(closest) => format!(
                    "set the annotation {NETWORK_ANNOTATION} to {closest}, or create the NetworkAttachmentDefinition"
                ),
                None => format!(
                    "create the NetworkAttachmentDefinition, or fix the annotation {NETWORK_ANNOTATION}"
                ),
            };
            let note =
                format!("{service}: {missing}: {fix}; its EndpointSlices are kept until then");
            Some((Reason::NetworkNotFound, "Validate", note))
        }
        Finding::InvalidProbe { problems } => {
            tracing::warn!(problems = ?problems, "the Service's probe annotation has bad values; the network prober uses the default probe");
            let note = format!(
                "{service}: {}; the network prober uses the default probe (a TCP connect to each \
                 target port every 2s, 3 failures in a row) until it is fixed",
                problems.join("; ")
            );
            Some((Reason::InvalidProbe, "Validate", note))
        }
    }
}
