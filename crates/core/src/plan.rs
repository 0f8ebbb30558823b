//! The pure plan: a managed Service, its candidates and the policy's decisions in; the
//! endpoints that should be published out, grouped by address family and port set. Where
//! they go among the Service's slices is [`super::slices`]' job.
//!
//! Nothing here does I/O, so every rule of the specification is a table test below.

use nad_model::decision::{Conditions, Decision};
use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
};

use k8s_openapi::{
    api::{
        core::v1::{ObjectReference, ServicePort},
        discovery::v1::{Endpoint, EndpointConditions, EndpointPort},
    },
    apimachinery::pkg::util::intstr::IntOrString,
};

use crate::validate::{self, Violation};
use nad_model::candidate::Candidate;
use nad_model::{
    input::target::{Family, ServiceTarget},
    pod::PodRecord,
};

/// The ports of a pod's endpoints, from the Service's ports.
///
/// A numeric `targetPort` is used as is; a named one is looked up among the pod's container
/// ports with the same protocol, and the port is left out for a pod that has no such port
/// (as Kubernetes' own EndpointSlice controller does).
pub fn endpoint_ports(service_ports: &[ServicePort], pod: &PodRecord) -> Vec<EndpointPort> {
    service_ports
        .iter()
        .filter_map(|sp| {
            let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".to_owned());
            let port = match &sp.target_port {
                None => sp.port,
                Some(IntOrString::Int(n)) => *n,
                Some(IntOrString::String(name)) => pod.named_port(name, &protocol)?,
            };
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(protocol),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

/// The ports of a slice as a comparable key: slices with the same key hold the same ports.
pub type PortKey = Vec<(String, i32, String, Option<String>)>;

pub fn port_key(ports: &[EndpointPort]) -> PortKey {
    ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.clone().unwrap_or_default(),
                p.app_protocol.clone(),
            )
        })
        .collect()
}

/// An endpoint's identity across reconciles: the pod it stands for and its address.
pub type EndpointKey = (String, String);

pub fn endpoint_key(endpoint: &Endpoint) -> EndpointKey {
    (
        endpoint
            .target_ref
            .as_ref()
            .and_then(|t| t.name.clone())
            .unwrap_or_default(),
        endpoint.addresses.first().cloned().unwrap_or_default(),
    )
}

fn endpoint(target: &ServiceTarget, candidate: &Candidate, ip: &IpAddr, c: Conditions) -> Endpoint {
    let pod = &candidate.pod;
    let subdomain_matches = pod.subdomain() == Some(target.name.as_str());
    let hostname = pod
        .hostname()
        .filter(|h| subdomain_matches && !h.is_empty())
        .map(str::to_owned);
    Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(c.ready),
            serving: Some(c.serving),
            terminating: Some(c.terminating),
        }),
        hostname,
        node_name: candidate
            .node_name()
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".to_owned()),
            namespace: Some(pod.namespace.to_string()),
            name: Some(pod.name.to_string()),
            uid: Some(pod.uid.to_string()).filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        }),
        zone: candidate.zone.clone(),
        ..Endpoint::default()
    }
}

/// Two included pods list the same address (a static-IPAM mistake, say): only the older one
/// publishes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conflict {
    pub address: IpAddr,
    pub kept: String,
    pub left_out: String,
}

/// An endpoint the EndpointSlice API would reject, left out of the slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub pod: String,
    pub address: IpAddr,
    pub violations: Vec<Violation>,
}

/// The endpoints of one address family and port set.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointGroup {
    pub family: Family,
    pub ports: Vec<EndpointPort>,
    /// Sorted by pod name and address.
    pub endpoints: Vec<Endpoint>,
}

/// The endpoints a Service should publish, and what was left out on the way.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Desired {
    /// Sorted by family and port set.
    pub groups: Vec<EndpointGroup>,
    pub conflicts: Vec<Conflict>,
    pub dropped: Vec<Dropped>,
}

impl Desired {
    pub fn endpoint_count(&self) -> usize {
        self.groups.iter().map(|g| g.endpoints.len()).sum()
    }

    /// How many slices of at most `max_endpoints` the endpoints need when packed perfectly.
    pub fn ideal_slices(&self, max_endpoints: usize) -> usize {
        let max = max_endpoints.max(1);
        self.groups
            .iter()
            .map(|g| g.endpoints.len().div_ceil(max))
            .sum()
    }
}

/// For each address of a wanted family, the index (into `included`) of the pod that publishes
/// it: the oldest claimant, by creation time and then name, so the choice is the same on every
/// reconcile and every replica.
fn address_owners(
    target: &ServiceTarget,
    included: &[(&Candidate, Conditions)],
) -> (HashMap<IpAddr, usize>, Vec<Conflict>) {
    let mut order: Vec<usize> = (0..included.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (included[a].0, included[b].0);
        // A pod without a creation time sorts last: it is the one that cannot prove its age.
        (a.created().is_none(), a.created(), a.name()).cmp(&(
            b.created().is_none(),
            b.created(),
            b.name(),
        ))
    });
    let mut owners: HashMap<IpAddr, usize> = HashMap::new();
    let mut conflicts = Vec::new();
    for index in order {
        let candidate = included[index].0;
        for ip in &candidate.ips {
            if !target.wants(Family::of(ip)) {
                continue;
            }
            match owners.get(ip) {
                None => {
                    owners.insert(*ip, index);
                }
                Some(&owner) if owner != index => conflicts.push(Conflict {
                    address: *ip,
                    kept: included[owner].0.name().to_owned(),
                    left_out: candidate.name().to_owned(),
                }),
                Some(_) => {}
            }
        }
    }
    conflicts.sort();
    (owners, conflicts)
}

/// The endpoints a Service should publish.
///
/// One endpoint per address, grouped by address family and resolved port set (pods whose
/// named `targetPort`s resolve differently land in different groups), sorted by pod name and
/// address. An address listed by two pods is published once, for the older pod
/// ([`Conflict`]); an endpoint the API would reject is left out ([`Dropped`]).
pub fn desired(target: &ServiceTarget, included: &[(&Candidate, Conditions)]) -> Desired {
    let (owners, conflicts) = address_owners(target, included);
    let mut dropped = Vec::new();
    let mut groups: BTreeMap<(Family, PortKey), EndpointGroup> = BTreeMap::new();
    for (index, (candidate, conditions)) in included.iter().enumerate() {
        let ports = endpoint_ports(&target.ports, &candidate.pod);
        let key = port_key(&ports);
        for ip in &candidate.ips {
            let family = Family::of(ip);
            if !target.wants(family) || owners.get(ip) != Some(&index) {
                continue;
            }
            let endpoint = endpoint(target, candidate, ip, *conditions);
            let violations = validate::endpoint(&endpoint, family.address_type(), "endpoint");
            if !violations.is_empty() {
                dropped.push(Dropped {
                    pod: candidate.name().to_owned(),
                    address: *ip,
                    violations,
                });
                continue;
            }
            groups
                .entry((family, key.clone()))
                .or_insert_with(|| EndpointGroup {
                    family,
                    ports: ports.clone(),
                    endpoints: Vec::new(),
                })
                .endpoints
                .push(endpoint);
        }
    }
    let mut groups: Vec<EndpointGroup> = groups.into_values().collect();
    for group in &mut groups {
        group.endpoints.sort_by_cached_key(endpoint_key);
    }
    Desired {
        groups,
        conflicts,
        dropped,
    }
}

/// Candidates sorted by the policy's decisions.
#[derive(Debug, Default)]
pub struct Split<'a> {
    pub included: Vec<(&'a Candidate, Conditions)>,
    pub excluded: Vec<(&'a Candidate, &'a str)>,
}

/// Pairs candidates with the policy's decisions (one per candidate, in order).
pub fn split<'a>(candidates: &'a [Candidate], decisions: &'a [Decision]) -> Split<'a> {
    let mut out = Split::default();
    for (candidate, decision) in candidates.iter().zip(decisions) {
        match decision {
            Decision::Include(c) => out.included.push((candidate, *c)),
            Decision::Exclude(reason) => out.excluded.push((candidate, reason.as_str())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{observe::tests::target, slices};
    use k8s_openapi::api::{core::v1::Pod, discovery::v1::EndpointSlice};
    use kube_core::ResourceExt;
    use nad_model::{
        keys::Keys,
        labels::{HEADLESS_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL},
    };
    use serde_json::json;
    use std::{net::IpAddr, sync::Arc};

    /// The slices of a Service that has none yet.
    fn desired_slices(
        target: &ServiceTarget,
        included: &[(&Candidate, Conditions)],
        max_endpoints: usize,
    ) -> Vec<EndpointSlice> {
        slices::place(target, &desired(target, included), &[], max_endpoints, None).write
    }

    const READY: Conditions = Conditions {
        ready: true,
        serving: true,
        terminating: false,
    };

    fn candidate(name: &str, ips: &[&str], spec: serde_json::Value) -> Candidate {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}")},
            "spec": {"containers": []},
        }))
        .unwrap();
        let extra: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(spec).unwrap();
        pod.spec = Some(extra);
        Candidate {
            pod: Arc::new(PodRecord::from_pod(&pod, &Keys::all())),
            ips: ips.iter().map(|s| s.parse::<IpAddr>().unwrap()).collect(),
            zone: None,
        }
    }

    fn simple(name: &str, ip: &str) -> Candidate {
        candidate(name, &[ip], json!({"containers": []}))
    }

    fn service_ports(ports: serde_json::Value) -> Vec<ServicePort> {
        serde_json::from_value(ports).unwrap()
    }

    fn eps(s: &EndpointSlice) -> &[Endpoint] {
        s.endpoints.as_deref().unwrap_or_default()
    }

    fn addresses(slice: &EndpointSlice) -> Vec<String> {
        eps(slice).iter().map(|e| e.addresses[0].clone()).collect()
    }

    #[test]
    fn two_ready_pods_give_one_ipv4_slice_with_labels_owner_and_conditions() {
        let mut t = target("team-a/macvlan");
        t.labels = [("app", "web")].into();
        t.ports = service_ports(
            json!([{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"}]),
        );
        let a = simple("a", "192.168.2.4");
        let b = simple("b", "192.168.2.5");
        let slices = desired_slices(&t, &[(&b, READY), (&a, READY)], 100);
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(s.name_any(), "web-ipv4-0");
        assert_eq!(s.namespace().as_deref(), Some("team-a"));
        assert_eq!(s.address_type, "IPv4");
        assert_eq!(addresses(s), vec!["192.168.2.4", "192.168.2.5"]);
        let labels = s.labels();
        assert_eq!(labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(labels[HEADLESS_LABEL], "");
        assert_eq!(labels["app"], "web");
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Service", "web", "svc-uid")
        );
        assert_eq!(owner.controller, Some(true));
        let e = &eps(s)[0];
        let c = e.conditions.as_ref().unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(true), Some(true), Some(false))
        );
        let r = e.target_ref.as_ref().unwrap();
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.name.as_deref(), Some("a"));
        assert_eq!(r.uid.as_deref(), Some("uid-a"));
        assert_eq!(r.namespace.as_deref(), Some("team-a"));
        let ports = s.ports.as_ref().unwrap();
        assert_eq!(ports[0].name.as_deref(), Some("http"));
        assert_eq!(ports[0].port, Some(80));
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(ports[0].app_protocol.as_deref(), Some("http"));
    }

    #[test]
    fn managed_by_and_service_name_labels_cannot_be_overridden_by_service_labels() {
        let mut t = target("team-a/m");
        t.labels = [
            (MANAGED_BY_LABEL, "someone-else"),
            (SERVICE_NAME_LABEL, "other"),
        ]
        .into();
        let a = simple("a", "192.168.2.4");
        let s = &desired_slices(&t, &[(&a, READY)], 100)[0];
        assert_eq!(s.labels()[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(s.labels()[SERVICE_NAME_LABEL], "web");
    }

    #[test]
    fn conditions_are_copied_as_decided() {
        let t = target("team-a/m");
        let a = simple("a", "192.168.2.4");
        for (ready, serving, terminating) in [
            (false, true, true),
            (true, true, true),
            (false, false, false),
        ] {
            let c = Conditions {
                ready,
                serving,
                terminating,
            };
            let s = &desired_slices(&t, &[(&a, c)], 100)[0];
            let got = eps(s)[0].conditions.clone().unwrap();
            assert_eq!(
                (got.ready, got.serving, got.terminating),
                (Some(ready), Some(serving), Some(terminating))
            );
        }
    }

    #[test]
    fn dual_stack_pods_land_in_one_slice_per_family_one_address_per_endpoint() {
        let t = target("team-a/m");
        let a = candidate(
            "a",
            &["192.168.2.4", "fd00::4", "192.168.3.4"],
            json!({"containers": []}),
        );
        let slices = desired_slices(&t, &[(&a, READY)], 100);
        let summary: Vec<_> = slices
            .iter()
            .map(|s| (s.name_any(), s.address_type.clone(), addresses(s)))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "web-ipv4-0".to_string(),
                    "IPv4".to_string(),
                    vec!["192.168.2.4".to_string(), "192.168.3.4".to_string()]
                ),
                (
                    "web-ipv6-0".to_string(),
                    "IPv6".to_string(),
                    vec!["fd00::4".to_string()]
                ),
            ]
        );
        assert!(slices.iter().flat_map(eps).all(|e| e.addresses.len() == 1));
    }

    #[test]
    fn ip_families_of_the_service_limit_the_slices() {
        let mut t = target("team-a/m");
        t.ip_families = Some(vec![Family::V6]);
        let a = candidate(
            "a",
            &["192.168.2.4", "FD00:0:0::4"],
            json!({"containers": []}),
        );
        let slices = desired_slices(&t, &[(&a, READY)], 100);
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].address_type, "IPv6");
        assert_eq!(
            addresses(&slices[0]),
            vec!["fd00::4"],
            "addresses are canonical"
        );
    }

    #[test]
    fn two_hundred_fifty_pods_give_three_slices_with_each_endpoint_once() {
        let t = target("team-a/m");
        let pods: Vec<Candidate> = (0..250)
            .map(|i| {
                simple(
                    &format!("pod-{i:03}"),
                    &format!("10.1.{}.{}", i / 200, i % 200 + 1),
                )
            })
            .collect();
        let included: Vec<_> = pods.iter().map(|c| (c, READY)).collect();
        let slices = desired_slices(&t, &included, 100);
        let sizes: Vec<_> = slices
            .iter()
            .map(|s| (s.name_any(), eps(s).len()))
            .collect();
        assert_eq!(
            sizes,
            vec![
                ("web-ipv4-0".to_string(), 100),
                ("web-ipv4-1".to_string(), 100),
                ("web-ipv4-2".to_string(), 50)
            ]
        );
        let mut seen: Vec<String> = slices
            .iter()
            .flat_map(|s| {
                eps(s)
                    .iter()
                    .map(|e| e.target_ref.clone().unwrap().name.unwrap())
            })
            .collect();
        let total = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!((total, seen.len()), (250, 250));
        // The same input in another order plans the same slices.
        let reversed: Vec<_> = included.iter().rev().cloned().collect();
        assert_eq!(desired_slices(&t, &reversed, 100), slices);
    }

    #[test]
    fn the_slice_size_is_clamped_to_what_the_api_accepts() {
        let t = target("team-a/m");
        let pods: Vec<Candidate> = (0..1001)
            .map(|i| {
                simple(
                    &format!("p{i:04}"),
                    &format!("10.2.{}.{}", i / 250, i % 250 + 1),
                )
            })
            .collect();
        let included: Vec<_> = pods.iter().map(|c| (c, READY)).collect();
        let sizes: Vec<_> = desired_slices(&t, &included, 5000)
            .iter()
            .map(|s| eps(s).len())
            .collect();
        assert_eq!(sizes, vec![1000, 1]);
        assert_eq!(desired_slices(&t, &included[..3], 0).len(), 3);
    }

    #[test]
    fn named_target_ports_resolve_per_pod_and_group_pods_by_port_set() {
        let mut t = target("team-a/m");
        t.ports = service_ports(json!([
            {"name": "http", "port": 80, "targetPort": "web"},
            {"name": "metrics", "port": 9090, "targetPort": 9100},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"},
        ]));
        let containers = |port: i32| {
            json!({"containers": [
                {"name": "c", "ports": [{"name": "web", "containerPort": port}, {"name": "dns", "containerPort": 5353, "protocol": "TCP"}]}
            ]})
        };
        let a = candidate("a", &["10.0.0.1"], containers(8080));
        let b = candidate("b", &["10.0.0.2"], containers(8080));
        let c = candidate("c", &["10.0.0.3"], containers(8081));
        let slices = desired_slices(&t, &[(&a, READY), (&b, READY), (&c, READY)], 100);
        assert_eq!(slices.len(), 2);
        type PortsAndAddresses = (Vec<(Option<String>, Option<i32>)>, Vec<String>);
        let by_ports: Vec<PortsAndAddresses> = slices
            .iter()
            .map(|s| {
                (
                    s.ports
                        .clone()
                        .unwrap()
                        .into_iter()
                        .map(|p| (p.name, p.port))
                        .collect(),
                    addresses(s),
                )
            })
            .collect();
        assert!(by_ports.contains(&(
            vec![
                (Some("http".into()), Some(8080)),
                (Some("metrics".into()), Some(9100))
            ],
            vec!["10.0.0.1".into(), "10.0.0.2".into()]
        )));
        assert!(
            by_ports.contains(&(
                vec![
                    (Some("http".into()), Some(8081)),
                    (Some("metrics".into()), Some(9100))
                ],
                vec!["10.0.0.3".into()]
            )),
            "{by_ports:?}"
        );
        // Two port sets in one family: a slice each, named in turn.
        let names: Vec<_> = slices.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["web-ipv4-0", "web-ipv4-1"]);
    }

    #[test]
    fn missing_target_port_defaults_to_the_port_and_unnamed_ports_get_an_empty_name() {
        let mut t = target("team-a/m");
        t.ports = service_ports(json!([{"port": 80}]));
        let a = simple("a", "10.0.0.1");
        let s = &desired_slices(&t, &[(&a, READY)], 100)[0];
        let p = &s.ports.as_ref().unwrap()[0];
        assert_eq!(
            (p.name.as_deref(), p.port, p.protocol.as_deref()),
            (Some(""), Some(80), Some("TCP"))
        );
    }

    #[test]
    fn zone_node_name_and_hostname_follow_kubernetes_rules() {
        let t = target("team-a/m");
        let mut with_subdomain = candidate(
            "a",
            &["10.0.0.1"],
            json!({"containers": [], "nodeName": "n1", "hostname": "db-0", "subdomain": "web"}),
        );
        with_subdomain.zone = Some("zone-a".into());
        let other_subdomain = candidate(
            "b",
            &["10.0.0.2"],
            json!({"containers": [], "hostname": "db-1", "subdomain": "other"}),
        );
        let no_subdomain = candidate(
            "c",
            &["10.0.0.3"],
            json!({"containers": [], "hostname": "db-2"}),
        );
        let s = &desired_slices(
            &t,
            &[
                (&with_subdomain, READY),
                (&other_subdomain, READY),
                (&no_subdomain, READY),
            ],
            100,
        )[0];
        let e: Vec<_> = eps(s)
            .iter()
            .map(|e| (e.hostname.clone(), e.node_name.clone(), e.zone.clone()))
            .collect();
        assert_eq!(
            e,
            vec![
                (
                    Some("db-0".into()),
                    Some("n1".into()),
                    Some("zone-a".into())
                ),
                (None, None, None),
                (None, None, None),
            ]
        );
    }

    fn aged(name: &str, ips: &[&str], created: Option<&str>) -> Candidate {
        let mut c = candidate(name, ips, json!({"containers": []}));
        let mut pod = (*c.pod).clone();
        pod.created = nad_model::pod::Stamp::of(created.map(|t| t.parse().unwrap()));
        c.pod = Arc::new(pod);
        c
    }

    #[test]
    fn an_address_claimed_by_two_pods_is_published_once_for_the_older_pod() {
        let t = target("team-a/m");
        let old = aged(
            "z-old",
            &["192.168.2.9", "192.168.2.10"],
            Some("2026-01-01T00:00:00Z"),
        );
        let new = aged(
            "a-new",
            &["192.168.2.9", "192.168.2.11"],
            Some("2026-06-01T00:00:00Z"),
        );
        let unknown = aged("0-unknown", &["192.168.2.9"], None);
        let included = [(&new, READY), (&unknown, READY), (&old, READY)];
        let got = desired(&t, &included);
        let owners: Vec<_> = got.groups[0]
            .endpoints
            .iter()
            .map(|e| {
                (
                    e.addresses[0].clone(),
                    e.target_ref.as_ref().unwrap().name.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            owners,
            vec![
                ("192.168.2.11".to_owned(), "a-new".to_owned()),
                ("192.168.2.10".to_owned(), "z-old".to_owned()),
                ("192.168.2.9".to_owned(), "z-old".to_owned()),
            ]
        );
        let ip: IpAddr = "192.168.2.9".parse().unwrap();
        assert_eq!(
            got.conflicts,
            vec![
                Conflict {
                    address: ip,
                    kept: "z-old".into(),
                    left_out: "0-unknown".into()
                },
                Conflict {
                    address: ip,
                    kept: "z-old".into(),
                    left_out: "a-new".into()
                },
            ]
        );
        let same_age = [
            aged("b", &["192.168.2.9"], Some("2026-01-01T00:00:00Z")),
            aged("a", &["192.168.2.9"], Some("2026-01-01T00:00:00Z")),
        ];
        let got = desired(&t, &[(&same_age[0], READY), (&same_age[1], READY)]);
        assert_eq!(got.conflicts[0].kept, "a", "same age: the name decides");
    }

    #[test]
    fn an_endpoint_the_api_would_reject_is_left_out_alone() {
        let t = target("team-a/m");
        let bad = candidate(
            "bad",
            &["192.168.2.1"],
            json!({"containers": [], "hostname": "Not_A_Label", "subdomain": "web"}),
        );
        let good = simple("good", "192.168.2.2");
        let got = desired(&t, &[(&bad, READY), (&good, READY)]);
        let kept: Vec<_> = got.groups[0]
            .endpoints
            .iter()
            .map(|e| &e.addresses[0])
            .collect();
        assert_eq!(kept, vec!["192.168.2.2"]);
        assert_eq!(got.dropped.len(), 1);
        assert_eq!(got.dropped[0].pod, "bad");
        assert_eq!(got.dropped[0].violations[0].field, "endpoint.hostname");
    }

    #[test]
    fn no_included_pods_means_no_slices() {
        assert!(desired_slices(&target("team-a/m"), &[], 100).is_empty());
    }

    #[test]
    fn split_pairs_decisions_with_candidates() {
        let pods = vec![simple("a", "10.0.0.1"), simple("b", "10.0.0.2")];
        let decisions = vec![Decision::Exclude("no".into()), Decision::Include(READY)];
        let Split {
            included: inc,
            excluded: exc,
        } = split(&pods, &decisions);
        assert_eq!(inc.len(), 1);
        assert_eq!(inc[0].0.name(), "b");
        assert_eq!(exc[0].1, "no");
    }
}
