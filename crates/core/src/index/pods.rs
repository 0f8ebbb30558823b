//! The pod index: every pod's [`PodRecord`], by `(namespace, network)`, fed by the pod watch.
//!
//! Each event is parsed once. The index answers which `(namespace, network)` pairs an event
//! concerns (the networks the pod is on now and was on before), so that only the Services on
//! them look again, and it hands a reconcile its Service's pods without scanning the others.
//!
//! A relist (the watch restarting) delivers `Init`, one `InitApply` per pod, then `InitDone`.
//! Pods deleted meanwhile never get a `Delete`: at `InitDone` the pods the relist did not
//! list are removed. What a relist concerns comes out at `InitDone` only ([`RelistGate`]).

use std::{
    borrow::Borrow,
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    hash::BuildHasher,
    sync::Arc,
};

use k8s_openapi::{
    api::{core::v1::Pod, resource::v1::ResourceClaim},
    jiff::Timestamp,
};
use kube_core::ResourceExt;
use nad_model::watch::Event;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::claims::Claims;
use super::pair::{Pair, PairMap};
use crate::relist::RelistGate;
use nad_model::input::network_status::StatusError;
use nad_model::intern::Name;
use nad_model::{
    keys::Keys,
    pod::{Interners, PodRecord},
};

pub type PodKey = (String, String);
/// `(namespace, network)`.
pub type NetworkKey = (String, String);

/// What one pod event means for the Services.
#[derive(Debug, Default, PartialEq)]
pub struct PodChange {
    /// `(namespace, network)` pairs whose Services must look again.
    pub networks: Vec<NetworkKey>,
    /// The pod that changed and when, for an event of one pod; `None` for what a relist
    /// released, whose Services plan everything.
    pub pod: Option<(String, Timestamp)>,
    /// The pod's annotation became unreadable (or unreadable differently): report it once.
    pub unreadable: Option<(PodKey, StatusError)>,
}

#[derive(Debug, Default)]
pub struct PodIndex {
    keys: Keys,
    interners: Interners,
    /// By namespace and name, found by hashing them ([`Self::hash`]): the key is the record's
    /// own, not a copy.
    pods: HashTable<Arc<PodRecord>>,
    hasher: DefaultHashBuilder,
    by_network: PairMap<BTreeSet<ByName>>,
    unreadable: HashMap<PodKey, String>,
    /// During a relist, the records it delivered, by address: a record from before the relist
    /// is alive while it is indexed, so no record the relist made can have its address.
    relisting: Option<HashSet<usize>>,
    gate: RelistGate<NetworkKey>,
    synced: bool,
    /// The claims the pods' DRA attachments are made from, with their relists' own gate.
    claims: Claims,
    claim_gate: RelistGate<NetworkKey>,
    claims_expected: bool,
    claims_synced: bool,
    /// Per network, a number that changes whenever its pods do (see [`Self::generation`]),
    /// and the pods changed last.
    generations: PairMap<Recent>,
    changes: u64,
}

/// Pods changed on a network that are remembered by name ([`PodIndex::changed_since`]).
const RECENT: usize = 16;

/// One network's generation and its latest changes.
#[derive(Debug, Default)]
struct Recent {
    generation: u64,
    /// The pods changed after `complete_after`, each with its change's number, oldest first.
    pods: VecDeque<(u64, Name)>,
    complete_after: u64,
}

/// A record in a network's set, ordered and found by the pod's name: the name is not kept a
/// second time as a key.
#[derive(Debug)]
struct ByName(Arc<PodRecord>);

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name.cmp(&other.0.name)
    }
}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

fn hash(hasher: &DefaultHashBuilder, namespace: &str, name: &str) -> u64 {
    hasher.hash_one((namespace, name))
}

fn is<'a>(namespace: &'a str, name: &'a str) -> impl Fn(&Arc<PodRecord>) -> bool + 'a {
    move |r| *r.namespace == *namespace && *r.name == *name
}

fn address(record: &Arc<PodRecord>) -> usize {
    Arc::as_ptr(record) as usize
}

impl PodIndex {
    pub fn new(keys: Keys) -> Self {
        PodIndex {
            keys,
            ..PodIndex::default()
        }
    }

    /// The label and annotation keys records are made with.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Records of later events keep `keys` (the watch relists to apply them to every pod).
    pub fn set_keys(&mut self, keys: Keys) {
        self.keys = keys;
    }

    /// Whether the first list is complete: the pods', and the claims' when they are watched
    /// ([`Self::expect_claims`]).
    pub fn is_synced(&self) -> bool {
        self.synced && (!self.claims_expected || self.claims_synced)
    }

    /// The claims are watched: the index is not synced until their first list is complete.
    pub fn expect_claims(&mut self) {
        self.claims_expected = true;
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The pods of `namespace` attached to `network` (or listing it in a malformed entry),
    /// sorted by name.
    pub fn on_network(
        &self,
        namespace: &str,
        network: &str,
    ) -> impl Iterator<Item = &Arc<PodRecord>> {
        self.by_network
            .get(&Pair(namespace, network))
            .into_iter()
            .flat_map(|pods| pods.iter().map(|p| &p.0))
    }

    /// A number that changes whenever a pod on the network is added, changed or removed, so
    /// that what is derived from the network's pods can be kept until then.
    pub fn generation(&self, namespace: &str, network: &str) -> u64 {
        self.generations
            .get(&Pair(namespace, network))
            .map_or(0, |recent| recent.generation)
    }

    /// The pods of the network changed after its generation `since`, by name, when they are
    /// few enough to be remembered: what was derived from the network's pods at `since` can
    /// be brought up to date with these alone. `None` when more changed than are remembered.
    pub fn changed_since(&self, namespace: &str, network: &str, since: u64) -> Option<Vec<Name>> {
        let Some(recent) = self.generations.get(&Pair(namespace, network)) else {
            return Some(Vec::new());
        };
        if since < recent.complete_after {
            return None;
        }
        let mut names: Vec<Name> = recent
            .pods
            .iter()
            .filter(|(change, _)| *change > since)
            .map(|(_, name)| name.clone())
            .collect();
        names.sort();
        names.dedup();
        Some(names)
    }

    fn changed(&mut self, network: Pair<'_>, pod: &Name) {
        self.changes += 1;
        let recent = self.generations.entry_ref(&network).or_default();
        recent.generation = self.changes;
        if recent.pods.len() == RECENT
            && let Some((forgotten, _)) = recent.pods.pop_front()
        {
            recent.complete_after = forgotten;
        }
        recent.pods.push_back((self.changes, pod.clone()));
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<PodRecord>> {
        self.pods
            .find(hash(&self.hasher, namespace, name), is(namespace, name))
    }

    /// Every pod (for a node's zone change).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<PodRecord>> {
        self.pods.iter()
    }

    /// Pods whose annotation cannot be read, with the reason.
    pub fn unreadable(&self) -> impl Iterator<Item = (&PodKey, &str)> {
        self.unreadable.iter().map(|(k, v)| (k, v.as_str()))
    }

    /// Takes a pod watch event seen at `now` (the time of a change whose pod carries none).
    pub fn on_event(&mut self, event: Event<&Pod>, now: Timestamp) -> PodChange {
        let mut change = PodChange::default();
        let mut affected = Vec::new();
        match event {
            Event::Apply(pod) | Event::InitApply(pod) => {
                let record = PodRecord::read(pod, &self.keys, &mut self.interners);
                let record = Arc::new(self.with_devices(&record).unwrap_or(record));
                let key = (record.namespace.to_string(), record.name.to_string());
                change.unreadable = self.note_readability(&key, &record);
                if let (Event::InitApply(_), Some(seen)) = (event, self.relisting.as_mut()) {
                    seen.insert(address(&record));
                }
                let before = self.insert(record.clone());
                let at = match (&before, record.changed_at.get()) {
                    (Some(before), Some(at)) if before.changed_at != record.changed_at => at,
                    (None, Some(at)) => at,
                    _ => now,
                };
                affected.extend(networks_of(&key.0, before.as_deref(), Some(&record)));
                change.pod = Some((key.1, at));
            }
            Event::Delete(pod) => {
                let key = (pod.namespace().unwrap_or_default(), pod.name_any());
                self.unreadable.remove(&key);
                let before = self.remove(&key.0, &key.1);
                affected.extend(networks_of(&key.0, before.as_deref(), None));
                change.pod = Some((key.1, now));
            }
            Event::Init => self.relisting = Some(HashSet::new()),
            Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    affected.extend(self.remove_unlisted(&seen));
                }
                self.synced = true;
            }
        }
        if matches!(event, Event::Init | Event::InitApply(_) | Event::InitDone) {
            change.pod = None;
        }
        let mut affected = self.gate.pass(event, affected);
        affected.sort();
        affected.dedup();
        change.networks = affected;
        change
    }

    /// Takes a ResourceClaim watch event seen at `now`: the pods that name a claim whose
    /// record changed get their DRA attachments made again.
    pub fn on_claim_event(&mut self, event: Event<&ResourceClaim>, now: Timestamp) -> PodChange {
        let changed = self.claims.on_event(event);
        if matches!(event, Event::InitDone) {
            self.claims_synced = true;
        }
        let users: BTreeSet<(String, Name)> = changed
            .iter()
            .flat_map(|key| {
                self.claims
                    .users(key)
                    .map(|name| (key.0.clone(), name.clone()))
            })
            .collect();
        let mut affected = Vec::new();
        for (namespace, name) in &users {
            let Some(record) = self.get(namespace, name).cloned() else {
                continue;
            };
            let Some(updated) = self.with_devices(&record) else {
                continue;
            };
            let updated = Arc::new(updated);
            if let Some(seen) = self.relisting.as_mut()
                && seen.remove(&address(&record))
            {
                seen.insert(address(&updated));
            }
            let before = self.insert(updated.clone());
            affected.extend(networks_of(namespace, before.as_deref(), Some(&updated)));
        }
        let mut change = PodChange::default();
        // One pod's change, as a pod event's; several pods' (a shared claim) or a relist's
        // make their Services plan everything.
        if matches!(event, Event::Apply(_) | Event::Delete(_))
            && users.len() == 1
            && let Some((_, name)) = users.first()
        {
            change.pod = Some((name.to_string(), now));
        }
        let mut affected = self.claim_gate.pass(event, affected);
        affected.sort();
        affected.dedup();
        change.networks = affected;
        change
    }

    /// Whether the claims' first list is complete.
    pub fn claims_synced(&self) -> bool {
        self.claims_synced
    }

    /// How many claims are kept.
    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    /// `record` with its DRA attachments made from the claims it names; `None` when they are
    /// the same as its own.
    fn with_devices(&self, record: &PodRecord) -> Option<PodRecord> {
        if record.claims().is_empty() && record.devices().is_empty() {
            return None;
        }
        record.with_devices(&self.claims.of(record))
    }

    /// Removes the pods a relist did not deliver (deleted while the watch was down); returns
    /// the networks they were on.
    fn remove_unlisted(&mut self, seen: &HashSet<usize>) -> Vec<NetworkKey> {
        let gone: Vec<PodKey> = self
            .iter()
            .filter(|record| !seen.contains(&address(record)))
            .map(|record| (record.namespace.to_string(), record.name.to_string()))
            .collect();
        let mut affected = Vec::new();
        for key in gone {
            self.unreadable.remove(&key);
            let before = self.remove(&key.0, &key.1);
            affected.extend(networks_of(&key.0, before.as_deref(), None));
        }
        affected
    }

    fn note_readability(
        &mut self,
        key: &PodKey,
        record: &PodRecord,
    ) -> Option<(PodKey, StatusError)> {
        match &record.attachments {
            Ok(_) => {
                self.unreadable.remove(key);
                None
            }
            Err(e) => {
                let text = e.to_string();
                if self.unreadable.get(key) == Some(&text) {
                    return None;
                }
                self.unreadable.insert(key.clone(), text);
                Some((key.clone(), (**e).clone()))
            }
        }
    }

    fn insert(&mut self, record: Arc<PodRecord>) -> Option<Arc<PodRecord>> {
        let before = self.remove(&record.namespace, &record.name);
        self.claims.add_user(&record);
        for network in record.networks() {
            let network = Pair(&record.namespace, network);
            self.changed(network, &record.name);
            self.by_network
                .entry_ref(&network)
                .or_default()
                .insert(ByName(record.clone()));
        }
        let hasher = &self.hasher;
        self.pods
            .insert_unique(hash(hasher, &record.namespace, &record.name), record, |r| {
                hash(hasher, &r.namespace, &r.name)
            });
        before
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        let (before, _) = self
            .pods
            .find_entry(hash(&self.hasher, namespace, name), is(namespace, name))
            .ok()?
            .remove();
        self.claims.remove_user(&before);
        for network in before.networks() {
            let network = Pair(namespace, network);
            self.changed(network, &before.name);
            if let Some(pods) = self.by_network.get_mut(&network) {
                pods.remove(name);
                if pods.is_empty() {
                    self.by_network.remove(&network);
                }
            }
        }
        Some(before)
    }
}

fn networks_of(
    namespace: &str,
    before: Option<&PodRecord>,
    now: Option<&PodRecord>,
) -> Vec<NetworkKey> {
    before
        .into_iter()
        .chain(now)
        .flat_map(PodRecord::networks)
        .map(|n| (namespace.to_owned(), n.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nad_model::input::network_status;
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

    fn at() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn pair(net: &str) -> NetworkKey {
        ("ns".to_string(), net.to_string())
    }

    const ON_A: &str = r#"[{"name":"ns/a","ips":["10.0.0.1"]}]"#;
    const ON_B: &str = r#"[{"name":"b","ips":["10.0.0.1"]}]"#;

    fn names(index: &PodIndex, net: &str) -> Vec<String> {
        index
            .on_network("ns", net)
            .map(|p| p.name.to_string())
            .collect()
    }

    #[test]
    fn a_pod_event_reaches_the_networks_it_is_and_was_on() {
        let mut index = PodIndex::default();
        let mut nets = |e: Event<&Pod>| index.on_event(e, at()).networks;
        assert_eq!(
            nets(Event::Apply(&pod("p", Some(ON_A)))),
            vec![pair("ns/a")]
        );
        assert_eq!(
            nets(Event::Apply(&pod("p", Some(ON_B)))),
            vec![pair("ns/a"), pair("ns/b")]
        );
        assert_eq!(nets(Event::Apply(&pod("p", None))), vec![pair("ns/b")]);
        assert!(nets(Event::Apply(&pod("p", None))).is_empty());
        nets(Event::Apply(&pod("p", Some(ON_A))));
        assert_eq!(nets(Event::Delete(&pod("p", None))), vec![pair("ns/a")]);
        assert!(index.is_empty());
        assert!(index.by_network.is_empty());
    }

    #[test]
    fn pods_are_found_by_network_sorted_by_name() {
        let mut index = PodIndex::default();
        for name in ["c", "a", "b"] {
            index.on_event(Event::Apply(&pod(name, Some(ON_A))), at());
        }
        index.on_event(Event::Apply(&pod("x", Some(ON_B))), at());
        assert_eq!(names(&index, "ns/a"), ["a", "b", "c"]);
        assert_eq!(names(&index, "ns/b"), ["x"]);
        index.on_event(Event::Apply(&pod("b", Some(ON_B))), at());
        assert_eq!(names(&index, "ns/a"), ["a", "c"]);
        assert_eq!(names(&index, "ns/b"), ["b", "x"]);
        let change = index.on_event(Event::Apply(&pod("a", Some(ON_A))), at());
        assert_eq!(change.pod.map(|(name, _)| name).as_deref(), Some("a"));
    }

    /// An unreadable annotation puts the pod on no network: only the Services of the networks
    /// it was on before must look again. It is reported once, not on every later update.
    #[test]
    fn an_unreadable_annotation_is_reported_once_per_change() {
        let mut index = PodIndex::default();
        index.on_event(Event::Apply(&pod("p", Some(ON_A))), at());
        let change = index.on_event(Event::Apply(&pod("p", Some("{oops"))), at());
        assert_eq!(change.networks, vec![pair("ns/a")]);
        let (key, error) = change.unreadable.expect("reported");
        assert_eq!(key, ("ns".to_owned(), "p".to_owned()));
        assert!(matches!(error, StatusError::Unreadable(_)));
        let again = index.on_event(Event::Apply(&pod("p", Some("{oops"))), at());
        assert!(again.unreadable.is_none() && again.networks.is_empty());
        assert!(
            index
                .on_event(Event::Apply(&pod("p", Some("[1"))), at())
                .unreadable
                .is_some(),
            "a different problem"
        );
        index.on_event(Event::Apply(&pod("p", Some(ON_A))), at());
        assert!(
            index
                .on_event(Event::Apply(&pod("p", Some("{oops"))), at())
                .unreadable
                .is_some(),
            "broken again after a fix"
        );
    }

    #[test]
    fn the_pods_changed_since_a_generation_are_named_while_few_enough_are() {
        let mut index = PodIndex::default();
        let generation = |index: &PodIndex| index.generation("ns", "ns/a");
        let since = |index: &PodIndex, at| {
            index
                .changed_since("ns", "ns/a", at)
                .map(|names| names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(since(&index, 0), Some(vec![]), "a network never seen");
        index.on_event(Event::Apply(&pod("p", Some(ON_A))), at());
        let first = generation(&index);
        index.on_event(Event::Apply(&pod("q", Some(ON_A))), at());
        index.on_event(Event::Apply(&pod("p", Some(ON_A))), at());
        index.on_event(Event::Apply(&pod("x", Some(ON_B))), at());
        assert_eq!(since(&index, first), Some(vec!["p".into(), "q".into()]));
        assert_eq!(since(&index, 0), Some(vec!["p".into(), "q".into()]));
        assert_eq!(since(&index, generation(&index)), Some(vec![]));
        index.on_event(Event::Delete(&pod("q", None)), at());
        assert_eq!(
            since(&index, first),
            Some(vec!["p".into(), "q".into()]),
            "gone"
        );
        let before = generation(&index);
        for i in 0..RECENT {
            index.on_event(Event::Apply(&pod(&format!("n{i:02}"), Some(ON_A))), at());
        }
        assert_eq!(
            since(&index, first),
            None,
            "more changed than are remembered"
        );
        assert_eq!(since(&index, before).map(|n| n.len()), Some(RECENT));
    }

    #[test]
    fn pods_gone_during_a_relist_are_removed_and_their_networks_released_at_its_end() {
        let mut index = PodIndex::default();
        index.on_event(Event::Apply(&pod("stays", Some(ON_A))), at());
        index.on_event(Event::Apply(&pod("gone", Some(ON_B))), at());
        assert!(index.on_event(Event::Init, at()).networks.is_empty());
        let listed = index.on_event(Event::InitApply(&pod("stays", Some(ON_A))), at());
        assert!(
            listed.networks.is_empty() && listed.pod.is_none(),
            "held back"
        );
        let done = index.on_event(Event::InitDone, at());
        assert_eq!(done.networks, vec![pair("ns/a"), pair("ns/b")]);
        assert!(done.pod.is_none(), "a relist plans everything");
        assert_eq!(index.len(), 1);
        assert!(names(&index, "ns/b").is_empty());
        assert!(index.is_synced());
        assert_eq!(
            index
                .on_event(Event::Apply(&pod("stays", Some(ON_B))), at())
                .networks,
            vec![pair("ns/a"), pair("ns/b")],
            "after the relist, events pass at once"
        );
    }
    const UID: &str = "0b0e6e1c-6d5e-4f0e-9d61-7a1c1b7f2a10";

    fn pod_with_claim(name: &str, claim: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": UID},
            "spec": {"containers": [], "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": claim}]},
        }))
        .unwrap()
    }

    fn claim(name: &str, ips: &[&str], reserved_for: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "nic", "driver": "dra.net", "pool": "n", "device": "eth1"}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": reserved_for}],
                "devices": [{"driver": "dra.net", "pool": "n", "device": "eth1",
                             "networkData": {"ips": ips}}],
            },
        }))
        .unwrap()
    }

    const DRA: &str = "deviceclass:dranet";
    const DRA_NIC: &str = "deviceclass:dranet/nic";

    #[test]
    fn a_claim_event_moves_the_pods_that_name_it() {
        let mut index = PodIndex::default();
        let change = index.on_event(Event::Apply(&pod_with_claim("p", "p-nic")), at());
        assert!(change.networks.is_empty(), "no claim yet: on no network");
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        assert_eq!(change.pod.map(|(name, _)| name).as_deref(), Some("p"));
        assert_eq!(names(&index, DRA), ["p"]);
        let generation = index.generation("ns", DRA);
        // The driver writes the same status again: nothing moves.
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        assert!(change.networks.is_empty());
        assert_eq!(index.generation("ns", DRA), generation);
        // A new address.
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.5/24"], UID)),
            at(),
        );
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        let ips = index.get("ns", "p").unwrap().ips(DRA).to_vec();
        assert_eq!(ips, ["192.168.2.5".parse::<std::net::IpAddr>().unwrap()]);
        // The claim goes away: so does the pod's attachment.
        let change = index.on_claim_event(Event::Delete(&claim("p-nic", &[], UID)), at());
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        assert!(names(&index, DRA).is_empty());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_pod_after_its_claim_finds_it_and_a_pod_gone_no_longer_uses_it() {
        let mut index = PodIndex::default();
        index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        let change = index.on_event(Event::Apply(&pod_with_claim("p", "p-nic")), at());
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        index.on_event(Event::Delete(&pod_with_claim("p", "p-nic")), at());
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.6/24"], UID)),
            at(),
        );
        assert!(change.networks.is_empty() && change.pod.is_none());
        assert_eq!(
            index
                .claims
                .users(&("ns".to_owned(), "p-nic".to_owned()))
                .count(),
            0
        );
    }

    #[test]
    fn a_claim_reserved_for_an_earlier_pod_of_the_name_is_not_this_one_s() {
        let mut index = PodIndex::default();
        index.on_event(Event::Apply(&pod_with_claim("p", "p-nic")), at());
        let earlier = "5a4c2f3e-1b0d-4c9a-8e7f-6d5c4b3a2910";
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], earlier)),
            at(),
        );
        assert!(change.networks.is_empty());
        let change = index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
    }

    #[test]
    fn a_claim_relist_releases_its_changes_when_done() {
        let mut index = PodIndex::default();
        index.on_event(Event::Apply(&pod_with_claim("p", "p-nic")), at());
        index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        assert!(index.on_claim_event(Event::Init, at()).networks.is_empty());
        let change = index.on_claim_event(
            Event::InitApply(&claim("p-nic", &["192.168.2.7/24"], UID)),
            at(),
        );
        assert!(change.networks.is_empty(), "held until the relist is done");
        let change = index.on_claim_event(Event::InitDone, at());
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        assert!(change.pod.is_none());
        assert!(index.claims_synced());
        index.expect_claims();
        assert!(!index.is_synced(), "the pods' first list is not complete");
        index.on_event(Event::Init, at());
        index.on_event(Event::InitApply(&pod_with_claim("p", "p-nic")), at());
        index.on_event(Event::InitDone, at());
        assert!(index.is_synced(), "both lists complete");
        // A relist that does not list the claim: deleted meanwhile.
        index.on_claim_event(Event::Init, at());
        let change = index.on_claim_event(Event::InitDone, at());
        assert_eq!(change.networks, vec![pair(DRA), pair(DRA_NIC)]);
        assert!(names(&index, DRA).is_empty());
    }

    #[test]
    fn a_claim_event_during_a_pod_relist_keeps_the_pod_listed() {
        let mut index = PodIndex::default();
        index.on_event(Event::Init, at());
        index.on_event(Event::InitApply(&pod_with_claim("p", "p-nic")), at());
        index.on_claim_event(
            Event::Apply(&claim("p-nic", &["192.168.2.4/24"], UID)),
            at(),
        );
        index.on_event(Event::InitDone, at());
        assert_eq!(index.len(), 1, "the record made again is the relist's");
        assert_eq!(names(&index, DRA), ["p"]);
    }
}
