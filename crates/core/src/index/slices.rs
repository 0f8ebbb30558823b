//! Which of this controller's slices belong to each Service, by name: the slices themselves
//! stay in the slice watch's store. A reconcile finds its Service's slices here instead of
//! scanning every slice, which at a cold start of 10 000 Services over 10 000 slices would be
//! 10^8 label comparisons.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{ResourceExt, runtime::watcher::Event};

use crate::slices::SERVICE_NAME_LABEL;

/// `(namespace, name)`.
type Key = (String, String);

/// Slice names by the Service they are labelled with, fed by the slice watch after its store.
#[derive(Debug, Default)]
pub struct SliceNames {
    names: Names,
    /// During a relist, the names it has shown so far; they replace the others at `InitDone`,
    /// when the store drops the slices the relist did not show. Until then both answer from
    /// what they had.
    relisting: Option<Names>,
}

#[derive(Debug, Default)]
struct Names {
    by_service: HashMap<Key, BTreeSet<String>>,
    /// Each slice's Service, to move a slice whose label changed.
    service_of: HashMap<Key, String>,
}

impl Names {
    fn insert(&mut self, slice: &EndpointSlice) {
        self.remove(slice);
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else {
            return;
        };
        let namespace = slice.namespace().unwrap_or_default();
        self.by_service
            .entry((namespace.clone(), service.clone()))
            .or_default()
            .insert(slice.name_any());
        self.service_of
            .insert((namespace, slice.name_any()), service.clone());
    }

    fn remove(&mut self, slice: &EndpointSlice) {
        let namespace = slice.namespace().unwrap_or_default();
        let Some(service) = self
            .service_of
            .remove(&(namespace.clone(), slice.name_any()))
        else {
            return;
        };
        let key = (namespace, service);
        if let Some(names) = self.by_service.get_mut(&key) {
            names.remove(&slice.name_any());
            if names.is_empty() {
                self.by_service.remove(&key);
            }
        }
    }
}

impl SliceNames {
    /// Follows an event of the slice watch (after its store applied it).
    pub fn on_event(&mut self, event: &Event<EndpointSlice>) {
        match event {
            Event::Init => self.relisting = Some(Names::default()),
            Event::InitApply(slice) => match self.relisting.as_mut() {
                Some(relisting) => relisting.insert(slice),
                None => self.names.insert(slice),
            },
            Event::Apply(slice) => self.names.insert(slice),
            Event::Delete(slice) => self.names.remove(slice),
            Event::InitDone => {
                if let Some(relisted) = self.relisting.take() {
                    self.names = relisted;
                }
            }
        }
    }

    /// The names of the slices labelled with the Service `namespace/service`, in order.
    pub fn of(&self, namespace: &str, service: &str) -> impl Iterator<Item = &str> {
        self.names
            .by_service
            .get(&(namespace.to_owned(), service.to_owned()))
            .into_iter()
            .flatten()
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, service: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap()
    }

    fn of(names: &SliceNames, service: &str) -> Vec<String> {
        names.of("ns", service).map(str::to_owned).collect()
    }

    #[test]
    fn slices_follow_their_service_label() {
        let mut names = SliceNames::default();
        names.on_event(&Event::Apply(slice("web-1", "web")));
        names.on_event(&Event::Apply(slice("web-0", "web")));
        names.on_event(&Event::Apply(slice("api-0", "api")));
        assert_eq!(of(&names, "web"), ["web-0", "web-1"]);
        names.on_event(&Event::Apply(slice("web-1", "api")));
        assert_eq!(of(&names, "web"), ["web-0"]);
        assert_eq!(of(&names, "api"), ["api-0", "web-1"]);
        names.on_event(&Event::Delete(slice("web-0", "web")));
        assert!(of(&names, "web").is_empty());
        assert!(
            !names
                .names
                .by_service
                .contains_key(&("ns".into(), "web".into()))
        );
    }

    #[test]
    fn a_relist_replaces_the_names_when_it_is_done() {
        let mut names = SliceNames::default();
        names.on_event(&Event::Apply(slice("web-0", "web")));
        names.on_event(&Event::Apply(slice("gone-0", "gone")));
        names.on_event(&Event::Init);
        names.on_event(&Event::InitApply(slice("web-0", "web")));
        names.on_event(&Event::InitApply(slice("web-1", "web")));
        assert_eq!(
            of(&names, "gone"),
            ["gone-0"],
            "answers from what it had until done"
        );
        names.on_event(&Event::InitDone);
        assert_eq!(of(&names, "web"), ["web-0", "web-1"]);
        assert!(of(&names, "gone").is_empty());
    }
}
