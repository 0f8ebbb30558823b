//! The reconcile of one Service: observe → decide → plan → place → write.
//!
//! [`observe`] reads the Service's candidates from the pod index, [`decide`] asks its plugin
//! about the pods that need it, [`plan`] turns the decisions into endpoints, [`slices`] places
//! them among the existing slices, and [`crate::apply`] writes the difference. The
//! bookkeeping between reconciles is [`book`]'s. Nothing else writes.

pub mod book;
pub mod candidates;
pub mod decide;
pub mod expectations;
pub mod observe;
pub mod plan;
pub mod scope;
pub mod slices;
pub mod state;

mod context;
mod events;
mod report;
mod write;

pub use context::{CONTROLLER_NAME, Context, Settings};
pub use events::Events;

#[cfg(test)]
mod tests;

use crate::reason::Reason;
use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};

use crate::{
    error::{Error, retry_delay},
    input::target::{self, Target},
    metrics::{
        services::{Problem, Update},
        sync::Figures,
        watch::unix_now,
    },
    plugin::POLICY_ANNOTATION,
};
use decide::{Decided, Inputs};
use observe::Observation;
use scope::Scope;

/// How often a Service is reconciled even when nothing seems to change.
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a Service whose cache lags behind this controller's writes is looked at again
/// (the watch events usually trigger it sooner).
const STALE_RETRY: Duration = Duration::from_millis(500);
/// How soon a Service with pods on unknown nodes is tried again.
const NODE_RETRY: Duration = Duration::from_secs(10);

/// Reconciles one Service: its slices become what the plan says, or stay as they are when the
/// plan cannot be made.
#[tracing::instrument(skip_all, fields(service = %service.name_any(), namespace = service.namespace().unwrap_or_default()))]
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.wait_ready().await?;
    let key = ObjectRef::from_obj(&*service);
    let started = Instant::now();
    let result = reconcile_service(&service, &ctx).await;
    let namespace = key.namespace.as_deref().unwrap_or_default();
    match &result {
        Ok((_, sync, update)) => {
            if let Some(error) = ctx.book.lock().succeeded(&key) {
                tracing::info!(after = %error, "reconcile succeeded again");
            }
            ctx.metrics.reconciled("ok", started.elapsed());
            ctx.metrics.sync.synced(sync.as_str());
            if let Some(update) = update {
                ctx.metrics
                    .services
                    .problems(namespace, &key.name, update.clone());
            }
        }
        Err(e) => {
            ctx.metrics.services.problems(
                namespace,
                &key.name,
                Update::Failed(failure(&ctx, &service, e)),
            );
            let new = {
                let mut book = ctx.book.lock();
                book.replan(&key);
                book.state(&key).failed(e.to_string())
            };
            if e.is_transient() && e.looks_unreachable() {
                ctx.recovery.unreachable();
            }
            ctx.metrics.reconciled(e.metric_label(), started.elapsed());
            ctx.metrics.sync.synced("error");
            if new && e.is_plugin_failure() {
                let note = format!("{e}; the EndpointSlices stay as last applied");
                ctx.warn(&service, e.event_reason(), "Evaluate", note).await;
            }
        }
    }
    result.map(|(action, _, _)| action)
}

/// The problem a failed reconcile leaves the Service with: its Event reason, and for a plugin
/// failure the Service's plugin.
fn failure(ctx: &Context, service: &Service, error: &Error) -> Problem {
    if error.is_plugin_failure() {
        Problem::of_plugin(
            error.event_reason(),
            &plugin_of(&ctx.plugins.snapshot(), service),
        )
    } else {
        Problem::new(error.event_reason())
    }
}

/// The name of the plugin the Service uses.
fn plugin_of(plugins: &crate::plugin::Plugins, service: &Service) -> String {
    let annotation = service.annotations().get(POLICY_ANNOTATION);
    plugins.name_for(annotation.map(String::as_str)).to_owned()
}

/// How a reconcile that did not fail ended, for the `syncs` metric.
enum Sync {
    Success,
    /// The cache was behind this controller's own writes: nothing was planned.
    Stale,
}

impl Sync {
    fn as_str(&self) -> &'static str {
        match self {
            Sync::Success => "success",
            Sync::Stale => "stale",
        }
    }
}

/// Backs off per Service: one failing Service never delays the others. A failure is logged at
/// warn when it is new for the Service, at debug while it repeats.
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(&*service);
    let (failures, repeated) = ctx
        .book
        .lock()
        .peek(&key)
        .map_or((1, false), |s| (s.failures, s.is_repeat()));
    let delay = retry_delay(error, failures);
    let (name, namespace) = (service.name_any(), service.namespace().unwrap_or_default());
    if repeated {
        tracing::debug!(service = %name, namespace, error = %error, failures, retry_in = ?delay, "reconcile failed again");
    } else {
        tracing::warn!(
            service = %name,
            namespace,
            error = %error,
            category = error.metric_label(),
            retry_in = ?delay,
            "reconcile failed"
        );
    }
    Action::requeue(delay)
}

/// A reconcile that did not fail: what to do next, how it ended, and what it found out about
/// the Service's problems (`None`: nothing, it did not look).
async fn reconcile_service(
    service: &Service,
    ctx: &Context,
) -> Result<(Action, Sync, Option<Update>), Error> {
    let key = ObjectRef::from_obj(service);
    let existing = ctx.slices_of(&key);
    let Some(begun) = ctx.book.lock().begin(&key, &existing) else {
        // The watch events of the last writes are on their way and will trigger a reconcile.
        tracing::debug!("cache behind this controller's own writes; waiting for it");
        return Ok((Action::requeue(STALE_RETRY), Sync::Stale, None));
    };
    // The cache is current with this controller's writes: what it shows is published.
    let published = existing
        .iter()
        .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
        .sum();
    ctx.metrics.services.published(
        key.namespace.as_deref().unwrap_or_default(),
        &key.name,
        Some(count(published)),
    );
    plan_and_write(service, ctx, &key, &existing, begun)
        .await
        .map(|(action, update)| (action, Sync::Success, Some(update)))
}

async fn plan_and_write(
    service: &Service,
    ctx: &Context,
    key: &ObjectRef<Service>,
    existing: &[Arc<EndpointSlice>],
    begun: book::Begun,
) -> Result<(Action, Update), Error> {
    let key = key.clone();
    let target = match target::classify(service) {
        Target::Managed(target) => target,
        Target::Unmanaged => {
            write::remove_all(ctx, service, &key, existing, "the Service is not annotated").await?;
            ctx.forget(&key);
            return Ok((Action::await_change(), Update::Forget));
        }
        Target::Invalid(problems) => {
            let note = format!(
                "{} (annotation {}): {}",
                key.name,
                target::NETWORK_ANNOTATION,
                problems.join("; ")
            );
            tracing::warn!(problems = ?problems, "Service cannot be served; its EndpointSlices are removed");
            ctx.warn(service, Reason::InvalidService, "Validate", note)
                .await;
            write::remove_all(ctx, service, &key, existing, "the Service is invalid").await?;
            ctx.forget(&key);
            let invalid = BTreeSet::from([Problem::new(Reason::InvalidService)]);
            return Ok((Action::await_change(), Update::Evaluated(invalid)));
        }
    };
    if service.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the slices through their owner reference.
        ctx.forget(&key);
        return Ok((Action::await_change(), Update::Forget));
    }
    if !begun.taken.slices_changed
        && matches!(&begun.taken.scope, Scope::Pods(changed) if changed.is_empty())
    {
        tracing::debug!("only this controller's own writes changed; nothing to plan");
        if let Some(remembered) = begun.remembered {
            ctx.book.lock().remember(&key, remembered);
        }
        return Ok((Action::requeue(next_resync(ctx, &key)), Update::Succeeded));
    }

    let changed = match &begun.taken.scope {
        Scope::Pods(changed) => ctx.observe_pods(&target, changed),
        Scope::Full => Observation::default(),
    };
    // Slices changed by someone else must be placed again even when no pod moves.
    let touches_published = begun.taken.slices_changed
        || match &begun.taken.scope {
            Scope::Pods(changed) => publishes_any(existing, changed),
            Scope::Full => false,
        };
    let plugins = ctx.plugins.snapshot();
    let plugin = plugin_of(&plugins, service);
    let inputs = Inputs {
        plugins,
        target: target.clone(),
        scope: begun.taken.scope,
        remembered: begun.remembered,
        changed,
        touches_published,
        observe_all: ctx.observer(&target),
    };
    let mut decided = run_decide(inputs).await?;
    report::decided(ctx, service, &decided).await;
    let mut found = BTreeSet::new();
    if decided.load_warning.is_some() {
        found.insert(Problem::of_plugin(Reason::PluginLoadFailed, &plugin));
    }
    if decided.fell_back.is_some() {
        found.insert(Problem::of_plugin(Reason::PluginFallback, &plugin));
    }
    if let Some(remembered) = decided.remembered.take() {
        ctx.book.lock().remember(&key, remembered);
    }
    let evaluated = decided.evaluated();
    let Some(verdicts) = decided.outcome? else {
        tracing::debug!(
            pods = evaluated,
            "changed pods move no endpoint; nothing to plan"
        );
        return Ok((Action::requeue(next_resync(ctx, &key)), Update::Succeeded));
    };
    let observation = &verdicts.observation;
    tracing::debug!(
        candidates = observation.candidates.len(),
        skipped = observation.skipped.len(),
        evaluated,
        "decided"
    );
    for (index, reason) in &verdicts.excluded {
        let pod = observation.candidates[*index].name();
        tracing::debug!(%pod, reason, "excluded by the policy");
    }
    let included = verdicts.included();
    let desired = plan::desired(&target, &included);
    let missing = ctx.network_missing(&target.network);
    let probe = report::probe_problems(&target);
    report::problems(
        ctx,
        service,
        &key,
        (&target, missing.as_ref(), &probe),
        observation,
        &desired,
    )
    .await;
    for (reason, present) in [
        (Reason::NetworkNotFound, missing.is_some()),
        (Reason::DuplicateAddress, !desired.conflicts.is_empty()),
        (Reason::EndpointLeftOut, !desired.dropped.is_empty()),
        (Reason::InvalidProbe, !probe.is_empty()),
    ] {
        if present {
            found.insert(Problem::new(reason));
        }
    }
    if missing.is_some() && desired.endpoint_count() == 0 && !existing.is_empty() {
        // A misspelt network: better the slices of the network it had than none.
        tracing::debug!(
            "no NetworkAttachmentDefinition for the network and no endpoint on it; slices kept"
        );
        return Ok((
            Action::requeue(next_resync(ctx, &key)),
            Update::Evaluated(found),
        ));
    }
    let max = ctx.settings.max_endpoints_per_slice;
    let changed_at = begun.taken.changed_at;
    let mut changes = slices::place(&target, &desired, existing, max, changed_at);
    ctx.metrics.sync.planned(changes.added, changes.removed);
    let figures = Figures {
        endpoints: count(desired.endpoint_count()),
        desired_slices: count(desired.ideal_slices(max)),
        slices: count(changes.unchanged + changes.apply.len()),
    };
    let mut held_back = write::hold_back(ctx, service, &key, &mut changes).await;
    let mut outdated = false;
    if changes.is_empty() {
        tracing::debug!(
            endpoints = included.len(),
            slices = changes.unchanged,
            held_back,
            "up to date"
        );
    } else {
        let written = write::write(ctx, service, &key, changes, existing).await?;
        if let Some(at) = changed_at.filter(|_| written.applied.len() + written.deleted.len() > 0) {
            ctx.metrics
                .flipped(at.as_millisecond() as f64 / 1000.0, unix_now());
        }
        tracing::info!(
            endpoints = included.len(),
            excluded = observation.candidates.len() - included.len(),
            skipped = observation.skipped.len(),
            applied = written.applied.len(),
            deleted = written.deleted.len(),
            refused = written.refused,
            "EndpointSlices updated"
        );
        held_back += written.refused;
        outdated = written.outdated > 0;
    }
    ctx.metrics
        .sync
        .service(&target.namespace, &target.name, Some(figures));
    let retry = observation.needs_retry();
    let mut book = ctx.book.lock();
    book.state(&key).node_retry = retry;
    if held_back > 0 {
        book.replan(&key);
        found.insert(Problem::new(Reason::EndpointSliceRefused));
    }
    let next = Action::requeue(if outdated {
        STALE_RETRY
    } else if retry {
        NODE_RETRY
    } else {
        RESYNC
    });
    Ok((next, Update::Evaluated(found)))
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn next_resync(ctx: &Context, key: &ObjectRef<Service>) -> Duration {
    let node_retry = ctx.book.lock().state(key).node_retry;
    if node_retry { NODE_RETRY } else { RESYNC }
}

/// Whether the slices publish any of the `pods`.
fn publishes_any(existing: &[Arc<EndpointSlice>], pods: &BTreeSet<String>) -> bool {
    existing
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter_map(|e| e.target_ref.as_ref()?.name.as_deref())
        .any(|pod| pods.contains(pod))
}

/// Runs [`decide::decide`] on a blocking thread: a plugin call may run up to its deadline,
/// and the WASI streams a guest writes to block on the async runtime, which they may not do
/// from one of its own threads.
async fn run_decide(inputs: Inputs) -> Result<Decided, Error> {
    Ok(tokio::task::spawn_blocking(move || decide::decide(inputs)).await?)
}
