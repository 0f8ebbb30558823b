//! The ResourceClaims pods use, kept as the records the pod index makes their DRA attachments
//! from ([`ClaimRecord`]: the pods a claim is reserved for, its allocated devices and their
//! status; never the whole object), and which pods name each claim.
//!
//! A claim is found by the pods that name it (`spec.resourceClaims`, the generated names in
//! `status.resourceClaimStatuses`), not by the UIDs it is reserved for: a pod names its claims
//! before they are allocated and reserved, and a claim names a pod UID that may be an earlier
//! pod of the same name. Which pods a claim serves is decided per pod
//! ([`ClaimRecord::serves`]).

use std::{
    collections::{BTreeSet, HashSet},
    sync::Arc,
};

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube_core::ResourceExt;
use nad_model::{input::device_network::ClaimRecord, intern::Name, pod::PodRecord, watch::Event};

use super::pair::{Pair, PairMap};

/// `(namespace, claim name)`.
pub type ClaimKey = (String, String);

#[derive(Debug, Default)]
pub struct Claims {
    /// Found by borrowed names ([`Pair`]): a pod's every event looks its claims up.
    records: PairMap<Arc<ClaimRecord>>,
    /// The pods that name each claim, by name (only pods that name a claim are here).
    users: PairMap<BTreeSet<Name>>,
    /// During a relist, the claims it listed.
    relisting: Option<HashSet<ClaimKey>>,
}

fn key_of(record: &ClaimRecord) -> ClaimKey {
    (record.namespace.to_string(), record.name.to_string())
}

impl Claims {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<ClaimRecord>> {
        self.records.get(&Pair(namespace, name))
    }

    /// The records of the claims `pod` names that exist.
    pub fn of(&self, pod: &PodRecord) -> Vec<&ClaimRecord> {
        pod.claims()
            .iter()
            .filter_map(|name| self.get(&pod.namespace, name))
            .map(|record| &**record)
            .collect()
    }

    /// The pods that name the claim `key`.
    pub fn users(&self, key: &ClaimKey) -> impl Iterator<Item = &Name> {
        self.users.get(key).into_iter().flatten()
    }

    /// Notes the claims `pod` names (an indexed pod).
    pub fn add_user(&mut self, pod: &PodRecord) {
        for claim in pod.claims() {
            self.users
                .entry_ref(&Pair(&pod.namespace, claim))
                .or_default()
                .insert(pod.name.clone());
        }
    }

    /// Forgets the claims `pod` named (a pod no longer indexed as it was).
    pub fn remove_user(&mut self, pod: &PodRecord) {
        for claim in pod.claims() {
            let key = Pair(&pod.namespace, claim);
            if let Some(users) = self.users.get_mut(&key) {
                users.remove(&pod.name);
                if users.is_empty() {
                    self.users.remove(&key);
                }
            }
        }
    }

    /// Applies one claim watch event; returns the claims whose records changed (appeared,
    /// changed or went away), whose users must be made again.
    pub fn on_event(&mut self, event: Event<&ResourceClaim>) -> Vec<ClaimKey> {
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::Apply(claim) | Event::InitApply(claim) => {
                let record = ClaimRecord::read(claim);
                let key = key_of(&record);
                if let (Event::InitApply(_), Some(seen)) = (event, self.relisting.as_mut()) {
                    seen.insert(key.clone());
                }
                match self.records.get(&key) {
                    Some(before) if **before == record => Vec::new(),
                    _ => {
                        self.records.insert(key.clone(), Arc::new(record));
                        vec![key]
                    }
                }
            }
            Event::Delete(claim) => {
                let key = (claim.namespace().unwrap_or_default(), claim.name_any());
                self.records.remove(&key).map(|_| key).into_iter().collect()
            }
            Event::InitDone => {
                let Some(seen) = self.relisting.take() else {
                    return Vec::new();
                };
                let gone: Vec<ClaimKey> = self
                    .records
                    .keys()
                    .filter(|key| !seen.contains(*key))
                    .cloned()
                    .collect();
                for key in &gone {
                    self.records.remove(key);
                }
                gone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, device: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "nic", "driver": "dra.net", "pool": "n", "device": device}]}}},
        }))
        .unwrap()
    }

    fn key(name: &str) -> ClaimKey {
        ("ns".to_owned(), name.to_owned())
    }

    #[test]
    fn only_a_change_of_what_is_kept_counts() {
        let mut claims = Claims::default();
        assert_eq!(
            claims.on_event(Event::Apply(&claim("a", "eth1"))),
            [key("a")]
        );
        assert!(
            claims
                .on_event(Event::Apply(&claim("a", "eth1")))
                .is_empty()
        );
        let mut relabelled = claim("a", "eth1");
        relabelled.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        assert!(
            claims.on_event(Event::Apply(&relabelled)).is_empty(),
            "labels are not kept"
        );
        assert_eq!(
            claims.on_event(Event::Apply(&claim("a", "eth2"))),
            [key("a")]
        );
        assert_eq!(
            claims.on_event(Event::Delete(&claim("a", "eth2"))),
            [key("a")]
        );
        assert!(
            claims
                .on_event(Event::Delete(&claim("a", "eth2")))
                .is_empty()
        );
        assert!(claims.is_empty());
    }

    #[test]
    fn a_relist_removes_the_claims_it_did_not_list() {
        let mut claims = Claims::default();
        claims.on_event(Event::Apply(&claim("kept", "eth1")));
        claims.on_event(Event::Apply(&claim("gone", "eth2")));
        assert!(claims.on_event(Event::Init).is_empty());
        assert!(
            claims
                .on_event(Event::InitApply(&claim("kept", "eth1")))
                .is_empty()
        );
        assert_eq!(claims.on_event(Event::InitDone), [key("gone")]);
        assert_eq!(claims.len(), 1);
        assert!(claims.get("ns", "kept").is_some());
    }

    #[test]
    fn users_are_the_pods_that_name_a_claim() {
        let pod = |name: &str, claim: &str| {
            PodRecord::from_pod(
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns"},
                    "spec": {"containers": [], "resourceClaims": [{"name": "c", "resourceClaimName": claim}]},
                }))
                .unwrap(),
                &Default::default(),
            )
        };
        let mut claims = Claims::default();
        let (a, b) = (pod("a", "shared"), pod("b", "shared"));
        claims.add_user(&a);
        claims.add_user(&b);
        let users: Vec<&str> = claims.users(&key("shared")).map(|n| &**n).collect();
        assert_eq!(users, ["a", "b"]);
        claims.on_event(Event::Apply(&claim("shared", "eth1")));
        assert_eq!(claims.of(&a).len(), 1);
        claims.remove_user(&a);
        claims.remove_user(&b);
        assert_eq!(claims.users(&key("shared")).count(), 0);
        assert!(claims.users.is_empty());
    }
}
