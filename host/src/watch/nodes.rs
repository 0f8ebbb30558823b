//! The node watch: keeps the node zones, and asks the Services with pods on a node that
//! appeared, went away or changed zone to plan again.

use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;

use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, runtime::watcher};

use super::{
    health::backoff,
    list::streamed,
    shared::{Shared, read, seen, write},
};
use kube::runtime::WatchStreamExt;
use nad_core::index::NetworkKey;
use nad_model::service_ref::ServiceRef;

pub fn watch(api: Api<Node>, shared: Shared) -> impl Stream<Item = ServiceRef> + Send {
    let mut health = shared.health("nodes");
    streamed(api, watcher::Config::default(), "nodes")
        .backoff(backoff())
        .filter_map(move |item| {
            let changed = health.observe(item).map_or_else(Vec::new, |event| {
                write(&shared.zones).on_event(seen(&event))
            });
            let services = if changed.is_empty() {
                Vec::new()
            } else {
                let changed: BTreeSet<&str> = changed.iter().map(String::as_str).collect();
                let networks: BTreeSet<NetworkKey> = read(&shared.pods)
                    .iter()
                    .filter(|p| p.node_name.as_deref().is_some_and(|n| changed.contains(n)))
                    .flat_map(|p| {
                        p.networks()
                            .map(|n| (p.namespace.to_string(), n.to_owned()))
                    })
                    .collect();
                let networks: Vec<NetworkKey> = networks.into_iter().collect();
                let services = read(&shared.networks).on(&networks);
                let (mut book, now) = (shared.book.lock(), Timestamp::now());
                for service in &services {
                    book.input_changed(service, now);
                }
                services
            };
            future::ready(Some(stream::iter(services)))
        })
        .flatten()
}
