//! The one vocabulary of what can be wrong: each reason is an Event's reason (`kubectl
//! describe service`, or a pod's for the network prober's) and, for a Service, the `reason`
//! label of the `service_problem` metric, so an alert and the Event it points to always say
//! the same.

use std::fmt;

/// Why a Service's EndpointSlices do not (or may not) follow its pods, or why a pod's
/// readiness on a network changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The Service's plugin failed or refused to decide (its slices stay as last applied).
    PluginFailed,
    /// The Service names a plugin that is not loaded.
    UnknownPlugin,
    /// A version of the Service's plugin did not load; the last good one serves.
    PluginLoadFailed,
    /// The plugin failed and the configured fallback decided instead.
    PluginFallback,
    /// No NetworkAttachmentDefinition of the Service's network exists.
    NetworkNotFound,
    /// The Service cannot be served (not headless, has a selector, ExternalName, ...).
    InvalidService,
    /// Two pods have the same address on the network.
    DuplicateAddress,
    /// An endpoint was left out (an address the EndpointSlice API rejects, ...).
    EndpointLeftOut,
    /// A slice was not written because the API refuses it: held back by this controller's
    /// own check of the API's rules, or refused by the API server (`422`). A bug here.
    EndpointSliceRefused,
    /// A write or delete failed (the API unreachable, say): retried.
    EndpointSliceWriteFailed,
    /// The controller's caches are not ready.
    NotReady,
    /// The Service's `isim.dev/probe` annotation has bad values: the network prober uses the
    /// default probe for it.
    InvalidProbe,
    /// On a pod, from the network prober: it stopped answering on a secondary network.
    NetworkUnready,
    /// On a pod, from the network prober: it answers on a secondary network again.
    NetworkReady,
    /// On the network prober's own pod: the admission policy that confines its writes, or its
    /// binding, is not in force, so it writes no condition until it is.
    AdmissionPolicyMissing,
    /// On the network prober's own pod: the admission policy is in force (again); it writes.
    AdmissionPolicyInForce,
}

impl Reason {
    pub const ALL: [Reason; 16] = [
        Reason::PluginFailed,
        Reason::UnknownPlugin,
        Reason::PluginLoadFailed,
        Reason::PluginFallback,
        Reason::NetworkNotFound,
        Reason::InvalidService,
        Reason::DuplicateAddress,
        Reason::EndpointLeftOut,
        Reason::EndpointSliceRefused,
        Reason::EndpointSliceWriteFailed,
        Reason::NotReady,
        Reason::InvalidProbe,
        Reason::NetworkUnready,
        Reason::NetworkReady,
        Reason::AdmissionPolicyMissing,
        Reason::AdmissionPolicyInForce,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PluginFailed => "PluginFailed",
            Reason::UnknownPlugin => "UnknownPlugin",
            Reason::PluginLoadFailed => "PluginLoadFailed",
            Reason::PluginFallback => "PluginFallback",
            Reason::NetworkNotFound => "NetworkNotFound",
            Reason::InvalidService => "InvalidService",
            Reason::DuplicateAddress => "DuplicateAddress",
            Reason::EndpointLeftOut => "EndpointLeftOut",
            Reason::EndpointSliceRefused => "EndpointSliceRefused",
            Reason::EndpointSliceWriteFailed => "EndpointSliceWriteFailed",
            Reason::NotReady => "NotReady",
            Reason::InvalidProbe => "InvalidProbe",
            Reason::NetworkUnready => "NetworkUnready",
            Reason::NetworkReady => "NetworkReady",
            Reason::AdmissionPolicyMissing => "AdmissionPolicyMissing",
            Reason::AdmissionPolicyInForce => "AdmissionPolicyInForce",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What was being done when the reason arose: an Event's `action` (what
/// `kubectl get events -o wide` shows beside the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Loading a plugin.
    Load,
    /// Reading a Service's annotations and its network.
    Validate,
    /// Asking a Service's plugin about its pods.
    Evaluate,
    /// Turning the decisions into endpoints.
    Plan,
    /// Writing a Service's EndpointSlices.
    Apply,
    /// The network prober probing a pod on its network.
    Probe,
    /// The network prober checking the admission policy that confines its writes.
    CheckAdmissionPolicy,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Load => "Load",
            Action::Validate => "Validate",
            Action::Evaluate => "Evaluate",
            Action::Plan => "Plan",
            Action::Apply => "Apply",
            Action::Probe => "Probe",
            Action::CheckAdmissionPolicy => "CheckAdmissionPolicy",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_a_name_of_its_own() {
        let names: std::collections::BTreeSet<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        assert!(names.iter().all(|n| n.chars().all(char::is_alphanumeric)));
    }
}
