//! A plugin built against `isim:nad-endpoints@1.2.0` (world `conditioned-endpoint-policy`),
//! frozen in `wit/` beside this file as it was released: the host's tests load it to prove that
//! a host speaking a newer 1.x still runs every 1.2 plugin unchanged, and that such a plugin,
//! which cannot import 1.3's `network-devices`, still sees a pod's readiness on a DRA network
//! through `network-readiness` (as the drivers of its devices report it).
//!
//! Its policy: every pod with label `app` equal to the Service's `app` label, with Kubernetes'
//! conditions (serving = ready, terminating = deleting, ready = serving and not terminating),
//! except that a pod whose network readiness is `False` is not serving.

/// The canonical-ABI glue that wit-bindgen generates is `unsafe` by nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "conditioned-endpoint-policy",
    });

    use super::Contract12;
    export!(Contract12);
}

use bindings::exports::isim::nad_endpoints::condition_keys::Guest as ConditionKeys;
use bindings::exports::isim::nad_endpoints::decisions::{DecisionScope, Guest as Decisions};
use bindings::exports::isim::nad_endpoints::policy::Guest;
use bindings::isim::nad_endpoints::pod_conditions::{ConditionStatus, network_readiness};
use bindings::isim::nad_endpoints::types::{Conditions, Decision, PluginInfo, Pod, Service};

struct Contract12;

fn app(labels: &[bindings::isim::nad_endpoints::types::KeyValue]) -> Option<&str> {
    labels
        .iter()
        .find(|kv| kv.key == "app")
        .map(|kv| kv.value.as_str())
}

impl Decisions for Contract12 {
    fn scope() -> DecisionScope {
        DecisionScope::PerPod
    }
}

impl ConditionKeys for Contract12 {
    fn condition_types() -> Vec<String> {
        Vec::new()
    }
}

impl Guest for Contract12 {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "contract-1-2".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            label_keys: vec!["app".into()],
            annotation_keys: vec![],
        }
    }

    fn validate_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn evaluate(
        service: Service,
        pods: Vec<Pod>,
        _config: String,
    ) -> Result<Vec<Decision>, String> {
        let wanted = app(&service.labels);
        let network = network_readiness();
        Ok(pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                if wanted.is_some() && app(&pod.labels) != wanted {
                    return Decision::Exclude("another app".into());
                }
                let down = network
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.status == ConditionStatus::False);
                let serving = pod.ready && !down;
                Decision::Include(Conditions {
                    ready: serving && !pod.terminating,
                    serving,
                    terminating: pod.terminating,
                })
            })
            .collect())
    }
}
