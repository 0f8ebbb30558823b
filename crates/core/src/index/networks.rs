//! The NetworkAttachmentDefinitions that exist, by `<namespace>/<name>`: whether a Service's
//! network names one, and if not, which existing name is closest (a misspelling's fix).

use std::collections::BTreeSet;

use nad_model::watch;

/// A Service's network that names no NetworkAttachmentDefinition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Missing {
    pub network: String,
    /// An existing one a few edits away.
    pub closest: Option<String>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    /// `Some` when `network` (`<namespace>/<name>`) is known not to exist.
    pub fn missing(&self, network: &str) -> Option<Missing> {
        if !self.listed || self.names.contains(network) {
            return None;
        }
        let closest = closest(network, &self.names);
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

fn key<K: kube_core::Resource>(object: &K) -> Option<String> {
    let meta = object.meta();
    Some(format!(
        "{}/{}",
        meta.namespace.as_deref()?,
        meta.name.as_deref()?
    ))
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
}
