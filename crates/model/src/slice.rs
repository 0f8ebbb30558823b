//! One of this controller's EndpointSlices as the slice cache keeps it: what diffing and repair
//! read, in about a fifth of the bytes of the `k8s-openapi` object.
//!
//! A slice is read back whole ([`SliceRecord::to_slice`]) when a reconcile needs it, so the
//! planner compares against exactly what the API server returned. A slice that holds anything
//! the record cannot say again (an edit by someone else: another label set on an endpoint,
//! hints, a finalizer) is not reduced at all: [`SliceRecord::of`] refuses it and the cache
//! keeps it whole, so repair still sees every difference.

use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
};
use kube_core::ObjectMeta;

use crate::{
    intern::{Interner, Name},
    keys::Entries,
    pod::Stamp,
    uid::Uid,
};

/// The values many slices share (namespaces, node and zone names, a Service's label set),
/// kept once.
#[derive(Debug, Default)]
pub struct SliceInterners {
    names: Interner<str>,
    labels: Interner<[(Name, Name)]>,
}

/// An EndpointSlice reduced to what diffing and repair read.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceRecord {
    name: Box<str>,
    namespace: Name,
    uid: Uid,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    created: Stamp,
    ipv6: bool,
    /// Shared by the slices of a Service.
    labels: std::sync::Arc<[(Name, Name)]>,
    /// The annotations (this controller writes one: the last change's trigger time).
    annotations: Entries,
    owner: Owner,
    ports: Box<[EndpointPort]>,
    endpoints: Box<[EndpointRecord]>,
}

/// The slice's one owner reference, to its Service (`apiVersion: v1`, `kind: Service`).
#[derive(Debug, Clone, PartialEq)]
struct Owner {
    name: Name,
    uid: Uid,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

/// An endpoint of a pod: one address, its conditions and the pod it points at.
#[derive(Debug, Clone, PartialEq)]
struct EndpointRecord {
    address: IpAddr,
    conditions: Conditions,
    hostname: Option<Box<str>>,
    node_name: Option<Name>,
    zone: Option<Name>,
    pod: Box<str>,
    pod_uid: Option<Uid>,
}

/// `ready`, `serving` and `terminating`, each unset, false or true, in two bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Conditions(u8);

impl Conditions {
    fn of(c: Option<&EndpointConditions>) -> Option<Self> {
        let c = c?;
        let two = |v: Option<bool>| match v {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        Some(Conditions(
            two(c.ready) | two(c.serving) << 2 | two(c.terminating) << 4,
        ))
    }

    fn get(self) -> EndpointConditions {
        let bool_at = |shift: u8| match (self.0 >> shift) & 3 {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        };
        EndpointConditions {
            ready: bool_at(0),
            serving: bool_at(2),
            terminating: bool_at(4),
        }
    }
}

impl SliceRecord {
    /// `slice` reduced, or `None` when the record could not give it back exactly (then it is
    /// kept whole). Checked by reading the record back: whatever field a reduction drops shows
    /// as a difference, also one a later API version adds.
    pub fn of(slice: &EndpointSlice, interners: &mut SliceInterners) -> Option<Self> {
        let record = Self::reduce(slice, interners)?;
        (record.to_slice() == *slice).then_some(record)
    }

    fn reduce(slice: &EndpointSlice, interners: &mut SliceInterners) -> Option<Self> {
        let meta = &slice.metadata;
        let ipv6 = match slice.address_type.as_str() {
            "IPv4" => false,
            "IPv6" => true,
            _ => return None,
        };
        let namespace = interners.names.get(meta.namespace.as_deref()?);
        let [owner] = meta.owner_references.as_deref()? else {
            return None;
        };
        let labels: Vec<(Name, Name)> = meta
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| {
                (
                    interners.names.get(k.as_str()),
                    interners.names.get(v.as_str()),
                )
            })
            .collect();
        let annotations: Entries = meta
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (interners.names.get(k.as_str()), Name::from(v.as_str())))
            .collect();
        let endpoints = slice
            .endpoints
            .iter()
            .flatten()
            .map(|e| EndpointRecord::reduce(e, interners))
            .collect::<Option<Box<[_]>>>()?;
        Some(SliceRecord {
            name: meta.name.as_deref()?.into(),
            namespace,
            uid: Uid::parse(meta.uid.as_deref()?),
            resource_version: meta.resource_version.as_deref().map(Box::from),
            generation: meta.generation,
            created: Stamp::of(meta.creation_timestamp.as_ref().map(|t| t.0)),
            ipv6,
            labels: interners.labels.get(labels),
            annotations,
            owner: Owner {
                name: interners.names.get(owner.name.as_str()),
                uid: Uid::parse(&owner.uid),
                controller: owner.controller,
                block_owner_deletion: owner.block_owner_deletion,
            },
            ports: slice.ports.clone().unwrap_or_default().into(),
            endpoints,
        })
    }

    /// The slice as the API server returned it.
    pub fn to_slice(&self) -> EndpointSlice {
        let map = |pairs: &[(Name, Name)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(self.name.to_string()),
                namespace: Some(self.namespace.to_string()),
                uid: Some(self.uid.to_string()),
                resource_version: self.resource_version.as_deref().map(str::to_owned),
                generation: self.generation,
                creation_timestamp: self.created.get().map(Time),
                labels: (!self.labels.is_empty()).then(|| map(&self.labels)),
                annotations: (!self.annotations.is_empty()).then(|| map(&self.annotations)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Service".to_owned(),
                    name: self.owner.name.to_string(),
                    uid: self.owner.uid.to_string(),
                    controller: self.owner.controller,
                    block_owner_deletion: self.owner.block_owner_deletion,
                }]),
                ..ObjectMeta::default()
            },
            address_type: if self.ipv6 { "IPv6" } else { "IPv4" }.to_owned(),
            endpoints: Some(
                self.endpoints
                    .iter()
                    .map(|e| e.to_endpoint(&self.namespace))
                    .collect(),
            ),
            ports: Some(self.ports.to_vec()),
        }
    }
}

impl EndpointRecord {
    fn reduce(e: &Endpoint, interners: &mut SliceInterners) -> Option<Self> {
        let [address] = e.addresses.as_slice() else {
            return None;
        };
        let pod = e.target_ref.as_ref()?;
        Some(EndpointRecord {
            address: address.parse().ok()?,
            conditions: Conditions::of(e.conditions.as_ref())?,
            hostname: e.hostname.as_deref().map(Box::from),
            node_name: e.node_name.as_deref().map(|n| interners.names.get(n)),
            zone: e.zone.as_deref().map(|z| interners.names.get(z)),
            pod: pod.name.as_deref()?.into(),
            pod_uid: pod.uid.as_deref().map(Uid::parse),
        })
    }

    fn to_endpoint(&self, namespace: &str) -> Endpoint {
        Endpoint {
            addresses: vec![self.address.to_string()],
            conditions: Some(self.conditions.get()),
            hostname: self.hostname.as_deref().map(str::to_owned),
            node_name: self.node_name.as_deref().map(str::to_owned),
            zone: self.zone.as_deref().map(str::to_owned),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".to_owned()),
                namespace: Some(namespace.to_owned()),
                name: Some(self.pod.to_string()),
                uid: self.pod_uid.as_ref().map(Uid::to_string),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }
    }
}

impl SliceRecord {
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(endpoint: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-ipv4-0", "namespace": "team-a",
                "uid": "6f1c2a3b-4d5e-4f60-8a7b-000000000001", "resourceVersion": "4711",
                "generation": 3, "creationTimestamp": "2026-12-01T10:00:00Z",
                "labels": {"kubernetes.io/service-name": "web",
                           "endpointslice.kubernetes.io/managed-by": "nad-service-controller.isim.dev",
                           "service.kubernetes.io/headless": ""},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T10:00:01Z"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                     "uid": "6f1c2a3b-4d5e-4f60-8a7b-0000000000ff", "controller": true}],
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [endpoint, {
                "addresses": ["10.128.0.2"],
                "conditions": {"ready": false, "serving": true, "terminating": true},
                "targetRef": {"kind": "Pod", "namespace": "team-a", "name": "web-1"},
            }],
        }))
        .unwrap()
    }

    fn endpoint() -> serde_json::Value {
        json!({
            "addresses": ["10.128.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "hostname": "web-0", "nodeName": "node-a", "zone": "zone-1",
            "targetRef": {"kind": "Pod", "namespace": "team-a", "name": "web-0",
                          "uid": "6f1c2a3b-4d5e-4f60-8a7b-000000000010"},
        })
    }

    #[test]
    fn a_slice_this_controller_wrote_reads_back_exactly() {
        let mut interners = SliceInterners::default();
        let slice = slice(endpoint());
        let record = SliceRecord::of(&slice, &mut interners).expect("reduced");
        assert_eq!(record.to_slice(), slice);
        assert_eq!(record.name(), "web-ipv4-0");
    }

    #[test]
    fn a_slice_with_anything_the_record_cannot_hold_is_refused() {
        let mut interners = SliceInterners::default();
        let mut changed = Vec::new();
        let mut with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut e = endpoint();
            f(&mut e);
            changed.push(slice(e));
        };
        with(&|e| e["hints"] = json!({"forZones": [{"name": "zone-1"}]}));
        with(&|e| e["addresses"] = json!(["10.128.0.1", "10.128.0.9"]));
        with(&|e| e["addresses"] = json!(["010.128.0.1"]));
        with(&|e| e["targetRef"]["namespace"] = json!("team-b"));
        with(&|e| e["targetRef"]["kind"] = json!("Node"));
        with(&|e| e["targetRef"]["resourceVersion"] = json!("7"));
        with(&|e| e["deprecatedTopology"] = json!({"k": "v"}));
        with(&|e| e["conditions"] = serde_json::Value::Null);
        let mut finalized = slice(endpoint());
        finalized.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        changed.push(finalized);
        let mut two_owners = slice(endpoint());
        let owner = two_owners.metadata.owner_references.clone().unwrap();
        two_owners
            .metadata
            .owner_references
            .as_mut()
            .unwrap()
            .extend(owner);
        changed.push(two_owners);
        let mut fqdn = slice(endpoint());
        fqdn.address_type = "FQDN".into();
        changed.push(fqdn);
        for slice in changed {
            assert_eq!(SliceRecord::of(&slice, &mut interners), None, "{slice:?}");
        }
    }

    #[test]
    fn every_condition_reads_back() {
        for ready in [None, Some(false), Some(true)] {
            for serving in [None, Some(false), Some(true)] {
                for terminating in [None, Some(false), Some(true)] {
                    let c = EndpointConditions {
                        ready,
                        serving,
                        terminating,
                    };
                    assert_eq!(Conditions::of(Some(&c)).unwrap().get(), c);
                }
            }
        }
    }
}
