//! The default endpoint policy of nad-service-controller, built as a WebAssembly component
//! (`wasm32-wasip2`) against the WIT world `isim:nad-endpoints/selecting-endpoint-policy`.
//!
//! This file is only the glue between the WIT bindings (from `nad-plugin-sdk`) and the policy:
//! all decisions are made by the plain-Rust [`policy`] module, which is unit-tested natively.
//! Logging happens here, because the imported `log` function only exists inside the host.
//!
//! To write a new plugin, copy this crate, rename it, and replace `policy.rs`.

mod policy;

/// Every call runs in a fresh instance that the host drops afterwards, so memory never needs to
/// be given back: a bump allocator that never frees makes each of the host's allocations for the
/// call's arguments (one per string and list) a few instructions, instead of a malloc.
/// Measured with `make bench` (BENCHMARKS.md, `evaluate/wasm`).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::LockedAllocator<lol_alloc::LeakingAllocator> =
    lol_alloc::LockedAllocator::new(lol_alloc::LeakingAllocator::new());

use nad_plugin_sdk::{
    CandidateLabels, ConditionKeys, Decision, DecisionScope, Decisions, KeyValue, Level, Plugin,
    PluginInfo, Pod, Service, log, network_readiness,
};

/// The exported component.
struct DefaultPolicy;

/// Each pod is decided from the Service and its own labels, phase and readiness (on the
/// primary network and on the Service's) alone, so the host asks about changed pods only.
impl Decisions for DefaultPolicy {
    fn scope() -> DecisionScope {
        DecisionScope::PerPod
    }
}

/// It reads network readiness (always given) and no other condition.
impl ConditionKeys for DefaultPolicy {
    fn condition_types() -> Vec<String> {
        Vec::new()
    }
}

/// A Service that selects by `app.kubernetes.io/name` or `app` includes only pods with the same
/// value of it: the host asks about only those, found from its index by label.
impl CandidateLabels for DefaultPolicy {
    fn selected_by(service: Service, config: String) -> Vec<KeyValue> {
        policy::selected_by(&service, &config)
    }
}

impl Plugin for DefaultPolicy {
    fn info() -> PluginInfo {
        policy::info()
    }

    fn validate_config(config: String) -> Result<(), String> {
        policy::validate_config(&config)
    }

    fn evaluate(service: Service, pods: Vec<Pod>, config: String) -> Result<Vec<Decision>, String> {
        let decisions = policy::evaluate(&service, &pods, &network_readiness(), &config)?;
        log(Level::Debug, &policy::summary(&decisions));
        Ok(decisions)
    }
}

nad_plugin_sdk::export_plugin!(DefaultPolicy);
