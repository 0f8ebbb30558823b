//! The decisions, as plain Rust (tested natively).

use serde::Deserialize;

use nad_plugin_sdk::{Decision, Pod, PodCondition, Service, k8s};

pub const DEFAULT_LABEL: &str = "endpoints.isim.dev/opt-out";

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_label")]
    pub label: String,
}

fn default_label() -> String {
    DEFAULT_LABEL.to_owned()
}

impl Config {
    /// An empty configuration means the defaults.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self {
                label: default_label(),
            });
        }
        if !text.trim_start().starts_with('{') {
            return Err("opt-out configuration: expected a JSON object such as {\"label\": \"maintenance\"}".to_owned());
        }
        let config: Config =
            serde_json::from_str(text).map_err(|e| format!("opt-out configuration: {e}"))?;
        if config.label.is_empty() {
            return Err("opt-out configuration: \"label\" must not be empty".to_owned());
        }
        Ok(config)
    }
}

/// `network`: the pod's readiness on the Service's network (`network_readiness()`), if any.
pub fn decide(
    service: &Service,
    pod: &Pod,
    network: Option<&PodCondition>,
    config: &Config,
) -> Decision {
    if let Some(opt_out) = pod.labels.iter().find(|kv| kv.key == config.label)
        && opt_out.value != "false"
    {
        return Decision::Exclude(format!(
            "pod opted out with label {}={:?}",
            config.label, opt_out.value
        ));
    }
    k8s::include_on_network(service, pod, network)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nad_plugin_sdk::{
        Conditions, PodPhase,
        testing::{self, PodExt},
    };

    fn service() -> Service {
        testing::service("web")
    }

    fn pod(labels: &[(&str, &str)], phase: PodPhase, ready: bool, terminating: bool) -> Pod {
        let mut pod = labels
            .iter()
            .fold(testing::pod("p"), |pod, (key, value)| pod.label(key, value))
            .phase(phase);
        if !ready {
            pod = pod.not_ready();
        }
        if terminating {
            pod = pod.terminating();
        }
        pod
    }

    fn cond(ready: bool, serving: bool, terminating: bool) -> Decision {
        Decision::Include(Conditions {
            ready,
            serving,
            terminating,
        })
    }

    #[test]
    fn opted_out_pods_are_excluded_with_the_label_in_the_reason() {
        let config = Config::parse("").unwrap();
        let got = decide(
            &service(),
            &pod(&[(DEFAULT_LABEL, "true")], PodPhase::Running, true, false),
            None,
            &config,
        );
        assert!(
            matches!(&got, Decision::Exclude(r) if r.contains(DEFAULT_LABEL)),
            "{got:?}"
        );
        let got = decide(
            &service(),
            &pod(&[(DEFAULT_LABEL, "false")], PodPhase::Running, true, false),
            None,
            &config,
        );
        assert_eq!(got, cond(true, true, false));
    }

    #[test]
    fn a_configured_label_replaces_the_default() {
        let config = Config::parse(r#"{"label": "maintenance"}"#).unwrap();
        let drained = pod(&[("maintenance", "yes")], PodPhase::Running, true, false);
        assert!(matches!(
            decide(&service(), &drained, None, &config),
            Decision::Exclude(_)
        ));
        let default_label = pod(&[(DEFAULT_LABEL, "true")], PodPhase::Running, true, false);
        assert_eq!(
            decide(&service(), &default_label, None, &config),
            cond(true, true, false)
        );
    }

    #[test]
    fn conditions_and_phases_follow_kubernetes() {
        let config = Config::parse("").unwrap();
        assert_eq!(
            decide(
                &service(),
                &pod(&[], PodPhase::Running, true, true),
                None,
                &config
            ),
            cond(false, true, true)
        );
        assert_eq!(
            decide(
                &service(),
                &pod(&[], PodPhase::Pending, false, false),
                None,
                &config
            ),
            cond(false, false, false)
        );
        let mut s = service();
        s.publish_not_ready_addresses = true;
        assert_eq!(
            decide(&s, &pod(&[], PodPhase::Running, false, true), None, &config),
            cond(true, false, true)
        );
        assert!(matches!(
            decide(
                &service(),
                &pod(&[], PodPhase::Failed, false, false),
                None,
                &config
            ),
            Decision::Exclude(_)
        ));
        assert!(matches!(
            decide(
                &service(),
                &pod(&[], PodPhase::Succeeded, false, false),
                None,
                &config
            ),
            Decision::Exclude(_)
        ));
    }

    #[test]
    fn bad_configuration_is_explained() {
        assert!(
            Config::parse(r#"{"lable": "x"}"#)
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            Config::parse(r#"{"label": ""}"#)
                .unwrap_err()
                .contains("must not be empty")
        );
        assert!(Config::parse("not json").is_err());
        assert!(
            Config::parse(r#"["maintenance"]"#)
                .unwrap_err()
                .contains("JSON object")
        );
    }
}
