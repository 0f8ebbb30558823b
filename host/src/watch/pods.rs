//! The pod watch: feeds the pod index and asks the Services on the networks a pod event
//! concerns to look again, naming the pod, so they need ask their policy about it alone;
//! Services that do not include the pod are screened first ([`super::screen`]).
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

use super::{Health, Shared, backoff, read, receiver_stream, screen::Screen, write};
use crate::index::{Keys, PodChange};
use k8s_openapi::jiff::Timestamp;

/// Pages of the initial list: each page is whole pods (managed fields and all) until they
/// are reduced to records, and the allocator keeps the peak.
const PAGE_SIZE: u32 = 100;

pub fn watch(
    api: Api<Pod>,
    shared: Shared,
    screen: Screen,
    mut keys: watch::Receiver<Keys>,
) -> impl Stream<Item = ObjectRef<Service>> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    let screening = screening(shared.clone(), screen, tx.clone());
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
                        let (now, screened) = route(&shared, &change);
                        for service in now {
                            if tx.send(service).is_err() {
                                return;
                            }
                        }
                        if let Some(job) = screened
                            && screening.send(job).is_err()
                        {
                            return;
                        }
                    }
                }
            }
        }
    });
    receiver_stream(rx)
}

/// A pod change to screen for some Services: the pod, when it changed, and the Services.
struct Job {
    pod: String,
    at: Timestamp,
    services: Vec<ObjectRef<Service>>,
}

/// The thread that screens pod changes in order, off the async runtime (plugin calls block),
/// and asks the Services that must reconcile to do so. It ends with the watch.
fn screening(
    shared: Shared,
    screen: Screen,
    tx: mpsc::UnboundedSender<ObjectRef<Service>>,
) -> std::sync::mpsc::Sender<Job> {
    let (jobs, rx) = std::sync::mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("pod-screen".into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                let moved = screen.screen(&shared, &job.pod, job.services);
                {
                    let mut book = shared.book.lock();
                    for service in &moved {
                        book.scopes.pod_changed(service.clone(), &job.pod, job.at);
                    }
                }
                for service in moved {
                    if tx.send(service).is_err() {
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the pod screening thread; every pod change reconciles its Services");
    }
    jobs
}

/// The Services a pod change concerns: those to reconcile now, with the change noted in their
/// pending scopes, and those to screen first (see [`super::screen`]). Services that include
/// the pod, or remember no decisions, reconcile at once; the others are screened.
fn route(shared: &Shared, change: &PodChange) -> (Vec<ObjectRef<Service>>, Option<Job>) {
    if let Some(((namespace, pod), error)) = &change.unreadable {
        tracing::warn!(
            %namespace, %pod, error = %error,
            "pod left out of every Service: its network-status annotation cannot be read"
        );
    }
    if change.networks.is_empty() {
        return (Vec::new(), None);
    }
    let services = read(&shared.networks).on(&change.networks);
    let mut book = shared.book.lock();
    let Some((pod, at)) = &change.pod else {
        for service in &services {
            book.scopes.everything_changed(service.clone());
        }
        return (services, None);
    };
    let (now, later): (Vec<_>, Vec<_>) = services
        .into_iter()
        .partition(|service| book.included(service, pod) || book.remembered(service).is_none());
    for service in &now {
        book.scopes.pod_changed(service.clone(), pod, *at);
    }
    let job = (!later.is_empty()).then(|| Job {
        pod: pod.clone(),
        at: *at,
        services: later,
    });
    (now, job)
}
