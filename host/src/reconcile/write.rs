//! Writing a reconcile's changes: what must not be sent, the writes, and the bookkeeping of
//! what was written and what failed.

use nad_model::reason::Reason;
use nad_model::service_ref::ServiceRef;
use std::sync::Arc;

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::ResourceExt;
use nad_process::kube_error::describe;

use super::Context;
use crate::{
    apply,
    error::Error,
    metrics::{RefusedBy, sync::Changed},
};
use nad_core::{
    book::Wrote,
    slices::{Changes, Seen},
};

/// Drops from `changes` the slices that must not be sent: exactly what the API refused
/// before, or what this controller's own check of the API's rules refuses. Returns how many
/// were held back.
pub async fn hold_back(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    changes: &mut Changes,
) -> usize {
    let before = changes.apply.len();
    let refused_now = ctx.book().hold_back(key, changes);
    for (slice, violations) in refused_now {
        ctx.metrics().slice_refused(RefusedBy::Precheck);
        let text = violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::error!(%slice, violations = %text, "EndpointSlice held back: the API would refuse it (a bug: please report it)");
        ctx.warn(
            service,
            Reason::EndpointSliceRefused,
            "Apply",
            format!("EndpointSlice {slice} was not written: {text}. This is a bug in nad-service-controller; please report it"),
        )
        .await;
    }
    before - changes.apply.len()
}

/// What [`write`] did.
#[derive(Debug, Default)]
pub struct Written {
    pub applied: Vec<String>,
    pub deleted: Vec<String>,
    /// Slices the API refused (`422`): not sent again until their content changes.
    pub refused: usize,
    /// Writes not made because the slice changed since it was planned: planned again.
    pub outdated: usize,
    /// Someone else changed the slices while the writes were in flight: plan again now.
    pub foreign: bool,
}

/// Writes the changes, counting them and recording what the cache should show afterwards.
/// Writes that worked are recorded even when others failed. A refused slice (`422`) is a bug
/// here: it is counted, reported once, and not sent again until its content changes; any
/// other failure is returned, to be retried.
pub async fn write(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    changes: Changes,
    existing: &[Arc<EndpointSlice>],
) -> Result<Written, Error> {
    let namespace = key.namespace.as_str();
    ctx.book().writing(key);
    let written = apply::write(ctx.client(), namespace, changes).await;
    ctx.metrics()
        .slices_written(written.applied.len(), written.deleted.len());
    let created = written
        .applied
        .iter()
        .filter(|(name, _)| !existing.iter().any(|s| s.name_any() == *name))
        .count();
    ctx.metrics().sync.changed(Changed {
        created,
        updated: written.applied.len() - created,
        deleted: written.deleted.len(),
    });
    if !written.outdated.is_empty() {
        tracing::debug!(slices = ?written.outdated, "EndpointSlices changed since they were planned; planning again from the change");
    }
    let wrote = Wrote {
        applied: &written.applied,
        deleted: &written.deleted,
        outdated: !written.outdated.is_empty(),
    };
    let foreign = ctx.book().wrote(key, existing, &wrote);
    let mut refused = 0;
    let mut first_error = None;
    for failed in written.failed {
        match (failed.slice, &failed.error) {
            (Some(sent), Error::Apply { source, .. }) => {
                refused += 1;
                report_refusal(ctx, service, key, &sent, source, existing).await;
            }
            (_, _) => {
                tracing::debug!(error = %failed.error, "EndpointSlice write failed");
                first_error.get_or_insert(failed.error);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(Written {
            applied: written.applied.into_iter().map(|(n, _)| n).collect(),
            deleted: written.deleted,
            refused,
            outdated: written.outdated.len(),
            foreign,
        }),
    }
}

pub async fn remove_all(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    existing: &[Arc<EndpointSlice>],
    why: &str,
) -> Result<(), Error> {
    if existing.is_empty() {
        return Ok(());
    }
    let changes = Changes {
        delete: existing.iter().map(|s| Seen::of(s)).collect(),
        removed: existing
            .iter()
            .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
            .sum(),
        ..Changes::default()
    };
    let written = write(ctx, service, key, changes, existing).await?;
    tracing::info!(
        deleted = written.deleted.len(),
        why,
        "EndpointSlices removed"
    );
    Ok(())
}

/// A refused write (`422`) is a bug here: counted, remembered (not sent again while its
/// content is the same), logged and told on the Service, naming the pods concerned.
async fn report_refusal(
    ctx: &Context,
    service: &Service,
    key: &ServiceRef,
    sent: &EndpointSlice,
    source: &kube::Error,
    existing: &[Arc<EndpointSlice>],
) {
    ctx.metrics().slice_refused(RefusedBy::Api);
    ctx.book().refused(key, sent);
    let stored = existing.iter().find(|s| s.name_any() == sent.name_any());
    let pods = apply::refused_pods(source, sent, stored.map(|s| &**s));
    tracing::error!(
        slice = %sent.name_any(), pods = ?pods, error = %describe(source),
        "the API server refused an EndpointSlice (a bug: please report it); not sent again until it changes"
    );
    ctx.warn(
        service,
        Reason::EndpointSliceRefused,
        "Apply",
        format!(
            "the API server refused EndpointSlice {} ({}); pods concerned: {}. This is a bug in \
             nad-service-controller; please report it. The slice is not sent again until its content changes",
            sent.name_any(),
            describe(source),
            if pods.is_empty() { "none".to_owned() } else { pods.join(", ") }
        ),
    )
    .await;
}
