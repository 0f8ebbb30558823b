//! The networks that exist: NetworkAttachmentDefinitions by `<namespace>/<name>`, and
//! DeviceClasses (DRA networks) by their key `deviceclass:<name>`. Whether a Service's network
//! names one, and if not, which existing name is closest (a misspelling's fix). One
//! [`NetworkDefinitions`] per kind, each fed by its own watch.

use std::collections::BTreeSet;

use nad_model::input::device_network::{self, DeviceNetwork};
use nad_model::watch;

/// A Service's network that names no NetworkAttachmentDefinition, or no DeviceClass.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Missing {
    pub network: String,
    /// An existing one a few edits away.
    pub closest: Option<String>,
}

impl Missing {
    /// The DeviceClass a DRA network names; `None` for a NetworkAttachmentDefinition.
    pub fn device_class(&self) -> Option<String> {
        DeviceNetwork::from_key(&self.network).map(|n| n.class)
    }

    /// The closest existing DeviceClass's name, for a DRA network.
    pub fn closest_class(&self) -> Option<String> {
        DeviceNetwork::from_key(self.closest.as_deref()?).map(|n| n.class)
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.device_class() {
            Some(class) => {
                write!(f, "DeviceClass {class} does not exist")?;
                match self.closest_class() {
                    Some(closest) => write!(f, " (did you mean {closest}?)"),
                    None => Ok(()),
                }
            }
            None => {
                write!(
                    f,
                    "network {} names no NetworkAttachmentDefinition",
                    self.network
                )?;
                match &self.closest {
                    Some(closest) => write!(f, " (did you mean {closest}?)"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The definitions the watch has listed. Until the first list (or without the CRD) no
/// network counts as missing.
#[derive(Debug, Default)]
pub struct NetworkDefinitions {
    names: BTreeSet<String>,
    /// A relist in progress.
    pending: Option<BTreeSet<String>>,
    listed: bool,
}

impl NetworkDefinitions {
    /// Applies one watch event; returns the networks that appeared or went away.
    pub fn on_event<K: kube_core::Resource>(&mut self, event: watch::Event<&K>) -> Vec<String> {
        match event {
            watch::Event::Init => {
                self.pending = Some(BTreeSet::new());
                Vec::new()
            }
            watch::Event::InitApply(object) => {
                if let Some(pending) = &mut self.pending {
                    pending.extend(key(object));
                }
                Vec::new()
            }
            watch::Event::InitDone => {
                let listed = self.pending.take().unwrap_or_default();
                let changed = self.names.symmetric_difference(&listed).cloned().collect();
                self.names = listed;
                self.listed = true;
                changed
            }
            watch::Event::Apply(object) => key(object)
                .filter(|k| self.names.insert(k.clone()))
                .into_iter()
                .collect(),
            watch::Event::Delete(object) => key(object)
                .filter(|k| self.names.remove(k))
                .into_iter()
                .collect(),
        }
    }

    /// `Some` when `network` (`<namespace>/<name>`, or a DRA network's key: its DeviceClass)
    /// is known not to exist.
    pub fn missing(&self, network: &str) -> Option<Missing> {
        let looked_up = match DeviceNetwork::from_key(network) {
            Some(device) => DeviceNetwork {
                request: None,
                ..device
            }
            .key(),
            None => network.to_owned(),
        };
        if !self.listed || self.names.contains(&looked_up) {
            return None;
        }
        let closest = if device_network::is_device_network(network) {
            closest_class(&looked_up, &self.names)
        } else {
            closest(network, &self.names)
        };
        Some(Missing {
            network: network.to_owned(),
            closest,
        })
    }
}

/// The existing name that `network` most likely meant: in its namespace, one a few edits
/// away (`macvlann` → `macvlan`; fewer edits for short names); else the same name in another
/// namespace.
fn closest(network: &str, names: &BTreeSet<String>) -> Option<String> {
    let (namespace, name) = network.split_once('/')?;
    let limit = (name.len() / 4).clamp(1, 3);
    let split = names.iter().filter_map(|n| Some((n, n.split_once('/')?)));
    split
        .clone()
        .filter(|(_, (ns, _))| *ns == namespace)
        .map(|(full, (_, other))| (strsim::levenshtein(name, other), full))
        .filter(|(distance, _)| *distance <= limit)
        .min()
        .map(|(_, full)| full.clone())
        .or_else(|| {
            split
                .filter(|(_, (_, other))| *other == name)
                .map(|(full, _)| full.clone())
                .next()
        })
}

/// The existing DeviceClass a few edits away from `class` (a key `deviceclass:<name>`).
fn closest_class(class: &str, names: &BTreeSet<String>) -> Option<String> {
    let limit = (class.len().saturating_sub(device_network::KEY_PREFIX.len()) / 4).clamp(1, 3);
    names
        .iter()
        .filter(|n| device_network::is_device_network(n))
        .map(|n| (strsim::levenshtein(class, n), n))
        .filter(|(distance, _)| *distance <= limit)
        .min()
        .map(|(_, n)| n.clone())
}

/// A NetworkAttachmentDefinition's `<namespace>/<name>`; a cluster-scoped object's (a
/// DeviceClass) `deviceclass:<name>`.
fn key<K: kube_core::Resource>(object: &K) -> Option<String> {
    let meta = object.meta();
    let name = meta.name.as_deref()?;
    Some(match meta.namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => DeviceNetwork {
            class: name.to_owned(),
            request: None,
        }
        .key(),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn nad(namespace: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn listed(names: &[(&str, &str)]) -> NetworkDefinitions {
        let mut definitions = NetworkDefinitions::default();
        definitions.on_event::<ConfigMap>(watch::Event::Init);
        for (ns, name) in names {
            definitions.on_event(watch::Event::InitApply(&nad(ns, name)));
        }
        definitions.on_event::<ConfigMap>(watch::Event::InitDone);
        definitions
    }

    #[test]
    fn nothing_is_missing_before_the_first_list() {
        let mut definitions = NetworkDefinitions::default();
        assert_eq!(definitions.missing("shop/macvlan"), None);
        definitions.on_event::<ConfigMap>(watch::Event::Init);
        assert_eq!(definitions.missing("shop/macvlan"), None);
        definitions.on_event::<ConfigMap>(watch::Event::InitDone);
        assert!(definitions.missing("shop/macvlan").is_some());
    }

    #[test]
    fn a_misspelt_network_is_told_the_closest_existing_name() {
        let definitions = listed(&[("shop", "macvlan"), ("shop", "sriov"), ("infra", "macvlan")]);
        assert_eq!(definitions.missing("shop/macvlan"), None);
        let missing = definitions.missing("shop/macvlann").unwrap();
        assert_eq!(
            missing.to_string(),
            "network shop/macvlann names no NetworkAttachmentDefinition (did you mean shop/macvlan?)"
        );
        // Another namespace's definition is not this one's, but it may be the fix.
        assert_eq!(
            definitions
                .missing("infra/sriov")
                .unwrap()
                .closest
                .as_deref(),
            Some("shop/sriov")
        );
        assert_eq!(
            definitions.missing("shop/ipvlan-storage").unwrap().closest,
            None
        );
    }

    #[test]
    fn events_report_the_networks_that_appear_and_go() {
        let mut definitions = listed(&[("shop", "macvlan")]);
        assert_eq!(
            definitions.on_event(watch::Event::Apply(&nad("shop", "sriov"))),
            ["shop/sriov"]
        );
        assert!(
            definitions
                .on_event(watch::Event::Apply(&nad("shop", "sriov")))
                .is_empty()
        );
        assert_eq!(
            definitions.on_event(watch::Event::Delete(&nad("shop", "macvlan"))),
            ["shop/macvlan"]
        );
        assert!(definitions.missing("shop/macvlan").is_some());
        // A relist reports what changed meanwhile.
        definitions.on_event::<ConfigMap>(watch::Event::Init);
        definitions.on_event(watch::Event::InitApply(&nad("shop", "macvlan")));
        assert_eq!(
            definitions.on_event::<ConfigMap>(watch::Event::InitDone),
            ["shop/macvlan", "shop/sriov"]
        );
    }
    #[test]
    fn a_device_class_that_does_not_exist_is_told_the_closest_one() {
        let class = |name: &str| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        let mut classes = NetworkDefinitions::default();
        classes.on_event::<ConfigMap>(watch::Event::Init);
        classes.on_event(watch::Event::InitApply(&class("dranet")));
        assert_eq!(
            classes.on_event::<ConfigMap>(watch::Event::InitDone),
            ["deviceclass:dranet"]
        );
        assert_eq!(classes.missing("deviceclass:dranet"), None);
        assert_eq!(
            classes.missing("deviceclass:dranet/nic"),
            None,
            "a request of an existing class"
        );
        let missing = classes.missing("deviceclass:drannet/nic").unwrap();
        assert_eq!(
            missing.to_string(),
            "DeviceClass drannet does not exist (did you mean dranet?)"
        );
        assert_eq!(missing.device_class().as_deref(), Some("drannet"));
        assert_eq!(missing.closest_class().as_deref(), Some("dranet"));
        assert_eq!(classes.missing("deviceclass:sriov").unwrap().closest, None);
    }
}
