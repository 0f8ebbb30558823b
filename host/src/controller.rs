//! The controller: watches and caches, the reconcile of one Service, and its error policy.
//!
//! A reconcile reads the caches ([`observe`]), asks the Service's plugin ([`plugin`]), plans
//! the slices ([`plan`]) and writes the difference ([`apply`]). Nothing else writes.

use std::{
    collections::BTreeSet,
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, future, stream};
use k8s_openapi::{
    api::{
        core::v1::{
            Container, ContainerPort, Node, Pod, PodCondition, PodSpec, PodStatus, Service,
        },
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};

use crate::{
    apply,
    error::{Error, describe, retry_delay},
    expectations::Expectations,
    metrics::Metrics,
    network_status,
    observe::{self, Candidate, Observation, ZONE_LABEL},
    plan::{self, Decision, MANAGED_BY, MANAGED_BY_LABEL},
    plugin::{
        self, Configured, FailurePolicy, POLICY_ANNOTATION, PluginDir, Runtime, SharedPlugins,
    },
    recovery::Recovery,
    scope::{Scope, Scopes},
    server::Readiness,
    service_state::{Problem, Services},
    target::{self, ServiceTarget, Target},
    triggers::{NodeZones, PodNetworks, RelistGate},
    validate, watch,
};

/// The name this controller reports Events under.
pub const CONTROLLER_NAME: &str = "nad-service-controller";

/// How often a Service is reconciled even when nothing seems to change.
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a Service whose cache lags behind this controller's writes is looked at again
/// (the watch events usually trigger it sooner).
const STALE_RETRY: Duration = Duration::from_millis(500);
/// How soon a Service with pods on unknown nodes is tried again.
const NODE_RETRY: Duration = Duration::from_secs(10);

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, Clone)]
pub struct Settings {
    pub max_endpoints_per_slice: usize,
    /// Watch Services, pods and slices of this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
}

/// Everything a reconcile reads or writes through.
pub struct Context {
    client: Client,
    recorder: Recorder,
    pods: Store<Pod>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    plugins: Arc<SharedPlugins>,
    settings: Settings,
    metrics: Arc<Metrics>,
    services: Arc<Mutex<Services>>,
    expectations: Arc<Mutex<Expectations>>,
    scopes: Arc<Mutex<Scopes>>,
    recovery: Arc<Recovery>,
    caches_ready: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    /// Waits until every cache has its initial list.
    ///
    /// Only one task awaits the stores themselves (see [`run`]): `Store::wait_until_ready`
    /// keeps the waker of its last poller only, so concurrent reconciles waiting on it directly
    /// could sleep forever. Reconciles wait on this watch channel instead.
    async fn wait_ready(&self) -> Result<(), Error> {
        let mut ready = self.caches_ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| Error::CachesNotReady)
    }

    fn expectations(&self) -> std::sync::MutexGuard<'_, Expectations> {
        lock(&self.expectations)
    }

    fn services(&self) -> std::sync::MutexGuard<'_, Services> {
        lock(&self.services)
    }

    /// Forgets everything about a Service that this controller no longer manages.
    fn forget(&self, key: &ObjectRef<Service>) {
        forget_service(&self.services, &self.expectations, &self.scopes, key);
    }

    /// The Service's slices may differ from its last plan (a write failed or was held back):
    /// its next reconcile plans everything, whatever triggers it.
    fn replan(&self, key: &ObjectRef<Service>) {
        lock(&self.scopes).everything_changed(key.clone());
    }

    async fn warn(&self, service: &Service, reason: &str, action: &str, note: String) {
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(truncate(note, 1024)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self
            .recorder
            .publish(&event, &service.object_ref(&()))
            .await
        {
            tracing::warn!(service = %service.name_any(), reason, error = %describe(&e), "could not publish Event");
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// Reconciles one Service: its slices become what the plan says, or stay as they are when the
/// plan cannot be made.
#[tracing::instrument(skip_all, fields(service = %service.name_any(), namespace = service.namespace().unwrap_or_default()))]
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.wait_ready().await?;
    let result = reconcile_service(&service, &ctx).await;
    let key = ObjectRef::from_obj(&*service);
    match &result {
        Ok(_) => {
            if let Some(error) = ctx.services().succeeded(&key) {
                tracing::info!(after = %error, "reconcile succeeded again");
            }
            ctx.metrics.reconciled("ok", started.elapsed());
        }
        Err(e) => {
            let new = ctx.services().get(&key).failed(e.to_string());
            ctx.replan(&key);
            if e.is_transient() && e.looks_unreachable() {
                ctx.recovery.unreachable();
            }
            ctx.metrics.reconciled(e.metric_label(), started.elapsed());
            if new
                && matches!(
                    e,
                    Error::Plugin(_) | Error::PluginTask(_) | Error::UnknownPlugin(_)
                )
            {
                ctx.warn(
                    &service,
                    e.event_reason(),
                    "Evaluate",
                    format!("{e}; the EndpointSlices stay as last applied"),
                )
                .await;
            }
        }
    }
    result
}

/// Backs off per Service: one failing Service never delays the others. A failure is logged at
/// warn when it is new for the Service, at debug while it repeats.
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(&*service);
    let (failures, repeated) = ctx
        .services()
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

async fn reconcile_service(service: &Service, ctx: &Context) -> Result<Action, Error> {
    let name = service.name_any();
    let namespace = service.namespace().unwrap_or_default();
    let key = ObjectRef::from_obj(service);
    let existing = ctx.slices.state_filter(|s| {
        s.metadata.namespace.as_deref() == Some(namespace.as_str())
            && plan::is_managed_slice_of(s, &name)
    });
    if ctx
        .expectations()
        .cache_is_stale(&namespace, &name, &existing)
    {
        // The watch events of the last writes are on their way and will trigger a reconcile.
        tracing::debug!("cache behind this controller's own writes; waiting for it");
        return Ok(Action::requeue(STALE_RETRY));
    }
    // Taken only now: a reconcile that waits for the cache leaves the changes it was called for
    // to the one that runs when the cache has caught up.
    let scope = lock(&ctx.scopes).take(&key);
    let target = match target::classify(service) {
        Target::Managed(target) => target,
        Target::Unmanaged => {
            remove_all(
                ctx,
                service,
                &key,
                &existing,
                "the Service is not annotated",
            )
            .await?;
            ctx.forget(&key);
            return Ok(Action::await_change());
        }
        Target::Invalid(problems) => {
            let note = format!(
                "{} (annotation {}): {}",
                name,
                target::NETWORK_ANNOTATION,
                problems.join("; ")
            );
            tracing::warn!(problems = ?problems, "Service cannot be served; its EndpointSlices are removed");
            ctx.warn(service, "InvalidService", "Validate", note).await;
            remove_all(ctx, service, &key, &existing, "the Service is invalid").await?;
            ctx.forget(&key);
            return Ok(Action::await_change());
        }
    };
    if service.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the slices through their owner reference.
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let node_retry = ctx.services().get(&key).node_retry;
    // The shortcut assumes the slices are as last planned; after a failed or held-back write
    // the scope is full (see `Context::replan`).
    if let Scope::Pods(changed) = &scope
        && pods_move_nothing(ctx, service, &target, &namespace, changed, &existing).await
    {
        tracing::debug!(
            pods = changed.len(),
            "changed pods move no endpoint; nothing to plan"
        );
        return Ok(Action::requeue(if node_retry {
            NODE_RETRY
        } else {
            RESYNC
        }));
    }

    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let observation =
        observe::candidates(&target, &pods, |node| ctx.nodes.get(&ObjectRef::new(node)));
    tracing::debug!(
        candidates = observation.candidates.len(),
        skipped = observation.skipped.len(),
        unreadable = observation.unreadable.len(),
        "observed"
    );
    let decisions = decide(ctx, service, &target, &observation.candidates).await?;
    let plan::Split { included, excluded } = plan::split(&observation.candidates, &decisions);
    for (candidate, reason) in &excluded {
        tracing::debug!(pod = %candidate.name(), reason, "excluded by the policy");
    }
    let desired = plan::desired(&target, &included, ctx.settings.max_endpoints_per_slice);
    report(ctx, service, &key, &target, &observation, &desired).await;
    let mut changes = plan::changes(desired.slices, &existing);
    let mut held_back = hold_back(ctx, service, &key, &mut changes).await;
    if changes.is_empty() {
        tracing::debug!(
            endpoints = included.len(),
            slices = changes.unchanged,
            held_back,
            "up to date"
        );
    } else {
        tracing::debug!(
            apply = changes.apply.len(),
            delete = changes.delete.len(),
            "writing"
        );
        let written = write(ctx, service, &key, changes, &existing).await?;
        tracing::info!(
            endpoints = included.len(),
            excluded = excluded.len(),
            skipped = observation.skipped.len(),
            applied = written.applied.len(),
            deleted = written.deleted.len(),
            refused = written.refused,
            "EndpointSlices updated"
        );
        held_back += written.refused;
    }
    let retry = observation.needs_retry();
    ctx.services().get(&key).node_retry = retry;
    if held_back > 0 {
        ctx.replan(&key);
    }
    Ok(Action::requeue(if retry { NODE_RETRY } else { RESYNC }))
}

/// Tells the operator about the Service's input problems, each once while it lasts: a log
/// line naming the pod, the address or field and the rule; a Warning Event for an address
/// two pods claim.
async fn report(
    ctx: &Context,
    service: &Service,
    key: &ObjectRef<Service>,
    target: &ServiceTarget,
    observation: &Observation,
    desired: &plan::Desired,
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
        .chain(desired.dropped.iter().cloned().map(Problem::from));
    let new = ctx.services().get(key).report(problems);
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
                ctx.warn(service, "DuplicateAddress", "Plan", note).await;
            }
        }
    }
}

/// Drops from `changes` the slices that must not be sent: exactly what the API refused
/// before, or what this controller's own check of the API's rules refuses. Returns how many
/// were held back.
async fn hold_back(
    ctx: &Context,
    service: &Service,
    key: &ObjectRef<Service>,
    changes: &mut plan::Changes,
) -> usize {
    let before = changes.apply.len();
    let mut refused_now = Vec::new();
    {
        let mut services = ctx.services();
        let state = services.get(key);
        changes.apply.retain(|slice| {
            if state.was_refused(slice) {
                tracing::debug!(slice = %slice.name_any(), "not sent again: the API refused this content before");
                return false;
            }
            let violations = validate::slice(slice);
            if violations.is_empty() {
                return true;
            }
            state.refused(slice);
            refused_now.push((slice.name_any(), violations));
            false
        });
        for name in &changes.delete {
            state.accepted(name);
        }
    }
    for (slice, violations) in refused_now {
        ctx.metrics.slice_refused("precheck");
        let text = violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::error!(%slice, violations = %text, "EndpointSlice held back: the API would refuse it (a bug: please report it)");
        ctx.warn(
            service,
            "EndpointSliceInvalid",
            "Apply",
            format!("EndpointSlice {slice} was not written: {text}. This is a bug in nad-service-controller; please report it"),
        )
        .await;
    }
    before - changes.apply.len()
}

/// For a reconcile caused by pod changes alone: whether none of the `changed` pods can move an
/// endpoint, so that planning every candidate again is pointless. True when each of them is
/// unpublished and the policy excludes it, or it is not a candidate at all. Anything unusual
/// (a pod to warn about, a plugin failure) answers false: the full reconcile handles it.
async fn pods_move_nothing(
    ctx: &Context,
    service: &Service,
    target: &ServiceTarget,
    namespace: &str,
    changed: &BTreeSet<String>,
    existing: &[Arc<EndpointSlice>],
) -> bool {
    let published = existing
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter_map(|e| e.target_ref.as_ref()?.name.as_deref());
    if published.into_iter().any(|pod| changed.contains(pod)) {
        return false;
    }
    let pods: Vec<Arc<Pod>> = changed
        .iter()
        .filter_map(|pod| ctx.pods.get(&ObjectRef::new(pod).within(namespace)))
        .collect();
    let observation =
        observe::candidates(target, &pods, |node| ctx.nodes.get(&ObjectRef::new(node)));
    if !observation.skipped.is_empty() || !observation.ignored_ips.is_empty() {
        return false;
    }
    if observation.candidates.is_empty() {
        return true;
    }
    match decide(ctx, service, target, &observation.candidates).await {
        Ok(decisions) => decisions.iter().all(|d| matches!(d, Decision::Exclude(_))),
        Err(_) => false,
    }
}

/// What [`write`] did.
struct Written {
    applied: Vec<String>,
    deleted: Vec<String>,
    /// Slices the API refused (`422`): not sent again until their content changes.
    refused: usize,
}

/// Writes the changes, counting them and recording what the cache should show afterwards.
/// Writes that worked are recorded even when others failed. A refused slice (`422`) is a bug
/// here: it is counted, reported once, and not sent again until its content changes; any
/// other failure is returned, to be retried.
async fn write(
    ctx: &Context,
    service: &Service,
    key: &ObjectRef<Service>,
    changes: plan::Changes,
    existing: &[Arc<EndpointSlice>],
) -> Result<Written, Error> {
    let namespace = key.namespace.as_deref().unwrap_or_default();
    let name = key.name.as_str();
    let written = apply::write(&ctx.client, namespace, changes).await;
    ctx.metrics
        .slices_written(written.applied.len(), written.deleted.len());
    {
        let mut expectations = ctx.expectations();
        for (slice, generation) in &written.applied {
            let created = !existing.iter().any(|s| s.name_any() == *slice);
            expectations.applied(namespace, name, slice, *generation, created);
        }
        for slice in &written.deleted {
            let uid = existing
                .iter()
                .find(|s| s.name_any() == *slice)
                .and_then(|s| s.uid());
            expectations.deleted(namespace, name, slice, uid);
        }
        let mut services = ctx.services();
        let state = services.get(key);
        for (slice, _) in &written.applied {
            state.accepted(slice);
        }
    }
    let mut refused = 0;
    let mut first_error = None;
    for failed in written.failed {
        match (failed.slice, &failed.error) {
            (Some(sent), Error::Apply { source, .. }) => {
                refused += 1;
                ctx.metrics.slice_refused("api");
                ctx.services().get(key).refused(&sent);
                let stored = existing.iter().find(|s| s.name_any() == sent.name_any());
                let pods = apply::refused_pods(source, &sent, stored.map(|s| &**s));
                tracing::error!(
                    slice = %sent.name_any(), pods = ?pods, error = %describe(source),
                    "the API server refused an EndpointSlice (a bug: please report it); not sent again until it changes"
                );
                ctx.warn(
                    service,
                    "EndpointSliceRefused",
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
        }),
    }
}

async fn remove_all(
    ctx: &Context,
    service: &Service,
    key: &ObjectRef<Service>,
    existing: &[Arc<EndpointSlice>],
    why: &str,
) -> Result<(), Error> {
    if existing.is_empty() {
        return Ok(());
    }
    let changes = plan::changes(Vec::new(), existing);
    let written = write(ctx, service, key, changes, existing).await?;
    tracing::info!(
        deleted = written.deleted.len(),
        why,
        "EndpointSlices removed"
    );
    Ok(())
}

/// Asks the Service's plugin about its candidates, applying the plugin's failure policy when
/// it is missing or fails.
async fn decide(
    ctx: &Context,
    service: &Service,
    target: &ServiceTarget,
    candidates: &[Candidate],
) -> Result<Vec<Decision>, Error> {
    let plugins = ctx.plugins.snapshot();
    let annotation = target
        .annotations
        .get(POLICY_ANNOTATION)
        .map(String::as_str);
    let name = plugins.name_for(annotation).to_owned();
    let policy = plugins.failure_policy(&name);
    if let Some(failure) = plugins.failure(&name) {
        let serving = if plugins.get(&name).is_ok() {
            "the previous version keeps serving"
        } else {
            "no version of it is loaded"
        };
        ctx.warn(
            service,
            "PluginLoadFailed",
            "Load",
            format!("{failure}; {serving}"),
        )
        .await;
    }
    let chosen = match plugins.get(&name) {
        Ok(chosen) => chosen.clone(),
        Err(unknown) if policy == FailurePolicy::Fallback => {
            let reason = unknown.to_string();
            return fall_back(ctx, service, &plugins, &name, reason, target, candidates).await;
        }
        Err(unknown) => return Err(unknown.into()),
    };
    match evaluate(ctx, chosen, target, candidates).await {
        Err(Error::Plugin(e)) if policy == FailurePolicy::Fallback => {
            fall_back(
                ctx,
                service,
                &plugins,
                &name,
                e.to_string(),
                target,
                candidates,
            )
            .await
        }
        result => result,
    }
}

/// The `fallback` failure policy: the built-in plugin decides, and the Service is told why.
async fn fall_back(
    ctx: &Context,
    service: &Service,
    plugins: &plugin::Plugins,
    name: &str,
    reason: String,
    target: &ServiceTarget,
    candidates: &[Candidate],
) -> Result<Vec<Decision>, Error> {
    ctx.metrics.plugin_fell_back(name);
    let note = format!(
        "{reason}; decided by the built-in default plugin instead (failure policy: fallback)"
    );
    ctx.warn(service, "PluginFallback", "Evaluate", note).await;
    evaluate(ctx, plugins.fallback().clone(), target, candidates).await
}

/// One call of a plugin for all candidates, off the async runtime (it may run up to its
/// deadline).
async fn evaluate(
    ctx: &Context,
    chosen: Configured,
    target: &ServiceTarget,
    candidates: &[Candidate],
) -> Result<Vec<Decision>, Error> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let service = plugin::service_view(target);
    let pods: Vec<_> = candidates
        .iter()
        .map(|c| plugin::pod_view(c, &chosen.plugin))
        .collect();
    let started = Instant::now();
    let name = chosen.plugin.name().to_owned();
    let result = tokio::task::spawn_blocking(move || {
        chosen.plugin.evaluate(&service, &pods, &chosen.config)
    })
    .await?;
    let outcome = result.as_ref().map_or_else(|e| e.cause(), |_| "ok");
    ctx.metrics.plugin_called(&name, outcome, started.elapsed());
    Ok(result?)
}

/// Keeps only what the controller reads of a pod.
pub fn strip_pod(pod: &mut Pod) {
    let meta = std::mem::take(&mut pod.metadata);
    let mut annotations = meta.annotations;
    if let Some(a) = annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    pod.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        creation_timestamp: meta.creation_timestamp,
        labels: meta.labels,
        annotations,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    };
    if let Some(spec) = pod.spec.take() {
        let containers = spec
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                ports: c.ports.map(|ports| {
                    ports
                        .into_iter()
                        .filter(|p| p.name.is_some())
                        .map(|p| ContainerPort {
                            name: p.name,
                            container_port: p.container_port,
                            protocol: p.protocol,
                            ..ContainerPort::default()
                        })
                        .collect()
                }),
                ..Container::default()
            })
            .collect();
        pod.spec = Some(PodSpec {
            containers,
            node_name: spec.node_name,
            hostname: spec.hostname,
            subdomain: spec.subdomain,
            ..PodSpec::default()
        });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
    }
}

/// Keeps only a node's name and zone.
pub fn strip_node(node: &mut Node) {
    let meta = std::mem::take(&mut node.metadata);
    let labels = meta
        .labels
        .map(|l| l.into_iter().filter(|(k, _)| k == ZONE_LABEL).collect());
    node.metadata = ObjectMeta {
        name: meta.name,
        resource_version: meta.resource_version,
        labels,
        ..ObjectMeta::default()
    };
    node.spec = None;
    node.status = None;
}

fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Notes, for each Service a pod event concerns, which pods changed. A relist (the watch
/// restarting) is not a change of single pods: it makes their next reconciles full.
fn record_pod_changes(
    scopes: &Mutex<Scopes>,
    event: &watcher::Event<Pod>,
    services: &[ObjectRef<Service>],
) {
    if services.is_empty() {
        return;
    }
    let mut scopes = lock(scopes);
    match event {
        watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => {
            let name = pod.name_any();
            for service in services {
                scopes.pod_changed(service.clone(), &name);
            }
        }
        _ => {
            for service in services {
                scopes.everything_changed(service.clone());
            }
        }
    }
}

/// The managed Services on any of the `(namespace, network)` pairs.
fn services_on(services: &Store<Service>, pairs: &[(String, String)]) -> Vec<ObjectRef<Service>> {
    if pairs.is_empty() {
        return Vec::new();
    }
    services
        .state()
        .iter()
        .filter(|svc| {
            let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
            pairs.iter().any(|(ns, _)| ns == namespace)
                && target::managed_network(svc).is_some_and(|network| {
                    pairs
                        .iter()
                        .any(|(ns, net)| ns == namespace && *net == network)
                })
        })
        .map(|svc| ObjectRef::from_obj(&**svc))
        .collect()
}

/// Whether a store got its initial list (`false`: its writer is gone).
///
/// Polled again every 100 ms: `Store::wait_until_ready` wakes only its last poller, and the
/// controller's own runner waits on the Service store too, so a single await could sleep
/// forever.
async fn store_ready<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await {
            Ok(result) => return result.is_ok(),
            Err(_) => continue,
        }
    }
}

/// Where the controller's plugins come from. Cloned for each term as leader: the plugin set
/// and the directory's scan state outlive a lost Lease.
#[derive(Clone)]
pub struct PluginSource {
    pub runtime: Arc<Runtime>,
    pub plugins: Arc<SharedPlugins>,
    /// Scanned every `poll` for new, changed and deleted plugins.
    pub dir: Option<Arc<Mutex<PluginDir>>>,
    pub poll: Duration,
}

/// Rescans the plugin directory every `poll`; on a change swaps the plugin set and asks for a
/// reconcile of every Service whose plugin changed.
fn watch_plugin_dir(
    source: PluginSource,
    services: Store<Service>,
    metrics: Arc<Metrics>,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let (tx, rx) = futures::channel::mpsc::unbounded::<ObjectRef<Service>>();
    if let Some(dir) = source.dir {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(source.poll).await;
                if tx.is_closed() {
                    // This controller's term ended; the next one scans.
                    return;
                }
                let (runtime, shared, dir) =
                    (source.runtime.clone(), source.plugins.clone(), dir.clone());
                let scanned = tokio::task::spawn_blocking(move || {
                    let mut next = (*shared.snapshot()).clone();
                    let scan = lock(&dir).scan(&runtime, &mut next);
                    (scan, next)
                })
                .await;
                let Ok((scan, next)) = scanned else {
                    tracing::error!("the plugin directory scan panicked; plugin reloading stopped");
                    return;
                };
                if scan.is_empty() {
                    continue;
                }
                for name in &scan.loaded {
                    metrics.plugin_loaded(name, "ok");
                }
                for failure in &scan.failed {
                    metrics.plugin_loaded(&failure.plugin, failure.step.as_str());
                }
                let changed = scan.changed();
                let refs: Vec<ObjectRef<Service>> = services
                    .state()
                    .iter()
                    .filter(|svc| target::managed_network(svc).is_some())
                    .filter(|svc| {
                        let annotation =
                            svc.annotations().get(POLICY_ANNOTATION).map(String::as_str);
                        changed.iter().any(|n| n == next.name_for(annotation))
                    })
                    .map(|svc| ObjectRef::from_obj(&**svc))
                    .collect();
                source.plugins.replace(next);
                tracing::info!(plugins = ?changed, services = refs.len(), "plugins changed; reconciling their Services");
                for r in refs {
                    if tx.unbounded_send(r).is_err() {
                        return;
                    }
                }
            }
        });
    }
    rx
}

/// Watches everything, reconciles until `shutdown` resolves (then finishes what is running).
///
/// Every watch retries on its own with a bounded backoff ([`watch`]); what a relist triggers
/// waits until its store is current ([`RelistGate`]); after an outage, the Services that failed
/// meanwhile are reconciled as soon as the API server is ready ([`crate::recovery`]).
pub async fn run(
    client: Client,
    plugins: PluginSource,
    settings: Settings,
    metrics: Arc<Metrics>,
    ready: Readiness,
    reporter: Reporter,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let scopes: Arc<Mutex<Scopes>> = Arc::default();
    let expectations: Arc<Mutex<Expectations>> = Arc::default();
    let states: Arc<Mutex<Services>> = Arc::default();
    let recovery = Arc::new(Recovery::default());
    let everything = |scopes: &Arc<Mutex<Scopes>>| {
        let scopes = scopes.clone();
        move |service: &ObjectRef<Service>| lock(&scopes).everything_changed(service.clone())
    };
    let (services, service_writer) = reflector::store::<Service>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let (slices, slice_writer) = reflector::store::<EndpointSlice>();
    let any = watcher::Config::default;
    let scoped = |client: Client| match &settings.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client),
        ),
    };
    let (service_api, pod_api, slice_api): (Api<Service>, Api<Pod>, Api<EndpointSlice>) =
        scoped(client.clone());

    let service_stream = {
        let (scopes, expectations, states, store) = (
            scopes.clone(),
            expectations.clone(),
            states.clone(),
            services.clone(),
        );
        let mut health = watch::Health::new("services", recovery.clone());
        let mut gate = RelistGate::default();
        watcher(service_api, any())
            .backoff(watch::backoff())
            .modify(|s: &mut Service| strip_meta(&mut s.metadata))
            .reflect(service_writer)
            .filter_map(move |item| {
                let changed = match health.observe(item) {
                    None => Vec::new(),
                    Some(event) => {
                        let now = match &event {
                            watcher::Event::Apply(svc) | watcher::Event::InitApply(svc) => {
                                vec![svc.clone()]
                            }
                            watcher::Event::Delete(svc) => {
                                let key = ObjectRef::from_obj(svc);
                                forget_service(&states, &expectations, &scopes, &key);
                                Vec::new()
                            }
                            watcher::Event::Init => Vec::new(),
                            watcher::Event::InitDone => {
                                // Services deleted while the watch was down got no Delete.
                                let gone = lock(&states).known(|key| store.get(key).is_none());
                                for key in &gone {
                                    forget_service(&states, &expectations, &scopes, key);
                                }
                                Vec::new()
                            }
                        };
                        gate.pass(&event, now)
                    }
                };
                for svc in &changed {
                    lock(&scopes).everything_changed(ObjectRef::from_obj(svc));
                }
                future::ready(Some(stream::iter(
                    changed.into_iter().map(Ok::<_, watcher::Error>),
                )))
            })
            .flatten()
    };
    let slice_triggers = {
        let (scopes, expectations) = (scopes.clone(), expectations.clone());
        let mut health = watch::Health::new("endpointslices", recovery.clone());
        let mut gate = RelistGate::default();
        watcher(
            slice_api,
            any().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
        )
        .backoff(watch::backoff())
        .modify(|s: &mut EndpointSlice| strip_meta(&mut s.metadata))
        .reflect(slice_writer)
        .filter_map(move |item| {
            let owners = health.observe(item).map_or_else(Vec::new, |event| {
                let owners = slice_owners(&scopes, &expectations, &event);
                gate.pass(&event, owners)
            });
            future::ready(Some(stream::iter(owners)))
        })
        .flatten()
    };

    let pod_triggers = {
        let services = services.clone();
        let pod_scopes = scopes.clone();
        let mut index = PodNetworks::default();
        let mut health = watch::Health::new("pods", recovery.clone());
        // Small pages: each page of the initial list is whole pods (managed fields and all)
        // until stripped, and the allocator keeps the peak.
        watcher(pod_api, any().page_size(100))
            .backoff(watch::backoff())
            .modify(strip_pod)
            .reflect(pod_writer)
            .filter_map(move |item| {
                let refs = match health.observe(item) {
                    Some(event) => {
                        let change = index.on_event(&event);
                        if let Some(((namespace, pod), error)) = &change.unreadable {
                            tracing::warn!(
                                %namespace, %pod, error = %error,
                                "pod left out of every Service: its network-status annotation cannot be read"
                            );
                        }
                        let refs = services_on(&services, &change.networks);
                        record_pod_changes(&pod_scopes, &event, &refs);
                        refs
                    }
                    None => Vec::new(),
                };
                future::ready(Some(stream::iter(refs)))
            })
            .flatten()
    };
    let node_triggers = {
        let (services, pods) = (services.clone(), pods.clone());
        let mut zones = NodeZones::default();
        let mut health = watch::Health::new("nodes", recovery.clone());
        watcher(Api::<Node>::all(client.clone()), any())
            .backoff(watch::backoff())
            .modify(strip_node)
            .reflect(node_writer)
            .filter_map(move |item| {
                let changed = health
                    .observe(item)
                    .map_or_else(Vec::new, |event| zones.on_event(&event));
                let pairs = if changed.is_empty() {
                    Vec::new()
                } else {
                    let mut pairs: Vec<(String, String)> = pods
                        .state()
                        .iter()
                        .filter(|p| {
                            p.spec
                                .as_ref()
                                .and_then(|s| s.node_name.as_ref())
                                .is_some_and(|n| changed.contains(n))
                        })
                        .flat_map(|p| {
                            let ns = p.namespace().unwrap_or_default();
                            let annotation = p
                                .annotations()
                                .get(network_status::ANNOTATION)
                                .map(String::as_str);
                            network_status::networks(annotation, &ns)
                                .unwrap_or_default()
                                .into_iter()
                                .map(move |net| (ns.clone(), net))
                        })
                        .collect();
                    pairs.sort();
                    pairs.dedup();
                    pairs
                };
                future::ready(Some(stream::iter(services_on(&services, &pairs))))
            })
            .flatten()
            .inspect(everything(&scopes))
    };

    let plugin_triggers = watch_plugin_dir(plugins.clone(), services.clone(), metrics.clone())
        .inspect(everything(&scopes));
    let recovery_triggers = {
        let states = states.clone();
        recovery
            .clone()
            .run(client.clone(), move || lock(&states).failing())
            .inspect(everything(&scopes))
    };
    let (caches_synced, caches_ready) = tokio::sync::watch::channel(false);
    {
        let stores = (
            services.clone(),
            pods.clone(),
            nodes.clone(),
            slices.clone(),
        );
        tokio::spawn(async move {
            let synced = store_ready(&stores.0).await
                && store_ready(&stores.1).await
                && store_ready(&stores.2).await
                && store_ready(&stores.3).await;
            if synced {
                tracing::info!("caches synced");
                ready.set(true);
                let _ = caches_synced.send(true);
            }
        });
    }
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        pods,
        nodes,
        slices,
        plugins: plugins.plugins,
        settings,
        metrics,
        services: states,
        expectations,
        scopes,
        recovery,
        caches_ready,
    });

    // Reconciles are CPU-bound (plugin calls, planning): more of them at once than cores adds
    // only memory, each holding its Service's candidates and a plugin instance.
    let concurrency = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    Controller::for_stream(service_stream, services)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(u16::try_from(concurrency).unwrap_or(2)),
        )
        // No watch error reaches the trigger stream (see `watch`); bounded all the same.
        .trigger_backoff(watch::backoff())
        .reconcile_on(slice_triggers)
        .reconcile_on(pod_triggers)
        .reconcile_on(node_triggers)
        .reconcile_on(plugin_triggers)
        .reconcile_on(recovery_triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ReconcilerFailed(..)
                    | kube::runtime::controller::Error::ObjectNotFound(..) => {}
                    other => tracing::warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        })
        .await;
}

/// Forgets a Service's state (gone, or no longer managed), so that nothing of it stays behind.
fn forget_service(
    states: &Mutex<Services>,
    expectations: &Mutex<Expectations>,
    scopes: &Mutex<Scopes>,
    key: &ObjectRef<Service>,
) {
    lock(states).forget(key);
    lock(expectations).forget(key.namespace.as_deref().unwrap_or_default(), &key.name);
    lock(scopes).forget(key);
}

/// The Services a slice event concerns (its owners), noting whether the event is only the echo
/// of this controller's own write.
fn slice_owners(
    scopes: &Mutex<Scopes>,
    expectations: &Mutex<Expectations>,
    event: &watcher::Event<EndpointSlice>,
) -> Vec<ObjectRef<Service>> {
    let (slice, deleted) = match event {
        watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) => (slice, false),
        watcher::Event::Delete(slice) => (slice, true),
        watcher::Event::Init | watcher::Event::InitDone => return Vec::new(),
    };
    let namespace = slice.namespace().unwrap_or_default();
    slice
        .owner_references()
        .iter()
        .filter(|o| o.kind == "Service")
        .map(|owner| {
            let own = !matches!(event, watcher::Event::InitApply(_))
                && lock(expectations).is_own_write(&namespace, &owner.name, slice, deleted);
            let service = ObjectRef::new(&owner.name).within(&namespace);
            if own {
                lock(scopes).own_write(service.clone());
            } else {
                lock(scopes).everything_changed(service.clone());
            }
            service
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stripped_pods_keep_what_the_controller_reads() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "web"},
                "annotations": {"k8s.v1.cni.cncf.io/network-status": "[]", LAST_APPLIED: "{...}"},
                "managedFields": [{"manager": "kubelet"}], "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}]},
            "spec": {"nodeName": "n1", "hostname": "h", "subdomain": "web", "serviceAccountName": "sa",
                "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "B"}],
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}, {"containerPort": 81}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                               {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx", "imageID": ""}]},
        }))
        .unwrap();
        strip_pod(&mut pod);
        let kept = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            kept,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"app": "web"}, "annotations": {"k8s.v1.cni.cncf.io/network-status": "[]"}},
                "spec": {"nodeName": "n1", "hostname": "h", "subdomain": "web",
                    "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}]}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            })
        );
    }

    #[test]
    fn stripped_nodes_keep_name_and_zone() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {ZONE_LABEL: "z", "kubernetes.io/os": "linux"}, "managedFields": []},
            "status": {"images": [{"names": ["big"], "sizeBytes": 1}]},
        }))
        .unwrap();
        strip_node(&mut node);
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {ZONE_LABEL: "z"}}})
        );
    }

    #[test]
    fn long_event_notes_are_cut() {
        assert_eq!(truncate("abcdef".into(), 5), "ab...");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }
}
