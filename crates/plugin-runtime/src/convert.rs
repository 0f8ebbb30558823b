//! The host's pods as the WIT records that cross the boundary (the Service's: [`crate::service`]).
//!
//! Each string and list crossing the boundary costs time, so pods carry only the labels and
//! annotations the plugin declared in its `info`.

use super::{
    Plugin,
    conditions::{CallConditions, NetworkDevice, PodCondition},
    wit,
};
use nad_model::{
    candidate::Candidate,
    input::{device_network, network_ready},
    pod::Phase,
};

fn only<K: AsRef<str>, V: AsRef<str>>(
    map: &[(K, V)],
    keep: impl Fn(&str) -> bool,
) -> Vec<wit::KeyValue> {
    map.iter()
        .filter(|(key, _)| keep(key.as_ref()))
        .map(|(key, value)| wit::KeyValue {
            key: key.as_ref().to_owned(),
            value: value.as_ref().to_owned(),
        })
        .collect()
}

pub fn pod_view(candidate: &Candidate, plugin: &Plugin) -> wit::Pod {
    let pod = &candidate.pod;
    wit::Pod {
        name: pod.name.to_string(),
        namespace: pod.namespace.to_string(),
        uid: pod.uid.to_string(),
        labels: only(pod.labels(), |k| plugin.reads_label(k)),
        annotations: only(pod.annotations(), |k| plugin.reads_annotation(k)),
        phase: match candidate.phase() {
            Phase::Pending => wit::PodPhase::Pending,
            Phase::Running => wit::PodPhase::Running,
            Phase::Succeeded => wit::PodPhase::Succeeded,
            Phase::Failed => wit::PodPhase::Failed,
            Phase::Unknown => wit::PodPhase::Unknown,
        },
        ready: candidate.is_ready(),
        terminating: candidate.is_terminating(),
        node_name: candidate.node_name().unwrap_or_default().to_owned(),
        zone: candidate.zone.clone().unwrap_or_default(),
        ips: candidate.ips.iter().map(ToString::to_string).collect(),
    }
}

/// The conditions of `candidates` (a call's pods, in order) on `network` as `plugin` reads
/// them, and their DRA devices there; `None` for a plugin that imports neither
/// `pod-conditions` nor `network-devices`.
pub fn conditions_view<'a>(
    candidates: impl IntoIterator<Item = &'a Candidate>,
    plugin: &Plugin,
    network: &str,
) -> Option<CallConditions> {
    if !plugin.reads_conditions() && !plugin.reads_devices() {
        return None;
    }
    let on_devices = device_network::is_device_network(network);
    // The prober's condition type, worked out once for the call.
    let network_type = (!on_devices).then(|| network_ready::condition_type(network));
    let mut view = CallConditions::default();
    for candidate in candidates {
        let pod = &candidate.pod;
        let readiness = match &network_type {
            Some(network_type) => pod.condition(network_type),
            None => pod.network_readiness(network),
        };
        view.network.push(readiness.map(PodCondition::from));
        view.declared.push(
            pod.conditions()
                .iter()
                .filter(|c| plugin.reads_condition(&c.type_))
                .map(PodCondition::from)
                .collect(),
        );
        view.devices.push(match pod.device_attachment(network) {
            Some(attachment) if plugin.reads_devices() => {
                attachment.devices.iter().map(NetworkDevice::from).collect()
            }
            _ => Vec::new(),
        });
    }
    Some(view)
}
