//! Which managed Services are on each `(namespace, network)`: the routing of pod events.

use std::collections::{BTreeSet, HashMap};

use kube_core::ResourceExt;
use nad_model::input::service_record::ServiceRecord;
use nad_model::service_ref::ServiceRef;

use super::pods::NetworkKey;
use nad_model::input::device_network::DeviceNetwork;

#[derive(Debug, Default)]
pub struct ServiceNetworks {
    services: HashMap<NetworkKey, BTreeSet<String>>,
    networks: HashMap<(String, String), NetworkKey>,
}

impl ServiceNetworks {
    /// A Service was added or changed: it is on its network while it is managed and valid.
    pub fn apply(&mut self, service: &ServiceRecord) {
        let key = (service.namespace().unwrap_or_default(), service.name_any());
        self.remove_key(&key);
        if let Some(network) = service.network() {
            let network_key = (key.0.clone(), network.to_owned());
            self.services
                .entry(network_key.clone())
                .or_default()
                .insert(key.1.clone());
            self.networks.insert(key, network_key);
        }
    }

    pub fn remove(&mut self, service: &ServiceRef) {
        let key = (service.namespace.clone(), service.name.clone());
        self.remove_key(&key);
    }

    fn remove_key(&mut self, key: &(String, String)) {
        if let Some(network_key) = self.networks.remove(key)
            && let Some(names) = self.services.get_mut(&network_key)
        {
            names.remove(&key.1);
            if names.is_empty() {
                self.services.remove(&network_key);
            }
        }
    }

    /// The Services on `network` (`<namespace>/<name>`), in any namespace.
    pub fn on_network(&self, network: &str) -> Vec<ServiceRef> {
        let keys: Vec<NetworkKey> = self
            .services
            .keys()
            .filter(|(_, n)| n == network)
            .cloned()
            .collect();
        self.on(&keys)
    }

    /// The Services on a DRA network of `class` (`deviceclass:<class>`, narrowed to a request
    /// or not), in any namespace.
    pub fn on_device_class(&self, class: &str) -> Vec<ServiceRef> {
        let keys: Vec<NetworkKey> = self
            .services
            .keys()
            .filter(|(_, n)| DeviceNetwork::from_key(n).is_some_and(|d| d.class == class))
            .cloned()
            .collect();
        self.on(&keys)
    }

    /// The Services on any of the `(namespace, network)` pairs.
    pub fn on(&self, networks: &[NetworkKey]) -> Vec<ServiceRef> {
        let mut out: Vec<ServiceRef> = networks
            .iter()
            .filter_map(|key| Some((key, self.services.get(key)?)))
            .flat_map(|((namespace, _), names)| {
                names
                    .iter()
                    .map(move |name| ServiceRef::new(namespace, name))
            })
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(name: &str, network: Option<&str>) -> ServiceRecord {
        let annotations = network
            .map(|n| json!({nad_model::input::target::NETWORK_ANNOTATION: n}))
            .unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "spec": {"clusterIP": "None"},
        }))
        .unwrap()
    }

    fn names(refs: Vec<ServiceRef>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn services_follow_their_annotation() {
        let mut index = ServiceNetworks::default();
        let a = ("ns".to_owned(), "ns/a".to_owned());
        let b = ("ns".to_owned(), "ns/b".to_owned());
        index.apply(&service("web", Some("a")));
        index.apply(&service("api", Some("a")));
        index.apply(&service("plain", None));
        assert_eq!(names(index.on(std::slice::from_ref(&a))), ["api", "web"]);
        index.apply(&service("web", Some("b")));
        assert_eq!(names(index.on(std::slice::from_ref(&a))), ["api"]);
        assert_eq!(names(index.on(&[a.clone(), b.clone()])), ["api", "web"]);
        index.apply(&service("web", None));
        assert!(index.on(std::slice::from_ref(&b)).is_empty());
        index.remove(&ServiceRef::new("ns", "api"));
        assert!(index.on(&[a]).is_empty());
        assert!(index.services.is_empty() && index.networks.is_empty());
    }
    #[test]
    fn services_on_a_device_class_are_found_by_it() {
        let mut index = ServiceNetworks::default();
        let on_class = |name: &str, annotations: serde_json::Value| -> ServiceRecord {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
                "spec": {"clusterIP": "None"},
            }))
            .unwrap()
        };
        index.apply(&on_class("all", json!({"isim.dev/device-class": "dranet"})));
        index.apply(&on_class(
            "nic",
            json!({"isim.dev/device-class": "dranet", "isim.dev/device-request": "nic"}),
        ));
        index.apply(&on_class(
            "other",
            json!({"isim.dev/device-class": "dranet2"}),
        ));
        index.apply(&service("multus", Some("dranet")));
        assert_eq!(names(index.on_device_class("dranet")), ["all", "nic"]);
        assert_eq!(
            names(index.on(&[("ns".to_owned(), "deviceclass:dranet/nic".to_owned())])),
            ["nic"]
        );
    }
}
