//! In-memory indexes the watches feed and reconciles read: pods reduced to what planning and
//! plugins need ([`pod`]), by `(namespace, network)` ([`pods`]), with the ResourceClaims their
//! DRA attachments come from ([`claims`]); nodes as a zone map
//! ([`nodes`]); managed Services by network ([`services`]); this controller's slices by
//! Service ([`slices`]); the NetworkAttachmentDefinitions that exist ([`networks`]). Pure and synchronous: no I/O.

pub mod claims;
pub mod networks;
pub mod nodes;
pub mod pair;
pub mod pods;
pub mod services;
pub mod slices;

pub use networks::{Missing, NetworkDefinitions};
pub use nodes::{NodeZones, ZONE_LABEL};
pub use pods::{NetworkKey, PodChange, PodIndex};
pub use services::ServiceNetworks;
pub use slices::SliceStore;
