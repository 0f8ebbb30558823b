//! Reading the caches: which pods are candidates for a Service, and what the host knows of them.
//!
//! Pure over its inputs (pods, a node lookup): the controller passes snapshots of its reflector
//! stores. Pods whose network attachment cannot be read are skipped with a reason; they never
//! stop the Service's other pods from being published.

use std::{net::IpAddr, sync::Arc};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::{
    network_status::{self, StatusError, Unusable},
    target::ServiceTarget,
};

/// The node label that gives an endpoint its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A pod attached to the Service's network, with its addresses on that network.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pod: Arc<Pod>,
    pub ips: Vec<IpAddr>,
    /// The node's zone label, when the pod is scheduled and the node has one.
    pub zone: Option<String>,
}

impl Candidate {
    pub fn name(&self) -> String {
        self.pod.name_any()
    }

    pub fn node_name(&self) -> Option<&str> {
        self.pod.spec.as_ref()?.node_name.as_deref()
    }

    /// `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    pub fn is_terminating(&self) -> bool {
        self.pod.metadata.deletion_timestamp.is_some()
    }

    /// When the pod was created; the older of two pods claiming one address keeps it.
    pub fn created(&self) -> Option<&k8s_openapi::jiff::Timestamp> {
        self.pod.metadata.creation_timestamp.as_ref().map(|t| &t.0)
    }

    pub fn phase(&self) -> &str {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Unknown")
    }
}

/// Why an attached (or possibly attached) pod was left out before the policy ran.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkipReason {
    #[error(transparent)]
    NetworkStatus(#[from] StatusError),
    #[error("its node {node} is not known (yet); retrying")]
    NodeMissing { node: String },
}

#[derive(Debug, Clone)]
pub struct Skipped {
    pub pod: String,
    pub reason: SkipReason,
}

/// Some addresses of an otherwise usable pod cannot be published; they are left out.
#[derive(Debug, Clone)]
pub struct IgnoredIps {
    pub pod: String,
    pub unusable: Vec<Unusable>,
}

#[derive(Debug, Default)]
pub struct Observation {
    /// Sorted by pod name: the order the plugin sees and the slices keep.
    pub candidates: Vec<Candidate>,
    pub skipped: Vec<Skipped>,
    pub ignored_ips: Vec<IgnoredIps>,
    /// Pods of the namespace whose annotation is not a JSON list at all. They are on no
    /// network; the pod watch reports them once, so a Service does not.
    pub unreadable: Vec<Skipped>,
}

impl Observation {
    /// A skipped pod may become usable without an event on the Service (its node appears).
    pub fn needs_retry(&self) -> bool {
        self.skipped
            .iter()
            .any(|s| matches!(s.reason, SkipReason::NodeMissing { .. }))
    }
}

/// Collects the Service's candidates: pods in its namespace attached to its network.
///
/// Pods without the annotation are not on any secondary network and are not reported, nor are
/// pods whose annotation is not a JSON list (listed in [`Observation::unreadable`]). Pods in
/// other namespaces are never candidates, even when attached to the same network.
pub fn candidates<'a>(
    target: &ServiceTarget,
    pods: impl IntoIterator<Item = &'a Arc<Pod>>,
    node: impl Fn(&str) -> Option<Arc<Node>>,
) -> Observation {
    let mut observation = Observation::default();
    for pod in pods {
        if pod.metadata.namespace.as_deref() != Some(target.namespace.as_str()) {
            continue;
        }
        let annotation = pod
            .annotations()
            .get(network_status::ANNOTATION)
            .map(String::as_str);
        let attachment =
            match network_status::attachment(annotation, &target.namespace, &target.network) {
                Ok(Some(attachment)) => attachment,
                Ok(None) | Err(StatusError::Missing) => continue,
                Err(e @ StatusError::Unreadable(_)) => {
                    observation.unreadable.push(Skipped {
                        pod: pod.name_any(),
                        reason: e.into(),
                    });
                    continue;
                }
                Err(e) => {
                    observation.skipped.push(Skipped {
                        pod: pod.name_any(),
                        reason: e.into(),
                    });
                    continue;
                }
            };
        if !attachment.unusable.is_empty() {
            observation.ignored_ips.push(IgnoredIps {
                pod: pod.name_any(),
                unusable: attachment.unusable,
            });
        }
        let node_name = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let zone = match node_name {
            None => None,
            Some(node_name) => match node(node_name) {
                Some(node) => node.labels().get(ZONE_LABEL).cloned(),
                None => {
                    observation.skipped.push(Skipped {
                        pod: pod.name_any(),
                        reason: SkipReason::NodeMissing {
                            node: node_name.to_owned(),
                        },
                    });
                    continue;
                }
            },
        };
        observation.candidates.push(Candidate {
            pod: pod.clone(),
            ips: attachment.ips,
            zone,
        });
    }
    observation
        .candidates
        .sort_by(|a, b| a.pod.metadata.name.cmp(&b.pod.metadata.name));
    observation
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::target::Family;
    use serde_json::json;

    pub(crate) fn target(network: &str) -> ServiceTarget {
        ServiceTarget {
            name: "web".into(),
            namespace: "team-a".into(),
            uid: "svc-uid".into(),
            network: network.into(),
            labels: Default::default(),
            annotations: Default::default(),
            ports: vec![],
            ip_families: None,
            publish_not_ready_addresses: false,
        }
    }

    pub(crate) fn pod(
        name: &str,
        namespace: &str,
        status: Option<&str>,
        node: Option<&str>,
    ) -> Arc<Pod> {
        let mut annotations = serde_json::Map::new();
        if let Some(status) = status {
            annotations.insert(network_status::ANNOTATION.into(), json!(status));
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                             "annotations": annotations},
                "spec": {"containers": [], "nodeName": node},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    }

    fn node(name: &str, zone: Option<&str>) -> Arc<Node> {
        let labels = zone.map(|z| json!({ZONE_LABEL: z})).unwrap_or(json!({}));
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        )
    }

    fn on(ip: &str) -> String {
        format!(r#"[{{"name":"team-a/macvlan","ips":["{ip}"]}}]"#)
    }

    #[test]
    fn attached_pods_in_the_namespace_are_candidates_sorted_by_name() {
        let pods = vec![
            pod("b", "team-a", Some(&on("192.168.2.2")), Some("n1")),
            pod("a", "team-a", Some(&on("192.168.2.1")), Some("n2")),
            pod("other-ns", "team-b", Some(&on("192.168.2.3")), Some("n1")),
            pod("no-annotation", "team-a", None, Some("n1")),
            pod(
                "other-net",
                "team-a",
                Some(r#"[{"name":"team-a/sriov","ips":["10.1.1.1"]}]"#),
                None,
            ),
        ];
        let nodes = [node("n1", Some("zone-1")), node("n2", None)];
        let lookup = |n: &str| nodes.iter().find(|x| x.name_any() == n).cloned();
        let got = candidates(&target("team-a/macvlan"), &pods, lookup);
        let names: Vec<_> = got.candidates.iter().map(Candidate::name).collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(got.candidates[0].zone, None);
        assert_eq!(got.candidates[1].zone.as_deref(), Some("zone-1"));
        assert_eq!(
            got.candidates[1].ips,
            vec!["192.168.2.2".parse::<IpAddr>().unwrap()]
        );
        assert!(got.skipped.is_empty());
        assert!(!got.needs_retry());
        assert_eq!(Family::of(&got.candidates[0].ips[0]), Family::V4);
    }

    #[test]
    fn broken_annotations_skip_only_that_pod() {
        let pods = vec![
            pod("bad-json", "team-a", Some("{oops"), None),
            pod(
                "no-ips",
                "team-a",
                Some(r#"[{"name":"team-a/macvlan"}]"#),
                None,
            ),
            pod("bad-ip", "team-a", Some(&on("300.1.1.1")), None),
            pod("good", "team-a", Some(&on("192.168.2.9")), None),
        ];
        let got = candidates(&target("team-a/macvlan"), &pods, |_| None);
        assert_eq!(got.candidates.len(), 1);
        assert_eq!(got.candidates[0].name(), "good");
        let skipped: Vec<_> = got.skipped.iter().map(|s| s.pod.as_str()).collect();
        assert_eq!(skipped, vec!["no-ips", "bad-ip"]);
        assert_eq!(
            got.unreadable[0].pod, "bad-json",
            "the pod watch's to report"
        );
        assert!(matches!(
            got.skipped[1].reason,
            SkipReason::NetworkStatus(StatusError::NoUsableIps { .. })
        ));
    }

    #[test]
    fn a_pod_on_an_unknown_node_is_skipped_and_retried() {
        let pods = vec![pod("a", "team-a", Some(&on("192.168.2.1")), Some("ghost"))];
        let got = candidates(&target("team-a/macvlan"), &pods, |_| None);
        assert!(got.candidates.is_empty());
        assert_eq!(
            got.skipped[0].reason,
            SkipReason::NodeMissing {
                node: "ghost".into()
            }
        );
        assert!(got.needs_retry());
        assert!(got.skipped[0].reason.to_string().contains("ghost"));
    }

    #[test]
    fn partly_unusable_ips_keep_the_pod_and_report_the_rest() {
        let raw = r#"[{"name":"team-a/macvlan","ips":["192.168.2.1","nope","127.0.0.1"]}]"#;
        let pods = vec![pod("a", "team-a", Some(raw), None)];
        let got = candidates(&target("team-a/macvlan"), &pods, |_| None);
        assert_eq!(got.candidates.len(), 1);
        assert_eq!(
            got.candidates[0].ips,
            vec!["192.168.2.1".parse::<IpAddr>().unwrap()]
        );
        let left_out: Vec<_> = got.ignored_ips[0]
            .unusable
            .iter()
            .map(|u| (u.value.as_str(), u.rule()))
            .collect();
        assert_eq!(
            left_out,
            vec![("nope", "not-an-address"), ("127.0.0.1", "loopback")]
        );
    }

    #[test]
    fn pod_state_is_read_from_status_and_metadata() {
        let mut p = (*pod("a", "team-a", Some(&on("192.168.2.1")), None)).clone();
        let c = Candidate {
            pod: Arc::new(p.clone()),
            ips: vec![],
            zone: None,
        };
        assert!(c.is_ready());
        assert!(!c.is_terminating());
        assert_eq!(c.phase(), "Running");
        p.status = None;
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let c = Candidate {
            pod: Arc::new(p),
            ips: vec![],
            zone: None,
        };
        assert!(!c.is_ready());
        assert!(c.is_terminating());
        assert_eq!(c.phase(), "Unknown");
    }
}
