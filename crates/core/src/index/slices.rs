//! This controller's slices, by the Service they are labelled with: the slice watch keeps them
//! here instead of in a reflector store. A reconcile finds its Service's slices by Service
//! instead of scanning every slice (at a cold start of 10 000 Services over 10 000 slices,
//! 10^8 label comparisons), and each slice is kept as a [`SliceRecord`], about a fifth of the
//! object, unless it holds something a record cannot say again (then whole).

use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_core::ResourceExt;
use nad_model::slice::{SliceInterners, SliceRecord};
use nad_model::watch::Event;

use super::pair::{Pair, PairMap};
use nad_model::labels::SERVICE_NAME_LABEL;

/// A slice as the store keeps it.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // nearly every slice is a record: a box would add a block each
enum Stored {
    Reduced(SliceRecord),
    /// Changed by someone else in a way a record cannot hold: kept as it was seen.
    Whole(Arc<EndpointSlice>),
}

impl Stored {
    fn name(&self) -> &str {
        match self {
            Stored::Reduced(record) => record.name(),
            Stored::Whole(slice) => slice.metadata.name.as_deref().unwrap_or_default(),
        }
    }

    fn get(&self) -> Arc<EndpointSlice> {
        match self {
            Stored::Reduced(record) => Arc::new(record.to_slice()),
            Stored::Whole(slice) => Arc::clone(slice),
        }
    }
}

/// This controller's slices by Service, fed by the slice watch.
#[derive(Debug, Default)]
pub struct SliceStore {
    slices: Slices,
    /// During a relist, the slices it has shown so far; they replace the others at `InitDone`,
    /// as a reflector store does. Until then the store answers from what it had.
    relisting: Option<Slices>,
    interners: SliceInterners,
    synced: bool,
}

#[derive(Debug, Default)]
struct Slices {
    /// The slices labelled with each Service, in name order: a few each, in a vector of their
    /// own size (a B-tree node would hold room for eleven).
    /// By `(namespace, Service)`.
    by_service: PairMap<Vec<Stored>>,
    /// Each slice's Service by `(namespace, slice)`, to move a slice whose label changed.
    service_of: PairMap<String>,
}

impl Slices {
    fn insert(&mut self, slice: &EndpointSlice, interners: &mut SliceInterners) {
        self.remove(slice);
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else {
            return;
        };
        let (namespace, name) = key_of(slice);
        let stored = match SliceRecord::of(slice, interners) {
            Some(record) => Stored::Reduced(record),
            None => Stored::Whole(Arc::new(slice.clone())),
        };
        let key = Pair(namespace, service);
        let slices = self.by_service.entry_ref(&key).or_default();
        let at = slices.partition_point(|s| s.name() < stored.name());
        slices.insert(at, stored);
        slices.shrink_to_fit();
        self.service_of
            .insert(Pair(namespace, name).to_owned(), service.clone());
    }

    fn remove(&mut self, slice: &EndpointSlice) {
        let (namespace, name) = key_of(slice);
        let Some(service) = self.service_of.remove(&Pair(namespace, name)) else {
            return;
        };
        let key = Pair(namespace, &service);
        if let Some(slices) = self.by_service.get_mut(&key) {
            slices.retain(|s| s.name() != name);
            slices.shrink_to_fit();
            if slices.is_empty() {
                self.by_service.remove(&key);
            }
        }
    }
}

/// A slice's namespace and name.
fn key_of(slice: &EndpointSlice) -> (&str, &str) {
    let meta = &slice.metadata;
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

impl SliceStore {
    /// Follows an event of the slice watch.
    pub fn on_event(&mut self, event: Event<&EndpointSlice>) {
        let interners = &mut self.interners;
        match event {
            Event::Init => self.relisting = Some(Slices::default()),
            Event::InitApply(slice) => match self.relisting.as_mut() {
                Some(relisting) => relisting.insert(slice, interners),
                None => self.slices.insert(slice, interners),
            },
            Event::Apply(slice) => self.slices.insert(slice, interners),
            Event::Delete(slice) => self.slices.remove(slice),
            Event::InitDone => {
                if let Some(relisted) = self.relisting.take() {
                    self.slices = relisted;
                }
                self.synced = true;
            }
        }
    }

    /// Whether the store has had its first list.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The slices labelled with the Service `namespace/service`, in name order, as the API
    /// server returned them.
    pub fn of(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        self.slices
            .by_service
            .get(&Pair(namespace, service))
            .into_iter()
            .flatten()
            .map(Stored::get)
            .collect()
    }

    /// How many slices are kept as records and how many whole.
    pub fn counts(&self) -> (usize, usize) {
        let all = self.slices.by_service.values().flatten();
        all.fold((0, 0), |(reduced, whole), s| match s {
            Stored::Reduced(_) => (reduced + 1, whole),
            Stored::Whole(_) => (reduced, whole + 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, service: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "resourceVersion": "1", "labels": {SERVICE_NAME_LABEL: service},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service",
                                              "name": service, "uid": "s"}]},
            "addressType": "IPv4", "ports": [],
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true},
                           "targetRef": {"kind": "Pod", "namespace": "ns", "name": "p"}}],
        }))
        .unwrap()
    }

    fn of(store: &SliceStore, service: &str) -> Vec<String> {
        store
            .of("ns", service)
            .iter()
            .map(|s| s.name_any())
            .collect()
    }

    #[test]
    fn slices_follow_their_service_label() {
        let mut store = SliceStore::default();
        store.on_event(Event::Apply(&slice("web-1", "web")));
        store.on_event(Event::Apply(&slice("web-0", "web")));
        store.on_event(Event::Apply(&slice("api-0", "api")));
        assert_eq!(of(&store, "web"), ["web-0", "web-1"]);
        store.on_event(Event::Apply(&slice("web-1", "api")));
        assert_eq!(of(&store, "web"), ["web-0"]);
        assert_eq!(of(&store, "api"), ["api-0", "web-1"]);
        store.on_event(Event::Delete(&slice("web-0", "web")));
        assert!(of(&store, "web").is_empty());
        assert!(
            !store
                .slices
                .by_service
                .contains_key(&("ns".into(), "web".into()))
        );
    }

    #[test]
    fn a_relist_replaces_the_slices_when_it_is_done() {
        let mut store = SliceStore::default();
        store.on_event(Event::Apply(&slice("web-0", "web")));
        store.on_event(Event::Apply(&slice("gone-0", "gone")));
        store.on_event(Event::Init);
        store.on_event(Event::InitApply(&slice("web-0", "web")));
        store.on_event(Event::InitApply(&slice("web-1", "web")));
        assert_eq!(
            of(&store, "gone"),
            ["gone-0"],
            "answers from what it had until done"
        );
        assert!(!store.is_synced());
        store.on_event(Event::InitDone);
        assert!(store.is_synced());
        assert_eq!(of(&store, "web"), ["web-0", "web-1"]);
        assert!(of(&store, "gone").is_empty());
    }

    #[test]
    fn a_slice_reads_back_as_seen_reduced_or_whole() {
        let mut store = SliceStore::default();
        let ours = slice("web-0", "web");
        let mut edited = slice("web-1", "web");
        edited.endpoints.as_mut().unwrap()[0].hints = Some(Default::default());
        store.on_event(Event::Apply(&ours.clone()));
        store.on_event(Event::Apply(&edited.clone()));
        assert_eq!(store.counts(), (1, 1));
        let kept: Vec<EndpointSlice> = store
            .of("ns", "web")
            .iter()
            .map(|s| (**s).clone())
            .collect();
        assert_eq!(kept, [ours, edited]);
    }
}
