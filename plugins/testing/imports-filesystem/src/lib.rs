//! A plugin that reads a file in `evaluate`, so that its component imports `wasi:filesystem`
//! (as a C plugin that calls `printf` does). The host refuses it at the link step, naming
//! the imports it does not provide.

/// The canonical-ABI glue that wit-bindgen generates is `unsafe` by nature.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
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
            name: "imports-filesystem".into(),
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
        let reason = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        Ok(pods
            .iter()
            .map(|_| Decision::Exclude(reason.clone()))
            .collect())
    }
}
