//! What a reconcile reads and writes through: the watches' state, read as one [`Snapshot`]
//! per reconcile, and the API (the one writer, Events).

use std::{
    collections::BTreeSet,
    sync::{Arc, MutexGuard},
};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Client, runtime::events::Reporter};

use super::events::Events;
use crate::{
    error::Error,
    metrics::Metrics,
    watch::shared::{Shared, read},
};
use nad_core::{
    book::{Begun, Book},
    candidates::CandidateCache,
    observe::{self, Observation},
    scope::Scope,
    slices,
    step::{Candidates, Snapshot},
};
use nad_model::input::service_record::ServiceRecord;
use nad_model::service_ref::ServiceRef;
use nad_model::{
    input::{device_network, target::ServiceTarget},
    reason::{Action, Reason},
};
use nad_plugin_runtime::{Plugins, SharedPlugins};

/// The name this controller reports Events under.
pub const CONTROLLER_NAME: &str = "nad-service-controller";

#[derive(Debug, Clone)]
pub struct Settings {
    pub max_endpoints_per_slice: usize,
    /// Watch Services, pods and slices of this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Services reconciled at once.
    pub concurrent_syncs: u16,
}

/// The API a reconcile writes to: slices (through [`crate::apply`]) and Events.
pub struct Api {
    pub client: Client,
    pub events: Events,
}

impl Api {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Api {
            events: Events::new(client.clone(), reporter),
            client,
        }
    }
}

/// Everything a reconcile reads or writes through.
pub struct Context {
    /// The watches' state: the indexes, the bookkeeping, the recovery, the metrics.
    shared: Shared,
    /// Each network's candidates, shared by its Services.
    candidates: Arc<CandidateCache>,
    plugins: Arc<SharedPlugins>,
    api: Api,
    settings: Settings,
    caches_ready: tokio::sync::watch::Receiver<bool>,
    /// Turns true when the controller is told to stop.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Steps (snapshot, plugin calls, planning) that run at once: no more than the cores,
    /// whatever `concurrent_syncs` is. A step is CPU-bound and holds its working set (the
    /// plugin's instance and records, the plan), so more at once would only add memory; the
    /// other syncs wait for their writes meanwhile, which is what more syncs are for.
    planning: Arc<tokio::sync::Semaphore>,
}

/// How many steps run at once with `concurrent_syncs`: at most the cores the process may use
/// (a cgroup's CPU quota counts).
fn planners(concurrent_syncs: u16) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    usize::from(concurrent_syncs).clamp(1, cores.max(1))
}

impl Context {
    pub fn new(
        api: Api,
        shared: Shared,
        plugins: Arc<SharedPlugins>,
        settings: Settings,
        (caches_ready, stopping): (
            tokio::sync::watch::Receiver<bool>,
            tokio::sync::watch::Receiver<bool>,
        ),
    ) -> Self {
        Context {
            shared,
            candidates: Arc::default(),
            plugins,
            api,
            planning: Arc::new(tokio::sync::Semaphore::new(planners(
                settings.concurrent_syncs,
            ))),
            settings,
            caches_ready,
            stopping,
        }
    }

    /// A turn to take a snapshot and run the step on it (see `planning` for why turns); it
    /// ends when the permit is dropped. The semaphore is never closed, so there always is one.
    pub async fn planning_turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.planning.clone().acquire_owned().await.ok()
    }

    pub fn book(&self) -> MutexGuard<'_, Book> {
        self.shared.book.lock()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn client(&self) -> &Client {
        &self.api.client
    }

    pub fn plugins(&self) -> Arc<Plugins> {
        self.plugins.snapshot()
    }

    /// The API server looks unreachable: the recovery probes it.
    pub fn unreachable(&self) {
        self.shared.recovery.unreachable();
    }

    /// Waits until every cache has its initial list: `true` then, `false` when the controller
    /// is told to stop first (a reconcile that waits must not hold up its graceful shutdown,
    /// which waits for the reconciles in flight).
    ///
    /// Only one task awaits the stores themselves: `Store::wait_until_ready` keeps the waker
    /// of its last poller only, so concurrent reconciles waiting on it directly could sleep
    /// forever. Reconciles wait on this watch channel instead.
    pub async fn wait_ready(&self) -> Result<bool, Error> {
        let (mut ready, mut stopping) = (self.caches_ready.clone(), self.stopping.clone());
        tokio::select! {
            synced = ready.wait_for(|ready| *ready) => {
                synced.map(|_| true).map_err(|_| Error::CachesNotReady)
            }
            Ok(_) = stopping.wait_for(|stopping| *stopping) => Ok(false),
        }
    }

    /// This controller's slices of the Service, from the cache.
    pub fn slices_of(&self, service: &ServiceRef) -> Vec<Arc<EndpointSlice>> {
        let namespace = service.namespace.as_str();
        let mut slices = read(&self.shared.slices).of(namespace, &service.name);
        slices.retain(|s| slices::is_managed_slice_of(s, &service.name));
        slices
    }

    /// What the reconcile of `target` reads, once: the changed pods among its candidates now,
    /// the network's candidates when the step asks for them.
    pub fn snapshot(
        &self,
        target: Arc<ServiceTarget>,
        existing: Vec<Arc<EndpointSlice>>,
        begun: Begun,
    ) -> Snapshot {
        let changed = match &begun.taken.scope {
            Scope::Pods(changed) => self.observe_pods(&target, changed),
            Scope::Full => Observation::default(),
        };
        let (pods, zones) = (self.shared.pods.clone(), self.shared.zones.clone());
        let (cache, of) = (self.candidates.clone(), target.clone());
        Snapshot {
            missing: if device_network::is_device_network(&target.network) {
                read(&self.shared.device_classes).missing(&target.network)
            } else {
                read(&self.shared.definitions).missing(&target.network)
            },
            target,
            existing,
            taken: begun.taken,
            remembered: begun.remembered,
            answered: begun.answered,
            changed,
            candidates: Candidates::lazy(move || cache.observe(&read(&pods), &read(&zones), &of)),
        }
    }

    /// The named pods among the Service's candidates (a pod-scoped reconcile's).
    fn observe_pods(&self, target: &ServiceTarget, names: &BTreeSet<String>) -> Observation {
        let names = names.iter().map(String::as_str);
        observe::named(
            &read(&self.shared.pods),
            &read(&self.shared.zones),
            target,
            names,
        )
    }

    /// Publishes a Warning Event on the Service; a failure to publish is logged, not fatal.
    /// Returns whether it was published.
    pub async fn warn(
        &self,
        service: &ServiceRecord,
        reason: Reason,
        action: Action,
        note: String,
    ) -> bool {
        self.api.events.warn(service, reason, action, note).await
    }
}

#[cfg(test)]
impl Context {
    /// A context over empty caches, writing to `client`; the senders of the caches' readiness
    /// (true) and of the stop (false) come with it.
    pub fn for_tests(
        client: Client,
        plugins: Plugins,
        zones: nad_core::index::NodeZones,
    ) -> (Self, TestGates) {
        let (ready, caches_ready) = tokio::sync::watch::channel(true);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let shared = Shared::new(Arc::default());
        *crate::watch::shared::write(&shared.pods) = nad_core::index::PodIndex::new(plugins.keys());
        *crate::watch::shared::write(&shared.zones) = zones;
        let settings = Settings {
            max_endpoints_per_slice: 100,
            namespace: None,
            concurrent_syncs: 1,
        };
        let plugins = Arc::new(SharedPlugins::new(plugins));
        let api = Api::new(client, test_reporter());
        let ctx = Context::new(api, shared, plugins, settings, (caches_ready, stopping));
        (ctx, TestGates { ready, stop })
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Writes to `client` from now on.
    pub fn set_client(&mut self, client: Client) {
        self.api = Api::new(client, test_reporter());
    }
}

/// What a test turns: the caches' readiness, and the stop.
#[cfg(test)]
pub struct TestGates {
    pub ready: tokio::sync::watch::Sender<bool>,
    pub stop: tokio::sync::watch::Sender<bool>,
}

#[cfg(test)]
fn test_reporter() -> Reporter {
    Reporter {
        controller: "test".into(),
        instance: None,
    }
}

#[cfg(test)]
mod tests {
    use super::planners;

    #[test]
    fn steps_at_once_are_the_syncs_up_to_the_cores() {
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(planners(1), 1);
        assert_eq!(planners(64), cores.min(64));
        assert_eq!(planners(0), 1, "at least one");
    }
}
