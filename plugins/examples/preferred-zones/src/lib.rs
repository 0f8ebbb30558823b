//! Example plugin `preferred-zones`: keeps a Service's traffic zone-local. The Service names
//! its zones in the annotation `endpoints.isim.dev/preferred-zones: "zone-a,zone-b"`; pods on
//! nodes in those zones are published, the others are left out. If no pod that would otherwise
//! be published is in a preferred zone, all of them are published (the fallback), so a Service
//! never goes dark because its zones have no pods. Terminal pods are left out and conditions
//! follow Kubernetes' rules, as in the default plugin.
//!
//! Configuration (`preferred-zones.json`, optional): `{"annotation": "<key>"}` reads another
//! Service annotation, `{"fallback": false}` turns the fallback off.
//!
//! This file is only glue; the decisions are in the plain-Rust [`policy`] module.

mod policy;

use nad_plugin_sdk::{
    CandidateLabels, ConditionKeys, Decision, DecisionScope, Decisions, KeyValue, Level, Plugin,
    PluginInfo, Pod, Service, log,
};

/// The exported component.
struct PreferredZones;

/// Whether a pod is published depends on the others: with no eligible pod in a preferred zone,
/// every zone's pods are (the fallback).
impl Decisions for PreferredZones {
    fn scope() -> DecisionScope {
        DecisionScope::WholeSet
    }
}

/// It reads no pod condition: a pod's readiness on the network does not enter its decisions
/// (see the default plugin and `k8s::include_on_network` for a policy that uses it).
impl ConditionKeys for PreferredZones {
    fn condition_types() -> Vec<String> {
        Vec::new()
    }
}

/// Any attached pod may be published: no label every included pod has.
impl CandidateLabels for PreferredZones {
    fn selected_by(_service: Service, _config: String) -> Vec<KeyValue> {
        Vec::new()
    }
}

impl Plugin for PreferredZones {
    fn info() -> PluginInfo {
        policy::info()
    }

    fn validate_config(config: String) -> Result<(), String> {
        policy::Config::parse(&config).map(|_| ())
    }

    fn evaluate(service: Service, pods: Vec<Pod>, config: String) -> Result<Vec<Decision>, String> {
        let config = policy::Config::parse(&config)?;
        let outcome = policy::evaluate(&service, &pods, &config);
        // Worth an operator's attention when the Service is not zone-local right now.
        let level = if outcome.fell_back {
            Level::Info
        } else {
            Level::Debug
        };
        // The host tags the line with the plugin's name; name the Service here.
        let line = format!(
            "service {}/{}: {}",
            service.namespace,
            service.name,
            outcome.summary()
        );
        log(level, &line);
        Ok(outcome.decisions)
    }
}

nad_plugin_sdk::export_plugin!(PreferredZones);
