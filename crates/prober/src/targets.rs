//! What one prober probes: the pods of its node that a managed Service on one of its networks
//! publishes (they are in the Service's EndpointSlices, ready or not), on the addresses and
//! ports published there, with the checks the Service asks for. Pure: Services, this
//! controller's slices and the node's pod records in, targets out.
//!
//! Published, not merely attached: a Service's policy may leave an attached pod out (another
//! `app`, say), and that pod need not answer on the Service's ports. A pod that does not
//! answer stays published, not serving (the default plugin's rule), so it stays probed and
//! comes back when it answers again. A plugin that leaves such a pod out altogether stops its
//! probing: its condition then stays `False` until the pod is published again.
//!
//! A pod's condition is per network, so a pod of two Services on one network is probed on
//! the union of their checks (it answers on that network only if it answers every Service
//! there that publishes it), with the timing of the first Service by name.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::ResourceExt;

use nad_model::{
    input::{network_ready::Status, target::ServiceTarget},
    labels::SERVICE_NAME_LABEL,
    pod::PodRecord,
    probe::{self as spec, Check, Port, Timing},
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
        headers: Vec<(String, String)>,
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
    pub timing: Timing,
    /// The network readiness condition the pod carries now, if any.
    pub known: Option<bool>,
    /// The Services it is probed for, `namespace/name`.
    pub services: Vec<String>,
}

impl Target {
    /// Whether `other` probes the same things the same way (the known status aside).
    pub fn same_probe(&self, other: &Target) -> bool {
        self.uid == other.uid
            && self.addresses == other.addresses
            && self.checks == other.checks
            && self.timing == other.timing
    }
}

/// A check the Service's probe asks for that cannot be made on a pod, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unprobed {
    pub key: TargetKey,
    pub reason: String,
}

/// The targets of `networks` among `pods` (the node's), as `slices` (this controller's) publish
/// them for `services` (every managed one).
pub fn targets<'a>(
    networks: &[String],
    services: impl IntoIterator<Item = &'a ServiceTarget>,
    slices: &[Arc<EndpointSlice>],
    pods: &[Arc<PodRecord>],
) -> (BTreeMap<TargetKey, Target>, Vec<Unprobed>) {
    let services: HashMap<(&str, &str), &ServiceTarget> = services
        .into_iter()
        .filter(|s| networks.contains(&s.network))
        .map(|s| ((s.namespace.as_str(), s.name.as_str()), s))
        .collect();
    let pods: HashMap<(&str, &str), &PodRecord> = pods
        .iter()
        .map(|p| ((&*p.namespace, &*p.name), &**p))
        .collect();
    let mut targets: BTreeMap<TargetKey, Target> = BTreeMap::new();
    let mut unprobed = Vec::new();
    for slice in by_service(slices) {
        let namespace = slice.namespace().unwrap_or_default();
        let Some(service) = slice
            .labels()
            .get(SERVICE_NAME_LABEL)
            .and_then(|name| services.get(&(namespace.as_str(), name.as_str())))
        else {
            continue;
        };
        let (spec, _) = spec::parse(service.annotations.get(spec::ANNOTATION));
        let published_ports = published_tcp_ports(slice);
        for endpoint in slice.endpoints.iter().flatten() {
            let Some(pod) = endpoint
                .target_ref
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .and_then(|name| pods.get(&(namespace.as_str(), name)))
            else {
                continue; // not a pod of this node
            };
            let key = (
                namespace.clone(),
                pod.name.to_string(),
                service.network.clone(),
            );
            let (checks, missing) = resolve(&spec.check, &published_ports, service, pod);
            if let Some(reason) = missing {
                unprobed.push(Unprobed {
                    key: key.clone(),
                    reason,
                });
            }
            let addresses = endpoint_addresses(endpoint);
            if checks.is_empty() || addresses.is_empty() {
                continue;
            }
            let target = targets
                .entry(key)
                .or_insert_with(|| new_target(pod, &service.network, spec.timing));
            add_to_target(target, addresses, checks, service);
        }
    }
    (targets, unprobed)
}

/// `slices` in the order of their Services (namespace, then name), so that a pod of two
/// Services on a network takes the timing of the first by name.
fn by_service(slices: &[Arc<EndpointSlice>]) -> Vec<&EndpointSlice> {
    let mut slices: Vec<&EndpointSlice> = slices.iter().map(|s| &**s).collect();
    slices.sort_by_key(|s| {
        (
            s.namespace(),
            s.labels().get(SERVICE_NAME_LABEL).cloned(),
            s.name_any(),
        )
    });
    slices
}

/// The TCP ports `slice` publishes (a port without a protocol is TCP).
fn published_tcp_ports(slice: &EndpointSlice) -> Vec<u16> {
    slice
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
        .filter_map(|p| u16::try_from(p.port?).ok())
        .collect()
}

/// The addresses an endpoint publishes, those that are IP addresses.
fn endpoint_addresses(endpoint: &Endpoint) -> Vec<IpAddr> {
    endpoint
        .addresses
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// A target for `pod` on `network` with `timing`, probing nothing yet; it starts from the
/// readiness the pod carries on that network, if any.
fn new_target(pod: &PodRecord, network: &str, timing: Timing) -> Target {
    Target {
        uid: pod.uid.to_string(),
        addresses: Vec::new(),
        checks: Vec::new(),
        timing,
        known: pod.network_readiness(network).and_then(|c| match c.status {
            Status::True => Some(true),
            Status::False => Some(false),
            Status::Unknown => None,
        }),
        services: Vec::new(),
    }
}

/// Adds one endpoint's `addresses` and `checks`, and `service` as `namespace/name`, to
/// `target`: each once, the addresses and checks sorted.
fn add_to_target(
    target: &mut Target,
    addresses: Vec<IpAddr>,
    checks: Vec<Resolved>,
    service: &ServiceTarget,
) {
    // One slice per address family: a dual-stack pod's addresses come from two.
    for address in addresses {
        if !target.addresses.contains(&address) {
            target.addresses.push(address);
        }
    }
    target.addresses.sort();
    for check in checks {
        if !target.checks.contains(&check) {
            target.checks.push(check);
        }
    }
    target.checks.sort();
    let name = format!("{}/{}", service.namespace, service.name);
    if !target.services.contains(&name) {
        target.services.push(name);
    }
}

/// The checks `check` makes on `pod` for `service` (whose slice publishes `published` TCP
/// ports for it), and the first port it could not resolve.
fn resolve(
    check: &Check,
    published: &[u16],
    service: &ServiceTarget,
    pod: &PodRecord,
) -> (Vec<Resolved>, Option<String>) {
    let port = |port: &Port| {
        match port {
        Port::Number(n) => Ok(*n),
        Port::Name(name) => pod
            .named_port(name, "TCP")
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| {
                format!(
                    "pod has no TCP container port named {name:?} (the isim.dev/probe of Service {}/{})",
                    service.namespace, service.name
                )
            }),
    }
    };
    match check {
        Check::Tcp(p) => match port(p) {
            Ok(p) => (vec![Resolved::Tcp(p)], None),
            Err(e) => (Vec::new(), Some(e)),
        },
        Check::Http {
            port: p,
            path,
            headers,
            status,
        } => match port(p) {
            Ok(port) => (
                vec![Resolved::Http {
                    port,
                    path: path.clone(),
                    headers: headers.clone(),
                    status: *status,
                }],
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        },
        // The ports as published: named target ports already resolved for this pod.
        Check::ServicePorts => (published.iter().map(|p| Resolved::Tcp(*p)).collect(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use nad_model::keys::Keys;
    use serde_json::json;
    use std::time::Duration;

    fn service(name: &str, network: &str, probe: Option<&str>) -> ServiceTarget {
        ServiceTarget {
            name: name.into(),
            namespace: "team-a".into(),
            uid: format!("uid-{name}"),
            network: network.into(),
            labels: Default::default(),
            annotations: probe
                .map(|p| [(spec::ANNOTATION, p)].into())
                .unwrap_or_default(),
            ports: Vec::new(),
            ip_families: None,
            publish_not_ready_addresses: false,
        }
    }

    fn pod(name: &str, condition: Option<&str>) -> Arc<PodRecord> {
        let conditions: Vec<serde_json::Value> = condition
            .map(|s| json!({"type": "network-ready.isim.dev/team-a.macvlan", "status": s}))
            .into_iter()
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}")},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "conditions": conditions},
        }))
        .unwrap();
        Arc::new(PodRecord::from_pod(&pod, &Keys::default()))
    }

    /// A slice of Service `service` publishing `endpoints` (pod, addresses) on `ports`.
    fn slice(
        name: &str,
        service: &str,
        ports: serde_json::Value,
        endpoints: &[(&str, &[&str])],
    ) -> Arc<EndpointSlice> {
        let endpoints: Vec<serde_json::Value> = endpoints
            .iter()
            .map(|(pod, addresses)| {
                json!({"addresses": addresses, "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "name": pod, "namespace": "team-a"}})
            })
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "team-a",
                             "labels": {SERVICE_NAME_LABEL: service}},
                "addressType": "IPv4", "ports": ports, "endpoints": endpoints,
            }))
            .unwrap(),
        )
    }

    fn macvlan() -> Vec<String> {
        vec!["team-a/macvlan".to_owned()]
    }

    #[test]
    fn published_pods_of_the_node_are_probed_on_every_address_and_published_port() {
        let web = service("web", "team-a/macvlan", None);
        let other = service("other", "team-a/sriov", None);
        let slices = [
            slice(
                "web-ipv4-0",
                "web",
                json!([{"port": 8080}, {"port": 9000}, {"port": 53, "protocol": "UDP"}]),
                &[("a", &["192.168.2.4"]), ("elsewhere", &["192.168.2.9"])],
            ),
            slice(
                "web-ipv6-0",
                "web",
                json!([{"port": 8080}, {"port": 9000}]),
                &[("a", &["fd00::4"])],
            ),
            slice(
                "other-ipv4-0",
                "other",
                json!([{"port": 80}]),
                &[("b", &["10.9.0.2"])],
            ),
        ];
        let pods = [
            pod("a", Some("True")),
            pod("b", None),
            pod("unpublished", None),
        ];
        let (found, unprobed) = targets(&macvlan(), [&web, &other], &slices, &pods);
        assert!(unprobed.is_empty());
        assert_eq!(found.len(), 1, "{found:?}");
        let a = &found[&("team-a".into(), "a".into(), "team-a/macvlan".into())];
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
        assert_eq!(a.timing.period, Duration::from_secs(2));
    }

    #[test]
    fn two_services_on_a_network_probe_the_union_with_the_first_ones_timing() {
        let api = service(
            "api",
            "team-a/macvlan",
            Some(r#"{"httpGet": {"port": "http", "path": "/ready"}, "periodSeconds": 5}"#),
        );
        let web = service("web", "team-a/macvlan", None);
        let slices = [
            slice(
                "web-ipv4-0",
                "web",
                json!([{"port": 8080}]),
                &[("a", &["192.168.2.4"])],
            ),
            slice(
                "api-ipv4-0",
                "api",
                json!([{"port": 80}]),
                &[("a", &["192.168.2.4"])],
            ),
        ];
        let pods = [pod("a", None)];
        let (found, _) = targets(&macvlan(), [&web, &api], &slices, &pods);
        let a = found.values().next().unwrap();
        assert_eq!(
            a.checks,
            [
                Resolved::Tcp(8080),
                Resolved::Http {
                    port: 8080,
                    path: "/ready".into(),
                    headers: Vec::new(),
                    status: None
                }
            ]
        );
        assert_eq!(a.timing.period, Duration::from_secs(5), "api sorts first");
        assert_eq!(a.services, ["team-a/api", "team-a/web"]);
        assert_eq!(a.known, None);
    }

    #[test]
    fn a_named_probe_port_the_pod_lacks_is_said_and_udp_is_not_probed() {
        let web = service(
            "web",
            "team-a/macvlan",
            Some(r#"{"tcpSocket": {"port": "grpc"}}"#),
        );
        let slices = [slice(
            "web-ipv4-0",
            "web",
            json!([{"port": 8080}]),
            &[("a", &["192.168.2.4"])],
        )];
        let pods = [pod("a", None)];
        let (found, unprobed) = targets(&macvlan(), [&web], &slices, &pods);
        assert!(found.is_empty());
        assert!(unprobed[0].reason.contains("\"grpc\""), "{unprobed:?}");
        let dns = service("dns", "team-a/macvlan", None);
        let slices = [slice(
            "dns-ipv4-0",
            "dns",
            json!([{"port": 53, "protocol": "UDP"}]),
            &[("a", &["192.168.2.4"])],
        )];
        let (none, _) = targets(&macvlan(), [&dns], &slices, &pods);
        assert!(none.is_empty(), "nothing a TCP probe can check");
    }
}
