//! The controller: the watches wired to the reconcile of one Service, for one term as leader.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::task::{JoinError, JoinSet};

use futures::{FutureExt, StreamExt, future};
use k8s_openapi::api::{
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
    resource::v1::ResourceClaim,
};
use k8s_openapi::jiff::Timestamp;
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
use nad_model::input::service_record::ServiceRecord;

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
    let (services, service_writer) = reflector::store::<ServiceRecord>();
    // Every task the controller starts, joined when it stops: none outlives it, and a panic in
    // any of them ends it (see `supervise`).
    let mut tasks = JoinSet::new();
    let (service_stream, triggers) = watches(
        &client,
        &plugins,
        &metrics,
        &shared,
        settings.namespace.as_deref(),
        (services.clone(), service_writer),
        &mut tasks,
    );
    let quorum = match settings.namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let caches_ready = signal_when_synced(&shared, (services.clone(), quorum), ready, &mut tasks);
    // The stop, told to the reconciles too: one waiting for the caches ends rather than hold
    // up the graceful shutdown, which waits for every reconcile in flight.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    let unsynced = stop_before_sync(services.clone(), stopping.clone());
    let api = reconcile::Api::new(client, reporter);
    let plugins = plugins.plugins.clone();
    let gates = (caches_ready, stopping);
    let ctx = Arc::new(Context::new(api, shared, plugins, settings, gates));

    // A reconcile mostly waits for its slice write; the plugin calls and planning run on the
    // blocking pool. Five at once, as upstream's EndpointSlice controller, keeps two cores
    // busy at a cold start of 10 000 Services where two at once left them half idle.
    let concurrency = ctx.settings().concurrent_syncs;
    let controller = Controller::for_stream(service_stream, services)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        // No watch error reaches the trigger stream (see `watch`); bounded all the same.
        .trigger_backoff(backoff())
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .take_until(unsynced)
        .for_each(|result| {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ReconcilerFailed(..)
                    | kube::runtime::controller::Error::ObjectNotFound(..) => {}
                    other => tracing::warn!(error = %other, "controller"),
                }
            }
            future::ready(())
        });
    supervise(controller, tasks).await;
}

/// Runs `main` until it ends, beside `tasks`. A task that panics ends the controller with its
/// panic: a watch that died would leave it deaf to a kind of change, so it stops and its
/// process is restarted rather than serve stale slices. When `main` ends (at shutdown), the
/// tasks still running are stopped, and a panic of one of them is raised then.
async fn supervise(main: impl Future<Output = ()>, mut tasks: JoinSet<()>) {
    tokio::pin!(main);
    loop {
        tokio::select! {
            () = &mut main => break,
            Some(ended) = tasks.join_next() => raise(ended),
        }
    }
    tasks.abort_all();
    while let Some(ended) = tasks.join_next().await {
        raise(ended);
    }
}

/// A task's panic, raised where it is joined; a task that ended or was stopped is no news.
fn raise(ended: Result<(), JoinError>) {
    if let Err(e) = ended
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

type Stores = (
    Store<ServiceRecord>,
    reflector::store::Writer<ServiceRecord>,
);

/// Every watch: the Controller's main stream (each Service added or changed) and, merged,
/// everything else that asks for a reconcile.
fn watches(
    client: &Client,
    plugins: &PluginSource,
    metrics: &Arc<Metrics>,
    shared: &Shared,
    namespace: Option<&str>,
    (services, service_writer): Stores,
    tasks: &mut JoinSet<()>,
) -> (
    impl futures::Stream<Item = Result<ServiceRecord, kube::runtime::watcher::Error>> + Send + use<>,
    impl futures::Stream<Item = ObjectRef<ServiceRecord>> + Send + use<>,
) {
    let (service_api, pod_api, slice_api): (Api<ServiceRecord>, Api<Pod>, Api<EndpointSlice>) =
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
    let claim_api: Api<ResourceClaim> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let pod_triggers = watch::pods::watch(
        (pod_api, claim_api),
        client.clone(),
        shared.clone(),
        screen,
        kept,
        tasks,
    );
    let class_triggers = watch::devices::watch(client.clone(), shared.clone());
    let node_triggers = watch::nodes::watch(Api::<Node>::all(client.clone()), shared.clone());
    let network_triggers = watch::networks::watch(client.clone(), shared.clone());
    let plugin_triggers = watch::plugin_dir::watch(
        plugins.clone(),
        client.clone(),
        services,
        metrics.clone(),
        keys,
        shared.book.clone(),
        tasks,
    );
    let recovery_triggers = {
        let book = shared.book.clone();
        let everything = shared.book.clone();
        shared
            .recovery
            .clone()
            .run(client.clone(), move || book.lock().failing(), tasks)
            .inspect(move |service| everything.lock().input_changed(service, Timestamp::now()))
    };
    // The Controller runs Services by its own reference.
    let triggers = futures::stream::select_all([
        slice_triggers.boxed(),
        pod_triggers.boxed(),
        node_triggers.boxed(),
        network_triggers.boxed(),
        class_triggers.boxed(),
        plugin_triggers.boxed(),
        recovery_triggers.boxed(),
    ])
    .map(|service| store_key(&service));
    (service_stream, triggers)
}

/// Resolves when the stop comes before the Service cache has its initial list, and never
/// otherwise.
///
/// kube's graceful shutdown waits for the reconciles in flight, and its runner starts none
/// before that cache is ready; but from the stop on it no longer polls the Service watch, so
/// the cache never gets ready and the wait never ends. Nothing has reconciled then, so there
/// is nothing to finish: the controller ends at once.
async fn stop_before_sync(
    services: Store<ServiceRecord>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let stopped = stopping.wait_for(|stop| *stop).await.is_ok();
    if stopped && services.wait_until_ready().now_or_never().is_none() {
        tracing::info!("stopped before the Service cache synced");
        return;
    }
    future::pending::<()>().await;
}

/// A channel that turns true once every cache and index has its initial list and the API
/// server has answered a quorum read ([`watch::list::quorum_read`]); readiness follows it.
fn signal_when_synced(
    shared: &Shared,
    (services, quorum): (Store<ServiceRecord>, Api<Service>),
    ready: Readiness,
    tasks: &mut JoinSet<()>,
) -> tokio::sync::watch::Receiver<bool> {
    let (synced, caches_ready) = tokio::sync::watch::channel(false);
    let (pods, zones, slices) = (
        shared.pods.clone(),
        shared.zones.clone(),
        shared.slices.clone(),
    );
    tasks.spawn(async move {
        if !store_ready(&services).await {
            return;
        }
        while !(read(&pods).is_synced() && read(&zones).is_synced() && read(&slices).is_synced()) {
            if synced.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The lists were streamed from the API server's watch cache, which answers while
        // etcd does not: ready only once etcd answers too.
        tokio::select! {
            () = watch::list::quorum_read(quorum) => {}
            () = synced.closed() => return,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Sets its flag when dropped: a task that holds one was stopped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn panic_message(e: JoinError) -> String {
        let payload = e.into_panic();
        payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_task_that_panics_ends_the_controller_with_its_panic() {
        let mut tasks = JoinSet::new();
        tasks.spawn(future::pending::<()>());
        tasks.spawn(async { panic!("the pod watch broke") });
        let ended = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::spawn(supervise(future::pending(), tasks)),
        )
        .await
        .expect("the controller ends at the panic, not at shutdown")
        .expect_err("it ends with the panic");
        assert!(ended.is_panic());
        assert_eq!(panic_message(ended), "the pod watch broke");
    }

    #[tokio::test]
    async fn when_the_controller_ends_its_tasks_are_stopped_and_ended_ones_are_no_news() {
        let stopped = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        let guard = Dropped(stopped.clone());
        tasks.spawn(async move {
            let _guard = guard;
            future::pending::<()>().await;
        });
        tasks.spawn(async {});
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let main = async move {
            let _ = finished.await;
        };
        let supervisor = tokio::spawn(supervise(main, tasks));
        tokio::task::yield_now().await;
        assert!(
            !stopped.load(Ordering::SeqCst),
            "running while the controller runs"
        );
        let _ = finish.send(());
        supervisor.await.expect("no panic");
        assert!(
            stopped.load(Ordering::SeqCst),
            "stopped with the controller"
        );
    }

    /// Found in CI: a test that stopped its controller right after starting it waited 10 s
    /// for nothing. Here the API server accepts connections and never answers, so the
    /// caches never sync.
    #[tokio::test]
    async fn a_stop_before_the_caches_synced_ends_the_controller() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        nad_process::install_crypto_provider();
        let config = nad_process::client_config(kube::Config::new(url.parse().unwrap()));
        let client = Client::try_from(config).unwrap();
        let runtime = Arc::new(nad_plugin_runtime::Runtime::new(Default::default()).unwrap());
        let plugins = nad_plugin_runtime::Plugins::built_in(&runtime).unwrap();
        let source = PluginSource {
            runtime,
            plugins: Arc::new(nad_plugin_runtime::SharedPlugins::new(plugins)),
            dir: None,
            poll: Duration::from_secs(1),
            configmap: None,
            registry: None,
        };
        let settings = Settings {
            max_endpoints_per_slice: 100,
            namespace: Some("default".into()),
            concurrent_syncs: 1,
        };
        let reporter = Reporter {
            controller: "nad-service-controller".into(),
            instance: None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let controller = tokio::spawn(run(
            client,
            source,
            settings,
            Arc::default(),
            Readiness::default(),
            reporter,
            async move {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), controller)
            .await
            .expect("the controller ends within 5 s of the stop")
            .expect("without a panic");
        silent.abort();
    }

    #[tokio::test]
    async fn a_panic_before_shutdown_is_raised_at_shutdown_too() {
        let mut tasks = JoinSet::new();
        tasks.spawn(async { panic!("the cache sync broke") });
        // The task has panicked; the controller ends before the supervisor sees it.
        tokio::task::yield_now().await;
        let ended = tokio::spawn(supervise(future::ready(()), tasks))
            .await
            .expect_err("the panic is raised");
        assert_eq!(panic_message(ended), "the cache sync broke");
    }
}
