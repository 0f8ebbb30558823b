//! A condition the controller keeps: of a pod (`status.conditions[]`) or of a DRA device
//! (`ResourceClaim.status.devices[].conditions[]`).

use crate::input::network_ready::Status;
use crate::intern::Name;

/// One of a pod's `status.conditions` that the index keeps, or of a device's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCondition {
    pub type_: Name,
    pub status: Status,
    pub reason: Name,
    pub message: Box<str>,
}
