//! Getting back in step after an API outage.
//!
//! While the API server (or its etcd) is away, reconciles fail and back off, each Service on
//! its own schedule. A Service whose last attempt failed, and that sees no event afterwards,
//! would wait out its backoff after the API returns. So whenever a watch or a write fails for
//! a reason that says "unreachable" (no connection, a timeout, a 5xx), the API server's
//! `/readyz` is probed every [`PROBE_INTERVAL`]; when it answers `ok`, every Service whose last
//! reconcile failed is reconciled at once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::Stream;
use kube::Client;
use nad_model::service_ref::ServiceRef;
use tokio::{sync::Notify, task::JoinSet};

/// How often an unreachable API server is asked whether it is ready again.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Shared by everything that talks to the API server: reports of failures in, one probe.
#[derive(Debug, Default)]
pub struct Recovery {
    down: AtomicBool,
    wake: Notify,
}

impl Recovery {
    /// Something failed as if the API server were away; start probing (once).
    pub fn unreachable(&self) {
        if !self.down.swap(true, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// Probes while the API server is away; after each outage yields the Services that
    /// `failing` names at that moment. Stops when the stream is dropped.
    pub fn run<F>(
        self: Arc<Self>,
        client: Client,
        failing: F,
        tasks: &mut JoinSet<()>,
    ) -> impl Stream<Item = ServiceRef> + Send + 'static
    where
        F: Fn() -> Vec<ServiceRef> + Send + Sync + 'static,
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = tx.closed() => return,
                }
                let since = Instant::now();
                let mut probes = 0_u32;
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(PROBE_INTERVAL) => {}
                        () = tx.closed() => return,
                    }
                    probes += 1;
                    if ready(&client).await {
                        break;
                    }
                }
                self.down.store(false, Ordering::SeqCst);
                let services = failing();
                tracing::info!(
                    probes,
                    unreachable_for = ?since.elapsed(),
                    retrying = services.len(),
                    "the API server is ready again; reconciling the Services that failed meanwhile"
                );
                for service in services {
                    if tx.send(service).is_err() {
                        return;
                    }
                }
            }
        });
        futures::stream::unfold(rx, |mut rx| async move {
            let service = rx.recv().await?;
            Some((service, rx))
        })
    }
}

/// `GET /readyz` answers `ok` (it checks etcd too, so a paused etcd is not "ready").
async fn ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_report_of_an_outage_starts_a_probe() {
        let recovery = Recovery::default();
        assert!(!recovery.down.load(Ordering::SeqCst));
        recovery.unreachable();
        recovery.unreachable();
        assert!(recovery.down.load(Ordering::SeqCst));
    }
}
