//! The controller: the watches wired to the reconcile of one Service, for one term as leader.

use std::{future::Future, sync::Arc, time::Duration};

use futures::{StreamExt, future};
use k8s_openapi::api::{
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    runtime::{
        Controller,
        events::Reporter,
        reflector::{self, ObjectRef, Store},
    },
};

use crate::{
    metrics::Metrics,
    reconcile::{self, Context, Settings},
    server::Readiness,
    watch::{
        self,
        health::backoff,
        plugin_dir::PluginSource,
        screen::Screen,
        shared::{Shared, read, store_key},
    },
};

/// Watches everything, reconciles until `shutdown` resolves (then finishes what is running).
///
/// Every watch retries on its own with a bounded backoff ([`watch`]); what a relist triggers
/// waits until its cache is current; after an outage, the Services that failed meanwhile are
/// reconciled as soon as the API server is ready ([`watch::recovery`]).
pub async fn run(
    client: Client,
    plugins: PluginSource,
    settings: Settings,
    metrics: Arc<Metrics>,
    ready: Readiness,
    reporter: Reporter,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shared = Shared::new(metrics.clone());
    let (services, service_writer) = reflector::store::<Service>();
    let (service_stream, triggers) = watches(
        &client,
        &plugins,
        &metrics,
        &shared,
        settings.namespace.as_deref(),
        (services.clone(), service_writer),
    );
    let caches_ready = signal_when_synced(&shared, services.clone(), ready);
    let api = reconcile::Api::new(client, reporter);
    let plugins = plugins.plugins.clone();
    let ctx = Arc::new(Context::new(api, shared, plugins, settings, caches_ready));

    // A reconcile mostly waits for its slice write; the plugin calls and planning run on the
    // blocking pool. Five at once, as upstream's EndpointSlice controller, keeps two cores
    // busy at a cold start of 10 000 Services where two at once left them half idle.
    let concurrency = ctx.settings().concurrent_syncs;
    Controller::for_stream(service_stream, services)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        // No watch error reaches the trigger stream (see `watch`); bounded all the same.
        .trigger_backoff(backoff())
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
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

type Stores = (Store<Service>, reflector::store::Writer<Service>);

/// Every watch: the Controller's main stream (each Service added or changed) and, merged,
/// everything else that asks for a reconcile.
fn watches(
    client: &Client,
    plugins: &PluginSource,
    metrics: &Arc<Metrics>,
    shared: &Shared,
    namespace: Option<&str>,
    (services, service_writer): Stores,
) -> (
    impl futures::Stream<Item = Result<Service, kube::runtime::watcher::Error>> + Send + use<>,
    impl futures::Stream<Item = ObjectRef<Service>> + Send + use<>,
) {
    let (service_api, pod_api, slice_api): (Api<Service>, Api<Pod>, Api<EndpointSlice>) =
        match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (
                Api::all(client.clone()),
                Api::all(client.clone()),
                Api::all(client.clone()),
            ),
        };
    let (keys, kept) = tokio::sync::watch::channel(plugins.plugins.snapshot().keys());
    let service_stream = watch::services::watch(
        service_api,
        services.clone(),
        service_writer,
        shared.clone(),
    );
    let slice_triggers = watch::slices::watch(slice_api, shared.clone());
    let screen = Screen {
        services: services.clone(),
        plugins: plugins.plugins.clone(),
    };
    let pod_triggers = watch::pods::watch(pod_api, shared.clone(), screen, kept);
    let node_triggers = watch::nodes::watch(Api::<Node>::all(client.clone()), shared.clone());
    let network_triggers = watch::networks::watch(client.clone(), shared.clone());
    let plugin_triggers = watch::plugin_dir::watch(
        plugins.clone(),
        client.clone(),
        services,
        metrics.clone(),
        keys,
        shared.book.clone(),
    );
    let recovery_triggers = {
        let book = shared.book.clone();
        let everything = shared.book.clone();
        shared
            .recovery
            .clone()
            .run(client.clone(), move || book.lock().failing())
            .inspect(move |service| everything.lock().input_changed(service.clone()))
    };
    // The Controller runs Services by its own reference.
    let triggers = futures::stream::select_all([
        slice_triggers.boxed(),
        pod_triggers.boxed(),
        node_triggers.boxed(),
        network_triggers.boxed(),
        plugin_triggers.boxed(),
        recovery_triggers.boxed(),
    ])
    .map(|service| store_key(&service));
    (service_stream, triggers)
}

/// A channel that turns true once every cache and index has its initial list; readiness
/// follows it.
fn signal_when_synced(
    shared: &Shared,
    services: Store<Service>,
    ready: Readiness,
) -> tokio::sync::watch::Receiver<bool> {
    let (synced, caches_ready) = tokio::sync::watch::channel(false);
    let (pods, zones, slices) = (
        shared.pods.clone(),
        shared.zones.clone(),
        shared.slices.clone(),
    );
    tokio::spawn(async move {
        if !store_ready(&services).await {
            return;
        }
        while !(read(&pods).is_synced() && read(&zones).is_synced() && read(&slices).is_synced()) {
            if synced.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!("caches synced");
        ready.set(true);
        let _ = synced.send(true);
    });
    caches_ready
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
