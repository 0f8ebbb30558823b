//! The reconcile of one Service: a snapshot, a pure step, the writes, and its effects as one
//! value.
//!
//! [`Context::snapshot`] reads what the Service needs once; [`nad_core::step::step`] (pure)
//! asks the Service's [`nad_core::decide::Policy`] (the plugins, [`nad_plugin_policy`]) about
//! the pods that need it, turns the decisions into endpoints ([`nad_core::plan`]) and places
//! them among the existing slices ([`nad_core::slices`]); [`crate::apply`] (the only writer)
//! writes the changes. What the step decided and the writes did become one [`Outcome`]: the
//! Book records its entry in one call ([`nad_core::book::Book::record`]) and
//! [`publish::publish`] tells the rest (figures, log lines, Events).

mod context;
mod events;
mod outcome;
mod publish;

pub use context::{Api, CONTROLLER_NAME, Context, Settings};
pub use events::Events;

#[cfg(test)]
mod tests;

use std::{sync::Arc, time::Instant};

use k8s_openapi::{api::discovery::v1::EndpointSlice, jiff::Timestamp};
use kube::{ResourceExt, runtime::controller::Action};
use nad_core::{
    slices::Changes,
    step::{self, Release, Snapshot, Step},
};
use nad_model::input::service_record::ServiceRecord;
use nad_model::{input::target::POLICY_ANNOTATION, service_ref::ServiceRef};
use nad_plugin_policy::{PluginPolicy, Record};

use crate::{apply, error::Error, error::retry_delay};
use outcome::Outcome;

/// Reconciles one Service: its slices become what the plan says, or stay as they are when the
/// plan cannot be made.
#[tracing::instrument(skip_all, fields(service = %service.name_any(), namespace = service.namespace().unwrap_or_default()))]
pub async fn reconcile(service: Arc<ServiceRecord>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.wait_ready().await? {
        // Told to stop before the caches synced: nothing was read, nothing to do.
        return Ok(Action::await_change());
    }
    let key = ServiceRef::of(&*service);
    let started = Instant::now();
    let turn = ctx.planning_turn().await;
    let existing = ctx.slices_of(&key);
    let mut outcome = reconcile_service(&service, &key, &existing, &ctx, turn).await;
    let entry = std::mem::take(&mut outcome.entry);
    let recorded = ctx.book().record(&key, &existing, entry, Timestamp::now());
    publish::publish(&ctx, &service, &key, outcome, recorded, started.elapsed()).await
}

/// Backs off per Service: one failing Service never delays the others. A failure is logged at
/// warn when it is new for the Service, at debug while it repeats.
pub fn error_policy(service: Arc<ServiceRecord>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ServiceRef::of(&*service);
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

/// Snapshot, step, writes, over the Service's slices `existing` in the cache. The snapshot and
/// the step hold the planning `turn`; the writes do not.
async fn reconcile_service(
    service: &ServiceRecord,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    ctx: &Context,
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Outcome {
    let Some(begun) = ctx.book().begin(key, existing, Timestamp::now()) else {
        return Outcome::default();
    };
    let target = match step::admit(service) {
        Ok(target) => target,
        Err(release) => {
            drop(turn);
            return released(ctx, key, existing, release).await;
        }
    };
    let plugins = ctx.plugins();
    let annotation = target.annotations.get(POLICY_ANNOTATION);
    let plugin = plugins.name_for(annotation);
    let mut outcome = Outcome::managed(existing, plugin, &target.network);
    let policy = PluginPolicy::new(plugins.clone(), &target);
    let snapshot = ctx.snapshot(target, existing.to_vec(), begun);
    let max = ctx.settings().max_endpoints_per_slice;
    let stepped = run_step(snapshot, policy, max).await;
    drop(turn);
    let (step, record) = match stepped {
        Ok(stepped) => stepped,
        Err(error) => return outcome.failed(error),
    };
    let evaluated = record.evaluated();
    outcome.decided(record);
    let plan = match step {
        Err(error) => return outcome.failed(error),
        Ok(Step::Unchanged { remembered }) => return outcome.unchanged(remembered, evaluated),
        Ok(Step::NetworkMissing(plan)) => return outcome.network_missing(*plan),
        Ok(Step::Write(plan)) => plan,
    };
    let changes = outcome.planned(*plan, max);
    write(ctx, key, existing, changes, &mut outcome).await;
    outcome
}

/// The Service is not this controller's to keep: its slices go (the garbage collector's job
/// when it is being deleted) and so does everything known of it.
async fn released(
    ctx: &Context,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    release: Release,
) -> Outcome {
    let (mut outcome, changes) = match release {
        Release::Unmanaged => (Outcome::released(None), Changes::remove_all(existing)),
        Release::Invalid(problems) => {
            let changes = Changes::remove_all(existing);
            (Outcome::released(Some(problems)), changes)
        }
        Release::Deleting => (Outcome::released(None), Changes::default()),
    };
    write(ctx, key, existing, changes, &mut outcome).await;
    outcome
}

/// The write path, the one way this controller writes slices: the Book holds back what must
/// not be sent and holds the slice events while the rest is in flight, [`apply::write`] sends
/// it, and the answer goes into the outcome.
async fn write(
    ctx: &Context,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    mut changes: Changes,
    outcome: &mut Outcome,
) {
    if changes.is_empty() {
        return;
    }
    let held_back = ctx.book().writing(key, &mut changes);
    outcome.held_back(held_back);
    if changes.is_empty() {
        return;
    }
    let written = apply::write(ctx.client(), &key.namespace, changes).await;
    outcome.wrote(written, existing);
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
