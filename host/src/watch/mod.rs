//! The watches: each one keeps a cache or an index current and turns its events into
//! reconcile requests for the Services they concern, noting why in the bookkeeping.
//!
//! - [`services`]: the Service store (the Controller's own), and which Services are on which
//!   network;
//! - [`pods`]: the pod index, relisted when the plugins start to read new pod keys; pod
//!   changes screened ([`screen`]) so that only the Services they can move reconcile;
//! - [`nodes`]: the node zones;
//! - [`networks`]: which NetworkAttachmentDefinitions exist;
//! - [`slices`]: this controller's slices, telling its own writes from anyone else's;
//! - [`plugin_dir`]: the plugin directory, rescanned for new, changed and removed plugins;
//! - [`registry`]: the registry credentials and CAs the plugins are pulled with;
//! - [`named`]: one object watched by name (the plugin ConfigMap, the registry settings);
//! - [`recovery`]: after an outage, the Services that failed meanwhile.
//!
//! Every watch retries on its own with a bounded backoff ([`health`]) and never ends; what a
//! relist triggers waits until the relist is complete ([`relist`]).

pub mod health;
pub mod named;
pub mod networks;
pub mod nodes;
pub mod plugin_dir;
pub mod pods;
pub mod recovery;
pub mod registry;
pub mod screen;
pub mod services;
pub mod slices;
pub mod strip;

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use health::{Health, backoff};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;

use crate::metrics::Metrics;
use nad_core::{
    book::SharedBook,
    index::{NetworkDefinitions, NodeZones, PodIndex, ServiceNetworks, SliceStore},
};
use recovery::Recovery;

/// The state the watches feed, shared with the reconciles.
#[derive(Clone, Default)]
pub struct Shared {
    pub book: SharedBook,
    pub pods: Arc<RwLock<PodIndex>>,
    pub zones: Arc<RwLock<NodeZones>>,
    pub networks: Arc<RwLock<ServiceNetworks>>,
    pub definitions: Arc<RwLock<NetworkDefinitions>>,
    pub slices: Arc<RwLock<SliceStore>>,
    pub recovery: Arc<Recovery>,
    pub metrics: Arc<Metrics>,
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
    pub fn forget(&self, service: &ObjectRef<Service>) {
        self.book.lock().forget(service);
        let namespace = service.namespace.as_deref().unwrap_or_default();
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

/// A stream of the values an unbounded channel receives.
fn receiver_stream<T: Send + 'static>(
    rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
}
