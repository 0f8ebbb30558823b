//! What one prober probes: the pods of its node that are candidates of a managed Service on
//! one of its networks, each with the addresses the controller publishes and the checks the
//! Services ask for. Pure: Services and pod records in, targets out.
//!
//! A pod's condition is per network, so a pod of two Services on one network is probed on
//! the union of their checks (it answers on that network only if it answers every Service
//! there), with the timing of the first Service by name.

use std::{collections::BTreeMap, net::IpAddr, sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::spec::{self, Check, Port, ProbeSpec};
use crate::{
    index::PodRecord,
    input::{network_ready::Status, target::ServiceTarget},
    reconcile::observe,
};

/// A pod on a network: `(namespace, pod name, network)`.
pub type TargetKey = (String, String, String);

/// One check, its port resolved for the pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolved {
    Tcp(u16),
    Http {
        port: u16,
        path: String,
        status: Option<u16>,
    },
}

/// One pod to probe on one network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub uid: String,
    /// The addresses the controller publishes (every one is probed).
    pub addresses: Vec<IpAddr>,
    pub checks: Vec<Resolved>,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// The network readiness condition the pod carries now, if any.
    pub known: Option<bool>,
    /// The Services it is probed for, `namespace/name`.
    pub services: Vec<String>,
}

impl Target {
    pub fn spec(&self) -> ProbeSpec {
        ProbeSpec {
            check: Check::ServicePorts,
            period: self.period,
            timeout: self.timeout,
            success_threshold: self.success_threshold,
            failure_threshold: self.failure_threshold,
        }
    }

    /// Whether `other` probes the same things the same way (the known status aside).
    pub fn same_probe(&self, other: &Target) -> bool {
        self.uid == other.uid
            && self.addresses == other.addresses
            && self.checks == other.checks
            && self.spec() == other.spec()
    }
}

/// A pod the Services' probes cannot check, and why (a named port it lacks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unprobed {
    pub key: TargetKey,
    pub reason: String,
}

/// The targets of `networks` among `pods` (the node's), for `services` (every managed one).
pub fn targets<'a>(
    networks: &[String],
    services: impl IntoIterator<Item = &'a ServiceTarget>,
    pods: &[Arc<PodRecord>],
) -> (BTreeMap<TargetKey, Target>, Vec<Unprobed>) {
    let mut services: Vec<&ServiceTarget> = services
        .into_iter()
        .filter(|s| networks.contains(&s.network))
        .collect();
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut targets: BTreeMap<TargetKey, Target> = BTreeMap::new();
    let mut unprobed = Vec::new();
    for service in services {
        let (spec, _) = spec::parse(
            service
                .annotations
                .get(spec::ANNOTATION)
                .map(String::as_str),
        );
        // Every node is known to the prober: it only probes its own.
        let observation = observe::candidates(service, pods, |_| Some(None));
        for candidate in &observation.candidates {
            let pod = &candidate.pod;
            let key = (
                pod.namespace.clone(),
                pod.name.clone(),
                service.network.clone(),
            );
            let (checks, missing) = resolve(&spec.check, service, pod);
            if let Some(reason) = missing {
                unprobed.push(Unprobed {
                    key: key.clone(),
                    reason,
                });
            }
            if checks.is_empty() || candidate.ips.is_empty() {
                continue;
            }
            let target = targets.entry(key).or_insert_with(|| Target {
                uid: pod.uid.clone(),
                addresses: candidate.ips.clone(),
                checks: Vec::new(),
                period: spec.period,
                timeout: spec.timeout,
                success_threshold: spec.success_threshold,
                failure_threshold: spec.failure_threshold,
                known: pod
                    .network_readiness(&service.network)
                    .and_then(|c| match c.status {
                        Status::True => Some(true),
                        Status::False => Some(false),
                        Status::Unknown => None,
                    }),
                services: Vec::new(),
            });
            for check in checks {
                if !target.checks.contains(&check) {
                    target.checks.push(check);
                }
            }
            target.checks.sort();
            target
                .services
                .push(format!("{}/{}", service.namespace, service.name));
        }
    }
    (targets, unprobed)
}

/// The checks `check` makes on `pod` for `service`, and the first port it could not resolve.
fn resolve(
    check: &Check,
    service: &ServiceTarget,
    pod: &PodRecord,
) -> (Vec<Resolved>, Option<String>) {
    let named = |name: &str| {
        pod.named_port(name, "TCP")
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| {
                format!(
                    "pod has no TCP container port named {name:?} (Service {}/{})",
                    service.namespace, service.name
                )
            })
    };
    let port = |port: &Port| match port {
        Port::Number(n) => Ok(*n),
        Port::Name(name) => named(name),
    };
    match check {
        Check::Tcp(p) => match port(p) {
            Ok(p) => (vec![Resolved::Tcp(p)], None),
            Err(e) => (Vec::new(), Some(e)),
        },
        Check::Http {
            port: p,
            path,
            status,
        } => match port(p) {
            Ok(port) => (
                vec![Resolved::Http {
                    port,
                    path: path.clone(),
                    status: *status,
                }],
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        },
        Check::ServicePorts => {
            let mut checks = Vec::new();
            let mut missing = None;
            // Only TCP can be connected to; UDP and SCTP ports are not probed.
            for p in service
                .ports
                .iter()
                .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
            {
                let resolved = match &p.target_port {
                    Some(IntOrString::Int(n)) => {
                        u16::try_from(*n).map_err(|_| format!("target port {n}"))
                    }
                    Some(IntOrString::String(name)) => named(name),
                    None => u16::try_from(p.port).map_err(|_| format!("port {}", p.port)),
                };
                match resolved {
                    Ok(port) if !checks.contains(&Resolved::Tcp(port)) => {
                        checks.push(Resolved::Tcp(port));
                    }
                    Ok(_) => {}
                    Err(e) => missing = missing.or(Some(e)),
                }
            }
            (checks, missing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Keys;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn service(
        name: &str,
        network: &str,
        ports: serde_json::Value,
        probe: Option<&str>,
    ) -> ServiceTarget {
        ServiceTarget {
            name: name.into(),
            namespace: "team-a".into(),
            uid: format!("uid-{name}"),
            network: network.into(),
            labels: BTreeMap::new(),
            annotations: probe
                .map(|p| BTreeMap::from([(spec::ANNOTATION.to_owned(), p.to_owned())]))
                .unwrap_or_default(),
            ports: serde_json::from_value(ports).unwrap(),
            ip_families: None,
            publish_not_ready_addresses: false,
        }
    }

    fn pod(name: &str, networks: serde_json::Value, condition: Option<&str>) -> Arc<PodRecord> {
        let conditions: Vec<serde_json::Value> = condition
            .map(|s| json!({"type": "network-ready.isim.dev/team-a.macvlan", "status": s}))
            .into_iter()
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                "annotations": {"k8s.v1.cni.cncf.io/network-status": networks.to_string()}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
            "status": {"phase": "Running", "conditions": conditions},
        }))
        .unwrap();
        Arc::new(PodRecord::from_pod(&pod, &Keys::default()))
    }

    fn macvlan(ips: &[&str]) -> serde_json::Value {
        json!([{"name": "team-a/macvlan", "interface": "net1", "ips": ips}])
    }

    #[test]
    fn pods_of_the_probers_networks_are_probed_on_every_address_and_service_port() {
        let networks = vec!["team-a/macvlan".to_owned()];
        let web = service(
            "web",
            "team-a/macvlan",
            json!([{"name": "http", "port": 80, "targetPort": "http"}, {"name": "admin", "port": 9000},
                   {"name": "dns", "port": 53, "protocol": "UDP"}]),
            None,
        );
        let other = service("other", "team-a/sriov", json!([{"port": 80}]), None);
        let pods = [
            pod("a", macvlan(&["192.168.2.4", "fd00::4"]), Some("True")),
            pod(
                "b",
                json!([{"name": "team-a/sriov", "ips": ["10.9.0.2"]}]),
                None,
            ),
        ];
        let (targets, unprobed) = targets(&networks, [&web, &other], &pods);
        assert!(unprobed.is_empty());
        assert_eq!(targets.len(), 1, "{targets:?}");
        let a = &targets[&("team-a".into(), "a".into(), "team-a/macvlan".into())];
        assert_eq!(
            a.addresses,
            [
                "192.168.2.4".parse::<IpAddr>().unwrap(),
                "fd00::4".parse().unwrap()
            ]
        );
        assert_eq!(a.checks, [Resolved::Tcp(8080), Resolved::Tcp(9000)]);
        assert_eq!(a.known, Some(true));
        assert_eq!(a.services, ["team-a/web"]);
        assert_eq!(a.period, Duration::from_secs(2));
    }

    #[test]
    fn two_services_on_a_network_probe_the_union_with_the_first_ones_timing() {
        let networks = vec!["team-a/macvlan".to_owned()];
        let api = service(
            "api",
            "team-a/macvlan",
            json!([{"port": 80, "targetPort": 8080}]),
            Some(r#"{"httpGet": {"port": "http", "path": "/ready"}, "periodSeconds": 5}"#),
        );
        let web = service(
            "web",
            "team-a/macvlan",
            json!([{"port": 80, "targetPort": 8080}]),
            None,
        );
        let pods = [pod("a", macvlan(&["192.168.2.4"]), None)];
        let (targets, _) = targets(&networks, [&web, &api], &pods);
        let a = targets.values().next().unwrap();
        assert_eq!(
            a.checks,
            [
                Resolved::Tcp(8080),
                Resolved::Http {
                    port: 8080,
                    path: "/ready".into(),
                    status: None
                }
            ]
        );
        assert_eq!(a.period, Duration::from_secs(5), "api sorts first");
        assert_eq!(a.services, ["team-a/api", "team-a/web"]);
        assert_eq!(a.known, None);
    }

    #[test]
    fn a_named_port_the_pod_lacks_is_said_and_other_ports_still_probed() {
        let networks = vec!["team-a/macvlan".to_owned()];
        let web = service(
            "web",
            "team-a/macvlan",
            json!([{"name": "a", "port": 80, "targetPort": "grpc"}, {"name": "b", "port": 81, "targetPort": "http"}]),
            None,
        );
        let pods = [pod("a", macvlan(&["192.168.2.4"]), None)];
        let (found, unprobed) = targets(&networks, [&web], &pods);
        assert_eq!(found.values().next().unwrap().checks, [Resolved::Tcp(8080)]);
        assert!(unprobed[0].reason.contains("\"grpc\""), "{unprobed:?}");
        let udp_only = service(
            "dns",
            "team-a/macvlan",
            json!([{"port": 53, "protocol": "UDP"}]),
            None,
        );
        let (none, _) = targets(&networks, [&udp_only], &pods);
        assert!(none.is_empty(), "nothing a TCP probe can check");
    }
}
