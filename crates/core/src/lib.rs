//! The pure heart of nad-service-controller: the indexes the watches feed, and one Service's
//! reconcile as a step from a snapshot and a policy to a plan. No Wasm runtime and no I/O:
//! everything here is tested with tables and a fake policy.
//!
//! - [`index`]: pods by network, node zones, Services by network, slices by Service, the
//!   NetworkAttachmentDefinitions that exist; [`relist`] holds back what a relist triggers;
//! - [`observe`], [`candidates`]: a Service's candidates, shared by the Services of a network;
//! - [`decide`]: asking a [`decide::Policy`] about the pods that need it;
//! - [`plan`]: the endpoints to publish; [`slices`]: where they go among the slices;
//!   [`validate`]: the EndpointSlice API's rules;
//! - [`step`]: snapshot and policy in, what to do out; [`findings`]: what is wrong with the
//!   input;
//! - [`book`]: the per-Service bookkeeping between reconciles ([`scope`], [`expectations`],
//!   [`state`]).

pub mod book;
pub mod candidates;
pub mod decide;
pub mod expectations;
pub mod findings;
pub mod index;
pub mod observe;
pub mod plan;
pub mod relist;
pub mod scope;
pub mod slices;
pub mod state;
pub mod step;
pub mod validate;
