//! A plugin built against `isim:nad-endpoints@1.1.0` (world `scoped-endpoint-policy`), frozen
//! in `wit/` beside this file as it was released: the host's tests load it to prove that a
//! host speaking a newer 1.x still runs every 1.1 plugin unchanged, its declared decision
//! scope included, and that such a plugin, which cannot read pod conditions, decides as it
//! always did when a pod's network readiness is `False`.
//!
//! Its policy: every pod with label `app` equal to the Service's `app` label, with Kubernetes'
//! conditions (serving = ready, terminating = deleting, ready = serving and not terminating).

/// The canonical-ABI glue that wit-bindgen generates is `unsafe` by nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "scoped-endpoint-policy",
    });

    use super::Contract11;
    export!(Contract11);
}

use bindings::exports::isim::nad_endpoints::decisions::{DecisionScope, Guest as Decisions};
use bindings::exports::isim::nad_endpoints::policy::Guest;
use bindings::isim::nad_endpoints::types::{Conditions, Decision, PluginInfo, Pod, Service};

struct Contract11;

fn app(labels: &[bindings::isim::nad_endpoints::types::KeyValue]) -> Option<&str> {
    labels
        .iter()
        .find(|kv| kv.key == "app")
        .map(|kv| kv.value.as_str())
}

impl Decisions for Contract11 {
    fn scope() -> DecisionScope {
        DecisionScope::PerPod
    }
}

impl Guest for Contract11 {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "contract-1-1".into(),
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
        Ok(pods
            .iter()
            .map(|pod| {
                if wanted.is_some() && app(&pod.labels) != wanted {
                    return Decision::Exclude("another app".into());
                }
                let serving = pod.ready;
                Decision::Include(Conditions {
                    ready: serving && !pod.terminating,
                    serving,
                    terminating: pod.terminating,
                })
            })
            .collect())
    }
}
