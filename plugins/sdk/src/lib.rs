//! What every Rust endpoint-policy plugin shares, so that a plugin is its policy and nothing
//! else, and a change of the WIT package touches this crate, not every plugin:
//!
//! - the bindings of world `isim:nad-endpoints/selecting-endpoint-policy` (the types, the
//!   `log`, `pod-conditions` and `network-devices` imports, the traits to implement) and
//!   [`export_plugin!`]. A plugin imports only what it calls: one that never calls
//!   [`network_devices`] does not import `network-devices`;
//! - [`k8s`]: the rules of Kubernetes' own EndpointSlice controller a policy should follow;
//! - [`testing`]: builders for the `pod` and `service` records, for native unit tests.
//!
//! A plugin:
//!
//! ```text
//! use nad_plugin_sdk::{CandidateLabels, ConditionKeys, Decision, DecisionScope, Decisions, KeyValue, Plugin, PluginInfo, Pod, Service};
//!
//! struct MyPolicy;
//!
//! impl Plugin for MyPolicy {
//!     fn info() -> PluginInfo { /* name, version, the keys it reads */ }
//!     fn validate_config(config: String) -> Result<(), String> { Ok(()) }
//!     fn evaluate(service: Service, pods: Vec<Pod>, config: String) -> Result<Vec<Decision>, String> {
//!         // Each pod's readiness on the Service's network, in order (none without a prober).
//!         let network = nad_plugin_sdk::network_readiness();
//!         /* one decision per pod, e.g. k8s::include_on_network(&service, pod, network[i].as_ref()) */
//!     }
//! }
//!
//! impl Decisions for MyPolicy {
//!     fn scope() -> DecisionScope { DecisionScope::PerPod }
//! }
//!
//! /// Conditions it reads besides network readiness (through `declared()`): none.
//! impl ConditionKeys for MyPolicy {
//!     fn condition_types() -> Vec<String> { Vec::new() }
//! }
//!
//! /// Labels every pod it includes has (the host asks about only those pods): none claimed.
//! impl CandidateLabels for MyPolicy {
//!     fn selected_by(service: Service, config: String) -> Vec<KeyValue> { Vec::new() }
//! }
//!
//! nad_plugin_sdk::export_plugin!(MyPolicy);
//! ```

pub mod k8s;
pub mod testing;

/// The WIT bindings. The canonical-ABI glue that wit-bindgen generates is `unsafe` by nature;
/// everything else here is safe code.
#[allow(unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "selecting-endpoint-policy",
        pub_export_macro: true,
        export_macro_name: "export_plugin",
        default_bindings_module: "nad_plugin_sdk::bindings",
        // Lets policies' tests compare decisions; unused impls cost nothing in a component.
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::export_plugin;
pub use bindings::exports::isim::nad_endpoints::candidate_labels::Guest as CandidateLabels;
pub use bindings::exports::isim::nad_endpoints::condition_keys::Guest as ConditionKeys;
pub use bindings::exports::isim::nad_endpoints::decisions::{DecisionScope, Guest as Decisions};
pub use bindings::exports::isim::nad_endpoints::policy::Guest as Plugin;
pub use bindings::isim::nad_endpoints::log::{Level, log};
pub use bindings::isim::nad_endpoints::network_devices::{
    NetworkDevice, devices as network_devices,
};
pub use bindings::isim::nad_endpoints::pod_conditions::{
    ConditionStatus, PodCondition, declared, network_readiness,
};
pub use bindings::isim::nad_endpoints::types::{
    Conditions, Decision, KeyValue, PluginInfo, Pod, PodPhase, Service, ServicePort, TargetPort,
};
