//! The Service watch: the Controller's own store, which Services are on which network, and
//! the bookkeeping of Services that are gone.

use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{Store, store::Writer},
        watcher,
    },
};

use super::{
    health::backoff,
    list::streamed,
    shared::{Shared, seen, store_key, write},
};
use nad_core::index::ServiceNetworks;
use nad_core::relist::RelistGate;
use nad_model::input::service_record::ServiceRecord;
use nad_model::service_ref::ServiceRef;

/// Services to reconcile, as the Controller's main stream: every Service added or changed.
pub fn watch(
    api: Api<ServiceRecord>,
    store: Store<ServiceRecord>,
    writer: Writer<ServiceRecord>,
    shared: Shared,
) -> impl Stream<Item = Result<ServiceRecord, watcher::Error>> + Send {
    let mut health = shared.health("services");
    let mut gate = RelistGate::default();
    streamed(api, watcher::Config::default(), "services")
        .backoff(backoff())
        .reflect(writer)
        .filter_map(move |item| {
            let changed = match health.observe(item) {
                None => Vec::new(),
                Some(event) => {
                    let now = on_event(&shared, &store, &event);
                    gate.pass(seen(&event), now)
                }
            };
            // The store is current for each of them now (a relist's at its end).
            let changed: Vec<ServiceRecord> = changed
                .into_iter()
                .filter_map(|key| store.get(&store_key(&key)))
                .map(|service| (*service).clone())
                .collect();
            let (mut book, now) = (shared.book.lock(), Timestamp::now());
            for service in &changed {
                book.input_changed(&ServiceRef::of(service), now);
            }
            future::ready(Some(stream::iter(changed.into_iter().map(Ok))))
        })
        .flatten()
}

fn on_event(
    shared: &Shared,
    store: &Store<ServiceRecord>,
    event: &watcher::Event<ServiceRecord>,
) -> Vec<ServiceRef> {
    match event {
        watcher::Event::Apply(service) | watcher::Event::InitApply(service) => {
            write(&shared.networks).apply(service);
            vec![ServiceRef::of(service)]
        }
        watcher::Event::Delete(service) => {
            let key = ServiceRef::of(service);
            write(&shared.networks).remove(&key);
            shared.forget(&key);
            Vec::new()
        }
        watcher::Event::Init => Vec::new(),
        watcher::Event::InitDone => {
            // Services deleted while the watch was down got no Delete: the store is current
            // now, so rebuild the network routing from it and forget the others.
            let mut networks = ServiceNetworks::default();
            for service in store.state() {
                networks.apply(&service);
            }
            *write(&shared.networks) = networks;
            let gone = shared
                .book
                .lock()
                .known(|key| store.get(&store_key(key)).is_none());
            for key in &gone {
                shared.forget(key);
            }
            Vec::new()
        }
    }
}
