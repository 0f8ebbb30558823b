//! A pod reduced to what planning and plugins read, parsed once per watch event.
//!
//! The controller keeps no Pod objects: each event becomes a [`PodRecord`], whose Multus
//! `network-status` annotation is already parsed into one attachment per network, and whose
//! labels, annotations and conditions are only those the loaded plugins declared ([`Keys`]),
//! besides the network readiness conditions of the network prober.

use std::net::IpAddr;

use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube_core::ResourceExt;

use crate::input::{
    network_ready::{self, Status},
    network_status::{self, Attachment, Attachments, StatusError},
};
use crate::keys::{Kept, Keys};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub port: i32,
    pub protocol: String,
}

/// One of a pod's `status.conditions` that the index keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCondition {
    pub type_: String,
    pub status: Status,
    pub reason: String,
    pub message: String,
}

/// What the controller knows of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub created: Option<Timestamp>,
    pub phase: Phase,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The pod has a `deletionTimestamp`.
    pub terminating: bool,
    pub node_name: Option<String>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ports: Vec<NamedPort>,
    /// Only the keys the loaded plugins read.
    pub labels: Kept,
    /// Only the keys the loaded plugins read.
    pub annotations: Kept,
    pub attachments: Attachments,
    /// Network readiness conditions, and the types the loaded plugins read; sorted by type.
    pub conditions: Box<[KeptCondition]>,
    /// When the pod last changed in a way that moves its endpoints, as Kubernetes' own
    /// EndpointSlice controller reads it: the `Ready` condition's last transition, else the
    /// creation. Becomes the slices' `endpoints.kubernetes.io/last-change-trigger-time`.
    pub changed_at: Option<Timestamp>,
}

impl PodRecord {
    pub fn from_pod(pod: &Pod, keys: &Keys) -> Self {
        let namespace = pod.namespace().unwrap_or_default();
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
        let ports = spec
            .into_iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone()?,
                    port: p.container_port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                })
            })
            .collect();
        let mut conditions: Vec<KeptCondition> = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| {
                network_ready::is_network_ready(&c.type_) || keys.conditions.contains(&c.type_)
            })
            .map(|c| KeptCondition {
                type_: c.type_.clone(),
                status: Status::parse(&c.status),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            })
            .collect();
        conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        let annotation = pod
            .annotations()
            .get(network_status::ANNOTATION)
            .map(String::as_str);
        PodRecord {
            name: pod.name_any(),
            uid: meta.uid.clone().unwrap_or_default(),
            created,
            phase: Phase::parse(status.and_then(|s| s.phase.as_deref())),
            ready: ready_condition.is_some_and(|c| c.status == "True"),
            terminating: meta.deletion_timestamp.is_some(),
            node_name: spec.and_then(|s| s.node_name.clone()),
            hostname: spec.and_then(|s| s.hostname.clone()),
            subdomain: spec.and_then(|s| s.subdomain.clone()),
            ports,
            labels: keys.labels.keep(meta.labels.as_ref()),
            annotations: keys.annotations.keep(meta.annotations.as_ref()),
            attachments: network_status::attachments(annotation, &namespace),
            conditions: conditions.into_boxed_slice(),
            changed_at,
            namespace,
        }
    }

    /// The networks the pod is attached to (none when its annotation cannot be read).
    pub fn networks(&self) -> impl Iterator<Item = &str> {
        self.attachments
            .as_ref()
            .into_iter()
            .flatten()
            .map(|(network, _)| network.as_str())
    }

    /// The pod's attachment to `network`: `None` when it is not attached.
    pub fn attachment(&self, network: &str) -> Option<&Result<Attachment, StatusError>> {
        self.attachments
            .as_ref()
            .ok()?
            .iter()
            .find(|(n, _)| n == network)
            .map(|(_, a)| a)
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
        self.conditions
            .binary_search_by(|c| c.type_.as_str().cmp(condition_type))
            .ok()
            .map(|i| &self.conditions[i])
    }

    /// The pod's readiness on `network`, as the network prober wrote it.
    pub fn network_readiness(&self, network: &str) -> Option<&KeptCondition> {
        self.condition(&network_ready::condition_type(network))
    }

    /// The container port named `name` with `protocol`.
    pub fn named_port(&self, name: &str, protocol: &str) -> Option<i32> {
        self.ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }
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
            (
                record.name.as_str(),
                record.namespace.as_str(),
                record.uid.as_str()
            ),
            ("p", "ns", "u")
        );
        assert_eq!(record.phase, Phase::Running);
        assert!(record.ready && !record.terminating);
        assert_eq!(record.node_name.as_deref(), Some("n1"));
        assert_eq!(record.named_port("http", "TCP"), Some(80));
        assert_eq!(record.ports.len(), 1, "only named ports are looked up");
        assert_eq!(&*record.labels, [("app".to_owned(), "web".to_owned())]);
        assert_eq!(
            &*record.annotations,
            [("isim.dev/weight".to_owned(), "3".to_owned())]
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
        let types: Vec<&str> = record.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["Scheduled", "network-ready.isim.dev/ns.macvlan"],
            "network readiness and the declared types, sorted"
        );
        let network = record.network_readiness("ns/macvlan").unwrap();
        assert_eq!(network.status, Status::False);
        assert_eq!(network.reason, "ConnectFailed");
        assert!(record.network_readiness("ns/bad").is_none());
        assert_eq!(
            record.changed_at.map(|t| t.to_string()).as_deref(),
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
            record.attachments,
            Err(StatusError::Unreadable(_))
        ));
        assert_eq!(record.networks().count(), 0);
        assert!(record.terminating && !record.ready);
        assert_eq!(record.phase, Phase::Unknown);
        assert_eq!(
            record.changed_at.map(|t| t.to_string()).as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "no Ready condition: the creation"
        );
    }
}
