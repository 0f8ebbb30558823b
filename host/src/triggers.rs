//! Which Services a pod or node event concerns. Pure state machines over watch events; the
//! controller turns their answers into reconcile requests.
//!
//! A relist (a watch restarted, for example after `410 Expired`) delivers `Init`, one
//! `InitApply` per object, then `InitDone`; the reflector store keeps the old objects until
//! `InitDone`. A reconcile triggered by an `InitApply` could therefore run against the old
//! store and find nothing to do, with no later event to correct it. So what a relist triggers
//! is held back by a [`RelistGate`] and released at `InitDone`, when the store is current.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{ResourceExt, runtime::watcher::Event};

use crate::{network_status, observe::ZONE_LABEL};

type PodKey = (String, String);

/// Holds back what the events of a relist trigger until the relist is complete.
#[derive(Debug)]
pub struct RelistGate<T> {
    held: Option<Vec<T>>,
}

impl<T> Default for RelistGate<T> {
    fn default() -> Self {
        Self { held: None }
    }
}

impl<T> RelistGate<T> {
    /// What `event` triggered, passed on now or held until the relist it belongs to is done.
    pub fn pass<K>(&mut self, event: &Event<K>, triggered: Vec<T>) -> Vec<T> {
        match event {
            Event::Init => {
                self.held = Some(triggered);
                Vec::new()
            }
            Event::InitApply(_) => match self.held.as_mut() {
                Some(held) => {
                    held.extend(triggered);
                    Vec::new()
                }
                None => triggered,
            },
            Event::InitDone => {
                let mut released = self.held.take().unwrap_or_default();
                released.extend(triggered);
                released
            }
            Event::Apply(_) | Event::Delete(_) => triggered,
        }
    }
}

/// What one pod event means for the Services.
#[derive(Debug, Default, PartialEq)]
pub struct PodChange {
    /// `(namespace, network)` pairs whose Services must be reconciled.
    pub networks: Vec<(String, String)>,
    /// The pod's annotation became unreadable (or unreadable differently): report it, once.
    pub unreadable: Option<(PodKey, network_status::StatusError)>,
}

/// Remembers each pod's networks, so that an event also reaches the Services of networks the
/// pod was attached to before (an annotation changed, the pod was deleted), and which pods
/// have an annotation that cannot be read, so that each is reported once per change.
#[derive(Debug, Default)]
pub struct PodNetworks {
    networks: HashMap<PodKey, Vec<String>>,
    unreadable: HashMap<PodKey, String>,
    relisting: Option<HashSet<PodKey>>,
    gate: RelistGate<(String, String)>,
}

impl PodNetworks {
    pub fn on_event(&mut self, event: &Event<Pod>) -> PodChange {
        let mut change = PodChange::default();
        let mut affected = Vec::new();
        match event {
            Event::Apply(pod) | Event::InitApply(pod) => {
                let key = key(pod);
                let now = match networks(pod) {
                    Ok(now) => {
                        self.unreadable.remove(&key);
                        now
                    }
                    Err(e) => {
                        let text = e.to_string();
                        if self.unreadable.get(&key) != Some(&text) {
                            self.unreadable.insert(key.clone(), text);
                            change.unreadable = Some((key.clone(), e));
                        }
                        Vec::new()
                    }
                };
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
                self.unreadable.remove(&key);
                let before = self.networks.remove(&key).unwrap_or_default();
                affected.extend(union(&key.0, before, networks(pod).unwrap_or_default()));
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
                        self.unreadable.remove(&key);
                        let before = self.networks.remove(&key).unwrap_or_default();
                        affected.extend(union(&key.0, before, Vec::new()));
                    }
                }
            }
        }
        let mut affected = self.gate.pass(event, affected);
        affected.sort();
        affected.dedup();
        change.networks = affected;
        change
    }
}

fn key(pod: &Pod) -> PodKey {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

fn networks(pod: &Pod) -> Result<Vec<String>, network_status::StatusError> {
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
    gate: RelistGate<String>,
}

impl NodeZones {
    /// Names of nodes whose pods' endpoints may have changed.
    pub fn on_event(&mut self, event: &Event<Node>) -> Vec<String> {
        let changed = match event {
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
        };
        self.gate.pass(event, changed)
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
        let mut nets = |e| index.on_event(&e).networks;
        assert_eq!(nets(Event::Apply(pod("p", Some(ON_A)))), vec![pair("ns/a")]);
        assert_eq!(
            nets(Event::Apply(pod("p", Some(ON_B)))),
            vec![pair("ns/a"), pair("ns/b")]
        );
        assert_eq!(nets(Event::Apply(pod("p", None))), vec![pair("ns/b")]);
        assert!(nets(Event::Apply(pod("p", None))).is_empty());
        nets(Event::Apply(pod("p", Some(ON_A))));
        assert_eq!(nets(Event::Delete(pod("p", None))), vec![pair("ns/a")]);
        assert!(index.networks.is_empty());
    }

    /// An unreadable annotation puts the pod on no network: only the Services of the networks
    /// it was on before must look again. It is reported once, not on every later update.
    #[test]
    fn an_unreadable_annotation_is_reported_once_per_change() {
        let mut index = PodNetworks::default();
        index.on_event(&Event::Apply(pod("p", Some(ON_A))));
        let change = index.on_event(&Event::Apply(pod("p", Some("{oops"))));
        assert_eq!(change.networks, vec![pair("ns/a")]);
        let (key, error) = change.unreadable.expect("reported");
        assert_eq!(key, ("ns".to_owned(), "p".to_owned()));
        assert!(matches!(error, network_status::StatusError::Unreadable(_)));
        let again = index.on_event(&Event::Apply(pod("p", Some("{oops"))));
        assert_eq!(again, PodChange::default(), "the same problem again");
        assert!(
            index
                .on_event(&Event::Apply(pod("p", Some("[1"))))
                .unreadable
                .is_some(),
            "a different problem"
        );
        index.on_event(&Event::Apply(pod("p", Some(ON_A))));
        assert!(
            index
                .on_event(&Event::Apply(pod("p", Some("{oops"))))
                .unreadable
                .is_some(),
            "broken again after a fix"
        );
    }

    #[test]
    fn pods_gone_during_a_relist_are_forgotten_and_reported() {
        let mut index = PodNetworks::default();
        index.on_event(&Event::Apply(pod("stays", Some(ON_A))));
        index.on_event(&Event::Apply(pod("gone", Some(ON_B))));
        index.on_event(&Event::Init);
        index.on_event(&Event::InitApply(pod("stays", Some(ON_A))));
        assert_eq!(
            index.on_event(&Event::InitDone).networks,
            vec![pair("ns/a"), pair("ns/b")]
        );
        assert_eq!(index.networks.len(), 1);
    }

    /// During a relist the store still holds the old objects: what the relist triggers comes
    /// out only at its end.
    #[test]
    fn a_relist_triggers_only_once_it_is_done() {
        let mut index = PodNetworks::default();
        assert!(index.on_event(&Event::Init).networks.is_empty());
        assert!(
            index
                .on_event(&Event::InitApply(pod("a", Some(ON_A))))
                .networks
                .is_empty()
        );
        assert!(
            index
                .on_event(&Event::InitApply(pod("b", Some(ON_B))))
                .networks
                .is_empty()
        );
        assert_eq!(
            index.on_event(&Event::InitDone).networks,
            vec![pair("ns/a"), pair("ns/b")]
        );
        assert_eq!(
            index.on_event(&Event::Apply(pod("a", Some(ON_B)))).networks,
            vec![pair("ns/a"), pair("ns/b")],
            "after the relist, events pass at once"
        );
    }

    #[test]
    fn the_gate_passes_live_events_and_holds_relists() {
        let mut gate = RelistGate::default();
        let ev = |e: Event<Node>| e;
        assert_eq!(
            gate.pass(&ev(Event::Apply(node("n", None))), vec![1]),
            vec![1]
        );
        assert!(gate.pass(&ev(Event::Init), vec![]).is_empty());
        assert!(
            gate.pass(&ev(Event::InitApply(node("n", None))), vec![2])
                .is_empty()
        );
        assert!(
            gate.pass(&ev(Event::InitApply(node("m", None))), vec![3])
                .is_empty()
        );
        assert_eq!(gate.pass(&ev(Event::InitDone), vec![4]), vec![2, 3, 4]);
        assert_eq!(
            gate.pass(&ev(Event::Delete(node("n", None))), vec![5]),
            vec![5]
        );
    }

    fn node(name: &str, zone: Option<&str>) -> Node {
        let labels = zone.map(|z| json!({ZONE_LABEL: z})).unwrap_or(json!({}));
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn only_new_nodes_zone_changes_and_deletions_matter() {
        let mut zones = NodeZones::default();
        assert_eq!(
            zones.on_event(&Event::Apply(node("n", Some("z1")))),
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
