//! The policy's answer for a pod, and the conditions of the endpoints it publishes: what a
//! plugin returns and what the plan turns into EndpointSlices.

/// EndpointSlice conditions of an included pod's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conditions {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// The policy's answer for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Include(Conditions),
    Exclude(String),
}
