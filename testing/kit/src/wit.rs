//! Builders of the WIT records the host gives a plugin ([`wit::Pod`], [`wit::Service`]), for the
//! host's tests and benchmarks: a running, ready pod and a plain Service, changed by chained
//! calls, so that a test spells out only what it is about.
//!
//! ```
//! use nad_test_kit::wit::{pod, service};
//!
//! let web = service("web").label("app", "web").build();
//! let db = pod("db-0").label("app", "db").ready(false).zone("zone-b").build();
//! assert_eq!(web.labels[0].value, "web");
//! assert!(!db.ready && db.zone == "zone-b");
//! ```
//!
//! Labels and annotations are kept sorted by key, as the host sends them.

use nad_plugin_runtime::wit;

/// A pod record being built; [`pod`] starts one, [`PodBuilder::build`] ends it. A record the
/// controller made can be changed too: `PodBuilder::from(record)`.
#[derive(Debug, Clone)]
pub struct PodBuilder(wit::Pod);

/// A pod named `name` in namespace `ns`, with uid `uid-<name>`: Running, Ready, not
/// terminating, on node `node-a` in zone `zone-a`, with one address (`192.0.2.1`), and no
/// labels or annotations.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(wit::Pod {
        name: name.to_owned(),
        namespace: "ns".to_owned(),
        uid: format!("uid-{name}"),
        labels: Vec::new(),
        annotations: Vec::new(),
        phase: wit::PodPhase::Running,
        ready: true,
        terminating: false,
        node_name: "node-a".to_owned(),
        zone: "zone-a".to_owned(),
        ips: vec!["192.0.2.1".to_owned()],
    })
}

impl From<wit::Pod> for PodBuilder {
    fn from(pod: wit::Pod) -> Self {
        PodBuilder(pod)
    }
}

impl From<PodBuilder> for wit::Pod {
    fn from(builder: PodBuilder) -> Self {
        builder.build()
    }
}

impl PodBuilder {
    /// The record.
    pub fn build(self) -> wit::Pod {
        self.0
    }

    /// Sets `metadata.name` (the uid stays as it was).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.0.name = name.into();
        self
    }

    /// Sets `metadata.namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.0.namespace = namespace.into();
        self
    }

    /// Sets `metadata.uid`.
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.0.uid = uid.into();
        self
    }

    /// Sets label `key` to `value`, replacing any value it had.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        set(&mut self.0.labels, key.into(), value.into());
        self
    }

    /// Sets each of `labels`, as [`Self::label`] does.
    pub fn labels<K, V>(self, labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        labels
            .into_iter()
            .fold(self, |pod, (key, value)| pod.label(key, value))
    }

    /// Sets annotation `key` to `value`, replacing any value it had.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        set(&mut self.0.annotations, key.into(), value.into());
        self
    }

    /// Sets each of `annotations`, as [`Self::annotation`] does.
    pub fn annotations<K, V>(self, annotations: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        annotations
            .into_iter()
            .fold(self, |pod, (key, value)| pod.annotation(key, value))
    }

    /// Sets `status.phase`.
    pub fn phase(mut self, phase: wit::PodPhase) -> Self {
        self.0.phase = phase;
        self
    }

    /// Whether the pod's `Ready` condition is `True`.
    pub fn ready(mut self, ready: bool) -> Self {
        self.0.ready = ready;
        self
    }

    /// Whether the pod has a `deletionTimestamp`.
    pub fn terminating(mut self, terminating: bool) -> Self {
        self.0.terminating = terminating;
        self
    }

    /// Sets `spec.nodeName` (empty: unscheduled).
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.0.node_name = node.into();
        self
    }

    /// Sets the node's zone (empty: unknown).
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.0.zone = zone.into();
        self
    }

    /// Sets the pod's addresses on the Service's network, replacing those it had.
    pub fn ips<S: Into<String>>(mut self, ips: impl IntoIterator<Item = S>) -> Self {
        self.0.ips = ips.into_iter().map(Into::into).collect();
        self
    }

    /// Leaves the pod without addresses (which the host never sends: for measuring what the
    /// addresses cost to cross).
    pub fn no_ips(mut self) -> Self {
        self.0.ips.clear();
        self
    }
}

/// A Service record being built; [`service`] starts one, [`ServiceBuilder::build`] ends it.
#[derive(Debug, Clone)]
pub struct ServiceBuilder(wit::Service);

/// Service `name` in namespace `ns` on network `ns/macvlan`: no labels, annotations or ports,
/// and not publishing not-ready addresses.
pub fn service(name: &str) -> ServiceBuilder {
    ServiceBuilder(wit::Service {
        name: name.to_owned(),
        namespace: "ns".to_owned(),
        labels: Vec::new(),
        annotations: Vec::new(),
        ports: Vec::new(),
        publish_not_ready_addresses: false,
        network: "ns/macvlan".to_owned(),
    })
}

impl From<wit::Service> for ServiceBuilder {
    fn from(service: wit::Service) -> Self {
        ServiceBuilder(service)
    }
}

impl From<ServiceBuilder> for wit::Service {
    fn from(builder: ServiceBuilder) -> Self {
        builder.build()
    }
}

impl ServiceBuilder {
    /// The record.
    pub fn build(self) -> wit::Service {
        self.0
    }

    /// Sets `metadata.name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.0.name = name.into();
        self
    }

    /// Sets `metadata.namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.0.namespace = namespace.into();
        self
    }

    /// Sets label `key` to `value`, replacing any value it had.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        set(&mut self.0.labels, key.into(), value.into());
        self
    }

    /// Sets annotation `key` to `value`, replacing any value it had.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        set(&mut self.0.annotations, key.into(), value.into());
        self
    }

    /// Adds a TCP port `name` (empty: unnamed) on `port`, to target port number `target`.
    pub fn port(mut self, name: impl Into<String>, port: u16, target: u16) -> Self {
        self.0.ports.push(wit::ServicePort {
            name: name.into(),
            protocol: "TCP".to_owned(),
            port,
            target_port: wit::TargetPort::Number(target),
            app_protocol: None,
        });
        self
    }

    /// Sets `spec.publishNotReadyAddresses`.
    pub fn publish_not_ready_addresses(mut self, publish: bool) -> Self {
        self.0.publish_not_ready_addresses = publish;
        self
    }

    /// Sets the network, as `<namespace>/<name>` of its NetworkAttachmentDefinition.
    pub fn network(mut self, network: impl Into<String>) -> Self {
        self.0.network = network.into();
        self
    }
}

/// Sets `key` in a list kept sorted by key, as the host sorts it.
fn set(list: &mut Vec<wit::KeyValue>, key: String, value: String) {
    match list.binary_search_by(|kv| kv.key.cmp(&key)) {
        Ok(i) => list[i].value = value,
        Err(i) => list.insert(i, wit::KeyValue { key, value }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_running_ready_and_bare_unless_told() {
        let p = pod("web-0").build();
        assert_eq!(
            (p.name.as_str(), p.namespace.as_str(), p.uid.as_str()),
            ("web-0", "ns", "uid-web-0")
        );
        assert!(matches!(p.phase, wit::PodPhase::Running));
        assert!(p.ready && !p.terminating);
        assert!(p.labels.is_empty() && p.annotations.is_empty());
        assert_eq!(
            (p.node_name.as_str(), p.zone.as_str()),
            ("node-a", "zone-a")
        );
        assert_eq!(p.ips, ["192.0.2.1"]);
    }

    #[test]
    fn a_service_is_plain_unless_told() {
        let s = service("web").build();
        assert_eq!((s.name.as_str(), s.namespace.as_str()), ("web", "ns"));
        assert!(s.labels.is_empty() && s.annotations.is_empty() && s.ports.is_empty());
        assert!(!s.publish_not_ready_addresses);
        assert_eq!(s.network, "ns/macvlan");
    }

    #[test]
    fn setters_change_what_they_name_and_keep_labels_sorted() {
        let p = pod("p")
            .labels([("b", "1"), ("a", "2")])
            .label("b", "3")
            .annotation("note", "x")
            .phase(wit::PodPhase::Succeeded)
            .ready(false)
            .terminating(true)
            .node("")
            .zone("")
            .no_ips()
            .build();
        let labels: Vec<(&str, &str)> = p
            .labels
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect();
        assert_eq!(labels, [("a", "2"), ("b", "3")]);
        assert_eq!(p.annotations.len(), 1);
        assert!(matches!(p.phase, wit::PodPhase::Succeeded));
        assert!(!p.ready && p.terminating);
        assert!(p.node_name.is_empty() && p.zone.is_empty() && p.ips.is_empty());

        let again = PodBuilder::from(p).name("q").ready(true).build();
        assert_eq!((again.name.as_str(), again.uid.as_str()), ("q", "uid-p"));
        assert!(again.ready && again.terminating);

        let s = service("web")
            .label("app", "web")
            .publish_not_ready_addresses(true)
            .port("http", 80, 8080)
            .build();
        assert_eq!(s.labels[0].key, "app");
        assert!(s.publish_not_ready_addresses);
        assert_eq!(s.ports[0].port, 80);
    }
}
