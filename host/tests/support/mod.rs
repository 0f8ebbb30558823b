//! What the tests on the local control plane share: the admin client, polling, namespaces,
//! a registry on loopback, and the controller's image run with runc.

pub mod image;
pub mod registry;

use std::{
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

pub const WAIT: Duration = Duration::from_secs(60);
/// How long a controller's reconcile count must hold to count as idle ([`Controller::settled`]).
pub const QUIET: Duration = Duration::from_millis(300);

/// The newest resourceVersion of the objects of kind `K` in `namespace` with the `labels`
/// (a selector; empty: all), 0 with none: the last change made to one of them, as
/// kube-apiserver's etcd store numbers it.
async fn newest<K>(client: &Client, namespace: &str, labels: &str) -> u64
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: kube::Api<K> = kube::Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&kube::api::ListParams::default().labels(labels))
        .await
        .unwrap();
    list.items
        .iter()
        .filter_map(|object| object.meta().resource_version.as_deref()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// The kubeconfig of the local control plane (`make local-up` writes it).
pub fn kubeconfig_path() -> PathBuf {
    let path = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.local/kubeconfig"));
    assert!(
        path.exists(),
        "no control plane: {} does not exist. Run `make local-up` first (`make test` does).",
        path.display()
    );
    path
}

/// The network prober's binary (`nad-network-prober`, package `nad-prober`), built beside this
/// package's binary by `cargo build --release -p nad-prober` (`make test` builds it). Cargo builds only this package's binaries for its tests, so
/// a prober older than its sources fails here rather than testing yesterday's code.
#[allow(dead_code)]
pub fn prober_binary() -> PathBuf {
    let prober = std::path::Path::new(env!("CARGO_BIN_EXE_nad-service-controller"))
        .with_file_name("nad-network-prober");
    let rebuild = "cargo build --release --locked -p nad-prober (make test does)";
    let built = std::fs::metadata(&prober)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}; build it: {rebuild}", prober.display()));
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = vec![repo.join("Cargo.lock")];
    for dir in ["crates/prober", "crates/process", "crates/model"] {
        let mut pending = vec![repo.join(dir)];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    sources.push(path);
                }
            }
        }
    }
    for source in sources {
        let changed = std::fs::metadata(&source).unwrap().modified().unwrap();
        assert!(
            changed <= built,
            "{} is older than {}: rebuild it: {rebuild}",
            prober.display(),
            source.display()
        );
    }
    prober
}

/// A client for the kubeconfig `path`, checked to reach its API server.
pub async fn client_for(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    nad_process::install_crypto_provider();
    // As the programs make theirs: no retries behind the controller's back.
    let client = Client::try_from(nad_process::client_config(config)).unwrap();
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the control plane in {} does not answer ({e}); run `make local-up`",
            path.display()
        )
    });
    client
}

/// The local control plane's administrator.
pub async fn client() -> Client {
    client_for(&kubeconfig_path()).await
}

/// Polls `check` until it returns `Some`, for at most [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    nad_test_kit::wait::eventually(what, WAIT, check).await
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(test: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("nsc-{test}-{n}{:05x}", nanos & 0xfffff)
}

/// A fresh namespace for the node simulator's pods, whose default ServiceAccount exists (so
/// pods can be created). Not every test binary uses both kinds.
#[allow(dead_code)]
pub async fn namespace(client: &Client, test: &str) -> String {
    let ns = unique(test);
    node_sim::create_test_namespace(client, &ns).await.unwrap();
    ns
}

/// A controller running in this process for one namespace (as `--watch-namespace` would scope
/// it), or for all.
/// Not every test binary starts one.
#[allow(dead_code)]
pub struct Controller {
    pub metrics: std::sync::Arc<nad_service_controller::metrics::Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl Controller {
    /// Starts it for `namespace`, with the plugins of `source`, at most 100 endpoints a slice.
    pub fn start(
        client: &Client,
        namespace: &str,
        source: nad_service_controller::watch::plugin_dir::PluginSource,
    ) -> Self {
        Self::start_in(client, Some(namespace), source)
    }

    /// Starts it for every namespace (as without `--watch-namespace`). Only a test binary
    /// with no other controller running may: it reconciles every annotated Service.
    pub fn start_cluster_wide(
        client: &Client,
        source: nad_service_controller::watch::plugin_dir::PluginSource,
    ) -> Self {
        Self::start_in(client, None, source)
    }

    fn start_in(
        client: &Client,
        namespace: Option<&str>,
        source: nad_service_controller::watch::plugin_dir::PluginSource,
    ) -> Self {
        use nad_service_controller::{
            controller, metrics::Metrics, reconcile::Settings, server::Readiness,
        };
        let metrics = std::sync::Arc::new(Metrics::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller::run(
            client.clone(),
            source,
            Settings {
                max_endpoints_per_slice: 100,
                namespace: namespace.map(str::to_owned),
                concurrent_syncs: 5,
            },
            metrics.clone(),
            Readiness::default(),
            kube::runtime::events::Reporter {
                controller: "nad-service-controller".into(),
                instance: Some(namespace.unwrap_or("cluster").to_owned()),
            },
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            metrics,
            stop: Some(stop),
            task,
        }
    }

    /// Waits until the controller has seen the test's changes in `namespaces` and is idle
    /// after them: each of its watches of pods, Services and slices has delivered the newest
    /// version of those objects there (the test's last change of each kind), its slice watch
    /// has delivered an event for each of its writes, and no reconcile has ended for [`QUIET`]
    /// since. What a test checks next is then not the echo of an earlier change, nor a state
    /// from before its own.
    pub async fn settled(&self, client: &Client, namespaces: &[&str]) {
        let mut wanted = [
            ("pods", 0),
            ("services", 0),
            ("endpointslices", 0),
            ("resourceclaims", 0),
        ];
        for namespace in namespaces {
            for (resource, version) in &mut wanted {
                // The slice watch sees this controller's slices only.
                let ours = format!(
                    "{}={}",
                    nad_model::labels::MANAGED_BY_LABEL,
                    nad_model::labels::MANAGED_BY
                );
                let newest = match *resource {
                    "pods" => {
                        newest::<k8s_openapi::api::core::v1::Pod>(client, namespace, "").await
                    }
                    "services" => {
                        newest::<k8s_openapi::api::core::v1::Service>(client, namespace, "").await
                    }
                    "resourceclaims" => {
                        newest::<k8s_openapi::api::resource::v1::ResourceClaim>(
                            client, namespace, "",
                        )
                        .await
                    }
                    _ => {
                        newest::<k8s_openapi::api::discovery::v1::EndpointSlice>(
                            client, namespace, &ours,
                        )
                        .await
                    }
                };
                *version = (*version).max(newest);
            }
        }
        let last = std::cell::Cell::new((None, std::time::Instant::now()));
        eventually(
            "the controller to see the test's changes and settle",
            || {
                let watch = &self.metrics.watch;
                let seen_all = wanted.iter().all(|(r, version)| watch.seen(r) >= *version);
                let scrape = nad_test_kit::metrics::Scrape::new(self.metrics.encode());
                let writes = scrape.sum("nad_service_controller_endpointslice_writes_total");
                let seen = scrape.value(
                    "nad_service_controller_watch_events_total{resource=\"endpointslices\"}",
                );
                let reconciles = scrape.sum("nad_service_controller_reconciles_total");
                // Quiet counts from when the changes were seen and the reconciles stopped ending.
                let now = seen_all.then_some(reconciles);
                let (before, since) = last.get();
                if now != before {
                    last.set((now, std::time::Instant::now()));
                }
                let quiet = now.is_some() && now == before && since.elapsed() >= QUIET;
                std::future::ready((seen >= writes && quiet).then_some(()))
            },
        )
        .await;
    }

    /// A controller that is the task `task` (to test [`Controller::stop`] itself).
    pub fn of_task(task: tokio::task::JoinHandle<()>) -> Self {
        Self {
            metrics: std::sync::Arc::default(),
            stop: None,
            task,
        }
    }

    /// Stops it (at most 10 s), and fails the test if it panicked (at any time): a controller
    /// that died mid-test must not pass for one that stopped.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(10), &mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Ok(Err(e)) => panic!("the controller task ended abnormally: {e}"),
            Err(_) => {
                self.task.abort();
                panic!("the controller did not stop within 10 s of being told to");
            }
        }
    }
}
