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

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server that answers every request `504`, counting them.
    async fn timing_out_server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buffer = [0_u8; 4096];
                    if matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Timeout","code":504,"message":"request did not complete"}"#;
                        let response = format!(
                            "HTTP/1.1 504 Gateway Timeout\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(response.as_bytes()).await;
                    }
                });
            }
        });
        (url, requests)
    }

    /// kube's client retries a `504` by itself unless told not to: a write the API server timed
    /// out on would be sent again and again, out of sight, for minutes.
    #[tokio::test]
    async fn the_client_sends_a_request_the_server_timed_out_on_once() {
        crate::install_crypto_provider();
        let (url, requests) = timing_out_server().await;
        let config = super::client_config(kube::Config::new(url.parse().unwrap()));
        let client = kube::Client::try_from(config).unwrap();
        let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.request_text(request),
        )
        .await
        .unwrap_or_else(|_| {
            let sent = requests.load(Ordering::SeqCst);
            panic!("no answer in 5 s: the client retried ({sent} requests so far)")
        });
        assert!(
            matches!(&answer, Err(kube::Error::Api(status)) if status.code == 504),
            "{answer:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(requests.load(Ordering::SeqCst), 1, "sent once, not retried");
    }
}
