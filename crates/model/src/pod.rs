//! A pod reduced to what planning and plugins read, parsed once per watch event.
//!
//! The controller keeps no Pod objects: each event becomes a [`PodRecord`], whose Multus
//! `network-status` annotation is already parsed into one attachment per network, and whose
//! labels, annotations and conditions are only those the loaded plugins declared ([`Keys`]),
//! besides the network readiness conditions of the network prober.

use std::{collections::BTreeMap, net::IpAddr, sync::Arc};

use k8s_openapi::{
    api::core::v1::{Pod, PodSpec, PodStatus},
    jiff::Timestamp,
};
use kube_core::ResourceExt;

use crate::condition::KeptCondition;
use crate::input::{
    device_network::{self, ClaimRecord, DeviceAttachment},
    network_ready::{self, Status},
    network_status::{self, Attachment, StatusError},
};
use crate::intern::{Interner, Name};
use crate::keys::{Entries, KeySet, Keys};
use crate::uid::Uid;

/// A pod's attachment to each network (`<namespace>/<name>`) it is on, or why its annotation
/// cannot be read at all (then it is on no network).
pub type Attachments =
    Result<Box<[(Name, Result<Attachment, Box<StatusError>>)]>, Box<StatusError>>;

/// `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    fn parse(phase: Option<&str>) -> Self {
        match phase {
            Some("Pending") => Phase::Pending,
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => Phase::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }
}

/// A named container port, for a Service's named `targetPort`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedPort {
    pub name: Name,
    pub port: i32,
    pub protocol: Name,
}

/// A Kubernetes timestamp in 8 bytes: whole seconds, as the API writes `metav1.Time`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Stamp(i64);

impl Stamp {
    pub const NONE: Stamp = Stamp(i64::MIN);

    pub fn of(at: Option<Timestamp>) -> Self {
        at.map_or(Stamp::NONE, |t| Stamp(t.as_second()))
    }

    pub fn get(self) -> Option<Timestamp> {
        if self == Stamp::NONE {
            return None;
        }
        Timestamp::from_second(self.0).ok()
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

/// What the pods of one template have in common, kept once for all of them: the kept labels
/// and annotations, and the named ports.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct Shared {
    /// Only the keys the loaded plugins read.
    pub labels: Entries,
    /// Only the keys the loaded plugins read.
    pub annotations: Entries,
    /// Only the named ports.
    pub ports: Box<[NamedPort]>,
}

/// What few pods have: `spec.hostname` and `spec.subdomain`, the kept conditions (network
/// readiness, which only Services with a network probe have written, and the types plugins
/// read), and DRA: the ResourceClaims the pod uses and its attachments to the networks of
/// their devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    pub hostname: Option<Box<str>>,
    pub subdomain: Option<Name>,
    /// Sorted by type.
    pub conditions: Box<[KeptCondition]>,
    /// The names of the pod's ResourceClaims ([`device_network::claim_names`]), sorted.
    pub claims: Box<[Name]>,
    /// The pod's attachments to DRA networks, sorted by key; made from the claims' records by
    /// [`PodRecord::with_devices`].
    pub devices: Box<[DeviceAttachment]>,
}

/// What the controller knows of one pod. Entries for every pod in the cluster, so kept small:
/// shared values are [`Name`]s from the index's [`Interners`], what a template's pods have in
/// common is [`Shared`] whole, and what few pods have is boxed ([`Extras`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    pub name: Name,
    pub namespace: Name,
    pub uid: Uid,
    pub created: Stamp,
    pub phase: Phase,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The pod has a `deletionTimestamp`.
    pub terminating: bool,
    pub node_name: Option<Name>,
    pub shared: Arc<Shared>,
    pub extras: Option<Box<Extras>>,
    pub attachments: Attachments,
    /// When the pod last changed in a way that moves its endpoints, as Kubernetes' own
    /// EndpointSlice controller reads it: the `Ready` condition's last transition, else the
    /// creation. Becomes the slices' `endpoints.kubernetes.io/last-change-trigger-time`.
    pub changed_at: Stamp,
}

/// The shared copies a pod index makes its records with.
#[derive(Debug, Default)]
pub struct Interners {
    names: Interner<str>,
    shared: Interner<Shared>,
}

impl Interners {
    pub fn name(&mut self, value: &str) -> Name {
        self.names.get(value)
    }
}

impl PodRecord {
    /// The record of `pod`, made with shared copies of its own (for a record not kept in an
    /// index; the index makes its records with [`PodRecord::read`]).
    pub fn from_pod(pod: &Pod, keys: &Keys) -> Self {
        Self::read(pod, keys, &mut Interners::default())
    }

    /// The record of `pod`, with `interners`' shared copies.
    pub fn read(pod: &Pod, keys: &Keys, interners: &mut Interners) -> Self {
        let namespace = interners.name(pod.metadata.namespace.as_deref().unwrap_or_default());
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let ready_condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let created = meta.creation_timestamp.as_ref().map(|t| t.0);
        let changed_at = ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
            .or(created);
        let annotation = pod
            .annotations()
            .get(network_status::ANNOTATION)
            .map(String::as_str);
        PodRecord {
            name: pod.name_any().into(),
            uid: Uid::parse(meta.uid.as_deref().unwrap_or_default()),
            created: Stamp::of(created),
            phase: Phase::parse(status.and_then(|s| s.phase.as_deref())),
            ready: ready_condition.is_some_and(|c| c.status == "True"),
            terminating: meta.deletion_timestamp.is_some(),
            node_name: spec
                .and_then(|s| s.node_name.as_deref())
                .map(|n| interners.name(n)),
            shared: shared(pod, keys, interners),
            extras: extras(pod, keys, interners),
            attachments: network_status::attachments(annotation, &namespace)
                .map(|all| {
                    all.into_iter()
                        .map(|(network, attachment)| {
                            (interners.name(&network), attachment.map_err(Box::new))
                        })
                        .collect()
                })
                .map_err(Box::new),
            changed_at: Stamp::of(changed_at),
            namespace,
        }
    }

    /// The networks the pod is attached to: those of its Multus annotation (none when it
    /// cannot be read), then those of its DRA devices.
    pub fn networks(&self) -> impl Iterator<Item = &str> {
        self.attachments
            .as_ref()
            .into_iter()
            .flatten()
            .map(|(network, _)| &**network)
            .chain(self.devices().iter().map(|d| &*d.key))
    }

    /// The pod's attachment to `network`: `None` when it is not attached.
    pub fn attachment(&self, network: &str) -> Option<Result<&Attachment, &StatusError>> {
        if device_network::is_device_network(network) {
            return self
                .device_attachment(network)
                .map(|d| d.attachment.as_ref());
        }
        self.attachments
            .as_ref()
            .ok()?
            .iter()
            .find(|(n, _)| **n == *network)
            .map(|(_, a)| a.as_ref().map_err(|e| &**e))
    }

    /// The pod's attachment to the DRA network `network` (its key), with its devices.
    pub fn device_attachment(&self, network: &str) -> Option<&DeviceAttachment> {
        self.devices().iter().find(|d| &*d.key == network)
    }

    /// The pod's attachments to DRA networks, sorted by key.
    pub fn devices(&self) -> &[DeviceAttachment] {
        self.extras.as_ref().map_or(&[], |e| &e.devices)
    }

    /// The names of the pod's ResourceClaims, sorted.
    pub fn claims(&self) -> &[Name] {
        self.extras.as_ref().map_or(&[], |e| &e.claims)
    }

    /// This record with its DRA attachments made again from `claims`, the records of the
    /// claims it names that exist (a claim it does not name, or that does not serve it, is
    /// left out). `None` when they are the same as before.
    pub fn with_devices(&self, claims: &[&ClaimRecord]) -> Option<Self> {
        let named: Vec<&ClaimRecord> = claims
            .iter()
            .copied()
            .filter(|c| {
                c.namespace.as_ref() == &*self.namespace
                    && self.claims().iter().any(|n| **n == *c.name)
            })
            .collect();
        let devices = device_network::attachments(&self.uid, &named);
        if *devices == *self.devices() {
            return None;
        }
        let mut record = self.clone();
        let mut extras = record.extras.take().map_or_else(Extras::default, |e| *e);
        extras.devices = devices.into();
        record.extras = (extras != Extras::default()).then(|| Box::new(extras));
        Some(record)
    }

    /// The pod's usable addresses on `network`.
    pub fn ips(&self, network: &str) -> &[IpAddr] {
        match self.attachment(network) {
            Some(Ok(attachment)) => &attachment.ips,
            _ => &[],
        }
    }

    /// The condition of type `condition_type`, when the index keeps it and the pod has it.
    pub fn condition(&self, condition_type: &str) -> Option<&KeptCondition> {
        let conditions = self.conditions();
        conditions
            .binary_search_by(|c| (*c.type_).cmp(condition_type))
            .ok()
            .map(|i| &conditions[i])
    }

    /// The pod's readiness on `network`: as the network prober wrote it, or on a DRA network
    /// as its devices' drivers report it ([`DeviceAttachment::readiness`]).
    pub fn network_readiness(&self, network: &str) -> Option<&KeptCondition> {
        if device_network::is_device_network(network) {
            return self.device_attachment(network)?.readiness();
        }
        self.condition(&network_ready::condition_type(network))
    }

    pub fn hostname(&self) -> Option<&str> {
        self.extras.as_ref()?.hostname.as_deref()
    }

    pub fn subdomain(&self) -> Option<&str> {
        self.extras.as_ref()?.subdomain.as_deref()
    }

    /// Only the keys the loaded plugins read, sorted by key.
    pub fn labels(&self) -> &[(Name, Name)] {
        &self.shared.labels
    }

    /// Only the keys the loaded plugins read, sorted by key.
    pub fn annotations(&self) -> &[(Name, Name)] {
        &self.shared.annotations
    }

    /// Network readiness conditions, and the types the loaded plugins read; sorted by type.
    pub fn conditions(&self) -> &[KeptCondition] {
        self.extras.as_ref().map_or(&[], |e| &e.conditions)
    }

    /// The container port named `name` with `protocol`.
    pub fn named_port(&self, name: &str, protocol: &str) -> Option<i32> {
        self.shared
            .ports
            .iter()
            .find(|p| &*p.name == name && &*p.protocol == protocol)
            .map(|p| p.port)
    }
}

fn extras(pod: &Pod, keys: &Keys, interners: &mut Interners) -> Option<Box<Extras>> {
    let (spec, status) = (pod.spec.as_ref(), pod.status.as_ref());
    let extras = Extras {
        hostname: spec.and_then(|s| s.hostname.as_deref()).map(Into::into),
        subdomain: spec
            .and_then(|s| s.subdomain.as_deref())
            .map(|s| interners.name(s)),
        conditions: conditions(status, keys, interners),
        claims: device_network::claim_names(pod)
            .iter()
            .map(|name| interners.name(name))
            .collect(),
        devices: Box::default(),
    };
    (extras != Extras::default()).then(|| Box::new(extras))
}

fn shared(pod: &Pod, keys: &Keys, interners: &mut Interners) -> Arc<Shared> {
    let meta = &pod.metadata;
    let shared = Shared {
        labels: kept(&keys.labels, meta.labels.as_ref(), interners, true),
        annotations: kept(
            &keys.annotations,
            meta.annotations.as_ref(),
            interners,
            false,
        ),
        ports: ports(pod.spec.as_ref(), interners),
    };
    interners.shared.get(shared)
}

fn ports(spec: Option<&PodSpec>, interners: &mut Interners) -> Box<[NamedPort]> {
    let ports: Vec<NamedPort> = spec
        .into_iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            Some(NamedPort {
                name: interners.name(p.name.as_deref()?),
                port: p.container_port,
                protocol: interners.name(p.protocol.as_deref().unwrap_or("TCP")),
            })
        })
        .collect();
    ports.into()
}

/// The entries of `map` whose keys are in `keys`, in key order; keys and (for labels, which
/// pods of one template share) values shared.
fn kept(
    keys: &KeySet,
    map: Option<&BTreeMap<String, String>>,
    interners: &mut Interners,
    shared_values: bool,
) -> Entries {
    let entries: Vec<(Name, Name)> = map
        .into_iter()
        .flatten()
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, v)| {
            let value = if shared_values {
                interners.name(v)
            } else {
                Name::from(v.as_str())
            };
            (interners.name(k), value)
        })
        .collect();
    entries.into()
}

fn conditions(
    status: Option<&PodStatus>,
    keys: &Keys,
    interners: &mut Interners,
) -> Box<[KeptCondition]> {
    let mut conditions: Vec<KeptCondition> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| network_ready::is_network_ready(&c.type_) || keys.conditions.contains(&c.type_))
        .map(|c| KeptCondition {
            type_: interners.name(&c.type_),
            status: Status::parse(&c.status),
            reason: interners.name(c.reason.as_deref().unwrap_or_default()),
            message: c.message.as_deref().unwrap_or_default().into(),
        })
        .collect();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    conditions.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeySet;
    use serde_json::json;

    #[test]
    fn a_pod_keeps_what_planning_and_the_plugins_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "web", "team": "a"},
                "annotations": {network_status::ANNOTATION: r#"[{"name":"macvlan","ips":["192.168.2.4"]},{"name":"ns/bad"}]"#,
                                "isim.dev/weight": "3", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": "n1", "hostname": "h", "subdomain": "web",
                "containers": [{"name": "c", "image": "nginx",
                    "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 81}]}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                               {"type": "network-ready.isim.dev/ns.macvlan", "status": "False",
                                "reason": "ConnectFailed", "message": "192.168.2.4:80: connection refused"},
                               {"type": "Scheduled", "status": "True"},
                               {"type": "ContainersReady", "status": "True"}]},
        }))
        .unwrap();
        let keys = Keys {
            labels: KeySet::only(["app"]),
            annotations: KeySet::only(["isim.dev/weight"]),
            conditions: KeySet::only(["Scheduled"]),
        };
        let record = PodRecord::from_pod(&pod, &keys);
        assert_eq!(
            (&*record.name, &*record.namespace, &*record.uid.to_string()),
            ("p", "ns", "u")
        );
        assert_eq!(record.phase, Phase::Running);
        assert!(record.ready && !record.terminating);
        assert_eq!(record.node_name.as_deref(), Some("n1"));
        assert_eq!(record.named_port("http", "TCP"), Some(80));
        assert_eq!(
            record.shared.ports.len(),
            1,
            "only named ports are looked up"
        );
        assert_eq!(record.labels(), [("app".into(), "web".into())]);
        assert_eq!(
            record.annotations(),
            [("isim.dev/weight".into(), "3".into())]
        );
        assert_eq!(
            record.networks().collect::<Vec<_>>(),
            ["ns/bad", "ns/macvlan"]
        );
        assert_eq!(
            record.ips("ns/macvlan"),
            ["192.168.2.4".parse::<IpAddr>().unwrap()]
        );
        assert!(matches!(
            record.attachment("ns/bad"),
            Some(Err(StatusError::NoIps { .. }))
        ));
        assert!(record.attachment("ns/other").is_none());
        let types: Vec<&str> = record.conditions().iter().map(|c| &*c.type_).collect();
        assert_eq!(
            types,
            ["Scheduled", "network-ready.isim.dev/ns.macvlan"],
            "network readiness and the declared types, sorted"
        );
        let network = record.network_readiness("ns/macvlan").unwrap();
        assert_eq!(network.status, Status::False);
        assert_eq!(&*network.reason, "ConnectFailed");
        assert!(record.network_readiness("ns/bad").is_none());
        assert_eq!(
            record.changed_at.get().map(|t| t.to_string()).as_deref(),
            Some("2026-01-01T00:00:05Z"),
            "the Ready condition's last transition"
        );
    }

    #[test]
    fn an_unreadable_annotation_puts_the_pod_on_no_network() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {network_status::ANNOTATION: "{oops"}, "deletionTimestamp": "2026-01-01T00:01:00Z"},
        }))
        .unwrap();
        let record = PodRecord::from_pod(&pod, &Keys::default());
        assert!(matches!(
            record.attachments.as_ref().map_err(|e| &**e),
            Err(StatusError::Unreadable(_))
        ));
        assert_eq!(record.networks().count(), 0);
        assert!(record.terminating && !record.ready);
        assert_eq!(record.phase, Phase::Unknown);
        assert_eq!(
            record.changed_at.get().map(|t| t.to_string()).as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "no Ready condition: the creation"
        );
    }

    #[test]
    fn records_of_one_template_share_their_names_labels_and_ports() {
        let pod = |name: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c",
                    "ports": [{"name": "http", "containerPort": 80}]}]},
            }))
            .unwrap()
        };
        let keys = Keys {
            labels: KeySet::only(["app"]),
            ..Keys::default()
        };
        let mut interners = Interners::default();
        let (a, b) = (
            PodRecord::read(&pod("a"), &keys, &mut interners),
            PodRecord::read(&pod("b"), &keys, &mut interners),
        );
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(
            a.node_name.as_ref().unwrap(),
            b.node_name.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        assert_eq!(a.named_port("http", "TCP"), Some(80));
        assert!(
            a.extras.is_none(),
            "no hostname, subdomain or kept condition: no extras"
        );
    }
    #[test]
    fn a_pod_with_claims_is_on_the_networks_of_their_devices() {
        let uid = "0b0e6e1c-6d5e-4f0e-9d61-7a1c1b7f2a10";
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": uid,
                "annotations": {network_status::ANNOTATION: r#"[{"name":"macvlan","ips":["192.168.9.4"]}]"#}},
            "spec": {"containers": [], "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "web-0-nic"}]},
        }))
        .unwrap();
        let record = PodRecord::from_pod(&pod, &Keys::default());
        assert_eq!(record.claims(), [Name::from("web-0-nic")]);
        assert!(record.devices().is_empty());
        let claim = |name: &str, reserved: &str, ready: &str| {
            ClaimRecord::read(
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns"},
                    "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}},
                    "status": {
                        "allocation": {"devices": {"results": [
                            {"request": "nic", "driver": "dra.net", "pool": "n", "device": "eth1"}]}},
                        "reservedFor": [{"resource": "pods", "name": "web-0", "uid": reserved}],
                        "devices": [{"driver": "dra.net", "pool": "n", "device": "eth1",
                            "conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "",
                                            "lastTransitionTime": "2026-12-07T00:00:00Z"}],
                            "networkData": {"ips": ["192.168.2.4/24"]}}],
                    },
                }))
                .unwrap(),
            )
        };
        let ours = claim("web-0-nic", uid, "True");
        let unnamed = claim("other", uid, "True");
        let with = record.with_devices(&[&ours, &unnamed]).unwrap();
        assert_eq!(
            with.networks().collect::<Vec<_>>(),
            ["ns/macvlan", "deviceclass:dranet", "deviceclass:dranet/nic"]
        );
        assert_eq!(
            with.ips("deviceclass:dranet"),
            ["192.168.2.4".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(with.ips("ns/macvlan").len(), 1);
        assert_eq!(
            with.devices()[0].devices.len(),
            1,
            "only the claims it names"
        );
        assert_eq!(
            with.network_readiness("deviceclass:dranet")
                .map(|c| c.status),
            Some(Status::True)
        );
        assert_eq!(with.with_devices(&[&ours]), None, "nothing changed");
        let down = claim("web-0-nic", uid, "False");
        let later = with.with_devices(&[&down]).unwrap();
        assert_eq!(
            later
                .network_readiness("deviceclass:dranet/nic")
                .map(|c| c.status),
            Some(Status::False)
        );
        // Reserved for an earlier pod of the same name: not this pod's.
        let stale = claim("web-0-nic", "5a4c2f3e-1b0d-4c9a-8e7f-6d5c4b3a2910", "True");
        let gone = later.with_devices(&[&stale]).unwrap();
        assert_eq!(gone.networks().collect::<Vec<_>>(), ["ns/macvlan"]);
        assert_eq!(gone.claims().len(), 1, "still names its claim");
    }
}
