//! The Service as plugins see it: its WIT record, and a key of what the record holds.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nad_model::{input::target::ServiceTarget, pairs::Pairs};

use super::wit;

fn all(pairs: &Pairs) -> Vec<wit::KeyValue> {
    pairs
        .iter()
        .map(|(key, value)| wit::KeyValue {
            key: key.to_owned(),
            value: value.to_owned(),
        })
        .collect()
}

pub fn service_view(target: &ServiceTarget) -> wit::Service {
    wit::Service {
        name: target.name.clone(),
        namespace: target.namespace.clone(),
        labels: all(&target.labels),
        annotations: all(&target.annotations),
        ports: target
            .ports
            .iter()
            .map(|p| wit::ServicePort {
                name: p.name.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                port: u16::try_from(p.port).unwrap_or_default(),
                target_port: match &p.target_port {
                    Some(IntOrString::String(name)) => wit::TargetPort::Name(name.clone()),
                    Some(IntOrString::Int(n)) => {
                        wit::TargetPort::Number(u16::try_from(*n).unwrap_or_default())
                    }
                    None => wit::TargetPort::Number(u16::try_from(p.port).unwrap_or_default()),
                },
                app_protocol: p.app_protocol.clone(),
            })
            .collect(),
        publish_not_ready_addresses: target.publish_not_ready_addresses,
        network: target.network.clone(),
    }
}

/// A hash of everything the Service's record holds, and of `config`: what a plugin's answer
/// about the Service may depend on.
pub(crate) fn key(target: &ServiceTarget, config: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (&target.name, &target.namespace, &target.network).hash(&mut hasher);
    (&target.labels, &target.annotations).hash(&mut hasher);
    target.publish_not_ready_addresses.hash(&mut hasher);
    for port in &target.ports {
        (&port.name, &port.protocol, port.port, &port.app_protocol).hash(&mut hasher);
        match &port.target_port {
            Some(IntOrString::Int(n)) => (0u8, n).hash(&mut hasher),
            Some(IntOrString::String(name)) => (1u8, name).hash(&mut hasher),
            None => 2u8.hash(&mut hasher),
        }
    }
    config.hash(&mut hasher);
    hasher.finish()
}
