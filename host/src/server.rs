//! The health and metrics endpoints: `/healthz`, `/readyz`, `/metrics`.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};

use crate::metrics::Metrics;

/// Readiness, flipped by the controller once it can do its job.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: Readiness,
}

pub fn router(metrics: Arc<Metrics>, ready: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, ready })
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = ?listener.local_addr().ok(), "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
