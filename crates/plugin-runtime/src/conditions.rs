//! Pod conditions for plugins (WIT 1.2): what the `pod-conditions` import answers (the sandbox
//! links it, `sandbox::link_conditions`), and the `condition-keys` export a plugin declares its
//! condition types with.
//!
//! The conditions of a call's pods travel beside the call (in its store), not in the `pod`
//! record, which a 1.x host may not change: a plugin that does not import `pod-conditions`
//! (every 1.0 and 1.1 plugin) gets nothing new and runs unchanged.

use wasmtime::component::{ComponentType, Lower};

use nad_model::{input::network_ready::Status, pod::KeptCondition};

/// The interface a plugin imports to read its pods' conditions (any 1.x from 1.2).
pub const IMPORT_INTERFACE: &str = "isim:nad-endpoints/pod-conditions@";
/// The interface a plugin may export to declare the condition types it reads.
pub const KEYS_INTERFACE: &str = "isim:nad-endpoints/condition-keys@";

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

/// The conditions of one call's pods, in the call's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallConditions {
    /// Each pod's readiness on the Service's network.
    pub network: Vec<Option<PodCondition>>,
    /// Each pod's conditions of the types the plugin declared, sorted by type.
    pub declared: Vec<Vec<PodCondition>>,
}

impl CallConditions {
    /// No conditions for `pods` pods: what a call made without them (the load's self-test)
    /// answers, so that a plugin may always index the lists by its pods.
    pub fn none(pods: usize) -> Self {
        CallConditions {
            network: vec![None; pods],
            declared: vec![Vec::new(); pods],
        }
    }
}
