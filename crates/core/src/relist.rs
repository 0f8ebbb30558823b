//! Relists: what a watch's restart triggers waits until the relist is complete.
//!
//! A relist (a watch restarted, for example after `410 Expired`) delivers `Init`, one
//! `InitApply` per object, then `InitDone`; a reflector store (and an index) still holds the
//! objects deleted meanwhile until `InitDone`. A reconcile triggered by an `InitApply` could
//! therefore run against a half-updated cache and find nothing to do, with no later event to correct it. So what a relist triggers
//! is held back by a [`RelistGate`] and released at `InitDone`, when the store is current.

use std::{collections::HashSet, hash::Hash};

use nad_model::watch::Event;

/// Holds back what the events of a relist trigger until the relist is complete. What is held
/// is a set: a relist of 150 000 pods on 100 networks holds 100 entries, not 150 000.
#[derive(Debug)]
pub struct RelistGate<T> {
    held: Option<HashSet<T>>,
}

impl<T> Default for RelistGate<T> {
    fn default() -> Self {
        Self { held: None }
    }
}

impl<T: Eq + Hash> RelistGate<T> {
    /// What `event` triggered, passed on now or held until the relist it belongs to is done
    /// (then each once, in no particular order).
    pub fn pass<K>(&mut self, event: Event<K>, triggered: Vec<T>) -> Vec<T> {
        match event {
            Event::Init => {
                self.held = Some(triggered.into_iter().collect());
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
                released.into_iter().collect()
            }
            Event::Apply(_) | Event::Delete(_) => triggered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn the_gate_passes_live_events_and_holds_relists() {
        let mut gate = RelistGate::default();
        fn ev(e: Event<&Node>) -> Event<&Node> {
            e
        }
        assert_eq!(gate.pass(ev(Event::Apply(&node("n"))), vec![1]), vec![1]);
        assert!(gate.pass(ev(Event::Init), vec![]).is_empty());
        assert!(
            gate.pass(ev(Event::InitApply(&node("n"))), vec![2])
                .is_empty()
        );
        assert!(
            gate.pass(ev(Event::InitApply(&node("m"))), vec![3, 2])
                .is_empty()
        );
        let mut released = gate.pass(ev(Event::InitDone), vec![4]);
        released.sort_unstable();
        assert_eq!(released, vec![2, 3, 4], "each held trigger once");
        assert_eq!(gate.pass(ev(Event::Delete(&node("n"))), vec![5]), vec![5]);
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    }
}
