//! The prober's `/healthz`, `/readyz` and `/metrics`.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};

use crate::metrics::ProbeMetrics;

#[derive(Clone)]
pub struct Served {
    pub metrics: Arc<ProbeMetrics>,
    pub ready: Arc<AtomicBool>,
}

pub fn router(served: Served) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<Served>| async move {
                if s.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the watches have not listed yet",
                    )
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(s): State<Served>| async move {
                (
                    [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                    s.metrics.encode(),
                )
                    .into_response()
            }),
        )
        .with_state(served)
}
