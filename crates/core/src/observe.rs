//! The candidate pods of a Service, read from the pod index, and what the host knows of them.
//!
//! Pure over its inputs (pod records, a zone lookup). Pods whose network attachment cannot be
//! read are skipped with a reason; they never stop the Service's other pods from being
//! published.

use nad_model::candidate::Candidate;
use std::sync::Arc;

use nad_model::intern::Name;

use crate::index::{NodeZones, PodIndex};
use nad_model::{
    input::{
        device_network,
        network_status::{StatusError, Unusable},
        target::ServiceTarget,
    },
    pod::PodRecord,
};

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

#[derive(Debug, Default, Clone)]
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
    /// Brings the observation up to date after the `changed` pods changed (added, updated or
    /// removed): their rows are replaced by those of `fresh`, the changed pods observed again.
    /// Every list stays sorted by pod name, as [`from_index`] makes them.
    pub fn patch<S: AsRef<str>>(&mut self, changed: &[S], fresh: Observation) {
        remove_pods(&mut self.candidates, changed, Candidate::name);
        remove_pods(&mut self.skipped, changed, |s| &s.pod);
        remove_pods(&mut self.ignored_ips, changed, |i| &i.pod);
        remove_pods(&mut self.unreadable, changed, |s| &s.pod);
        insert_pods(&mut self.candidates, fresh.candidates, Candidate::name);
        insert_pods(&mut self.skipped, fresh.skipped, |s| &s.pod);
        insert_pods(&mut self.ignored_ips, fresh.ignored_ips, |i| &i.pod);
        insert_pods(&mut self.unreadable, fresh.unreadable, |s| &s.pod);
    }

    /// A skipped pod may become usable without an event on the Service (its node appears).
    pub fn needs_retry(&self) -> bool {
        self.skipped
            .iter()
            .any(|s| matches!(s.reason, SkipReason::NodeMissing { .. }))
    }
}

/// Removes the rows of the `pods` from `rows`, sorted by pod name.
fn remove_pods<T, S: AsRef<str>>(rows: &mut Vec<T>, pods: &[S], name: impl Fn(&T) -> &str) {
    for pod in pods {
        let pod = pod.as_ref();
        let at = rows.partition_point(|row| name(row) < pod);
        let end = at + rows[at..].iter().take_while(|row| name(row) == pod).count();
        rows.drain(at..end);
    }
}

/// Inserts `new` rows into `rows`, both sorted by pod name, keeping the order.
fn insert_pods<T>(rows: &mut Vec<T>, new: Vec<T>, name: impl Fn(&T) -> &str) {
    for row in new {
        let at = rows.partition_point(|kept| name(kept) <= name(&row));
        rows.insert(at, row);
    }
}

/// Collects the Service's candidates among `pods`: those in its namespace attached to its
/// network. `zone` gives a node's zone: `None` for a node not known (yet), `Some(None)` for a
/// node without a zone label.
///
/// Pods not attached are not reported, nor are pods whose annotation is not a JSON list
/// (listed in [`Observation::unreadable`]). Pods in other namespaces are never candidates,
/// even when attached to the same network.
pub fn candidates<'a>(
    target: &ServiceTarget,
    pods: impl IntoIterator<Item = &'a Arc<PodRecord>>,
    zone: impl Fn(&str) -> Option<Option<String>>,
) -> Observation {
    let mut observation = Observation::default();
    // A pod's Multus annotation says nothing of its DRA devices: unreadable, it hides no
    // device attachment.
    let multus = !device_network::is_device_network(&target.network);
    for pod in pods {
        if *pod.namespace != *target.namespace {
            continue;
        }
        let skip = |reason: SkipReason| Skipped {
            pod: pod.name.to_string(),
            reason,
        };
        let attachment = match &pod.attachments {
            Err(e) if multus && **e == StatusError::Missing => continue,
            Err(e) if multus => {
                observation.unreadable.push(skip((**e).clone().into()));
                continue;
            }
            _ => match pod.attachment(&target.network) {
                None => continue,
                Some(Err(e)) => {
                    observation.skipped.push(skip(e.clone().into()));
                    continue;
                }
                Some(Ok(attachment)) => attachment,
            },
        };
        let zone = match pod.node_name.as_deref() {
            None => None,
            Some(node) => match zone(node) {
                Some(zone) => zone,
                None => {
                    observation.skipped.push(skip(SkipReason::NodeMissing {
                        node: node.to_owned(),
                    }));
                    continue;
                }
            },
        };
        if !attachment.unusable.is_empty() {
            observation.ignored_ips.push(IgnoredIps {
                pod: pod.name.to_string(),
                unusable: attachment.unusable.to_vec(),
            });
        }
        observation.candidates.push(Candidate {
            pod: pod.clone(),
            ips: attachment.ips.clone(),
            zone,
        });
    }
    observation
        .candidates
        .sort_by(|a, b| a.pod.name.cmp(&b.pod.name));
    observation
}

/// The Service's candidates among the pods the index has on its network.
pub fn from_index(pods: &PodIndex, zones: &NodeZones, target: &ServiceTarget) -> Observation {
    let on_network = pods.on_network(&target.namespace, &target.network);
    candidates(target, on_network, zone_of(zones))
}

/// Brings `observation`, the network's candidates as [`from_index`] observed them, up to date
/// after the `changed` pods changed: those pods observed again, not the network's every pod.
pub fn refresh(
    observation: &mut Observation,
    changed: &[Name],
    pods: &PodIndex,
    zones: &NodeZones,
    target: &ServiceTarget,
) {
    let on_network = changed
        .iter()
        .filter_map(|name| pods.get(&target.namespace, name))
        .filter(|pod| pod.networks().any(|network| network == target.network));
    let fresh = candidates(target, on_network, zone_of(zones));
    observation.patch(changed, fresh);
}

/// The named pods among the Service's candidates (the pods a pod-scoped change names).
pub fn named<'a>(
    pods: &PodIndex,
    zones: &NodeZones,
    target: &ServiceTarget,
    names: impl IntoIterator<Item = &'a str>,
) -> Observation {
    let named = names
        .into_iter()
        .filter_map(|name| pods.get(&target.namespace, name))
        .filter(|pod| pod.attachment(&target.network).is_some());
    candidates(target, named, zone_of(zones))
}

fn zone_of(zones: &NodeZones) -> impl Fn(&str) -> Option<Option<String>> + '_ {
    |node| zones.zone(node).map(|z| z.map(str::to_owned))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use nad_model::{
        input::{network_status, target::Family},
        keys::Keys,
    };
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
    ) -> Arc<PodRecord> {
        let mut annotations = serde_json::Map::new();
        if let Some(status) = status {
            annotations.insert(network_status::ANNOTATION.into(), json!(status));
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                         "annotations": annotations},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        Arc::new(PodRecord::from_pod(&pod, &Keys::all()))
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
        let lookup = |n: &str| match n {
            "n1" => Some(Some("zone-1".to_owned())),
            "n2" => Some(None),
            _ => None,
        };
        let got = candidates(&target("team-a/macvlan"), &pods, lookup);
        let names: Vec<_> = got.candidates.iter().map(Candidate::name).collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(got.candidates[0].zone, None);
        assert_eq!(got.candidates[1].zone.as_deref(), Some("zone-1"));
        assert_eq!(
            *got.candidates[1].ips,
            ["192.168.2.2".parse::<std::net::IpAddr>().unwrap()]
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
        let got = candidates(&target("team-a/macvlan"), &pods, |_| Some(None));
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
    fn an_unreadable_multus_annotation_hides_no_device_attachment() {
        use nad_model::input::device_network::ClaimRecord;
        let bad_json: Pod = serde_json::from_value(json!({
            "metadata": {"name": "dra", "namespace": "team-a", "uid": "uid-dra",
                         "annotations": {network_status::ANNOTATION: "{oops"}},
            "spec": {"containers": [], "resourceClaims": [{"name": "nic", "resourceClaimName": "dra-nic"}]},
        }))
        .unwrap();
        let bad_json = PodRecord::from_pod(&bad_json, &Keys::all());
        let claim = ClaimRecord::read(
            &serde_json::from_value(json!({
                "metadata": {"name": "dra-nic", "namespace": "team-a"},
                "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}},
                "status": {
                    "allocation": {"devices": {"results": [
                        {"request": "nic", "driver": "dra.net", "pool": "n1", "device": "eth1"}]}},
                    "reservedFor": [{"resource": "pods", "name": "dra", "uid": "uid-dra"}],
                    "devices": [{"driver": "dra.net", "pool": "n1", "device": "eth1",
                                 "networkData": {"ips": ["192.168.2.4/24"]}}],
                },
            }))
            .unwrap(),
        );
        let record = Arc::new(bad_json.with_devices(&[&claim]).unwrap());
        let on_devices = candidates(&target("deviceclass:dranet"), [&record], |_| Some(None));
        assert_eq!(on_devices.candidates.len(), 1);
        assert!(on_devices.unreadable.is_empty());
        let on_multus = candidates(&target("team-a/macvlan"), [&record], |_| Some(None));
        assert_eq!(
            on_multus.unreadable.len(),
            1,
            "its Multus Services still report it"
        );
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
            *got.candidates[0].ips,
            ["192.168.2.1".parse::<std::net::IpAddr>().unwrap()]
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
}
