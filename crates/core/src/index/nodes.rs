//! Nodes reduced to a name → zone map: all a slice needs of a node.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nad_model::watch::Event;

use crate::relist::RelistGate;

/// The node label that gives an endpoint its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Every node's zone, fed by the node watch.
#[derive(Debug, Default)]
pub struct NodeZones {
    zones: HashMap<String, Option<String>>,
    relisting: Option<HashSet<String>>,
    gate: RelistGate<String>,
    synced: bool,
    generation: u64,
}

impl NodeZones {
    /// `None` when the node is not known; `Some(None)` when it has no zone label.
    pub fn zone(&self, node: &str) -> Option<Option<&str>> {
        self.zones.get(node).map(Option::as_deref)
    }

    /// A number that changes whenever a node's zone does (or a node comes or goes).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Names of nodes whose pods' endpoints may have changed: a new node, a deleted one, or a
    /// changed zone (a heartbeat changes nothing).
    pub fn on_event(&mut self, event: Event<&Node>) -> Vec<String> {
        let changed = match event {
            Event::Apply(node) | Event::InitApply(node) => {
                let name = node.name_any();
                if let (Event::InitApply(_), Some(seen)) = (event, self.relisting.as_mut()) {
                    seen.insert(name.clone());
                }
                let zone = node.labels().get(ZONE_LABEL).cloned();
                match self.zones.insert(name.clone(), zone.clone()) {
                    Some(before) if before == zone => Vec::new(),
                    _ => vec![name],
                }
            }
            Event::Delete(node) => {
                self.zones.remove(&node.name_any());
                vec![node.name_any()]
            }
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::InitDone => {
                self.synced = true;
                let seen = self.relisting.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .zones
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .cloned()
                    .collect();
                for node in &gone {
                    self.zones.remove(node);
                }
                gone
            }
        };
        if !changed.is_empty() {
            self.generation += 1;
        }
        self.gate.pass(event, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>) -> Node {
        let labels = zone.map(|z| json!({ZONE_LABEL: z})).unwrap_or(json!({}));
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn only_new_nodes_zone_changes_and_deletions_matter() {
        let mut zones = NodeZones::default();
        assert_eq!(
            zones.on_event(Event::Apply(&node("n", Some("z1")))),
            vec!["n"]
        );
        assert_eq!(zones.zone("n"), Some(Some("z1")));
        assert!(
            zones
                .on_event(Event::Apply(&node("n", Some("z1"))))
                .is_empty(),
            "a heartbeat"
        );
        assert_eq!(
            zones.on_event(Event::Apply(&node("n", Some("z2")))),
            vec!["n"]
        );
        assert_eq!(zones.on_event(Event::Apply(&node("n", None))), vec!["n"]);
        assert_eq!(zones.zone("n"), Some(None));
        assert_eq!(zones.on_event(Event::Delete(&node("n", None))), vec!["n"]);
        assert_eq!(zones.zone("n"), None);
    }

    #[test]
    fn nodes_gone_during_a_relist_are_removed_at_its_end() {
        let mut zones = NodeZones::default();
        zones.on_event(Event::Apply(&node("stays", None)));
        zones.on_event(Event::Apply(&node("gone", None)));
        zones.on_event(Event::Init);
        assert!(
            zones
                .on_event(Event::InitApply(&node("stays", Some("z"))))
                .is_empty()
        );
        let mut released = zones.on_event(Event::InitDone);
        released.sort();
        assert_eq!(released, vec!["gone", "stays"]);
        assert_eq!(zones.zone("gone"), None);
        assert!(zones.is_synced());
    }
}
