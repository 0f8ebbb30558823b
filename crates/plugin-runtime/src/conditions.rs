//! Pod conditions for plugins (WIT 1.2): what the `pod-conditions` import answers (the sandbox
//! links it, `sandbox::link_conditions`), and the `condition-keys` export a plugin declares its
//! condition types with; and the DRA devices behind a pod's addresses (WIT 1.3), what the
//! `network-devices` import answers.
//!
//! The conditions and devices of a call's pods travel beside the call (in its store), not in
//! the `pod` record, which a 1.x host may not change: a plugin that imports neither (every 1.0
//! and 1.1 plugin) gets nothing new and runs unchanged, and a 1.2 plugin gets no devices.

use wasmtime::component::{ComponentType, Lower};

use nad_model::{
    condition::KeptCondition,
    input::{device_network::AttachedDevice, network_ready::Status},
};

/// The interface a plugin imports to read its pods' conditions (any 1.x from 1.2).
pub const IMPORT_INTERFACE: &str = "isim:nad-endpoints/pod-conditions@";
/// The interface a plugin may export to declare the condition types it reads.
pub const KEYS_INTERFACE: &str = "isim:nad-endpoints/condition-keys@";
/// The interface a plugin imports to read its pods' DRA devices (any 1.x from 1.3).
pub const DEVICES_INTERFACE: &str = "isim:nad-endpoints/network-devices@";

/// `condition-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ComponentType, Lower)]
#[component(enum)]
#[repr(u8)]
pub enum ConditionStatus {
    #[component(name = "true")]
    True,
    #[component(name = "false")]
    False,
    #[component(name = "unknown")]
    Unknown,
}

/// `pod-condition`.
#[derive(Debug, Clone, PartialEq, Eq, ComponentType, Lower)]
#[component(record)]
pub struct PodCondition {
    #[component(name = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl From<&KeptCondition> for PodCondition {
    fn from(c: &KeptCondition) -> Self {
        PodCondition {
            type_: c.type_.to_string(),
            status: match c.status {
                Status::True => ConditionStatus::True,
                Status::False => ConditionStatus::False,
                Status::Unknown => ConditionStatus::Unknown,
            },
            reason: c.reason.to_string(),
            message: c.message.to_string(),
        }
    }
}

/// `network-device`.
#[derive(Debug, Clone, PartialEq, Eq, ComponentType, Lower)]
#[component(record)]
pub struct NetworkDevice {
    pub claim: String,
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[component(name = "interface-name")]
    pub interface_name: String,
    #[component(name = "hardware-address")]
    pub hardware_address: String,
    pub ips: Vec<String>,
    pub conditions: Vec<PodCondition>,
}

impl From<&AttachedDevice> for NetworkDevice {
    fn from(attached: &AttachedDevice) -> Self {
        let device = &attached.device;
        let status = device.status.as_ref();
        let text = |value: Option<&str>| value.unwrap_or_default().to_owned();
        NetworkDevice {
            claim: attached.claim.to_string(),
            request: device.request.to_string(),
            driver: device.driver.to_string(),
            pool: device.pool.to_string(),
            device: device.device.to_string(),
            interface_name: text(status.and_then(|s| s.interface_name.as_deref())),
            hardware_address: text(status.and_then(|s| s.hardware_address.as_deref())),
            ips: status
                .map(|s| s.ips.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            conditions: status
                .map(|s| s.conditions.iter().map(PodCondition::from).collect())
                .unwrap_or_default(),
        }
    }
}

/// The conditions of one call's pods, in the call's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallConditions {
    /// Each pod's readiness on the Service's network.
    pub network: Vec<Option<PodCondition>>,
    /// Each pod's conditions of the types the plugin declared, sorted by type.
    pub declared: Vec<Vec<PodCondition>>,
    /// Each pod's DRA devices on the Service's network (empty lists on a Multus network, and
    /// for a plugin that does not import `network-devices`).
    pub devices: Vec<Vec<NetworkDevice>>,
}

impl CallConditions {
    /// No conditions for `pods` pods: what a call made without them (the load's self-test)
    /// answers, so that a plugin may always index the lists by its pods.
    pub fn none(pods: usize) -> Self {
        CallConditions {
            network: vec![None; pods],
            declared: vec![Vec::new(); pods],
            devices: vec![Vec::new(); pods],
        }
    }
}
