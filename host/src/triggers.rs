//! Which Services a pod or node event concerns. Pure state machines over watch events; the
//! controller turns their answers into reconcile requests.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{ResourceExt, runtime::watcher::Event};

use crate::{network_status, observe::ZONE_LABEL};

type PodKey = (String, String);

/// Remembers each pod's networks, so that an event also reaches the Services of networks the
/// pod was attached to before (an annotation changed, the pod was deleted).
#[derive(Debug, Default)]
pub struct PodNetworks {
    networks: HashMap<PodKey, Vec<String>>,
    relisting: Option<HashSet<PodKey>>,
}

impl PodNetworks {
    /// `(namespace, network)` pairs whose Services must be reconciled.
    pub fn on_event(&mut self, event: &Event<Pod>) -> Vec<(String, String)> {
        let mut affected = Vec::new();
        match event {
            Event::Apply(pod) | Event::InitApply(pod) => {
                let key = key(pod);
                let now = networks(pod);
                if let (Event::InitApply(_), Some(seen)) = (event, self.relisting.as_mut()) {
                    seen.insert(key.clone());
                }
                let before = self
                    .networks
                    .insert(key.clone(), now.clone())
                    .unwrap_or_default();
                affected.extend(union(&key.0, before, now));
            }
            Event::Delete(pod) => {
                let key = key(pod);
                let before = self.networks.remove(&key).unwrap_or_default();
                affected.extend(union(&key.0, before, networks(pod)));
            }
            Event::Init => self.relisting = Some(HashSet::new()),
            Event::InitDone => {
                // Pods deleted while the watch was down never got a Delete event.
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<PodKey> = self
                        .networks
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        let before = self.networks.remove(&key).unwrap_or_default();
                        affected.extend(union(&key.0, before, Vec::new()));
                    }
                }
            }
        }
        affected.sort();
        affected.dedup();
        affected
    }
}

fn key(pod: &Pod) -> PodKey {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

fn networks(pod: &Pod) -> Vec<String> {
    let namespace = pod.namespace().unwrap_or_default();
    network_status::networks(
        pod.annotations()
            .get(network_status::ANNOTATION)
            .map(String::as_str),
        &namespace,
    )
}

fn union(namespace: &str, a: Vec<String>, b: Vec<String>) -> Vec<(String, String)> {
    a.into_iter()
        .chain(b)
        .map(|n| (namespace.to_owned(), n))
        .collect()
}

/// Remembers each node's zone: only a new node, a deleted one or a changed zone matters.
#[derive(Debug, Default)]
pub struct NodeZones {
    zones: HashMap<String, Option<String>>,
}

impl NodeZones {
    /// Names of nodes whose pods' endpoints may have changed.
    pub fn on_event(&mut self, event: &Event<Node>) -> Vec<String> {
        match event {
            Event::Apply(node) | Event::InitApply(node) => {
                let zone = node.labels().get(ZONE_LABEL).cloned();
                match self.zones.insert(node.name_any(), zone.clone()) {
                    Some(before) if before == zone => Vec::new(),
                    _ => vec![node.name_any()],
                }
            }
            Event::Delete(node) => {
                self.zones.remove(&node.name_any());
                vec![node.name_any()]
            }
            Event::Init | Event::InitDone => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, status: Option<&str>) -> Pod {
        let annotations = status
            .map(|s| json!({network_status::ANNOTATION: s}))
            .unwrap_or(json!({}));
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "annotations": annotations}}),
        )
        .unwrap()
    }

    fn pair(net: &str) -> (String, String) {
        ("ns".to_string(), net.to_string())
    }

    const ON_A: &str = r#"[{"name":"ns/a","ips":["10.0.0.1"]}]"#;
    const ON_B: &str = r#"[{"name":"b","ips":["10.0.0.1"]}]"#;

    #[test]
    fn a_pod_event_reaches_the_networks_it_is_and_was_on() {
        let mut index = PodNetworks::default();
        assert_eq!(
            index.on_event(&Event::Apply(pod("p", Some(ON_A)))),
            vec![pair("ns/a")]
        );
        assert_eq!(
            index.on_event(&Event::Apply(pod("p", Some(ON_B)))),
            vec![pair("ns/a"), pair("ns/b")]
        );
        assert_eq!(
            index.on_event(&Event::Apply(pod("p", None))),
            vec![pair("ns/b")]
        );
        assert!(index.on_event(&Event::Apply(pod("p", None))).is_empty());
        index.on_event(&Event::Apply(pod("p", Some(ON_A))));
        assert_eq!(
            index.on_event(&Event::Delete(pod("p", None))),
            vec![pair("ns/a")]
        );
        assert!(index.networks.is_empty());
    }

    #[test]
    fn an_unreadable_annotation_reaches_every_network_of_the_namespace() {
        let mut index = PodNetworks::default();
        assert_eq!(
            index.on_event(&Event::Apply(pod("p", Some("{oops")))),
            vec![pair(network_status::ANY_NETWORK)]
        );
    }

    #[test]
    fn pods_gone_during_a_relist_are_forgotten_and_reported() {
        let mut index = PodNetworks::default();
        index.on_event(&Event::Apply(pod("stays", Some(ON_A))));
        index.on_event(&Event::Apply(pod("gone", Some(ON_B))));
        index.on_event(&Event::Init);
        index.on_event(&Event::InitApply(pod("stays", Some(ON_A))));
        assert_eq!(index.on_event(&Event::InitDone), vec![pair("ns/b")]);
        assert_eq!(index.networks.len(), 1);
    }

    fn node(name: &str, zone: Option<&str>) -> Node {
        let labels = zone.map(|z| json!({ZONE_LABEL: z})).unwrap_or(json!({}));
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn only_new_nodes_zone_changes_and_deletions_matter() {
        let mut zones = NodeZones::default();
        assert_eq!(
            zones.on_event(&Event::InitApply(node("n", Some("z1")))),
            vec!["n"]
        );
        assert!(
            zones
                .on_event(&Event::Apply(node("n", Some("z1"))))
                .is_empty(),
            "a heartbeat"
        );
        assert_eq!(
            zones.on_event(&Event::Apply(node("n", Some("z2")))),
            vec!["n"]
        );
        assert_eq!(zones.on_event(&Event::Apply(node("n", None))), vec!["n"]);
        assert_eq!(zones.on_event(&Event::Delete(node("n", None))), vec!["n"]);
    }
}
