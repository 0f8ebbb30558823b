//! What the controller reads of Kubernetes objects, as pure parsers and checks: which
//! Services are managed ([`target`]) and what is kept of each ([`service_record`]), a pod's attachments from the Multus annotation
//! ([`network_status`]) and from the DRA devices of its ResourceClaims ([`device_network`]), which addresses an EndpointSlice may hold ([`address`]), and the
//! pod condition that says whether a pod answers on a network ([`network_ready`]).

pub mod address;
pub mod device_network;
pub mod network_ready;
pub mod network_status;
pub mod service_record;
pub mod target;
