//! The pod watch: feeds the pod index and asks the Services on the networks a pod event
//! concerns to look again, naming the pod, so they need ask their policy about it alone.
//!
//! The index keeps only the pod labels and annotations the loaded plugins read. When a
//! newly loaded plugin reads a key the index does not keep, the watch starts over: the
//! relist makes every record again with the new keys and plans the Services in full.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{
    Api,
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use tokio::sync::{mpsc, watch};

use super::{Health, Shared, backoff, read, receiver_stream, write};
use crate::index::{Keys, PodChange};

/// Pages of the initial list: each page is whole pods (managed fields and all) until they
/// are reduced to records, and the allocator keeps the peak.
const PAGE_SIZE: u32 = 100;

pub fn watch(
    api: Api<Pod>,
    shared: Shared,
    mut keys: watch::Receiver<Keys>,
) -> impl Stream<Item = ObjectRef<Service>> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut health = Health::new("pods", shared.recovery.clone());
        let mut keys_open = true;
        loop {
            let kept = keys.borrow_and_update().clone();
            write(&shared.pods).set_keys(kept.clone());
            let mut events = watcher(api.clone(), watcher::Config::default().page_size(PAGE_SIZE))
                .backoff(backoff())
                .boxed();
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    changed = keys.changed(), if keys_open => {
                        if changed.is_err() {
                            keys_open = false;
                        } else if !kept.covers(&keys.borrow()) {
                            tracing::info!("a plugin reads pod labels or annotations not kept so far; listing the pods again");
                            break;
                        }
                    }
                    item = events.next() => {
                        let Some(item) = item else { return };
                        let Some(event) = health.observe(item) else { continue };
                        let change = write(&shared.pods).on_event(&event);
                        for service in route(&shared, &change) {
                            if tx.send(service).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    });
    receiver_stream(rx)
}

/// The Services a pod change concerns, with the change noted in their pending scopes. The
/// Services that publish the pod come first: theirs are the reconciles that move endpoints,
/// the others mostly learn that the pod stays out.
fn route(shared: &Shared, change: &PodChange) -> Vec<ObjectRef<Service>> {
    if let Some(((namespace, pod), error)) = &change.unreadable {
        tracing::warn!(
            %namespace, %pod, error = %error,
            "pod left out of every Service: its network-status annotation cannot be read"
        );
    }
    if change.networks.is_empty() {
        return Vec::new();
    }
    let mut services = read(&shared.networks).on(&change.networks);
    let mut book = shared.book.lock();
    for service in &services {
        match &change.pod {
            Some((pod, at)) => book.scopes.pod_changed(service.clone(), pod, *at),
            None => book.scopes.everything_changed(service.clone()),
        }
    }
    if let Some((pod, _)) = &change.pod {
        services.sort_by_key(|service| !book.included(service, pod));
    }
    services
}
