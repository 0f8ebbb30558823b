//! The default policy as plain Rust: no I/O, no logging, no wasm glue, so it can be tested
//! natively with `cargo test -p nad-default-plugin`.
//!
//! Which pods (SPEC "Which pods"):
//! - if the Service has label `app.kubernetes.io/name`, only pods with the same value of it;
//!   otherwise if it has label `app`, only pods with the same `app`; otherwise all pods;
//! - pods in phase Succeeded or Failed are excluded; terminating pods are included.
//!
//! Endpoint conditions (SPEC "Endpoint conditions", Kubernetes semantics):
//! - serving = pod Ready; terminating = pod has a deletionTimestamp;
//! - ready = publishNotReadyAddresses || (serving && !terminating);
//! - and on the Service's own network: a pod whose network readiness condition (written by
//!   the network prober) is `False` is not serving, whatever its `Ready` says; without the
//!   condition (no prober), as above.

use nad_plugin_sdk::{Decision, KeyValue, PluginInfo, Pod, PodCondition, Service, k8s};

/// The recommended Kubernetes name label; takes precedence over [`APP_LABEL`].
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The traditional `app` label, used when the Service has no [`NAME_LABEL`].
pub const APP_LABEL: &str = "app";

/// The longest part of a rejected configuration quoted back in an error message.
const MAX_QUOTED_CONFIG: usize = 80;

/// Name, version and the pod label keys this policy reads (it reads no annotations).
pub fn info() -> PluginInfo {
    PluginInfo {
        name: "default".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        label_keys: vec![NAME_LABEL.to_string(), APP_LABEL.to_string()],
        annotation_keys: Vec::new(),
    }
}

/// The default policy takes no settings: an empty (or whitespace-only) document and an empty
/// JSON object `{}` are accepted, anything else is an error for the operator.
pub fn validate_config(config: &str) -> Result<(), String> {
    let trimmed = config.trim();
    if trimmed.is_empty() || is_empty_json_object(trimmed) {
        return Ok(());
    }
    Err(format!(
        "the default plugin takes no configuration (expected an empty document or {{}}), \
         but was given {}",
        quote_config(trimmed)
    ))
}

/// `{` and `}` with only whitespace between them.
fn is_empty_json_object(s: &str) -> bool {
    s.strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|inner| inner.trim().is_empty())
}

/// The configuration as a quoted string, shortened if it is long.
fn quote_config(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTED_CONFIG) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &s[..cut], s.len()),
        None => format!("{s:?}"),
    }
}

/// Decides every pod: exactly one decision per pod, in the same order. `network` holds each
/// pod's readiness on the Service's network, in the same order (missing entries: none).
pub fn evaluate(
    service: &Service,
    pods: &[Pod],
    network: &[Option<PodCondition>],
    config: &str,
) -> Result<Vec<Decision>, String> {
    validate_config(config)?;
    let selector = Selector::for_service(service);
    Ok(pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            decide(
                service,
                &selector,
                pod,
                network.get(i).and_then(Option::as_ref),
            )
        })
        .collect())
}

/// The label equality every pod the policy includes for `service` has (`candidate-labels`):
/// the one its [`Selector`] checks, none when it selects every pod. None either for a
/// configuration `evaluate` refuses, so that the refusal is still given.
pub fn selected_by(service: &Service, config: &str) -> Vec<KeyValue> {
    if validate_config(config).is_err() {
        return Vec::new();
    }
    match Selector::for_service(service) {
        Selector::Label { key, value } => vec![KeyValue {
            key: key.to_owned(),
            value: value.to_owned(),
        }],
        Selector::All => Vec::new(),
    }
}

/// The one-line summary the plugin logs after each evaluation.
pub fn summary(decisions: &[Decision]) -> String {
    let included = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Include(_)))
        .count();
    let excluded = decisions.len() - included;
    format!(
        "evaluated {} pods: {included} included, {excluded} excluded",
        decisions.len()
    )
}

/// Which pods a Service selects by label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selector<'a> {
    /// Only pods whose label `key` has exactly `value`.
    Label { key: &'static str, value: &'a str },
    /// Every pod.
    All,
}

impl<'a> Selector<'a> {
    fn for_service(service: &'a Service) -> Self {
        [NAME_LABEL, APP_LABEL]
            .into_iter()
            .find_map(|key| {
                k8s::value(&service.labels, key).map(|value| Selector::Label { key, value })
            })
            .unwrap_or(Selector::All)
    }

    /// `None` when the pod is selected, else why it is not.
    fn rejects(&self, pod: &Pod) -> Option<String> {
        let Selector::Label { key, value } = *self else {
            return None;
        };
        match k8s::value(&pod.labels, key) {
            Some(found) if found == value => None,
            Some(found) => Some(format!(
                "pod label {key}={found:?} does not match the Service's {value:?}"
            )),
            None => Some(format!(
                "pod label {key} is missing (the Service selects {key}={value:?})"
            )),
        }
    }
}

fn decide(
    service: &Service,
    selector: &Selector<'_>,
    pod: &Pod,
    network: Option<&PodCondition>,
) -> Decision {
    if let Some(reason) = selector.rejects(pod) {
        return Decision::Exclude(reason);
    }
    k8s::include_on_network(service, pod, network)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nad_plugin_sdk::{
        Conditions, PodPhase,
        testing::{self, PodExt, ServiceExt},
    };

    /// Unsorted on purpose where a test says so: the policy must not rely on the order.
    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    fn service(labels: &[(&str, &str)], publish_not_ready_addresses: bool) -> Service {
        let mut service = testing::service("web");
        for (key, value) in labels {
            service = service.label(key, value);
        }
        if publish_not_ready_addresses {
            service = service.publishing_not_ready();
        }
        service
    }

    fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
        labels.iter().fold(testing::pod(name), |pod, (key, value)| {
            pod.label(key, value)
        })
    }

    fn cond(ready: bool, serving: bool, terminating: bool) -> Conditions {
        Conditions {
            ready,
            serving,
            terminating,
        }
    }

    fn eval(service: &Service, pods: &[Pod]) -> Vec<Decision> {
        match evaluate(service, pods, &[], "") {
            Ok(decisions) => decisions,
            Err(e) => panic!("evaluate failed: {e}"),
        }
    }

    fn eval_one(service: &Service, pod: Pod) -> Decision {
        let mut decisions = eval(service, &[pod]);
        assert_eq!(decisions.len(), 1);
        decisions.remove(0)
    }

    fn assert_included(decision: &Decision) -> Conditions {
        match decision {
            Decision::Include(c) => *c,
            Decision::Exclude(reason) => panic!("expected include, got exclude: {reason}"),
        }
    }

    fn assert_excluded(decision: &Decision) -> &str {
        match decision {
            Decision::Exclude(reason) => reason,
            Decision::Include(c) => panic!("expected exclude, got include: {c:?}"),
        }
    }

    // ---- info ----

    #[test]
    fn info_declares_name_version_and_keys() {
        let info = info();
        assert_eq!(info.name, "default");
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(info.label_keys, vec!["app.kubernetes.io/name", "app"]);
        assert!(info.annotation_keys.is_empty());
    }

    // ---- conditions ----

    #[test]
    fn conditions_follow_kubernetes_for_every_combination() {
        // (pod ready, pod terminating, publishNotReadyAddresses) -> (ready, serving, terminating)
        let table = [
            ((false, false, false), cond(false, false, false)),
            ((false, false, true), cond(true, false, false)),
            ((false, true, false), cond(false, false, true)),
            ((false, true, true), cond(true, false, true)),
            ((true, false, false), cond(true, true, false)),
            ((true, false, true), cond(true, true, false)),
            ((true, true, false), cond(false, true, true)),
            ((true, true, true), cond(true, true, true)),
        ];
        for ((ready, terminating, pnra), expected) in table {
            let svc = service(&[], pnra);
            let mut p = pod("p", &[]);
            p.ready = ready;
            p.terminating = terminating;
            let got = assert_included(&eval_one(&svc, p));
            assert_eq!(
                got, expected,
                "ready={ready} terminating={terminating} publishNotReadyAddresses={pnra}"
            );
        }
    }

    #[test]
    fn a_pod_that_does_not_answer_on_the_network_is_published_not_serving() {
        use nad_plugin_sdk::{ConditionStatus, testing::network_condition};
        let svc = service(&[], false);
        let pods = [pod("down", &[]), pod("up", &[]), pod("unprobed", &[])];
        let network = [
            Some(network_condition(ConditionStatus::False)),
            Some(network_condition(ConditionStatus::True)),
            None,
        ];
        let decisions = evaluate(&svc, &pods, &network, "").unwrap();
        assert_eq!(assert_included(&decisions[0]), cond(false, false, false));
        assert_eq!(assert_included(&decisions[1]), cond(true, true, false));
        assert_eq!(assert_included(&decisions[2]), cond(true, true, false));
        // publishNotReadyAddresses keeps it ready, still not serving.
        let publishing = service(&[], true);
        let decisions = evaluate(&publishing, &pods[..1], &network[..1], "").unwrap();
        assert_eq!(assert_included(&decisions[0]), cond(true, false, false));
        // A pod the Service does not select stays out, whatever its network says.
        let web = service(&[("app", "web")], false);
        let decisions = evaluate(&web, &[pod("db", &[("app", "db")])], &network[1..2], "").unwrap();
        assert!(assert_excluded(&decisions[0]).contains("app"));
    }

    #[test]
    fn serving_and_terminating_together_is_valid() {
        let svc = service(&[("app", "web")], false);
        let mut p = pod("p", &[("app", "web")]);
        p.ready = true;
        p.terminating = true;
        let got = assert_included(&eval_one(&svc, p));
        assert_eq!(got, cond(false, true, true));
    }

    // ---- label selection ----

    #[test]
    fn name_label_takes_precedence_over_app() {
        let svc = service(
            &[("app.kubernetes.io/name", "web"), ("app", "legacy")],
            false,
        );
        let pods = [
            pod(
                "both-match",
                &[("app.kubernetes.io/name", "web"), ("app", "legacy")],
            ),
            pod("name-only", &[("app.kubernetes.io/name", "web")]),
            pod(
                "name-matches-app-differs",
                &[("app.kubernetes.io/name", "web"), ("app", "x")],
            ),
            pod("app-only", &[("app", "legacy")]),
            pod(
                "name-differs",
                &[("app.kubernetes.io/name", "other"), ("app", "legacy")],
            ),
        ];
        let decisions = eval(&svc, &pods);
        assert_eq!(decisions.len(), 5);
        assert_included(&decisions[0]);
        assert_included(&decisions[1]);
        assert_included(&decisions[2]);
        assert_eq!(
            assert_excluded(&decisions[3]),
            r#"pod label app.kubernetes.io/name is missing (the Service selects app.kubernetes.io/name="web")"#
        );
        assert_eq!(
            assert_excluded(&decisions[4]),
            r#"pod label app.kubernetes.io/name="other" does not match the Service's "web""#
        );
    }

    #[test]
    fn app_label_used_when_service_has_no_name_label() {
        let svc = service(&[("app", "web"), ("tier", "backend")], false);
        let pods = [
            pod("match", &[("app", "web")]),
            pod(
                "match-with-name-label",
                &[("app", "web"), ("app.kubernetes.io/name", "zzz")],
            ),
            pod("differs", &[("app", "db")]),
            pod("missing", &[("app.kubernetes.io/name", "web")]),
        ];
        let decisions = eval(&svc, &pods);
        assert_included(&decisions[0]);
        assert_included(&decisions[1]);
        assert_eq!(
            assert_excluded(&decisions[2]),
            r#"pod label app="db" does not match the Service's "web""#
        );
        assert_eq!(
            assert_excluded(&decisions[3]),
            r#"pod label app is missing (the Service selects app="web")"#
        );
    }

    #[test]
    fn service_without_either_label_selects_all_pods() {
        let svc = service(&[("tier", "backend")], false);
        let pods = [
            pod("none", &[]),
            pod("app", &[("app", "x")]),
            pod("name", &[("app.kubernetes.io/name", "y")]),
        ];
        let decisions = eval(&svc, &pods);
        assert_eq!(decisions.len(), 3);
        decisions.iter().for_each(|d| {
            assert_included(d);
        });
    }

    #[test]
    fn empty_label_value_on_service_still_selects() {
        let svc = service(&[("app", "")], false);
        let decisions = eval(&svc, &[pod("empty", &[("app", "")]), pod("missing", &[])]);
        assert_included(&decisions[0]);
        assert_eq!(
            assert_excluded(&decisions[1]),
            r#"pod label app is missing (the Service selects app="")"#
        );
    }

    #[test]
    fn label_values_are_compared_exactly() {
        let svc = service(&[("app", "web")], false);
        let decisions = eval(
            &svc,
            &[
                pod("case", &[("app", "Web")]),
                pod("space", &[("app", "web ")]),
            ],
        );
        assert_excluded(&decisions[0]);
        assert_excluded(&decisions[1]);
    }

    #[test]
    fn unsorted_label_lists_still_work() {
        let mut svc = service(&[], false);
        svc.labels = vec![kv("zzz", "1"), kv("app", "web"), kv("aaa", "2")];
        let mut p = pod("p", &[]);
        p.labels = vec![kv("zzz", "1"), kv("app", "web")];
        assert_included(&eval_one(&svc, p));
    }

    #[test]
    fn reasons_quote_unusual_values() {
        let svc = service(&[("app", "a\"b")], false);
        let reason = assert_excluded(&eval_one(&svc, pod("p", &[("app", "c\nd")]))).to_string();
        assert_eq!(
            reason,
            r#"pod label app="c\nd" does not match the Service's "a\"b""#
        );
    }

    // ---- phases ----

    #[test]
    fn phases() {
        let svc = service(&[], false);
        let cases = [
            (PodPhase::Pending, None),
            (PodPhase::Running, None),
            (PodPhase::Unknown, None),
            (PodPhase::Succeeded, Some("pod phase is Succeeded")),
            (PodPhase::Failed, Some("pod phase is Failed")),
        ];
        for (phase, excluded) in cases {
            let mut p = pod("p", &[]);
            p.phase = phase;
            let decision = eval_one(&svc, p);
            match excluded {
                None => assert_eq!(assert_included(&decision), cond(true, true, false)),
                Some(reason) => assert_eq!(assert_excluded(&decision), reason),
            }
        }
    }

    #[test]
    fn pending_not_ready_pod_is_included_not_ready() {
        let svc = service(&[], false);
        let mut p = pod("p", &[]);
        p.phase = PodPhase::Pending;
        p.ready = false;
        assert_eq!(
            assert_included(&eval_one(&svc, p)),
            cond(false, false, false)
        );
    }

    #[test]
    fn label_mismatch_is_reported_before_phase() {
        let svc = service(&[("app", "web")], false);
        let mut p = pod("p", &[("app", "db")]);
        p.phase = PodPhase::Failed;
        assert!(assert_excluded(&eval_one(&svc, p)).starts_with("pod label app="));
    }

    // ---- order and count ----

    #[test]
    fn one_decision_per_pod_in_order() {
        let svc = service(&[("app", "web")], false);
        let pods: Vec<Pod> = (0..50)
            .map(|i| {
                let mut p = pod(
                    &format!("p{i}"),
                    &[("app", if i % 3 == 0 { "db" } else { "web" })],
                );
                p.ready = i % 2 == 0;
                p
            })
            .collect();
        let decisions = eval(&svc, &pods);
        assert_eq!(decisions.len(), pods.len());
        for (i, (p, d)) in pods.iter().zip(&decisions).enumerate() {
            if i % 3 == 0 {
                assert_excluded(d);
            } else {
                assert_eq!(assert_included(d).serving, p.ready, "pod {i}");
            }
        }
    }

    #[test]
    fn no_pods_no_decisions() {
        assert!(eval(&service(&[("app", "web")], false), &[]).is_empty());
    }

    // ---- summary ----

    #[test]
    fn summary_counts() {
        let svc = service(&[("app", "web")], false);
        let pods = [
            pod("a", &[("app", "web")]),
            pod("b", &[("app", "db")]),
            pod("c", &[("app", "web")]),
        ];
        assert_eq!(
            summary(&eval(&svc, &pods)),
            "evaluated 3 pods: 2 included, 1 excluded"
        );
        assert_eq!(summary(&[]), "evaluated 0 pods: 0 included, 0 excluded");
    }

    // ---- config ----

    #[test]
    fn accepts_empty_configs() {
        for config in [
            "",
            " ",
            "\n",
            " \t\r\n ",
            "{}",
            " { } ",
            "{\n}\n",
            "\t{\r\n\t}\t",
        ] {
            assert_eq!(validate_config(config), Ok(()), "config {config:?}");
        }
    }

    #[test]
    fn rejects_any_setting() {
        for config in [
            "{\"a\":1}",
            "[]",
            "null",
            "0",
            "\"\"",
            "{",
            "}",
            "{}{}",
            "{} x",
            "mode: strict",
        ] {
            let err = match validate_config(config) {
                Ok(()) => panic!("config {config:?} was accepted"),
                Err(e) => e,
            };
            assert!(
                err.starts_with("the default plugin takes no configuration"),
                "{err}"
            );
            assert!(err.contains(&format!("{:?}", config.trim())), "{err}");
        }
    }

    #[test]
    fn long_rejected_config_is_shortened() {
        let config = format!("{{\"key\": \"{}\"}}", "é".repeat(500));
        let err = match validate_config(&config) {
            Ok(()) => panic!("accepted"),
            Err(e) => e,
        };
        assert!(err.len() < 300, "{err}");
        assert!(
            err.ends_with(&format!("... ({} bytes)", config.len())),
            "{err}"
        );
    }

    #[test]
    fn evaluate_rejects_invalid_config() {
        let svc = service(&[], false);
        let result = evaluate(&svc, &[pod("p", &[])], &[], "{\"strict\": true}");
        match result {
            Err(e) => assert!(e.contains("takes no configuration"), "{e}"),
            Ok(d) => panic!("accepted: {d:?}"),
        }
    }

    #[test]
    fn evaluate_accepts_empty_object_config() {
        let svc = service(&[], false);
        assert_eq!(
            evaluate(&svc, &[pod("p", &[])], &[], " {} ").map(|d| d.len()),
            Ok(1)
        );
    }

    // ---- the labels declared to the host (candidate-labels) ----

    #[test]
    fn selected_by_names_the_label_the_selector_checks() {
        let name = service(&[("app.kubernetes.io/name", "web"), ("app", "x")], false);
        assert_eq!(
            selected_by(&name, ""),
            [kv("app.kubernetes.io/name", "web")]
        );
        let app = service(&[("app", "web"), ("tier", "a")], false);
        assert_eq!(selected_by(&app, "{}"), [kv("app", "web")]);
        assert_eq!(selected_by(&service(&[("tier", "a")], false), ""), []);
        // A refused configuration claims nothing, so evaluate still gives its refusal.
        assert_eq!(selected_by(&app, "{\"x\": 1}"), []);
    }

    /// The claim holds: every pod without the declared labels is excluded, whatever the
    /// Service selects and whatever the pod's phase and readiness.
    #[test]
    fn every_pod_without_the_declared_labels_is_excluded() {
        let values = [None, Some("web"), Some("db"), Some("")];
        fn labels<'a>(name: Option<&'a str>, app: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
            let mut labels = Vec::new();
            labels.extend(name.map(|v| (NAME_LABEL, v)));
            labels.extend(app.map(|v| (APP_LABEL, v)));
            labels
        }
        let mut pods = Vec::new();
        for (name, app) in values
            .iter()
            .flat_map(|n| values.iter().map(move |a| (*n, *a)))
        {
            for ready in [false, true] {
                let mut p = pod("p", &labels(name, app));
                p.ready = ready;
                pods.push(p);
            }
        }
        let mut checked = 0;
        for (name, app) in values
            .iter()
            .flat_map(|n| values.iter().map(move |a| (*n, *a)))
        {
            let svc = service(&labels(name, app), false);
            let claim = selected_by(&svc, "");
            for (p, decision) in pods.iter().zip(eval(&svc, &pods)) {
                let has = claim
                    .iter()
                    .all(|want| k8s::value(&p.labels, &want.key) == Some(want.value.as_str()));
                if !has {
                    assert_excluded(&decision);
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "only {checked} pods outside a claim");
    }
}
