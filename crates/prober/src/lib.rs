//! The network prober (`nad-network-prober`): readiness of pods on the Service's
//! own network, where its clients are.
//!
//! A pod's `Ready` is decided by kubelet's probes on the primary network, so a pod whose
//! secondary interface is dead stays Ready and published. The prober runs as a DaemonSet whose
//! pods are attached to the networks it watches; each probes the pods of its own node that are
//! candidates of a managed Service on one of those networks, from the network itself (the
//! probe crosses the same kind of link a client does), and writes the pod condition
//! `network-ready.isim.dev/<namespace>.<name>` ([`nad_model::input::network_ready`]) when it flips,
//! never per probe. The controller's default plugin publishes a pod whose condition is
//! `False` not serving; a pod's owner can also gate its `Ready` on it (`readinessGates`).
//!
//! - [`args`]: its flags; the probe a Service asks for (`isim.dev/probe`), its defaults and
//!   bounds, is [`nad_model::probe`], which the controller reads too;
//! - [`targets`]: which pods, addresses and checks (pure);
//! - [`tracker`]: the success and failure thresholds (pure);
//! - [`check`]: one TCP or HTTP attempt;
//! - [`guard`]: no write while the admission policy that confines the writes is not in force;
//! - [`run`]: the watches, the probe tasks and the writes; [`metrics`] and the [`server`] of
//!   `/metrics`, `/healthz` and `/readyz`.
//!
//! It depends on the project's vocabulary (`nad_model`) and the Kubernetes client only: no Wasm
//! runtime, no plugin fetcher, none of the controller (`hack/check-layers.py` keeps it so).

pub mod args;
pub mod check;
pub mod guard;
pub mod metrics;
pub mod run;
pub mod server;
pub mod targets;
pub mod tracker;

use std::sync::{Arc, atomic::AtomicBool};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ObjectReference;

pub use args::ProbeArgs;
use server::Served;

/// Runs the prober until `stop` resolves.
pub async fn main(
    args: ProbeArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let client = nad_process::kube_client().await?;
    let metrics = Arc::new(metrics::ProbeMetrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .with_context(|| format!("listening on {}", args.address))?;
    let served = Served {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, server::router(served)).await {
            tracing::error!(error = %e, "the /metrics server stopped");
        }
    });
    tracing::info!(node = %args.node_name, networks = ?args.networks, address = %args.address, "probing");
    let in_force = Arc::new(AtomicBool::new(false));
    let own_pod = args.pod_name.as_ref().map(|name| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.clone()),
        namespace: args.pod_namespace.clone(),
        ..ObjectReference::default()
    });
    let guard = guard::watch(
        client.clone(),
        guard::Names {
            policy: args.admission_policy,
            binding: args.admission_policy_binding,
        },
        std::time::Duration::from_secs(args.admission_policy_check_seconds),
        in_force.clone(),
        metrics.clone(),
        run::recorder(&client, &args.node_name),
        own_pod,
    );
    let run = run::run(
        client,
        args.node_name,
        args.networks,
        run::Gates { ready, in_force },
        metrics,
        stop,
    );
    tokio::select! {
        () = guard => Ok(()),
        result = run => result,
    }
}
