//! The plugins' sources, followed while the controller runs: the plugin directory, rescanned
//! every `poll`, and the plugin ConfigMap, watched through the API. New, changed and removed
//! plugins go through the load pipeline off the async runtime; a change swaps the plugin set,
//! widens the pod keys the index keeps when a plugin reads new ones, and asks every Service
//! whose plugin changed to plan again.

use k8s_openapi::jiff::Timestamp;
use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Client, runtime::reflector::Store};
use nad_model::fetch::Fetch;
use nad_model::input::service_record::ServiceRecord;
use tokio::{sync::watch, task::JoinSet};

use crate::metrics::{Loaded, Metrics};
use nad_core::book::SharedBook;
use nad_model::input::target::{self, Target};
use nad_model::keys::Keys;
use nad_model::service_ref::ServiceRef;
use nad_plugin_runtime::{Loader, PluginDir, Plugins, Runtime, Scan, SharedPlugins, configmap};

use super::{
    named::{Named, Seen},
    registry::RegistrySettings,
};

/// The ConfigMap whose `binaryData` holds plugins, read through the API.
#[derive(Clone)]
pub struct ConfigMapSource {
    pub namespace: String,
    pub name: String,
    pub loader: Arc<Mutex<Loader>>,
}

impl ConfigMapSource {
    /// A ConfigMap source whose `<name>.oci` entries are fetched with `fetcher`.
    pub fn new(namespace: &str, name: &str, fetcher: Option<Arc<dyn Fetch>>) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            loader: Arc::new(Mutex::new(Loader::new(fetcher))),
        }
    }

    /// Whether a plugin that failed (a fetch, a timed-out self-test) is due another try.
    fn retry_due(&self) -> bool {
        self.loader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .any_retry_due()
    }

    /// Loads the ConfigMap's plugins (none when it is gone) into `plugins`.
    pub fn load(
        &self,
        runtime: &Runtime,
        plugins: &mut Plugins,
        configmap: Option<&ConfigMap>,
    ) -> Scan {
        let (entries, ignored) = configmap.map(configmap::entries).unwrap_or_default();
        if !ignored.is_empty() {
            tracing::warn!(
                configmap = %format!("{}/{}", self.namespace, self.name),
                ignored = ?ignored,
                "ConfigMap keys that are not plugins are ignored: put components in binaryData as <name>.wasm, configurations as <name>.json"
            );
        }
        self.loader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .load(runtime, plugins, entries, &[])
    }
}

/// Where the controller's plugins come from. Cloned for each term as leader: the plugin set
/// and the sources' load state outlive a lost Lease.
#[derive(Clone)]
pub struct PluginSource {
    pub runtime: Arc<Runtime>,
    pub plugins: Arc<SharedPlugins>,
    /// Scanned every `poll` for new, changed and deleted plugins.
    pub dir: Option<Arc<Mutex<PluginDir>>>,
    pub poll: Duration,
    /// Watched through the API.
    pub configmap: Option<ConfigMapSource>,
    /// The registry credentials and CAs, watched through the API.
    pub registry: Option<RegistrySettings>,
}

/// What a change of the plugin set updates, besides the set.
struct Publisher {
    plugins: Arc<SharedPlugins>,
    services: Store<ServiceRecord>,
    metrics: Arc<Metrics>,
    keys: watch::Sender<Keys>,
    book: SharedBook,
    tx: futures::channel::mpsc::UnboundedSender<ServiceRef>,
}

impl Publisher {
    /// Swaps in `next` after `scan` changed it and asks every Service whose plugin changed to
    /// plan again; `false` once this controller's term has ended.
    fn publish(&self, scan: &Scan, next: Plugins) -> bool {
        if scan.is_empty() {
            return true;
        }
        for name in &scan.loaded {
            self.metrics.plugin_loaded(name, Loaded::Ok);
        }
        for failure in &scan.failed {
            self.metrics
                .plugin_loaded(&failure.plugin, Loaded::Failed(failure.step));
        }
        let changed = scan.changed();
        let refs: Vec<ServiceRef> = self
            .services
            .state()
            .iter()
            .filter(|svc| match svc.target() {
                Target::Managed(managed) => {
                    let annotation = managed.annotations.get(target::POLICY_ANNOTATION);
                    changed.iter().any(|n| n == next.name_for(annotation))
                }
                _ => false,
            })
            .map(|svc| ServiceRef::of(&**svc))
            .collect();
        let wanted = next.keys();
        self.plugins.replace(next);
        self.keys.send_if_modified(|kept| {
            let wider = !kept.covers(&wanted);
            if wider {
                kept.union(&wanted);
            }
            wider
        });
        tracing::info!(plugins = ?changed, services = refs.len(), "plugins changed; reconciling their Services");
        {
            let (mut book, now) = (self.book.lock(), Timestamp::now());
            for r in &refs {
                book.input_changed(r, now);
            }
        }
        refs.into_iter().all(|r| self.tx.unbounded_send(r).is_ok())
    }
}

/// Follows the plugin directory, the plugin ConfigMap and the registry settings; on a change
/// swaps the plugin set and asks for a reconcile of every Service whose plugin changed.
pub fn watch(
    source: PluginSource,
    client: Client,
    services: Store<ServiceRecord>,
    metrics: Arc<Metrics>,
    keys: watch::Sender<Keys>,
    book: SharedBook,
    tasks: &mut JoinSet<()>,
) -> impl futures::Stream<Item = ServiceRef> + Send + 'static {
    let (tx, rx) = futures::channel::mpsc::unbounded::<ServiceRef>();
    let publisher = Arc::new(Publisher {
        plugins: source.plugins.clone(),
        services,
        metrics,
        keys,
        book,
        tx,
    });
    if let Some(dir) = source.dir.clone() {
        tasks.spawn(scan_dir(source.clone(), dir, publisher.clone()));
    }
    if let Some(registry) = source.registry.clone() {
        let publisher = publisher.clone();
        tasks.spawn(registry.watch(client.clone(), move || publisher.tx.is_closed()));
    }
    if let Some(configmap) = source.configmap.clone() {
        tasks.spawn(watch_configmap(source, configmap, client, publisher));
    }
    rx
}

/// Rescans the directory every `poll`, until the term ends.
async fn scan_dir(source: PluginSource, dir: Arc<Mutex<PluginDir>>, publisher: Arc<Publisher>) {
    loop {
        tokio::time::sleep(source.poll).await;
        if publisher.tx.is_closed() {
            // This controller's term ended; the next one scans.
            return;
        }
        let (runtime, shared, dir) = (source.runtime.clone(), source.plugins.clone(), dir.clone());
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
        if !publisher.publish(&scan, next) {
            return;
        }
    }
}

/// Loads the ConfigMap's plugins at every change of it, and again while a plugin that failed
/// (an artifact not fetched) is due another try, until the term ends. A deleted ConfigMap
/// unloads its plugins, as a deleted file does.
async fn watch_configmap(
    source: PluginSource,
    configmap: ConfigMapSource,
    client: Client,
    publisher: Arc<Publisher>,
) {
    // Retried as every other watch (within 2 s), so that its errors, counted, tell a failing
    // watch from a quiet one.
    let mut watch = Named::<ConfigMap>::new(client, &configmap.namespace, &configmap.name);
    let progress = publisher.metrics.watch.progress("configmaps");
    // The ConfigMap as last loaded, for retries.
    let mut current: Option<ConfigMap> = None;
    loop {
        // The term's end shows on the channel; look at it while no event comes.
        let latest = match watch.next(|e| super::health::count(&progress, e)).await {
            None => return,
            Some(Seen::Quiet) if publisher.tx.is_closed() => return,
            Some(Seen::Quiet) if configmap.retry_due() => current.clone(),
            Some(Seen::Quiet) => continue,
            Some(Seen::Failed(error)) => {
                tracing::warn!(
                    configmap = %format!("{}/{}", configmap.namespace, configmap.name),
                    error = %error,
                    "cannot watch the plugin ConfigMap (retrying); the plugins loaded keep serving"
                );
                continue;
            }
            Some(Seen::State(cm)) => cm,
        };
        current.clone_from(&latest);
        let (runtime, shared, cm_source) = (
            source.runtime.clone(),
            source.plugins.clone(),
            configmap.clone(),
        );
        let loaded = tokio::task::spawn_blocking(move || {
            let mut next = (*shared.snapshot()).clone();
            let scan = cm_source.load(&runtime, &mut next, latest.as_ref());
            (scan, next)
        })
        .await;
        let Ok((scan, next)) = loaded else {
            tracing::error!("loading the plugin ConfigMap panicked; plugin reloading stopped");
            return;
        };
        if !publisher.publish(&scan, next) {
            return;
        }
    }
}
