//! The vocabulary of nad-service-controller, at the bottom of its crates: what it reads of
//! Kubernetes objects and what its parts say to each other. Pure: no Kubernetes client, no
//! Wasm runtime.
//!
//! - [`input`]: which Services are managed (the `isim.dev/network` and
//!   `isim.dev/device-class` annotations), a pod's IPs on a network (the Multus
//!   `network-status` annotation, or its ResourceClaims' DRA devices), which addresses the
//!   EndpointSlice API accepts, the network-readiness condition;
//! - [`pod`], [`keys`]: a pod reduced to what planning and plugins read; [`uid`] and
//!   [`condition`]: its UID and the conditions kept of it (and of its DRA devices);
//! - [`intern`]: values many pods share, kept once;
//! - [`candidate`]: a pod attached to a Service's network, as its policy is asked about it;
//! - [`decision`]: the policy's answer, and the endpoint conditions it sets; [`selection`]: the
//!   pod labels a policy declares every pod it includes has;
//! - [`fetch`]: what the plugin runtime's loader asks of a fetcher of plugin artifacts;
//! - [`probe`]: the probe a Service asks the network prober for (`isim.dev/probe`);
//! - [`labels`]: what this controller writes on EndpointSlices; [`pairs`]: a Service's labels
//!   and annotations as they are kept;
//! - [`slice`]: one of those slices as the slice cache keeps it;
//! - [`service_ref`]: a Service by namespace and name, the key of what is kept per Service;
//! - [`watch`]: what a watch saw happen to an object, as the indexes take it;
//! - [`reason`]: why a Service's slices do not follow its pods (Event reasons, metric labels).

pub mod candidate;
pub mod condition;
pub mod decision;
pub mod digest;
pub mod fetch;
pub mod input;
pub mod intern;
pub mod keys;
pub mod labels;
pub mod pairs;
pub mod pod;
pub mod probe;
pub mod reason;
pub mod selection;
pub mod service_ref;
pub mod slice;
pub mod uid;
pub mod watch;
