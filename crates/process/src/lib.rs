//! What each of the project's programs, the controller (`nad-service-controller`) and the
//! network prober (`nad-network-prober`), does the same way:
//! - [`telemetry`]: log lines on stderr, text or JSON;
//! - [`kube_error`]: a Kubernetes client error as one line, never a dump of the client's structs;
//! - [`shutdown_signal`]: stopping cleanly on SIGTERM or Ctrl-C;
//! - [`install_crypto_provider`]: the one TLS provider of the process.

pub mod kube_error;
pub mod telemetry;

/// Makes ring rustls' provider for this process, before any TLS client (kube's, the registry's)
/// is made. rustls cannot choose on its own when a build compiles in a second provider (the
/// sigstore crate's backend brings aws-lc-rs): a client made without an installed one then
/// panics. A second call changes nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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
