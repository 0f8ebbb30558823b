//! What a reconcile reads and writes through.

use crate::reason::Reason;
use std::{
    collections::BTreeSet,
    sync::{Arc, RwLock, RwLockReadGuard},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Client,
    runtime::reflector::{ObjectRef, Store},
};

use super::{
    book::SharedBook,
    candidates::CandidateCache,
    decide::ObserveAll,
    events::Events,
    observe::{self, Observation},
    slices,
};
use crate::{
    error::Error,
    index::{Missing, NetworkDefinitions, NodeZones, PodIndex, SliceNames},
    input::target::ServiceTarget,
    metrics::Metrics,
    plugin::SharedPlugins,
    watch::recovery::Recovery,
};

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

/// Everything a reconcile reads or writes through.
pub struct Context {
    pub client: Client,
    pub events: Events,
    pub pods: Arc<RwLock<PodIndex>>,
    pub zones: Arc<RwLock<NodeZones>>,
    pub slices: Store<EndpointSlice>,
    pub slice_names: Arc<RwLock<SliceNames>>,
    /// The NetworkAttachmentDefinitions that exist.
    pub definitions: Arc<RwLock<NetworkDefinitions>>,
    /// Each network's candidates, shared by its Services.
    pub candidates: Arc<CandidateCache>,
    pub plugins: Arc<SharedPlugins>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub book: SharedBook,
    pub recovery: Arc<Recovery>,
    pub caches_ready: tokio::sync::watch::Receiver<bool>,
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Context {
    /// Waits until every cache has its initial list.
    ///
    /// Only one task awaits the stores themselves: `Store::wait_until_ready` keeps the waker
    /// of its last poller only, so concurrent reconciles waiting on it directly could sleep
    /// forever. Reconciles wait on this watch channel instead.
    pub async fn wait_ready(&self) -> Result<(), Error> {
        let mut ready = self.caches_ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| Error::CachesNotReady)
    }

    /// This controller's slices of the Service, from the cache.
    pub fn slices_of(&self, service: &ObjectRef<Service>) -> Vec<Arc<EndpointSlice>> {
        let namespace = service.namespace.as_deref().unwrap_or_default();
        read(&self.slice_names)
            .of(namespace, &service.name)
            .filter_map(|name| self.slices.get(&ObjectRef::new(name).within(namespace)))
            .filter(|s| slices::is_managed_slice_of(s, &service.name))
            .collect()
    }

    /// Whether `network` is known to name no NetworkAttachmentDefinition.
    pub fn network_missing(&self, network: &str) -> Option<Missing> {
        read(&self.definitions).missing(network)
    }

    /// What observes the Service's candidates later, on any thread.
    pub fn observer(&self, target: &Arc<ServiceTarget>) -> ObserveAll {
        let (pods, zones) = (self.pods.clone(), self.zones.clone());
        let (cache, target) = (self.candidates.clone(), target.clone());
        Box::new(move || cache.observe(&read(&pods), &read(&zones), &target))
    }

    /// The named pods among the Service's candidates (a pod-scoped reconcile's).
    pub fn observe_pods(&self, target: &ServiceTarget, names: &BTreeSet<String>) -> Observation {
        let names = names.iter().map(String::as_str);
        observe::named(&read(&self.pods), &read(&self.zones), target, names)
    }

    /// Forgets a Service that is gone or no longer managed: its bookkeeping, its figures and its problems.
    pub fn forget(&self, service: &ObjectRef<Service>) {
        self.book.lock().forget(service);
        let namespace = service.namespace.as_deref().unwrap_or_default();
        self.metrics.forget_service(namespace, &service.name);
    }

    /// Publishes a Warning Event on the Service; a failure to publish is logged, not fatal.
    pub async fn warn(&self, service: &Service, reason: Reason, action: &str, note: String) {
        self.events.warn(service, reason, action, note).await;
    }
}
