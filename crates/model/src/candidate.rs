//! A candidate of a Service: a pod attached to its network, as the policy is asked about it.

use std::{net::IpAddr, sync::Arc};

use k8s_openapi::jiff::Timestamp;

use crate::pod::{Phase, PodRecord};

/// A pod attached to the Service's network, with its addresses on that network.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pod: Arc<PodRecord>,
    pub ips: Box<[IpAddr]>,
    /// The node's zone label, when the pod is scheduled and the node has one.
    pub zone: Option<String>,
}

impl Candidate {
    pub fn name(&self) -> &str {
        &self.pod.name
    }

    pub fn node_name(&self) -> Option<&str> {
        self.pod.node_name.as_deref()
    }

    /// `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.pod.ready
    }

    pub fn is_terminating(&self) -> bool {
        self.pod.terminating
    }

    /// When the pod was created; the older of two pods claiming one address keeps it.
    pub fn created(&self) -> Option<Timestamp> {
        self.pod.created.get()
    }

    pub fn phase(&self) -> Phase {
        self.pod.phase
    }
}
