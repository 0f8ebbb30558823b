//! The watches: each one keeps a cache or an index current and turns its events into
//! reconcile requests for the Services they concern, noting why in the bookkeeping.
//!
//! - [`services`]: the Service store (the Controller's own), and which Services are on which
//!   network;
//! - [`pods`]: the pod index, relisted when the plugins start to read new pod keys, and the
//!   ResourceClaims its pods' DRA attachments come from; pod changes screened ([`screen`]) so
//!   that only the Services they can move reconcile;
//! - [`nodes`]: the node zones;
//! - [`networks`]: which NetworkAttachmentDefinitions exist; [`devices`]: whether the cluster
//!   serves DRA, and which DeviceClasses exist (the ResourceClaims are watched with the pods);
//! - [`slices`]: this controller's slices, telling its own writes from anyone else's;
//! - [`plugin_dir`]: the plugin directory, rescanned for new, changed and removed plugins;
//! - [`registry`]: the registry credentials and CAs the plugins are pulled with;
//! - [`discovery`]: whether the API server serves an optional kind;
//! - [`named`]: one object watched by name (the plugin ConfigMap, the registry settings);
//! - [`recovery`]: after an outage, the Services that failed meanwhile;
//! - [`shared`]: the state they feed, shared with the reconciles.
//!
//! Every watch lists by streaming, or in pages where the server cannot ([`list`]), retries on
//! its own with a bounded backoff ([`health`]) and never ends; what a relist triggers waits
//! until the relist is complete ([`nad_core::relist`]).

pub mod devices;
pub mod discovery;
pub mod health;
pub mod list;
pub mod named;
pub mod networks;
pub mod nodes;
pub mod plugin_dir;
pub mod pods;
pub mod recovery;
pub mod registry;
pub mod screen;
pub mod services;
pub mod shared;
pub mod slices;
pub mod strip;
