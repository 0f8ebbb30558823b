//! DRA networks: whether the cluster serves the DRA API (`resource.k8s.io/v1`), and the watch
//! of DeviceClasses (their metadata only): which classes exist, so that a Service naming one
//! that does not gets told, and is reconciled again when it appears (or goes). The
//! ResourceClaims themselves are watched beside the pods ([`super::pods`]), whose index makes
//! the pods' DRA attachments from them.
//!
//! A cluster without the API (before Kubernetes 1.34, or with it turned off) is reported once;
//! Services on DRA networks then get no endpoints, and everything else works as before.

use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::{api::resource::v1::DeviceClass, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{GroupVersionKind, PartialObjectMeta},
    runtime::{WatchStreamExt, watcher},
};

use super::{
    discovery::find,
    health::backoff,
    list::streamed,
    shared::{Shared, read, seen, write},
};
use nad_model::service_ref::ServiceRef;

const GROUP: &str = "resource.k8s.io";
const VERSION: &str = "v1";

/// Whether the cluster serves the DRA API (`resource.k8s.io/v1`): discovered by the first watch
/// that asks, the others get its answer.
pub async fn served(shared: &Shared, client: &Client) -> bool {
    *shared.dra.get_or_init(|| discover(client)).await
}

/// Whether the cluster serves ResourceClaims and DeviceClasses at `resource.k8s.io/v1`.
async fn discover(client: &Client) -> bool {
    let claims = GroupVersionKind::gvk(GROUP, VERSION, "ResourceClaim");
    if find(client, &claims, "DRA API, resource.k8s.io/v1")
        .await
        .is_some()
    {
        return true;
    }
    tracing::warn!(
        api = "resource.k8s.io/v1",
        "this cluster does not serve the DRA API (Kubernetes 1.34 or later serves it): Services on DRA networks (isim.dev/device-class) get no endpoints; Services on NetworkAttachmentDefinitions are not affected"
    );
    false
}

/// The DeviceClass watch, once [`discover`] found the API; nothing without it.
pub fn watch(client: Client, shared: Shared) -> impl Stream<Item = ServiceRef> + Send {
    let found = {
        let (client, shared) = (client.clone(), shared.clone());
        async move { served(&shared, &client).await }
    };
    stream::once(found)
        .filter(|served| future::ready(*served))
        .flat_map(move |_| {
            let shared = shared.clone();
            let mut health = shared.health("deviceclasses");
            let api: Api<PartialObjectMeta<DeviceClass>> = Api::all(client.clone());
            streamed(api, watcher::Config::default(), "deviceclasses")
                .backoff(backoff())
                .filter_map(move |item| {
                    let changed = health.observe(item).map_or_else(Vec::new, |event| {
                        write(&shared.device_classes).on_event(seen(&event))
                    });
                    let services: Vec<ServiceRef> = changed
                        .iter()
                        .filter_map(|key| {
                            nad_model::input::device_network::DeviceNetwork::from_key(key)
                        })
                        .flat_map(|class| read(&shared.networks).on_device_class(&class.class))
                        .collect();
                    if !services.is_empty() {
                        tracing::info!(classes = ?changed, services = services.len(), "DeviceClasses changed; reconciling the Services on them");
                        let (mut book, now) = (shared.book.lock(), Timestamp::now());
                        for service in &services {
                            book.input_changed(service, now);
                        }
                    }
                    future::ready(Some(stream::iter(services)))
                })
                .flatten()
                .boxed()
        })
}
