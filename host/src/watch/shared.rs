//! The state the watches feed and the reconciles read: the indexes, the bookkeeping, the
//! recovery list and the figures, with the lock helpers every user of them goes through.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::runtime::{reflector::ObjectRef, watcher};

use super::{health::Health, recovery::Recovery};
use crate::metrics::Metrics;
use nad_core::{
    book::SharedBook,
    index::{NetworkDefinitions, NodeZones, PodIndex, ServiceNetworks, SliceStore},
};
use nad_model::input::service_record::ServiceRecord;
use nad_model::{service_ref::ServiceRef, watch::Event};

/// The state the watches feed, shared with the reconciles.
#[derive(Clone, Default)]
pub struct Shared {
    pub book: SharedBook,
    pub pods: Arc<RwLock<PodIndex>>,
    pub zones: Arc<RwLock<NodeZones>>,
    pub networks: Arc<RwLock<ServiceNetworks>>,
    pub definitions: Arc<RwLock<NetworkDefinitions>>,
    /// The DeviceClasses that exist (DRA networks), by `deviceclass:<name>`.
    pub device_classes: Arc<RwLock<NetworkDefinitions>>,
    pub slices: Arc<RwLock<SliceStore>>,
    pub recovery: Arc<Recovery>,
    pub metrics: Arc<Metrics>,
    /// Whether the cluster serves the DRA API, asked once (`watch::devices::served`).
    pub dra: Arc<tokio::sync::OnceCell<bool>>,
}

impl Shared {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Shared {
            metrics,
            ..Shared::default()
        }
    }

    /// The health of the watch of `resource`, reporting to this state's recovery and metrics.
    pub fn health(&self, resource: &'static str) -> Health {
        Health::new(
            resource,
            self.recovery.clone(),
            self.metrics.watch.progress(resource),
        )
    }

    /// Forgets a Service that is gone: its bookkeeping, its figures and its problems.
    pub fn forget(&self, service: &ServiceRef) {
        self.book.lock().forget(service);
        let namespace = service.namespace.as_str();
        self.metrics.forget_service(namespace, &service.name);
    }
}

/// A poisoned lock is still used: the indexes are updated before anything can panic.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// A watch's event as the indexes take it (`nad_model::watch`), the object borrowed.
pub fn seen<K>(event: &watcher::Event<K>) -> Event<&K> {
    match event {
        watcher::Event::Apply(object) => Event::Apply(object),
        watcher::Event::Delete(object) => Event::Delete(object),
        watcher::Event::Init => Event::Init,
        watcher::Event::InitApply(object) => Event::InitApply(object),
        watcher::Event::InitDone => Event::InitDone,
    }
}

/// The key of `service` in kube's Service store and Controller (the key everything of this
/// controller's own is kept by is [`ServiceRef`]).
pub fn store_key(service: &ServiceRef) -> ObjectRef<ServiceRecord> {
    ObjectRef::new(&service.name).within(&service.namespace)
}
