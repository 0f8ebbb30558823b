//! Start-up and shutdown: the client, the default plugin, the endpoints, leader election, and
//! the controller, stopped cleanly on SIGTERM or Ctrl-C.

use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, runtime::events::Reporter};
use nad_plugin_fetcher::Puller;
use tokio::sync::watch;

use crate::{
    args::RunArgs,
    controller,
    leader::LeaderElector,
    metrics::Metrics,
    reconcile::{CONTROLLER_NAME, Settings},
    server::{self, Readiness},
    watch::{
        plugin_dir::{ConfigMapSource, PluginSource},
        registry::RegistrySettings,
    },
};
use nad_plugin_runtime::{Limits, PluginDir, Plugins, Runtime, SharedPlugins};

fn runtime(args: &RunArgs) -> anyhow::Result<Runtime> {
    Runtime::new(Limits {
        deadline: args.plugin_deadline,
        memory_bytes: args.plugin_memory_limit_mib as usize * 1024 * 1024,
    })
    .context("starting the plugin runtime")
}

fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nad-service-controller".to_owned());
    format!("{host}_{}", std::process::id())
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = nad_process::kube_client().await?;
    let version = client.apiserver_version().await.map_err(|e| {
        anyhow::anyhow!(
            "reaching the Kubernetes API server: {}",
            nad_process::kube_error::describe(&e)
        )
    })?;
    tracing::info!(server = %version.git_version, "connected to the API server");
    let source = plugin_source(&args, &client).await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        nad_process::shutdown_signal().await;
        tracing::info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let metrics = Arc::new(Metrics::default());
    let ready = Readiness::default();
    serve(&args, &metrics, &ready, &stopped).await?;

    let elector = args.leader_election.then(|| {
        LeaderElector::new(
            client.clone(),
            &args.leader_election_namespace,
            &args.leader_election_lease,
            identity(),
        )
    });
    let term = Term {
        client,
        source,
        settings: Settings {
            max_endpoints_per_slice: args.max_endpoints_per_slice,
            namespace: args.watch_namespace.clone(),
            concurrent_syncs: args.concurrent_syncs,
        },
        metrics,
        ready,
        reporter: Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: elector
                .as_ref()
                .map(|e| e.identity().to_owned())
                .or_else(|| Some(identity())),
        },
    };
    match elector {
        None => {
            // Without leader election this replica leads all along.
            term.metrics.set_leader(true);
            term.run(stopped()).await;
        }
        Some(elector) => lead(&elector, &term, stopped).await,
    }
    tracing::info!("stopped");
    Ok(())
}

/// The built-in plugin, the plugin directory's, and the failure policies.
async fn plugin_source(args: &RunArgs, client: &Client) -> anyhow::Result<PluginSource> {
    let runtime = Arc::new(runtime(args)?);
    let mut plugins = tokio::task::block_in_place(|| Plugins::built_in(&runtime))
        .context("checking the built-in default plugin")?;
    let (default_policy, policies) = args.failure_policies()?;
    plugins.set_failure_policies(default_policy, policies);
    if let Some(name) = &args.default_plugin {
        plugins.set_default(name);
    }
    let (puller, registry_settings) = registry(args, client).await?;
    let (dir, plugins) = match args.plugin_dir.clone() {
        None => (None, plugins),
        Some(path) => {
            // Plugins run off the async runtime's threads (see `run`).
            let (runtime, puller) = (runtime.clone(), puller.clone());
            let (dir, plugins, scan) = tokio::task::spawn_blocking(move || {
                let mut dir = PluginDir::with_fetcher(path, Some(puller));
                let scan = dir.scan(&runtime, &mut plugins);
                (dir, plugins, scan)
            })
            .await
            .context("loading the plugin directory")?;
            if !scan.failed.is_empty() {
                tracing::warn!(
                    failed = scan.failed.len(),
                    dir = %dir.path().display(),
                    "some plugins did not load; Services that name them get a Warning Event"
                );
            }
            (Some(dir), plugins)
        }
    };
    let (configmap, plugins) = match &args.plugin_configmap {
        None => (None, plugins),
        Some(name) => {
            let source = ConfigMapSource::new(&args.plugin_configmap_namespace, name, Some(puller));
            let found = first_configmap(client, &source).await;
            let runtime = runtime.clone();
            let (source, plugins) = tokio::task::spawn_blocking(move || {
                let mut plugins = plugins;
                source.load(&runtime, &mut plugins, found.as_ref());
                (source, plugins)
            })
            .await
            .context("loading the plugin ConfigMap")?;
            (Some(source), plugins)
        }
    };
    if plugins.get(plugins.default_name()).is_err() {
        tracing::warn!(
            default = plugins.default_name(),
            "the default plugin is not loaded (yet)"
        );
    }
    tracing::info!(
        plugins = ?plugins.names().collect::<Vec<_>>(),
        default = plugins.default_name(),
        deadline = ?args.plugin_deadline,
        memory_limit_mib = args.plugin_memory_limit_mib,
        "plugins ready"
    );
    Ok(PluginSource {
        runtime,
        plugins: Arc::new(SharedPlugins::new(plugins)),
        dir: dir.map(|d| Arc::new(std::sync::Mutex::new(d))),
        poll: args.plugin_poll_interval,
        configmap,
        registry: registry_settings,
    })
}

/// The registry client, with the credentials and CAs of the registry Secret and CA ConfigMap,
/// if they are named (read before the plugins load, so that they are pulled with them).
async fn registry(
    args: &RunArgs,
    client: &Client,
) -> anyhow::Result<(Arc<Puller>, Option<RegistrySettings>)> {
    let puller = Arc::new(
        args.registry
            .puller()
            .context("setting up the OCI registry client")?,
    );
    if args.plugin_registry_secret.is_none()
        && args.plugin_registry_ca_configmap.is_none()
        && args.plugin_verification_configmap.is_none()
    {
        return Ok((puller, None));
    }
    let settings = RegistrySettings {
        namespace: args.plugin_configmap_namespace.clone(),
        secret: args.plugin_registry_secret.clone(),
        ca_configmap: args.plugin_registry_ca_configmap.clone(),
        policy_configmap: args.plugin_verification_configmap.clone(),
        file_cas: args.registry.cas()?,
        puller: puller.clone(),
    };
    settings.read(client).await;
    Ok((puller, Some(settings)))
}

/// The plugin ConfigMap as it is at start-up; `None` (its watch loads it later) when it does
/// not exist yet or cannot be read.
async fn first_configmap(client: &Client, source: &ConfigMapSource) -> Option<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &source.namespace);
    let configmap = format!("{}/{}", source.namespace, source.name);
    match api.get_opt(&source.name).await {
        Ok(Some(found)) => Some(found),
        Ok(None) => {
            tracing::warn!(%configmap, "the plugin ConfigMap does not exist (yet); its plugins load when it is created");
            None
        }
        Err(e) => {
            tracing::warn!(%configmap, error = %nad_process::kube_error::describe(&e), "cannot read the plugin ConfigMap (its watch retries); check the controller's RBAC for it");
            None
        }
    }
}

/// Serves health, readiness and metrics until `stopped`.
async fn serve<F, S>(
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    ready: &Readiness,
    stopped: &S,
) -> anyhow::Result<()>
where
    S: Fn() -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let router = server::router(metrics.clone(), ready.clone());
    let mut servers = vec![args.health_address];
    if args.metrics_address != args.health_address {
        servers.push(args.metrics_address);
    }
    for addr in servers {
        let (router, stop) = (router.clone(), stopped());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        tokio::spawn(async move {
            if let Err(e) = server::serve(listener, router, stop).await {
                tracing::error!(%addr, error = %e, "HTTP server failed");
            }
        });
    }
    Ok(())
}

/// What one term of the controller runs with.
struct Term {
    client: Client,
    source: PluginSource,
    settings: Settings,
    metrics: Arc<Metrics>,
    ready: Readiness,
    reporter: Reporter,
}

impl Term {
    async fn run(&self, stop: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
        controller::run(
            self.client.clone(),
            self.source.clone(),
            self.settings.clone(),
            self.metrics.clone(),
            self.ready.clone(),
            self.reporter.clone(),
            stop,
        )
        .await;
    }
}

/// One term as leader after another: a leader that loses its Lease (it could not renew it in
/// time, say during an API outage, or another replica took it) stops reconciling at once (its
/// running reconciles are cancelled) and stands as a candidate again, with fresh caches.
async fn lead<F, S>(elector: &LeaderElector, term: &Term, stopped: S)
where
    S: Fn() -> F,
    F: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    loop {
        // A standby replica is healthy and ready: it is doing its job by waiting.
        term.ready.set(true);
        term.metrics.set_leader(false);
        if !elector.acquire(stopped()).await {
            break;
        }
        term.metrics.set_leader(true);
        term.ready.set(false);
        tokio::select! {
            () = term.run(stopped()) => {
                term.metrics.end_term();
                elector.release().await;
                break;
            }
            () = elector.hold() => {
                term.metrics.end_term();
                tracing::warn!("no longer the leader; reconciling stopped, standing as a candidate again");
            }
        }
    }
}
