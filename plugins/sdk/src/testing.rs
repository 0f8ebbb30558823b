//! Builders of the WIT records for a policy's native unit tests: a ready, running pod and a
//! Service, changed by chained calls.
//!
//! ```
//! use nad_plugin_sdk::testing::{PodExt, ServiceExt, pod, service};
//!
//! let web = service("web").label("app", "web");
//! let db = pod("db-0").label("app", "db").not_ready().zone("zone-b");
//! assert_eq!(web.labels[0].value, "web");
//! assert!(!db.ready && db.zone == "zone-b");
//! ```

use crate::{ConditionStatus, KeyValue, Pod, PodCondition, PodPhase, Service};

/// A running, ready pod `name` in namespace `ns`, on node `node-a` in zone `zone-a`, with
/// one address (`192.0.2.1`), and no labels or annotations.
pub fn pod(name: &str) -> Pod {
    Pod {
        name: name.to_owned(),
        namespace: "ns".to_owned(),
        uid: format!("uid-{name}"),
        labels: Vec::new(),
        annotations: Vec::new(),
        phase: PodPhase::Running,
        ready: true,
        terminating: false,
        node_name: "node-a".to_owned(),
        zone: "zone-a".to_owned(),
        ips: vec!["192.0.2.1".to_owned()],
    }
}

/// Service `name` in namespace `ns` on network `ns/macvlan`, without labels or ports, with
/// its network annotation.
pub fn service(name: &str) -> Service {
    Service {
        name: name.to_owned(),
        namespace: "ns".to_owned(),
        labels: Vec::new(),
        annotations: vec![kv("isim.dev/network", "macvlan")],
        ports: Vec::new(),
        publish_not_ready_addresses: false,
        network: "ns/macvlan".to_owned(),
    }
}

/// A pod's readiness condition on network `ns/macvlan` (that of [`service`]) with `status`,
/// as the network prober writes it.
pub fn network_condition(status: ConditionStatus) -> PodCondition {
    let (reason, message) = match status {
        ConditionStatus::True => ("Answered", "192.0.2.1:80 answered"),
        ConditionStatus::False => ("ConnectFailed", "192.0.2.1:80: connection timed out"),
        ConditionStatus::Unknown => ("", ""),
    };
    PodCondition {
        type_: "network-ready.isim.dev/ns.macvlan".to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// Sets `key` in a list kept sorted by key, as the host sorts it.
fn set(list: &mut Vec<KeyValue>, key: &str, value: &str) {
    list.retain(|kv| kv.key != key);
    list.push(kv(key, value));
    list.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Chained changes of a test pod.
pub trait PodExt: Sized {
    fn label(self, key: &str, value: &str) -> Self;
    fn annotation(self, key: &str, value: &str) -> Self;
    fn not_ready(self) -> Self;
    fn terminating(self) -> Self;
    fn phase(self, phase: PodPhase) -> Self;
    fn zone(self, zone: &str) -> Self;
    fn node(self, node: &str) -> Self;
    fn ips(self, ips: &[&str]) -> Self;
}

impl PodExt for Pod {
    fn label(mut self, key: &str, value: &str) -> Self {
        set(&mut self.labels, key, value);
        self
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        set(&mut self.annotations, key, value);
        self
    }

    fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }

    fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }

    fn phase(mut self, phase: PodPhase) -> Self {
        self.phase = phase;
        self
    }

    fn zone(mut self, zone: &str) -> Self {
        zone.clone_into(&mut self.zone);
        self
    }

    fn node(mut self, node: &str) -> Self {
        node.clone_into(&mut self.node_name);
        self
    }

    fn ips(mut self, ips: &[&str]) -> Self {
        self.ips = ips.iter().map(|ip| (*ip).to_owned()).collect();
        self
    }
}

/// Chained changes of a test Service.
pub trait ServiceExt: Sized {
    fn label(self, key: &str, value: &str) -> Self;
    fn annotation(self, key: &str, value: &str) -> Self;
    fn publishing_not_ready(self) -> Self;
}

impl ServiceExt for Service {
    fn label(mut self, key: &str, value: &str) -> Self {
        set(&mut self.labels, key, value);
        self
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        set(&mut self.annotations, key, value);
        self
    }

    fn publishing_not_ready(mut self) -> Self {
        self.publish_not_ready_addresses = true;
        self
    }
}
