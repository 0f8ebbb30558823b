//! The watch of NetworkAttachmentDefinitions (their metadata only): which networks exist, so
//! that a Service naming one that does not gets told, and is reconciled again when it appears
//! (or goes). A cluster without the CRD (no Multus) is reported once, and nothing is checked.

use k8s_openapi::jiff::Timestamp;

use futures::{Stream, StreamExt, future, stream};
use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, PartialObjectMeta},
    runtime::{WatchStreamExt, watcher},
};

use super::{
    discovery::find,
    health::backoff,
    list::streamed,
    shared::{Shared, read, seen, write},
};
use nad_model::service_ref::ServiceRef;

const GROUP: &str = "k8s.cni.cncf.io";
const VERSION: &str = "v1";
const KIND: &str = "NetworkAttachmentDefinition";

pub fn watch(client: Client, shared: Shared) -> impl Stream<Item = ServiceRef> + Send {
    stream::once(discover(client))
        .filter_map(future::ready)
        .flat_map(move |api| {
            let shared = shared.clone();
            let mut health = shared.health("networkattachmentdefinitions");
            streamed(api, watcher::Config::default(), "networkattachmentdefinitions")
                .backoff(backoff())
                .filter_map(move |item| {
                    let changed = health
                        .observe(item)
                        .map_or_else(Vec::new, |event| write(&shared.definitions).on_event(seen(&event)));
                    let services: Vec<ServiceRef> = changed
                        .iter()
                        .flat_map(|network| read(&shared.networks).on_network(network))
                        .collect();
                    if !services.is_empty() {
                        tracing::info!(networks = ?changed, services = services.len(), "NetworkAttachmentDefinitions changed; reconciling the Services on them");
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

/// The API of the definitions, or `None` when the cluster has no such CRD.
async fn discover(client: Client) -> Option<Api<PartialObjectMeta<DynamicObject>>> {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, KIND);
    if let Some(resource) = find(&client, &gvk, "NetworkAttachmentDefinition API").await {
        return Some(Api::all_with(client, &resource));
    }
    tracing::warn!(
        crd = "network-attachment-definitions.k8s.cni.cncf.io",
        "this cluster has no NetworkAttachmentDefinition CRD: install Multus (which brings it) for pods to get secondary networks; the controller runs, without checking that the Services' networks exist (restart it once the CRD is installed)"
    );
    None
}
