//! `serve-http`, the nginx images' stand-in: serves the files of `<root>` (by default
//! `usr/share/nginx/html`, relative to the pod's directory, like nginx's document root) on
//! every port it is given: `/` is `index.html`, a missing file is 404. Removing `index.html`
//! makes an HTTP readiness probe on `/` fail, as it would with nginx.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context as _;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;

pub async fn serve(ports: Vec<u16>, root: PathBuf) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/", get(index))
        .route("/{*path}", get(file))
        .with_state(root);
    let mut servers = tokio::task::JoinSet::new();
    for port in ports {
        servers.spawn(axum::serve(listen(port).await?, app.clone()).into_future());
    }
    tokio::select! {
        done = servers.join_next() => match done {
            Some(result) => Ok(result??),
            None => Ok(()),
        },
        _ = tokio::signal::ctrl_c() => Ok(()),
        () = terminated() => Ok(()),
    }
}

/// A listener on `port` of every address, as nginx's `listen 80; listen [::]:80;`: `[::]`,
/// which takes IPv4 too (`net.ipv6.bindv6only` is 0), or `0.0.0.0` where IPv6 is off.
async fn listen(port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
    if let Ok(listener) = tokio::net::TcpListener::bind(any6).await {
        return Ok(listener);
    }
    let any4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    tokio::net::TcpListener::bind(any4)
        .await
        .with_context(|| format!("listening on {any4}"))
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

async fn index(State(root): State<PathBuf>) -> (StatusCode, String) {
    read(root.join("index.html")).await
}

async fn file(State(root): State<PathBuf>, Path(path): Path<String>) -> (StatusCode, String) {
    if path.split('/').any(|part| part == "..") {
        return (StatusCode::FORBIDDEN, "403 Forbidden\n".into());
    }
    let path = root.join(&path);
    if path.is_dir() {
        return read(path.join("index.html")).await;
    }
    read(path).await
}

async fn read(path: PathBuf) -> (StatusCode, String) {
    match tokio::fs::read_to_string(&path).await {
        Ok(body) => (StatusCode::OK, body),
        Err(_) => (StatusCode::NOT_FOUND, "404 Not Found\n".into()),
    }
}
