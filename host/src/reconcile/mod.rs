//! The reconcile of one Service: a snapshot, a pure step, and its effects.
//!
//! [`Context::snapshot`] reads what the Service needs once; [`nad_core::step::step`] (pure)
//! asks the Service's [`nad_core::decide::Policy`] (the plugins, [`nad_plugin_policy`]) about
//! the pods that need it, turns the decisions into endpoints ([`nad_core::plan`]) and places
//! them among the existing slices ([`nad_core::slices`]); the effects (`report`, `write`)
//! tell the operator, write through [`crate::apply`] (the only writer) and keep the
//! bookkeeping ([`nad_core::book`]).

mod context;
mod events;
mod report;
mod write;

pub use context::{Api, CONTROLLER_NAME, Context, Settings};
pub use events::Events;

#[cfg(test)]
mod tests;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{ResourceExt, runtime::controller::Action};
use nad_core::{slices, step};

use crate::{
    error::{Error, retry_delay},
    metrics::{
        Reconciled,
        services::{Problem, Update},
        sync::{Figures, Synced},
        watch::unix_now,
    },
};
use nad_core::step::{Plan, Release, Snapshot, Step};
use nad_model::service_ref::ServiceRef;
use nad_model::{
    input::target::{NETWORK_ANNOTATION, POLICY_ANNOTATION},
    reason::Reason,
};
use nad_plugin_policy::{PluginPolicy, Record};

/// How often a Service is reconciled even when nothing seems to change.
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a Service whose cache lags behind this controller's writes is looked at again
/// (the watch events usually trigger it sooner).
const STALE_RETRY: Duration = Duration::from_millis(500);
/// How soon a Service with pods on unknown nodes is tried again.
const NODE_RETRY: Duration = Duration::from_secs(10);

/// How a reconcile that did not fail ended: what next, how (for the `syncs` metric), and what
/// it found out about the Service's problems (`None`: nothing, it did not look).
struct Done {
    next: Action,
    sync: Synced,
    update: Option<Update>,
}

impl Done {
    fn evaluated(next: Duration, problems: BTreeSet<Problem>) -> Self {
        Done {
            next: Action::requeue(next),
            sync: Synced::Success,
            update: Some(Update::Evaluated(problems)),
        }
    }

    fn released(update: Update) -> Self {
        Done {
            next: Action::await_change(),
            sync: Synced::Success,
            update: Some(update),
        }
    }
}

/// Reconciles one Service: its slices become what the plan says, or stay as they are when the
/// plan cannot be made.
#[tracing::instrument(skip_all, fields(service = %service.name_any(), namespace = service.namespace().unwrap_or_default()))]
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.wait_ready().await?;
    let key = ServiceRef::of(&service);
    let started = Instant::now();
    let result = reconcile_service(&service, &ctx).await;
    let namespace = key.namespace.as_str();
    match &result {
        Ok(done) => {
            if let Some(error) = ctx.book().succeeded(&key) {
                tracing::info!(after = %error, "reconcile succeeded again");
            }
            ctx.metrics().reconciled(Reconciled::Ok, started.elapsed());
            ctx.metrics().sync.synced(done.sync);
            if let Some(update) = &done.update {
                let services = &ctx.metrics().services;
                services.problems(namespace, &key.name, update.clone());
            }
        }
        Err(e) => {
            let failure = Update::Failed(failure(&ctx, &service, e));
            ctx.metrics()
                .services
                .problems(namespace, &key.name, failure);
            let new = ctx.book().failed(&key, e.to_string());
            if e.is_transient() && e.looks_unreachable() {
                ctx.unreachable();
            }
            ctx.metrics()
                .reconciled(Reconciled::Failed(e.category()), started.elapsed());
            ctx.metrics().sync.synced(Synced::Error);
            if new && e.is_plugin_failure() {
                let note = format!("{e}; the EndpointSlices stay as last applied");
                ctx.warn(&service, e.event_reason(), "Evaluate", note).await;
            }
        }
    }
    result.map(|done| done.next)
}

/// The problem a failed reconcile leaves the Service with: its Event reason, and for a plugin
/// failure the Service's plugin.
fn failure(ctx: &Context, service: &Service, error: &Error) -> Problem {
    if error.is_plugin_failure() {
        let annotation = service.annotations().get(POLICY_ANNOTATION);
        let plugins = ctx.plugins();
        let plugin = plugins.name_for(annotation.map(String::as_str));
        Problem::of_plugin(error.event_reason(), plugin)
    } else {
        Problem::new(error.event_reason())
    }
}

/// Backs off per Service: one failing Service never delays the others. A failure is logged at
/// warn when it is new for the Service, at debug while it repeats.
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ServiceRef::of(&service);
    let (failures, repeated) = ctx.book().failures(&key);
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

/// Snapshot, step, effects. The snapshot and the step wait for a planning turn; the effects
/// (writes, Events) do not hold it.
async fn reconcile_service(service: &Service, ctx: &Context) -> Result<Done, Error> {
    let turn = ctx.planning_turn().await;
    let key = ServiceRef::of(service);
    let existing = ctx.slices_of(&key);
    let Some(begun) = ctx.book().begin(&key, &existing) else {
        // The watch events of the last writes are on their way and will trigger a reconcile.
        tracing::debug!("cache behind this controller's own writes; waiting for it");
        let next = Action::requeue(STALE_RETRY);
        return Ok(Done {
            next,
            sync: Synced::Stale,
            update: None,
        });
    };
    // The cache is current with this controller's writes: what it shows is published.
    let published = existing
        .iter()
        .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
        .sum();
    let namespace = key.namespace.as_str();
    let services = &ctx.metrics().services;
    services.published(namespace, &key.name, Some(count(published)));
    let target = match step::admit(service) {
        Ok(target) => target,
        Err(release) => {
            drop(turn);
            return released(ctx, service, &key, &existing, release).await;
        }
    };
    let policy = PluginPolicy::new(ctx.plugins(), &target);
    let snapshot = ctx.snapshot(target, existing.clone(), begun);
    let max = ctx.settings().max_endpoints_per_slice;
    let (step, record) = run_step(snapshot, policy, max).await?;
    drop(turn);
    let problems = report::policy(ctx, service, &record).await;
    match step? {
        Step::Unchanged { remembered } => {
            tracing::debug!(pods = record.evaluated(), "nothing to plan");
            if let Some(remembered) = remembered {
                ctx.book().remember(&key, remembered);
            }
            let next = Action::requeue(next_resync(ctx, &key));
            Ok(Done {
                next,
                sync: Synced::Success,
                update: Some(Update::Succeeded),
            })
        }
        Step::Kept(plan) => {
            tracing::debug!(
                "no NetworkAttachmentDefinition for the network and no endpoint on it; slices kept"
            );
            let problems = told(ctx, service, &key, plan, problems).await.1;
            Ok(Done::evaluated(next_resync(ctx, &key), problems))
        }
        Step::Write(plan) => placed(ctx, service, &key, &existing, plan, problems).await,
    }
}

/// The Service is not this controller's to keep: its slices go (the garbage collector's job
/// when it is being deleted) and so does everything known of it.
async fn released(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    release: Release,
) -> Result<Done, Error> {
    let update = match release {
        Release::Unmanaged => {
            write::remove_all(ctx, service, key, existing, "the Service is not annotated").await?;
            Update::Forget
        }
        Release::Invalid(problems) => {
            let note = format!(
                "{} (annotation {NETWORK_ANNOTATION}): {}",
                key.name,
                problems.join("; ")
            );
            tracing::warn!(problems = ?problems, "Service cannot be served; its EndpointSlices are removed");
            ctx.warn(service, Reason::InvalidService, "Validate", note)
                .await;
            write::remove_all(ctx, service, key, existing, "the Service is invalid").await?;
            Update::Evaluated(BTreeSet::from([Problem::new(Reason::InvalidService)]))
        }
        Release::Deleting => Update::Forget,
    };
    ctx.forget(key);
    Ok(Done::released(update))
}

/// Keeps a plan's decisions and tells its findings; the plan, and the Service's problems now.
async fn told(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    mut plan: Box<Plan>,
    mut problems: BTreeSet<Problem>,
) -> (Box<Plan>, BTreeSet<Problem>) {
    if let Some(remembered) = plan.remembered.take() {
        ctx.book().remember(key, remembered);
    }
    let observation = &plan.verdicts.observation;
    tracing::debug!(
        candidates = observation.candidates.len(),
        skipped = observation.skipped.len(),
        "decided"
    );
    for (index, reason) in &plan.verdicts.excluded {
        let pod = observation.candidates[*index].name();
        tracing::debug!(%pod, reason, "excluded by the policy");
    }
    problems.extend(plan.problems().into_iter().map(Problem::new));
    let findings = std::mem::take(&mut plan.findings);
    report::findings(ctx, service, key, &plan.target, findings).await;
    (plan, problems)
}

/// Writes a plan's changes (those the API would accept) and notes what happened.
async fn placed(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    plan: Box<Plan>,
    problems: BTreeSet<Problem>,
) -> Result<Done, Error> {
    let (plan, mut problems) = told(ctx, service, key, plan, problems).await;
    let node_retry = plan.node_retry();
    let Plan {
        desired,
        mut changes,
        changed_at,
        target,
        ..
    } = *plan;
    let max = ctx.settings().max_endpoints_per_slice;
    ctx.metrics().sync.planned(changes.added, changes.removed);
    let figures = Figures {
        endpoints: count(desired.endpoint_count()),
        desired_slices: count(desired.ideal_slices(max)),
        slices: count(changes.unchanged + changes.apply.len()),
    };
    let held_back = write::hold_back(ctx, service, key, &mut changes).await;
    let endpoints = desired.endpoint_count();
    let written = written(
        ctx,
        service,
        key,
        existing,
        changes,
        (endpoints, changed_at),
    )
    .await?;
    let held_back = held_back + written.refused;
    ctx.metrics()
        .sync
        .service(&target.namespace, &target.name, Some(figures));
    ctx.book().planned(key, node_retry, held_back > 0);
    if held_back > 0 {
        problems.insert(Problem::new(Reason::EndpointSliceRefused));
    }
    let next = next_after(&written, node_retry);
    Ok(Done::evaluated(next, problems))
}

/// When to look at a Service again after its slices were written.
fn next_after(written: &write::Written, node_retry: bool) -> Duration {
    if written.foreign {
        // The slice event that asked for it was held during the write.
        Duration::ZERO
    } else if written.outdated > 0 {
        STALE_RETRY
    } else if node_retry {
        NODE_RETRY
    } else {
        RESYNC
    }
}

/// Writes `changes` (none: the slices are up to date), counting how long the change they carry
/// took to reach the slices.
async fn written(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    changes: slices::Changes,
    (endpoints, changed_at): (usize, Option<k8s_openapi::jiff::Timestamp>),
) -> Result<write::Written, Error> {
    if changes.is_empty() {
        let slices = changes.unchanged;
        tracing::debug!(endpoints, slices, "up to date");
        return Ok(write::Written::default());
    }
    let written = write::write(ctx, service, key, changes, existing).await?;
    if let Some(at) = changed_at.filter(|_| written.applied.len() + written.deleted.len() > 0) {
        ctx.metrics()
            .flipped(at.as_millisecond() as f64 / 1000.0, unix_now());
    }
    tracing::info!(
        endpoints,
        applied = written.applied.len(),
        deleted = written.deleted.len(),
        refused = written.refused,
        "EndpointSlices updated"
    );
    Ok(written)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn next_resync(ctx: &Context, key: &ServiceRef) -> Duration {
    if ctx.book().node_retry(key) {
        NODE_RETRY
    } else {
        RESYNC
    }
}

/// Runs [`step::step`] on a blocking thread: a plugin call may run up to its deadline, and the
/// WASI streams a guest writes to block on the async runtime, which they may not do from one
/// of its own threads.
async fn run_step(
    snapshot: Snapshot,
    mut policy: PluginPolicy,
    max_endpoints: usize,
) -> Result<(Result<Step, Error>, Record), Error> {
    Ok(tokio::task::spawn_blocking(move || {
        let step = step::step(snapshot, &mut policy, max_endpoints).map_err(Error::from);
        (step, policy.into_record())
    })
    .await?)
}
