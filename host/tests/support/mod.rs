//! What the tests on the local control plane share: the admin client, polling, namespaces.

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

/// A client for the kubeconfig `path`, checked to reach its API server.
pub async fn client_for(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
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
    node_sim::eventually(what, WAIT, check).await
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh namespace whose default ServiceAccount exists (so pods can be created).
pub async fn namespace(client: &Client, test: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!("nsc-{test}-{n}{:05x}", nanos & 0xfffff);
    node_sim::create_test_namespace(client, &ns).await.unwrap();
    ns
}
