//! Whether the API server serves a kind: asked through discovery, again every
//! [`DISCOVERY_RETRY`] until the API server answers, so that a watch of an optional API (the
//! NetworkAttachmentDefinition CRD, DRA) starts only where it exists.

use std::time::Duration;

use kube::{
    Client,
    api::{ApiResource, GroupVersionKind},
};

/// How long to wait before asking the API server again.
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(2);

/// The resource of `gvk`, or `None` when the API server does not serve it. A failure to ask is
/// logged once (naming `what`) and asked again until the API server answers.
pub async fn find(client: &Client, gvk: &GroupVersionKind, what: &str) -> Option<ApiResource> {
    let mut reported = false;
    loop {
        match kube::discovery::pinned_kind(client, gvk).await {
            Ok((resource, _)) => return Some(resource),
            Err(kube::Error::Api(status)) if status.code == 404 => return None,
            Err(kube::Error::Discovery(_)) => return None,
            Err(e) => {
                if !reported {
                    tracing::warn!(error = %nad_process::kube_error::describe(&e), "cannot discover the {what} (retrying)");
                    reported = true;
                }
                tokio::time::sleep(DISCOVERY_RETRY).await;
            }
        }
    }
}
