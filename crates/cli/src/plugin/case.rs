//! What a plugin is evaluated on: a Service, its pods and the nodes' zones, read from files
//! ([`super::files`], `plugin eval` and `plugin test`) or from the cluster (`explain`).

use std::sync::Arc;

use nad_model::{input::target::ServiceTarget, pod::PodRecord};

/// Each node, by name, with its zone label if it has one.
pub type Zones = Vec<(String, Option<String>)>;

/// A Service, its pods and the nodes' zones: from files (`plugin eval`) or the cluster
/// (`explain`).
pub struct Case {
    pub target: Arc<ServiceTarget>,
    /// In the order of the file.
    pub pods: Vec<Arc<PodRecord>>,
    /// `None`: every node exists, without a zone.
    pub zones: Option<Zones>,
}
