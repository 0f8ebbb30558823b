//! The prober's I/O: the watches (managed Services and this controller's EndpointSlices
//! everywhere, the pods of its own node), one
//! task per pod and network that probes it every period, and the condition writes, Events and
//! metrics of each flip.

use std::{
    collections::{BTreeMap, BTreeSet},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{ObjectReference, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::json;
use tokio::{sync::Notify, task::JoinHandle};

use super::{
    check,
    metrics::ProbeMetrics,
    targets::{self, Resolved, Target, TargetKey},
    tracker::Tracker,
};
use nad_model::{
    input::{
        network_ready,
        target::{self as service_target, Target as Classified},
    },
    keys::Keys,
    labels::{MANAGED_BY, MANAGED_BY_LABEL},
    pod::PodRecord,
    reason::{Action, Reason},
};

/// The condition's reasons.
pub const REASON_ANSWERED: &str = "ProbeSucceeded";
pub const REASON_FAILED: &str = "ProbeFailed";
/// The Events on a pod when its readiness on a network flips.
/// The Events' reporting controller.
pub const REPORTER: &str = "nad-network-prober";

/// What the probe tasks share.
struct Shared {
    client: Client,
    recorder: Recorder,
    metrics: Arc<ProbeMetrics>,
    /// Whether the admission policy that confines the writes is in force ([`super::guard`]).
    in_force: Arc<AtomicBool>,
}

/// What the prober's state says to others: `ready` turns true once every watch has listed;
/// `in_force` (set by [`super::guard`]) lets conditions be written.
pub struct Gates {
    pub ready: Arc<AtomicBool>,
    pub in_force: Arc<AtomicBool>,
}

/// An Event of the prober's: its note cut to the 1024 bytes the API allows.
pub fn event(type_: EventType, reason: Reason, note: &str, action: Action) -> KubeEvent {
    KubeEvent {
        type_,
        reason: reason.as_str().to_owned(),
        note: Some(note.chars().take(1024).collect()),
        action: action.as_str().to_owned(),
        secondary: None,
    }
}

/// The prober's Event recorder: the reporting controller, and its node as the instance.
pub fn recorder(client: &Client, node: &str) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: REPORTER.into(),
            instance: Some(node.to_owned()),
        },
    )
}

/// A running probe task and what it probes.
struct Running {
    target: Target,
    task: JoinHandle<()>,
}

/// Probes the pods of `node` on `networks` until `stop` resolves.
pub async fn run(
    client: Client,
    node: String,
    networks: Vec<String>,
    gates: Gates,
    metrics: Arc<ProbeMetrics>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let Gates { ready, in_force } = gates;
    let changed = Arc::new(Notify::new());
    let (services, services_writer) = reflector::store::<Service>();
    let (pods, pods_writer) = reflector::store::<Pod>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let services_synced = Arc::new(AtomicBool::new(false));
    let pods_synced = Arc::new(AtomicBool::new(false));
    let slices_synced = Arc::new(AtomicBool::new(false));
    let watch_services = watcher(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(services_writer);
    let watch_pods = watcher(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields(&format!("spec.nodeName={node}")),
    )
    .default_backoff()
    .reflect(pods_writer);
    let watch_slices = watcher(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
    )
    .default_backoff()
    .reflect(slices_writer);
    let shared = Arc::new(Shared {
        recorder: recorder(&client, &node),
        client,
        metrics,
        in_force,
    });
    let plan = async {
        let mut running: BTreeMap<TargetKey, Running> = BTreeMap::new();
        let mut said: BTreeSet<(TargetKey, String)> = BTreeSet::new();
        loop {
            changed.notified().await;
            // Let a burst of events (a list, a rollout) settle into one plan.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let synced = [&services_synced, &pods_synced, &slices_synced]
                .iter()
                .all(|s| s.load(Ordering::Relaxed));
            if !synced {
                continue;
            }
            ready.store(true, Ordering::Relaxed);
            let stores = Stores {
                services: &services,
                slices: &slices,
                pods: &pods,
            };
            replan(&shared, &networks, &stores, &mut running, &mut said);
        }
    };
    tokio::select! {
        () = follow(watch_services, services_synced.clone(), changed.clone(), "services") => {}
        () = follow(watch_pods, pods_synced.clone(), changed.clone(), "pods") => {}
        () = follow(watch_slices, slices_synced.clone(), changed.clone(), "endpointslices") => {}
        () = plan => {}
        () = stop => tracing::info!("stopping; the conditions stay as last written"),
    }
    Ok(())
}

/// Follows a watch: tells the planner about every change, and marks `synced` once listed.
async fn follow<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    synced: Arc<AtomicBool>,
    changed: Arc<Notify>,
    what: &'static str,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitDone) => synced.store(true, Ordering::Relaxed),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(watch = what, error = %e, "watch failed; retrying");
                continue;
            }
        }
        changed.notify_one();
    }
}

/// What the watches hold.
struct Stores<'a> {
    services: &'a Store<Service>,
    slices: &'a Store<EndpointSlice>,
    pods: &'a Store<Pod>,
}

/// Starts, restarts and stops the probe tasks to match the watches.
fn replan(
    shared: &Arc<Shared>,
    networks: &[String],
    stores: &Stores<'_>,
    running: &mut BTreeMap<TargetKey, Running>,
    said: &mut BTreeSet<(TargetKey, String)>,
) {
    let managed: Vec<Arc<service_target::ServiceTarget>> = stores
        .services
        .state()
        .iter()
        .filter_map(|s| match service_target::classify(s) {
            Classified::Managed(target) => Some(target),
            _ => None,
        })
        .collect();
    let records: Vec<Arc<PodRecord>> = stores
        .pods
        .state()
        .iter()
        .map(|p| Arc::new(PodRecord::from_pod(p, &Keys::default())))
        .collect();
    let slices = stores.slices.state();
    let (wanted, unprobed) =
        targets::targets(networks, managed.iter().map(|s| &**s), &slices, &records);
    for u in unprobed {
        let (ns, pod, network) = &u.key;
        if said.insert((u.key.clone(), u.reason.clone())) {
            tracing::warn!(pod = %format!("{ns}/{pod}"), network, reason = %u.reason, "a check of this pod cannot be made; the others are");
        }
    }
    running.retain(|key, r| {
        let keep = wanted.get(key).is_some_and(|t| t.same_probe(&r.target));
        if !keep {
            r.task.abort();
        }
        keep
    });
    for (key, target) in wanted {
        if running.contains_key(&key) {
            continue;
        }
        tracing::debug!(pod = %format!("{}/{}", key.0, key.1), network = %key.2, addresses = ?target.addresses, checks = ?target.checks, "probing");
        let task = tokio::spawn(probe(shared.clone(), key.clone(), target.clone()));
        running.insert(key, Running { target, task });
    }
    for network in networks {
        let count = running.keys().filter(|k| &k.2 == network).count();
        shared.metrics.set_targets(network, count);
    }
}

/// A check as the condition's message names it.
fn describe(check: &Resolved) -> String {
    match check {
        Resolved::Tcp(port) => format!("tcp {port}"),
        Resolved::Http { port, path, .. } => format!("http {port} {path}"),
    }
}

/// Probes one pod on one network every period, writing its condition when it flips.
async fn probe(shared: Arc<Shared>, key: TargetKey, target: Target) {
    let timing = target.timing;
    let (namespace, name, network) = &key;
    let condition_type = network_ready::condition_type(network);
    let mut tracker = Tracker::new(target.known);
    // Spread the probers' first attempts over one period.
    tokio::time::sleep(first_attempt_delay(&key, timing.period)).await;
    let mut interval = tokio::time::interval(timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let checks: Vec<String> = target.checks.iter().map(describe).collect();
    loop {
        interval.tick().await;
        let started = Instant::now();
        let failure = check::probe(&target.addresses, &target.checks, timing.timeout).await;
        shared
            .metrics
            .probed(network, failure.is_none(), started.elapsed());
        if let Some(failure) = &failure {
            tracing::debug!(pod = %format!("{namespace}/{name}"), network, %failure, "probe failed");
        }
        let before = tracker.status();
        let Some(status) = tracker.record(failure.is_none(), &timing) else {
            continue;
        };
        if !shared.in_force.load(Ordering::Relaxed) {
            // Not written, so tried again at the next probe (the guard tells why, once).
            tracing::debug!(pod = %format!("{namespace}/{name}"), network, ready = status, "not written: the admission policy is not in force");
            tracker.unwrite(before);
            continue;
        }
        let (reason, message) =
            condition_text(&target, &checks, failure.as_deref(), tracker.failures());
        let message = bounded(message);
        let written =
            write_condition(&shared, &key, &condition_type, status, reason, &message).await;
        match written {
            Ok(()) => {
                shared.metrics.wrote(network, Some(status));
                tracing::info!(pod = %format!("{namespace}/{name}"), network, ready = status, %message, "network readiness changed");
                if let Some((type_, reason, note)) = flip_event(network, before, status, &message) {
                    publish(&shared, &key, &target.uid, type_, reason, note).await;
                }
            }
            Err(e) => {
                shared.metrics.wrote(network, None);
                tracing::warn!(pod = %format!("{namespace}/{name}"), network, condition = %condition_type, error = %e,
                    "cannot write the pod's network readiness; retrying at the next probe");
                tracker.unwrite(before);
            }
        }
    }
}

/// How long a pod's prober waits before its first attempt: a part of one period fixed by
/// the pod and network, so that the probers' first attempts spread over the period.
fn first_attempt_delay(key: &TargetKey, period: Duration) -> Duration {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(hasher.finish() % period_ms)
}

/// The condition's reason and message after a flip: the addresses and `checks` that
/// answered, or the `failure` and how many `failures` in a row led to it.
fn condition_text(
    target: &Target,
    checks: &[String],
    failure: Option<&str>,
    failures: u32,
) -> (&'static str, String) {
    let period = target.timing.period.as_secs();
    match failure {
        None => {
            let addresses: Vec<String> = target.addresses.iter().map(ToString::to_string).collect();
            (
                REASON_ANSWERED,
                format!(
                    "{} answered ({}), probed every {period}s",
                    addresses.join(", "),
                    checks.join(", "),
                ),
            )
        }
        Some(failure) => (
            REASON_FAILED,
            format!("{failure} ({failures} failures in a row, probed every {period}s)"),
        ),
    }
}

/// The most of a condition's message: what a pod answered is quoted in it, cut short already
/// ([`check::MAX_QUOTED_CHARS`]); this bounds the whole.
pub const MAX_MESSAGE_CHARS: usize = 1024;

fn bounded(message: String) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message;
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The Event that tells of a flip from `before` to `status` on `network`: a warning when the
/// pod stops answering, a normal one when it answers again; none when it answers at first.
fn flip_event(
    network: &str,
    before: Option<bool>,
    status: bool,
    message: &str,
) -> Option<(EventType, Reason, String)> {
    match (before, status) {
        (_, false) => Some((
            EventType::Warning,
            Reason::NetworkUnready,
            format!("Readiness on network {network} failed: {message}"),
        )),
        (Some(false), true) => Some((
            EventType::Normal,
            Reason::NetworkReady,
            format!("Answers on network {network} again: {message}"),
        )),
        _ => None,
    }
}

/// Writes the pod's network readiness condition: a strategic merge of that one condition
/// type, so the pod's other conditions (kubelet's, other networks') stay as they are.
async fn write_condition(
    shared: &Shared,
    key: &TargetKey,
    condition_type: &str,
    status: bool,
    reason: &str,
    message: &str,
) -> anyhow::Result<()> {
    let (namespace, name, _) = key;
    let patch = json!({"status": {"conditions": [{
        "type": condition_type,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    Api::<Pod>::namespaced(shared.client.clone(), namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(|e| anyhow::anyhow!(nad_process::kube_error::describe(&e)))
        .with_context(|| format!("patching the status of pod {namespace}/{name}"))?;
    Ok(())
}

async fn publish(
    shared: &Shared,
    key: &TargetKey,
    uid: &str,
    type_: EventType,
    reason: Reason,
    note: String,
) {
    let (namespace, name, _) = key;
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.clone()),
        namespace: Some(namespace.clone()),
        uid: Some(uid.to_owned()),
        ..ObjectReference::default()
    };
    let event = event(type_, reason, &note, Action::Probe);
    if let Err(e) = shared.recorder.publish(&event, &reference).await {
        tracing::debug!(pod = %format!("{namespace}/{name}"), %reason, error = %e, "could not publish an Event");
    }
}
