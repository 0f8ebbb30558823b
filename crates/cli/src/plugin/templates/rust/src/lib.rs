//! The glue between the WIT bindings and the policy: all decisions are made by the plain-Rust
//! [`policy`] module, which `cargo test` tests natively. Logging happens here, because the
//! imported `log` function only exists inside the host.

mod policy;

/// The WIT bindings of world `conditioned-endpoint-policy`, from `wit/` (what
/// `nad-service-controller plugin wit` prints). The glue wit-bindgen generates is `unsafe` by
/// nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "conditioned-endpoint-policy",
        // Lets the policy's tests compare decisions.
        additional_derives: [PartialEq, Eq],
    });

    use super::Component;
    export!(Component);
}

use bindings::exports::isim::nad_endpoints::{
    condition_keys::Guest as ConditionKeys,
    decisions::{DecisionScope, Guest as Decisions},
    policy::Guest as Policy,
};
use bindings::isim::nad_endpoints::{
    log::{Level, log},
    pod_conditions::network_readiness,
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

/// The pod conditions it reads besides each pod's readiness on the Service's network (which
/// needs no declaring): none. Declared types come through `pod_conditions::declared()`.
impl ConditionKeys for Component {
    fn condition_types() -> Vec<String> {
        Vec::new()
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
        // Each pod's readiness on the Service's network (the network prober's), in order.
        let decisions = policy::evaluate(&service, &pods, &network_readiness(), &config)?;
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
