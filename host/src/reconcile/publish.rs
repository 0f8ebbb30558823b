//! Publishing a reconcile's [`Outcome`], after the Book recorded it: its figures, log lines and
//! Events; and what next, for kube's Controller.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Next;
use nad_core::{book::Recorded, findings::Finding};
use nad_model::input::service_record::ServiceRecord;
use nad_model::{
    input::{device_network::CLASS_ANNOTATION, target::NETWORK_ANNOTATION},
    reason::{Action, Reason},
    service_ref::ServiceRef,
};

use super::{
    Context,
    outcome::{Counts, Ended, Notice, Outcome, WritesLine, count, failure},
};
use crate::{
    error::Error,
    metrics::{
        Reconciled, RefusedBy,
        services::Update,
        sync::{Changed, Synced},
        watch::unix_now,
    },
};

/// How often a Service is reconciled even when nothing seems to change.
pub const RESYNC: Duration = Duration::from_secs(600);
/// How soon a Service whose cache lags behind this controller's writes is looked at again
/// (the watch events usually trigger it sooner).
pub const STALE_RETRY: Duration = Duration::from_millis(500);
/// How soon a Service with pods on unknown nodes is tried again.
pub const NODE_RETRY: Duration = Duration::from_secs(10);

/// Publishes what the reconcile of `service` did (its `outcome`, as the Book `recorded` it),
/// in `elapsed`: the figures, the log lines, the Events; returns what next.
pub async fn publish(
    ctx: &Context,
    service: &ServiceRecord,
    key: &ServiceRef,
    outcome: Outcome,
    recorded: Recorded,
    elapsed: Duration,
) -> Result<Next, Error> {
    let Outcome {
        ended,
        notices,
        problems,
        plugin,
        network,
        counts,
        ..
    } = outcome;
    let metrics = ctx.metrics();
    let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
    if let Ended::Released { .. } = ended {
        metrics.forget_service(namespace, name);
    }
    // The Service's problems before its Events: whoever sees an Event finds its problem
    // among the metrics already.
    let update = match &ended {
        Ended::Failed(error) => Some(Update::Failed(failure(error, &plugin))),
        Ended::Stale => None,
        Ended::Released { invalid: true } | Ended::Planned { .. } => {
            Some(Update::Evaluated(problems))
        }
        Ended::Released { invalid: false } => Some(Update::Forget),
        Ended::Unchanged => Some(Update::Succeeded),
    };
    if let Some(update) = update {
        metrics.services.problems(namespace, name, update);
    }
    figures(ctx, key, &counts, &ended);
    for notice in &notices {
        log(notice);
        let (reason, action, note) = notice.warning(name);
        ctx.warn(service, reason, action, note).await;
    }
    tell(ctx, service, key, &network, &recorded.new_findings).await;
    let next = match ended {
        Ended::Failed(error) => {
            if error.is_transient() && error.looks_unreachable() {
                ctx.unreachable();
            }
            metrics.reconciled(Reconciled::Failed(error.category()), elapsed);
            metrics.sync.synced(Synced::Error);
            if recorded.new_failure && error.is_plugin_failure() {
                let note = format!("{error}; the EndpointSlices stay as last applied");
                ctx.warn(service, error.event_reason(), Action::Evaluate, note)
                    .await;
            }
            return Err(error);
        }
        Ended::Stale => {
            tracing::debug!("cache behind this controller's own writes; waiting for it");
            metrics.reconciled(Reconciled::Ok, elapsed);
            metrics.sync.synced(Synced::Stale);
            return Ok(Next::requeue(STALE_RETRY));
        }
        Ended::Released { .. } => Next::await_change(),
        Ended::Unchanged => Next::requeue(resync(recorded.node_retry)),
        Ended::Planned { outdated } => {
            Next::requeue(next_after(recorded.foreign, outdated, recorded.node_retry))
        }
    };
    if let Some(error) = &recorded.recovered {
        tracing::info!(after = %error, "reconcile succeeded again");
    }
    metrics.reconciled(Reconciled::Ok, elapsed);
    metrics.sync.synced(Synced::Success);
    Ok(next)
}

/// Tells the operator about the Service's new findings, each once while it lasts (see
/// [`told`]); one whose Event the API refused is told again by the next reconcile.
async fn tell(
    ctx: &Context,
    service: &ServiceRecord,
    key: &ServiceRef,
    network: &str,
    findings: &[Finding],
) {
    for finding in findings {
        let Some((reason, action, note)) = told(finding, network, &key.name) else {
            continue;
        };
        if !ctx.warn(service, reason, action, note).await {
            // Told again by the next reconcile, rather than never while the problem lasts.
            ctx.book().untold(key, finding, Timestamp::now());
        }
    }
}

/// The figures of a reconcile that ended as `ended`, and the log lines of its writes.
fn figures(ctx: &Context, key: &ServiceRef, counts: &Counts, ended: &Ended) {
    let metrics = ctx.metrics();
    let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
    if let Some(published) = counts.published {
        let published = Some(count(published));
        metrics.services.published(namespace, name, published);
    }
    if !counts.calls.is_empty() {
        metrics.plugin_calls(&counts.calls);
    }
    if let Some(plugin) = &counts.fell_back {
        metrics.plugin_fell_back(plugin);
    }
    if let Some(planned) = &counts.planned {
        metrics.sync.planned(planned.added, planned.removed);
    }
    for _ in 0..counts.held_back {
        metrics.slice_refused(RefusedBy::Precheck);
    }
    if let Some(written) = &counts.written {
        metrics.slices_written(written.applied, written.deleted);
        metrics.sync.changed(Changed {
            created: written.created,
            updated: written.applied - written.created,
            deleted: written.deleted,
        });
        for _ in 0..written.refused {
            metrics.slice_refused(RefusedBy::Api);
        }
    }
    if let Some(at) = counts.flipped_at(ended) {
        metrics.flipped(at.as_millisecond() as f64 / 1000.0, unix_now());
    }
    match counts.writes_line(ended) {
        Some(WritesLine::Updated {
            endpoints,
            applied,
            deleted,
            refused,
        }) => tracing::info!(
            endpoints,
            applied,
            deleted,
            refused,
            "EndpointSlices updated"
        ),
        Some(WritesLine::Removed { deleted, invalid }) => {
            let why = if invalid {
                "the Service is invalid"
            } else {
                "the Service is not annotated"
            };
            tracing::info!(deleted, why, "EndpointSlices removed");
        }
        Some(WritesLine::UpToDate { endpoints }) => tracing::debug!(endpoints, "up to date"),
        None => {}
    }
    if let (Some(planned), false) = (&counts.planned, matches!(ended, Ended::Failed(_))) {
        let figures = Some(planned.figures);
        metrics.sync.service(namespace, name, figures);
    }
}

/// The log line of a notice. A plugin's load failure is logged where it is loaded, and a
/// fallback is counted: here they are debug lines, not one warning per reconcile.
fn log(notice: &Notice) {
    match notice {
        Notice::PluginLoadFailed(warning) => {
            tracing::debug!(%warning, "the latest version of the Service's plugin did not load");
        }
        Notice::PluginFellBack(why) => {
            tracing::debug!(%why, "the Service's plugin failed; the built-in default plugin decided instead");
        }
        Notice::InvalidService(problems) => {
            tracing::warn!(
                ?problems,
                "Service cannot be served; its EndpointSlices are removed"
            );
        }
        Notice::HeldBack { slice, violations } => {
            tracing::error!(%slice, %violations, "EndpointSlice held back: the API would refuse it (a bug: please report it)");
        }
        Notice::Refused { slice, pods, error } => {
            tracing::error!(
                %slice, ?pods, %error,
                "the API server refused an EndpointSlice (a bug: please report it); not sent again until it changes"
            );
        }
    }
}

/// When to look at a Service again after its slices were planned: at once when someone else
/// changed them during the write (the slice event that asked for it was held), soon when a
/// write was outdated or pods wait for their nodes.
fn next_after(foreign: bool, outdated: bool, node_retry: bool) -> Duration {
    if foreign {
        Duration::ZERO
    } else if outdated {
        STALE_RETRY
    } else {
        resync(node_retry)
    }
}

fn resync(node_retry: bool) -> Duration {
    if node_retry { NODE_RETRY } else { RESYNC }
}

/// Logs `problem` (a log line naming the pod, the address or field and the rule); returns the
/// Warning Event that tells it on the Service, if it has one: an address two pods claim, a
/// network that names no NetworkAttachmentDefinition, a bad probe annotation.
fn told(problem: &Finding, network: &str, service: &str) -> Option<(Reason, Action, String)> {
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
            Some((Reason::DuplicateAddress, Action::Plan, note))
        }
        Finding::NetworkNotFound(missing) => {
            tracing::warn!(%missing, "the Service's network does not exist; its EndpointSlices are kept");
            let fix = match (missing.device_class(), &missing.closest) {
                (Some(_), Some(_)) => format!(
                    "set the annotation {CLASS_ANNOTATION} to {}, or create the DeviceClass",
                    missing.closest_class().unwrap_or_default()
                ),
                (Some(_), None) => format!(
                    "create the DeviceClass (the DRA driver's install brings it), or fix the annotation {CLASS_ANNOTATION}"
                ),
                (None, Some(closest)) => format!(
                    "set the annotation {NETWORK_ANNOTATION} to {closest}, or create the NetworkAttachmentDefinition"
                ),
                (None, None) => format!(
                    "create the NetworkAttachmentDefinition, or fix the annotation {NETWORK_ANNOTATION}"
                ),
            };
            let note =
                format!("{service}: {missing}: {fix}; its EndpointSlices are kept until then");
            Some((Reason::NetworkNotFound, Action::Validate, note))
        }
        Finding::InvalidProbe { problems } => {
            tracing::warn!(problems = ?problems, "the Service's probe annotation has bad values; the network prober uses the default probe");
            let note = format!(
                "{service}: {}; the network prober uses the default probe (a TCP connect to each \
                 target port every 2s, 3 failures in a row) until it is fixed",
                problems.join("; ")
            );
            Some((Reason::InvalidProbe, Action::Validate, note))
        }
    }
}
