//! The glue between the WIT bindings and the policy: all decisions are made by the plain-Rust
//! [`policy`] module, which `cargo test` tests natively. Logging happens here, because the
//! imported `log` function only exists inside the host.

mod policy;

/// The WIT bindings of world `scoped-endpoint-policy`, from `wit/` (what `nad-service-controller
/// plugin wit` prints). The glue wit-bindgen generates is `unsafe` by nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "scoped-endpoint-policy",
        // Lets the policy's tests compare decisions.
        additional_derives: [PartialEq, Eq],
    });

    use super::Component;
    export!(Component);
}

use bindings::exports::isim::nad_endpoints::{
    decisions::{DecisionScope, Guest as Decisions},
    policy::Guest as Policy,
};
use bindings::isim::nad_endpoints::{
    log::{Level, log},
    types::{Decision, PluginInfo, Pod, Service},
};

struct Component;

/// Each pod is decided from the Service and that pod alone, so the host asks about changed
/// pods only. Say `WholeSet` if a decision ever depends on the other pods.
impl Decisions for Component {
    fn scope() -> DecisionScope {
        DecisionScope::PerPod
    }
}

impl Policy for Component {
    fn info() -> PluginInfo {
        policy::info()
    }

    fn validate_config(config: String) -> Result<(), String> {
        policy::validate_config(&config)
    }

    fn evaluate(service: Service, pods: Vec<Pod>, config: String) -> Result<Vec<Decision>, String> {
        let decisions = policy::evaluate(&service, &pods, &config)?;
        let included = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Include(_)))
            .count();
        log(
            Level::Debug,
            &format!("evaluated {} pods: {included} included", decisions.len()),
        );
        Ok(decisions)
    }
}
