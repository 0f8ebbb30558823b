//! What the controller reads of Kubernetes objects, as pure parsers and checks: which
//! Services are managed ([`target`]), a pod's attachments from the Multus annotation
//! ([`network_status`]), and which addresses an EndpointSlice may hold ([`address`]).

pub mod address;
pub mod network_status;
pub mod target;
