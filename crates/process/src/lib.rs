//! What each of the project's programs, the controller (`nad-service-controller`) and the
//! network prober (`nad-network-prober`), does the same way:
//! - [`telemetry`]: log lines on stderr, text or JSON;
//! - [`kube_error`]: a Kubernetes client error as one line, never a dump of the client's structs;
//! - [`shutdown_signal`]: stopping cleanly on SIGTERM or Ctrl-C;
//! - [`install_crypto_provider`]: the one TLS provider of the process;
//! - [`kube_client`]: the Kubernetes client, retrying nothing behind the program's back.

pub mod kube_error;
pub mod telemetry;

/// Makes ring rustls' provider for this process, before any TLS client (kube's, the registry's)
/// is made. rustls cannot choose on its own when a build compiles in a second provider (the
/// sigstore crate's backend brings aws-lc-rs): a client made without an installed one then
/// panics. A second call changes nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The Kubernetes client (the in-cluster config, `KUBECONFIG` or `~/.kube/config`), made with
/// [`client_config`].
pub async fn kube_client() -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = kube::Config::infer()
        .await
        .context("connecting to Kubernetes (in-cluster config, KUBECONFIG or ~/.kube/config)")?;
    kube::Client::try_from(client_config(config))
        .context("connecting to Kubernetes (in-cluster config, KUBECONFIG or ~/.kube/config)")
}

/// `config` without kube's built-in retries: kube's client retries a `429`, `503` or `504` up
/// to 15 times, with delays growing to minutes, so a write the API server times out on (its
/// etcd away) would hold its caller for minutes and fail nowhere anyone sees. The programs
/// retry themselves, where it shows: the controller per Service with its own backoff and at
/// once when the API server is ready again (counted and logged), the prober at its next probe.
pub fn client_config(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the program");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Runs `main` on a multi-threaded async runtime, to its end.
pub fn block_on<F: std::future::Future>(main: F) -> anyhow::Result<F::Output> {
    use anyhow::Context as _;
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(main))
}
