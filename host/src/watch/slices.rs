//! The watch of this controller's slices: their store by Service ([`nad_core::index::SliceStore`]),
//! and the Services a slice event concerns. An event that shows exactly what this controller
//! wrote adds nothing to check; anything else (a hand edit, a deletion by someone else) makes
//! the owner place its decisions again (no input changed, so they stand).

use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};

use super::{
    health::backoff,
    list::streamed,
    shared::{Shared, seen, write},
    strip::strip_meta,
};
use nad_core::book::SharedBook;
use nad_core::relist::RelistGate;
use nad_model::labels::{MANAGED_BY, MANAGED_BY_LABEL};
use nad_model::service_ref::ServiceRef;

pub fn watch(api: Api<EndpointSlice>, shared: Shared) -> impl Stream<Item = ServiceRef> + Send {
    let mut health = shared.health("endpointslices");
    let mut gate = RelistGate::default();
    let ours = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    streamed(api, ours, "endpointslices")
        .backoff(backoff())
        .modify(|s: &mut EndpointSlice| strip_meta(&mut s.metadata))
        .filter_map(move |item| {
            let owners = health.observe(item).map_or_else(Vec::new, |event| {
                write(&shared.slices).on_event(seen(&event));
                let owners = owners(&shared.book, &event);
                gate.pass(seen(&event), owners)
            });
            future::ready(Some(stream::iter(owners)))
        })
        .flatten()
}

/// The Services a slice event concerns (its owners) that must reconcile: not for the echo of
/// this controller's own write, unless a reconcile waits for it.
fn owners(book: &SharedBook, event: &watcher::Event<EndpointSlice>) -> Vec<ServiceRef> {
    let (slice, deleted) = match event {
        watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) => (slice, false),
        watcher::Event::Delete(slice) => (slice, true),
        watcher::Event::Init | watcher::Event::InitDone => return Vec::new(),
    };
    let listed = matches!(event, watcher::Event::InitApply(_));
    let namespace = slice.namespace().unwrap_or_default();
    let (mut book, now) = (book.lock(), Timestamp::now());
    slice
        .owner_references()
        .iter()
        .filter(|o| o.kind == "Service")
        .map(|owner| ServiceRef::new(&namespace, &owner.name))
        .filter(|service| book.slice_event(service, slice, deleted, listed, now))
        .collect()
}
