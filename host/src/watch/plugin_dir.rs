//! The plugin directory, rescanned every `poll`: new, changed and removed plugins go through
//! the load pipeline off the async runtime; a change swaps the plugin set, widens the pod
//! keys the index keeps when a plugin reads new ones, and asks every Service whose plugin
//! changed to plan again.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use k8s_openapi::api::core::v1::Service;
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::watch;

use crate::{
    index::Keys,
    input::target,
    metrics::Metrics,
    plugin::{POLICY_ANNOTATION, PluginDir, Runtime, SharedPlugins},
    reconcile::book::SharedBook,
};

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
pub fn watch(
    source: PluginSource,
    services: Store<Service>,
    metrics: Arc<Metrics>,
    keys: watch::Sender<Keys>,
    book: SharedBook,
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
                    let scan = dir
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .scan(&runtime, &mut next);
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
                let wanted = next.keys();
                source.plugins.replace(next);
                keys.send_if_modified(|kept| {
                    let wider = !kept.covers(&wanted);
                    if wider {
                        kept.union(&wanted);
                    }
                    wider
                });
                tracing::info!(plugins = ?changed, services = refs.len(), "plugins changed; reconciling their Services");
                {
                    let mut book = book.lock();
                    for r in &refs {
                        book.scopes.everything_changed(r.clone());
                    }
                }
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
