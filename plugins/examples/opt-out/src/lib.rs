//! Example plugin `opt-out`: every attached pod is published, except pods that carry the
//! opt-out label (by default `endpoints.isim.dev/opt-out: "true"`), for instance while an
//! operator drains or debugs them without deleting them. Terminal pods are left out and
//! conditions follow Kubernetes' rules, as in the default plugin.
//!
//! Configuration (`opt-out.json`, optional): `{"label": "<key>"}` names another label; any
//! value other than `"false"` opts the pod out.

mod policy;

use nad_plugin_sdk::{
    CandidateLabels, ConditionKeys, Decision, DecisionScope, Decisions, KeyValue, Plugin,
    PluginInfo, Pod, Service, network_readiness,
};

struct OptOut;

/// Each pod is decided from the Service, its own labels and the configuration alone.
impl Decisions for OptOut {
    fn scope() -> DecisionScope {
        DecisionScope::PerPod
    }
}

/// It reads network readiness (always given) and no other condition.
impl ConditionKeys for OptOut {
    fn condition_types() -> Vec<String> {
        Vec::new()
    }
}

/// Every attached pod is published unless it opts out: no label every included pod has.
impl CandidateLabels for OptOut {
    fn selected_by(_service: Service, _config: String) -> Vec<KeyValue> {
        Vec::new()
    }
}

impl Plugin for OptOut {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "opt-out".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            // The host only copies declared keys; "*" because the label is configurable.
            label_keys: vec!["*".to_owned()],
            annotation_keys: Vec::new(),
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        policy::Config::parse(&config).map(|_| ())
    }

    fn evaluate(service: Service, pods: Vec<Pod>, config: String) -> Result<Vec<Decision>, String> {
        let config = policy::Config::parse(&config)?;
        let network = network_readiness();
        Ok(pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let network = network.get(i).and_then(Option::as_ref);
                policy::decide(&service, pod, network, &config)
            })
            .collect())
    }
}

nad_plugin_sdk::export_plugin!(OptOut);
