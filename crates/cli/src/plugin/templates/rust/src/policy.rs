//! The policy as plain Rust: no I/O and no logging, so `cargo test` tests it natively.
//!
//! It starts as nad-service-controller's default policy; change it to yours, then update the
//! expectations in `testdata/` (`make update`) and read the diff.
//!
//! - If the Service has the label `app.kubernetes.io/name`, only pods with the same value of
//!   it; otherwise if it has `app`, only pods with the same `app`; otherwise every pod.
//! - Pods in phase Succeeded or Failed are left out.
//! - Endpoint conditions as Kubernetes gives them: serving = the pod is Ready, terminating =
//!   it is being deleted, ready = serving and not terminating (always, when the Service
//!   publishes not-ready addresses).
//! - And on the Service's own network: a pod whose readiness there (the network prober's
//!   condition) is False is not serving, whatever its Ready says. Keep such a pod included:
//!   the prober probes the pods a Service publishes.

use crate::bindings::isim::nad_endpoints::{
    pod_conditions::{ConditionStatus, PodCondition},
    types::{Conditions, Decision, KeyValue, PluginInfo, Pod, PodPhase, Service},
};

const NAME_LABEL: &str = "app.kubernetes.io/name";
const APP_LABEL: &str = "app";

/// The name Services select (the file must be `{{name}}.wasm`), and the pod label keys the
/// policy reads: the host sends each pod only the labels and annotations declared here.
pub fn info() -> PluginInfo {
    PluginInfo {
        name: "{{name}}".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        label_keys: vec![NAME_LABEL.to_string(), APP_LABEL.to_string()],
        annotation_keys: Vec::new(),
    }
}

/// This policy takes no configuration: the empty document or `{}`.
pub fn validate_config(config: &str) -> Result<(), String> {
    match config.trim() {
        "" | "{}" => Ok(()),
        other => Err(format!(
            "{{name}} takes no configuration (expected an empty document or {{}}), but was given {other:?}"
        )),
    }
}

/// Exactly one decision per pod, in the same order. `network` holds each pod's readiness on
/// the Service's network, in the same order (none without a prober).
pub fn evaluate(
    service: &Service,
    pods: &[Pod],
    network: &[Option<PodCondition>],
    config: &str,
) -> Result<Vec<Decision>, String> {
    validate_config(config)?;
    let selector = [NAME_LABEL, APP_LABEL]
        .into_iter()
        .find_map(|key| value(&service.labels, key).map(|wanted| (key, wanted)));
    Ok(pods
        .iter()
        .enumerate()
        .map(|(i, pod)| decide(service, selector, pod, network.get(i).and_then(Option::as_ref)))
        .collect())
}

fn decide(
    service: &Service,
    selector: Option<(&str, &str)>,
    pod: &Pod,
    network: Option<&PodCondition>,
) -> Decision {
    if let Some((key, wanted)) = selector {
        match value(&pod.labels, key) {
            Some(found) if found == wanted => {}
            Some(found) => {
                return Decision::Exclude(format!(
                    "pod label {key}={found:?} does not match the Service's {wanted:?}"
                ));
            }
            None => {
                return Decision::Exclude(format!(
                    "pod label {key} is missing (the Service selects {key}={wanted:?})"
                ));
            }
        }
    }
    match pod.phase {
        PodPhase::Succeeded => Decision::Exclude("pod phase is Succeeded".to_string()),
        PodPhase::Failed => Decision::Exclude("pod phase is Failed".to_string()),
        PodPhase::Pending | PodPhase::Running | PodPhase::Unknown => {
            let answers = network.is_none_or(|c| c.status != ConditionStatus::False);
            let serving = pod.ready && answers;
            Decision::Include(Conditions {
                ready: service.publish_not_ready_addresses || (serving && !pod.terminating),
                serving,
                terminating: pod.terminating,
            })
        }
    }
}

fn value<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
    list.iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    fn service(labels: &[(&str, &str)]) -> Service {
        Service {
            name: "web".into(),
            namespace: "default".into(),
            labels: labels.iter().map(|(k, v)| kv(k, v)).collect(),
            annotations: vec![kv("isim.dev/network", "macvlan")],
            ports: vec![],
            publish_not_ready_addresses: false,
            network: "default/macvlan".into(),
        }
    }

    fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
        Pod {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            labels: labels.iter().map(|(k, v)| kv(k, v)).collect(),
            annotations: vec![],
            phase: PodPhase::Running,
            ready: true,
            terminating: false,
            node_name: "node-a".into(),
            zone: "zone-a".into(),
            ips: vec!["10.1.0.1".into()],
        }
    }

    #[test]
    fn pods_of_the_services_app_are_included_with_kubernetes_conditions() {
        let web = service(&[("app", "web")]);
        let mut deleting = pod("c", &[("app", "web")]);
        deleting.terminating = true;
        let decisions = evaluate(
            &web,
            &[
                pod("a", &[("app", "web")]),
                pod("b", &[("app", "db")]),
                deleting,
            ],
            &[],
            "",
        )
        .unwrap();
        assert_eq!(decisions.len(), 3, "one decision per pod");
        assert_eq!(
            decisions[0],
            Decision::Include(Conditions {
                ready: true,
                serving: true,
                terminating: false
            })
        );
        assert!(matches!(&decisions[1], Decision::Exclude(r) if r.contains("does not match")));
        assert_eq!(
            decisions[2],
            Decision::Include(Conditions {
                ready: false,
                serving: true,
                terminating: true
            })
        );
    }

    #[test]
    fn stopped_pods_are_left_out() {
        let mut done = pod("a", &[]);
        done.phase = PodPhase::Succeeded;
        assert!(matches!(
            &evaluate(&service(&[]), &[done], &[], "").unwrap()[0],
            Decision::Exclude(_)
        ));
    }

    #[test]
    fn a_pod_that_does_not_answer_on_the_network_is_not_serving() {
        let condition = |status| PodCondition {
            type_: "network-ready.isim.dev/default.macvlan".into(),
            status,
            reason: String::new(),
            message: String::new(),
        };
        let pods = [pod("down", &[]), pod("up", &[]), pod("unprobed", &[])];
        let network = [
            Some(condition(ConditionStatus::False)),
            Some(condition(ConditionStatus::True)),
            None,
        ];
        let decisions = evaluate(&service(&[]), &pods, &network, "").unwrap();
        let serving: Vec<bool> = decisions
            .iter()
            .map(|d| matches!(d, Decision::Include(c) if c.serving && c.ready))
            .collect();
        assert_eq!(serving, [false, true, true]);
    }

    #[test]
    fn configuration_is_refused() {
        assert!(validate_config("{}").is_ok());
        assert!(validate_config(r#"{"x": 1}"#).is_err());
    }
}
