//! A plugin built against `wit/` beside it: the host's WIT with one more field in `pod`.
//! The host refuses it at the link step, naming the function, the record and the field.

/// The canonical-ABI glue that wit-bindgen generates is `unsafe` by nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "endpoint-policy",
    });

    use super::Guest;
    export!(Guest);
}

use bindings::isim::nad_endpoints::types::{Decision, PluginInfo, Pod, Service};

struct Guest;

impl bindings::exports::isim::nad_endpoints::policy::Guest for Guest {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "stale-wit".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            label_keys: vec![],
            annotation_keys: vec![],
        }
    }

    fn validate_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn evaluate(
        _service: Service,
        pods: Vec<Pod>,
        _config: String,
    ) -> Result<Vec<Decision>, String> {
        Ok(pods
            .iter()
            .map(|pod| Decision::Exclude(format!("owner {}", pod.owner)))
            .collect())
    }
}
