//! The controller: watches and caches, the reconcile of one Service, and its error policy.
//!
//! A reconcile reads the caches ([`observe`]), asks the Service's plugin ([`plugin`]), plans
//! the slices ([`plan`]) and writes the difference ([`apply`]). Nothing else writes.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, future, stream};
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
    error::{Error, retry_delay},
    expectations::Expectations,
    metrics::Metrics,
    network_status,
    observe::{self, Candidate, ZONE_LABEL},
    plan::{self, Decision, MANAGED_BY, MANAGED_BY_LABEL},
    plugin::{
        self, Configured, FailurePolicy, POLICY_ANNOTATION, PluginDir, Runtime, SharedPlugins,
    },
    scope::{Scope, Scopes},
    server::Readiness,
    target::{self, ServiceTarget, Target},
    triggers::{NodeZones, PodNetworks},
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
    failures: Mutex<HashMap<ObjectRef<Service>, u32>>,
    expectations: Arc<Mutex<Expectations>>,
    scopes: Arc<Mutex<Scopes>>,
    /// Services whose last full reconcile found pods on nodes not in the cache yet.
    node_retry: Mutex<HashSet<ObjectRef<Service>>>,
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

    fn node_retry(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectRef<Service>>> {
        self.node_retry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn expectations(&self) -> std::sync::MutexGuard<'_, Expectations> {
        self.expectations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<Service>, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            tracing::warn!(service = %service.name_any(), error = %e, "could not publish Event");
        }
    }
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
            ctx.failures().remove(&key);
            ctx.metrics.reconciled("ok", started.elapsed());
        }
        Err(e) => {
            *ctx.failures().entry(key).or_default() += 1;
            ctx.metrics.reconciled(e.metric_label(), started.elapsed());
            if matches!(
                e,
                Error::Plugin(_) | Error::PluginTask(_) | Error::UnknownPlugin(_)
            ) {
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

/// Backs off per Service: one failing Service never delays the others.
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx
        .failures()
        .get(&ObjectRef::from_obj(&*service))
        .copied()
        .unwrap_or(1);
    let delay = retry_delay(error, failures);
    tracing::warn!(
        service = %service.name_any(),
        namespace = service.namespace().unwrap_or_default(),
        error = %error,
        category = error.metric_label(),
        retry_in = ?delay,
        "reconcile failed"
    );
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
                &namespace,
                &name,
                &existing,
                "the Service is not annotated",
            )
            .await?;
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
            remove_all(ctx, &namespace, &name, &existing, "the Service is invalid").await?;
            return Ok(Action::await_change());
        }
    };
    if service.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the slices through their owner reference.
        ctx.expectations().forget(&namespace, &name);
        return Ok(Action::await_change());
    }
    if let Scope::Pods(changed) = &scope
        && pods_move_nothing(ctx, service, &target, &namespace, changed, &existing).await
    {
        tracing::debug!(
            pods = changed.len(),
            "changed pods move no endpoint; nothing to plan"
        );
        let retry = ctx.node_retry().contains(&key);
        return Ok(Action::requeue(if retry { NODE_RETRY } else { RESYNC }));
    }

    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let observation =
        observe::candidates(&target, &pods, |node| ctx.nodes.get(&ObjectRef::new(node)));
    for skipped in &observation.skipped {
        tracing::warn!(pod = %skipped.pod, reason = %skipped.reason, network = %target.network, "pod skipped; the Service's other endpoints stay published");
    }
    for ignored in &observation.ignored_ips {
        tracing::warn!(pod = %ignored.pod, ips = ?ignored.ips, network = %target.network, "unparsable IPs in the network-status annotation were left out");
    }

    tracing::debug!(
        candidates = observation.candidates.len(),
        skipped = observation.skipped.len(),
        "observed"
    );
    let decisions = decide(ctx, service, &target, &observation.candidates).await?;
    let plan::Split { included, excluded } = plan::split(&observation.candidates, &decisions);
    for (candidate, reason) in &excluded {
        tracing::debug!(pod = %candidate.name(), reason, "excluded by the policy");
    }
    let desired = plan::desired_slices(&target, &included, ctx.settings.max_endpoints_per_slice);
    let changes = plan::changes(desired, &existing);
    if changes.is_empty() {
        tracing::debug!(
            endpoints = included.len(),
            slices = changes.unchanged,
            "up to date"
        );
    } else {
        tracing::debug!(
            apply = changes.apply.len(),
            delete = changes.delete.len(),
            "writing"
        );
        let written = write(ctx, &namespace, &name, changes, &existing).await?;
        tracing::info!(
            endpoints = included.len(),
            excluded = excluded.len(),
            skipped = observation.skipped.len(),
            applied = written.applied.len(),
            deleted = written.deleted.len(),
            "EndpointSlices updated"
        );
    }
    let retry = observation.needs_retry();
    if retry {
        ctx.node_retry().insert(key);
    } else {
        ctx.node_retry().remove(&key);
    }
    Ok(Action::requeue(if retry { NODE_RETRY } else { RESYNC }))
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

fn lock(scopes: &Mutex<Scopes>) -> std::sync::MutexGuard<'_, Scopes> {
    scopes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes the changes, counting them and recording what the cache should show afterwards.
async fn write(
    ctx: &Context,
    namespace: &str,
    service: &str,
    changes: plan::Changes,
    existing: &[Arc<EndpointSlice>],
) -> Result<apply::Written, Error> {
    let written = apply::write(&ctx.client, namespace, changes).await?;
    ctx.metrics
        .slices_written(written.applied.len(), written.deleted.len());
    let mut expectations = ctx.expectations();
    for (slice, generation) in &written.applied {
        let created = !existing.iter().any(|s| s.name_any() == *slice);
        expectations.applied(namespace, service, slice, *generation, created);
    }
    for slice in &written.deleted {
        let uid = existing
            .iter()
            .find(|s| s.name_any() == *slice)
            .and_then(|s| s.uid());
        expectations.deleted(namespace, service, slice, uid);
    }
    Ok(written)
}

async fn remove_all(
    ctx: &Context,
    namespace: &str,
    service: &str,
    existing: &[Arc<EndpointSlice>],
    why: &str,
) -> Result<(), Error> {
    if existing.is_empty() {
        return Ok(());
    }
    let changes = plan::changes(Vec::new(), existing);
    let written = write(ctx, namespace, service, changes, existing).await?;
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
                    pairs.iter().any(|(ns, net)| {
                        ns == namespace && (*net == network || net == network_status::ANY_NETWORK)
                    })
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

/// Where the controller's plugins come from.
pub struct PluginSource {
    pub runtime: Arc<Runtime>,
    pub plugins: Arc<SharedPlugins>,
    /// Scanned every `poll` for new, changed and deleted plugins.
    pub dir: Option<PluginDir>,
    pub poll: Duration,
}

/// Rescans the plugin directory every `poll`; on a change swaps the plugin set and asks for a
/// reconcile of every Service whose plugin changed.
fn watch_plugin_dir(
    source: PluginSource,
    services: Store<Service>,
    metrics: Arc<Metrics>,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    if let Some(mut dir) = source.dir {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(source.poll).await;
                let (runtime, shared) = (source.runtime.clone(), source.plugins.clone());
                let scanned = tokio::task::spawn_blocking(move || {
                    let mut next = (*shared.snapshot()).clone();
                    let scan = dir.scan(&runtime, &mut next);
                    (dir, scan, next)
                })
                .await;
                let Ok((returned, scan, next)) = scanned else {
                    tracing::error!("the plugin directory scan panicked; plugin reloading stopped");
                    return;
                };
                dir = returned;
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

    let service_stream = watcher(service_api, any())
        .default_backoff()
        .modify(|s: &mut Service| strip_meta(&mut s.metadata))
        .reflect(service_writer)
        .applied_objects()
        .inspect_ok({
            let everything = everything(&scopes);
            move |svc| everything(&ObjectRef::from_obj(svc))
        });
    let slice_stream = watcher(
        slice_api,
        any().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
    )
    .default_backoff()
    .modify(|s: &mut EndpointSlice| strip_meta(&mut s.metadata))
    .reflect(slice_writer)
    .inspect_ok({
        let (scopes, expectations) = (scopes.clone(), expectations.clone());
        move |event: &watcher::Event<EndpointSlice>| {
            let (slice, deleted) = match event {
                watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) => (slice, false),
                watcher::Event::Delete(slice) => (slice, true),
                watcher::Event::Init | watcher::Event::InitDone => return,
            };
            let namespace = slice.namespace().unwrap_or_default();
            for owner in slice
                .owner_references()
                .iter()
                .filter(|o| o.kind == "Service")
            {
                let own = !matches!(event, watcher::Event::InitApply(_))
                    && expectations
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .is_own_write(&namespace, &owner.name, slice, deleted);
                let service = ObjectRef::new(&owner.name).within(&namespace);
                if own {
                    lock(&scopes).own_write(service);
                } else {
                    lock(&scopes).everything_changed(service);
                }
            }
        }
    })
    .touched_objects();

    let pod_triggers = {
        let services = services.clone();
        let pod_scopes = scopes.clone();
        let mut index = PodNetworks::default();
        // Small pages: each page of the initial list is whole pods (managed fields and all)
        // until stripped, and the allocator keeps the peak.
        watcher(pod_api, any().page_size(100))
            .default_backoff()
            .modify(strip_pod)
            .reflect(pod_writer)
            .filter_map(move |event| {
                let refs = match event {
                    Ok(event) => {
                        let refs = services_on(&services, &index.on_event(&event));
                        record_pod_changes(&pod_scopes, &event, &refs);
                        refs
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pod watch failed; retrying");
                        Vec::new()
                    }
                };
                future::ready(Some(stream::iter(refs)))
            })
            .flatten()
    };
    let node_triggers = {
        let (services, pods) = (services.clone(), pods.clone());
        let mut zones = NodeZones::default();
        watcher(Api::<Node>::all(client.clone()), any())
            .default_backoff()
            .modify(strip_node)
            .reflect(node_writer)
            .filter_map(move |event| {
                let changed = match event {
                    Ok(event) => zones.on_event(&event),
                    Err(e) => {
                        tracing::warn!(error = %e, "node watch failed; retrying");
                        Vec::new()
                    }
                };
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

    let plugin_triggers = watch_plugin_dir(
        PluginSource {
            runtime: plugins.runtime.clone(),
            plugins: plugins.plugins.clone(),
            dir: plugins.dir,
            poll: plugins.poll,
        },
        services.clone(),
        metrics.clone(),
    )
    .inspect(everything(&scopes));
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
        failures: Mutex::default(),
        expectations,
        scopes,
        node_retry: Mutex::default(),
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
        .owns_stream(slice_stream)
        .reconcile_on(pod_triggers)
        .reconcile_on(node_triggers)
        .reconcile_on(plugin_triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ReconcilerFailed(..) => {}
                    other => tracing::warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stripped_pods_keep_what_the_controller_reads() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"app": "web"},
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
