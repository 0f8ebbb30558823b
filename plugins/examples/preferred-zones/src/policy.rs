//! The decisions, as plain Rust: no I/O, no logging, no wasm glue, so they are tested natively
//! with `cargo test -p nad-plugin-preferred-zones`.
//!
//! Which pods:
//! - pods in phase Succeeded or Failed are excluded (as in the default plugin); the others are
//!   *eligible*;
//! - without the Service annotation (default `endpoints.isim.dev/preferred-zones`), or when it
//!   names no zone, every eligible pod is included;
//! - with it, an eligible pod is included when its `zone` is one of the listed zones (exact,
//!   case-sensitive match; a pod whose zone is unknown never matches) and excluded otherwise;
//! - fallback: when no eligible pod is in a preferred zone, every eligible pod is included, so
//!   the Service never goes dark because its zones have no pods. `{"fallback": false}` turns
//!   this off.
//!
//! Endpoint conditions (Kubernetes semantics):
//! - serving = pod Ready; terminating = pod has a deletionTimestamp;
//! - ready = publishNotReadyAddresses || (serving && !terminating).

use serde::Deserialize;

use nad_plugin_sdk::{Conditions, Decision, KeyValue, PluginInfo, Pod, Service, k8s};

/// The name Services select this plugin by (`isim.dev/endpoint-policy: preferred-zones`).
pub const PLUGIN_NAME: &str = "preferred-zones";
/// The Service annotation listing the preferred zones, comma-separated.
pub const DEFAULT_ANNOTATION: &str = "endpoints.isim.dev/preferred-zones";
/// Where a pod's zone comes from; named in exclusion reasons for pods whose zone is unknown.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Name, version and the pod keys this policy reads: none. It reads only the Service's
/// annotations (always passed whole) and each pod's `zone` field.
pub fn info() -> PluginInfo {
    PluginInfo {
        name: PLUGIN_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        label_keys: Vec::new(),
        annotation_keys: Vec::new(),
    }
}

/// The plugin's configuration (`preferred-zones.json`); every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The Service annotation that lists the preferred zones.
    #[serde(default = "default_annotation")]
    pub annotation: String,
    /// Include every eligible pod when none is in a preferred zone.
    #[serde(default = "default_fallback")]
    pub fallback: bool,
}

fn default_annotation() -> String {
    DEFAULT_ANNOTATION.to_owned()
}

fn default_fallback() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Self {
            annotation: default_annotation(),
            fallback: default_fallback(),
        }
    }
}

impl Config {
    /// Parses and checks a configuration document. An empty (or whitespace-only) document
    /// means the defaults.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        const EXPECTED: &str = "expected a JSON object with the optional keys \"annotation\" \
                                (a string) and \"fallback\" (true or false)";
        // serde would also accept a JSON array as a struct, by position: only objects count.
        if !text.trim_start().starts_with('{') {
            return Err(format!(
                "preferred-zones configuration: {EXPECTED}, got {}",
                quote(text.trim())
            ));
        }
        let config: Config = serde_json::from_str(text)
            .map_err(|e| format!("preferred-zones configuration: {e} ({EXPECTED})"))?;
        if config.annotation.is_empty() {
            return Err(
                "preferred-zones configuration: \"annotation\" must not be empty".to_owned(),
            );
        }
        if config.annotation.chars().any(char::is_whitespace) {
            return Err(format!(
                "preferred-zones configuration: \"annotation\" {:?} is not an annotation key \
                 (it contains whitespace)",
                config.annotation
            ));
        }
        Ok(config)
    }
}

/// The longest part of a rejected configuration quoted back in an error message.
const MAX_QUOTED_CONFIG: usize = 80;

/// `s` as a quoted string, shortened if it is long.
fn quote(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTED_CONFIG) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &s[..cut], s.len()),
        None => format!("{s:?}"),
    }
}

/// The preferred zones named by the Service's annotation `key`: comma-separated, each entry
/// trimmed, empty entries and repeats dropped, in the annotation's order. `None` when the
/// annotation is missing or names no zone.
pub fn preferred_zones<'a>(service: &'a Service, key: &str) -> Option<Vec<&'a str>> {
    let value = annotation(&service.annotations, key)?;
    let mut zones: Vec<&str> = Vec::new();
    for zone in value.split(',').map(str::trim).filter(|z| !z.is_empty()) {
        if !zones.contains(&zone) {
            zones.push(zone);
        }
    }
    (!zones.is_empty()).then_some(zones)
}

/// The value of annotation `key` (a linear scan: the lists are short, and it does not rely on
/// the host's sorting).
fn annotation<'a>(annotations: &'a [KeyValue], key: &str) -> Option<&'a str> {
    annotations
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

/// The result of one evaluation: the decisions and what the plugin logs about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exactly one per pod, in order.
    pub decisions: Vec<Decision>,
    /// The preferred zones, or `None` when the Service names none (all pods).
    pub zones: Option<Vec<String>>,
    /// Eligible pods in a preferred zone (0 without preferred zones).
    pub in_zone: usize,
    /// No eligible pod was in a preferred zone, so all eligible pods were included.
    pub fell_back: bool,
}

impl Outcome {
    /// The one-line summary the plugin logs after each evaluation.
    pub fn summary(&self) -> String {
        let included = self
            .decisions
            .iter()
            .filter(|d| matches!(d, Decision::Include(_)))
            .count();
        let excluded = self.decisions.len() - included;
        let mut line = format!(
            "evaluated {} pods: {included} included, {excluded} excluded",
            self.decisions.len()
        );
        match &self.zones {
            None => line.push_str("; the Service names no preferred zones"),
            Some(zones) => {
                line.push_str(&format!(
                    "; {} in the preferred zones {zones:?}",
                    self.in_zone
                ));
                if self.fell_back {
                    line.push_str(
                        "; fallback: no eligible pod is in a preferred zone, so all are included",
                    );
                }
            }
        }
        line
    }
}

/// Decides every pod: exactly one decision per pod, in the same order.
pub fn evaluate(service: &Service, pods: &[Pod], config: &Config) -> Outcome {
    // Phase and conditions first: a pod that is not eligible never counts for the fallback.
    let eligible: Vec<Result<Conditions, String>> =
        pods.iter().map(|pod| eligibility(service, pod)).collect();
    let Some(zones) = preferred_zones(service, &config.annotation) else {
        return Outcome {
            decisions: eligible.into_iter().map(to_decision).collect(),
            zones: None,
            in_zone: 0,
            fell_back: false,
        };
    };
    let is_preferred = |pod: &Pod| !pod.zone.is_empty() && zones.contains(&pod.zone.as_str());
    let candidates = eligible.iter().filter(|e| e.is_ok()).count();
    let in_zone = pods
        .iter()
        .zip(&eligible)
        .filter(|(pod, e)| e.is_ok() && is_preferred(pod))
        .count();
    let fell_back = config.fallback && in_zone == 0 && candidates > 0;
    let decisions = pods
        .iter()
        .zip(eligible)
        .map(|(pod, e)| match e {
            Ok(_) if fell_back || is_preferred(pod) => to_decision(e),
            Ok(_) => Decision::Exclude(zone_reason(pod, &zones, in_zone == 0)),
            Err(_) => to_decision(e),
        })
        .collect();
    Outcome {
        decisions,
        zones: Some(zones.iter().map(|z| (*z).to_owned()).collect()),
        in_zone,
        fell_back,
    }
}

fn to_decision(eligibility: Result<Conditions, String>) -> Decision {
    match eligibility {
        Ok(conditions) => Decision::Include(conditions),
        Err(reason) => Decision::Exclude(reason),
    }
}

/// The pod's endpoint conditions, or why it is never published (its phase).
fn eligibility(service: &Service, pod: &Pod) -> Result<Conditions, String> {
    match k8s::include(service, pod) {
        Decision::Include(conditions) => Ok(conditions),
        Decision::Exclude(reason) => Err(reason),
    }
}

/// Why an eligible pod outside the preferred zones is left out. `none_in_zone` is only true
/// here when the fallback is off (otherwise the pod would have been included).
fn zone_reason(pod: &Pod, zones: &[&str], none_in_zone: bool) -> String {
    let mut reason = if pod.zone.is_empty() {
        format!(
            "pod zone is unknown (its node has no {ZONE_LABEL} label, or it is not scheduled), \
             so it is not in the preferred zones {zones:?}"
        )
    } else {
        format!(
            "pod zone {:?} is not one of the preferred zones {zones:?}",
            pod.zone
        )
    };
    if none_in_zone {
        reason.push_str("; no pod is in a preferred zone and the fallback is off");
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;
    use nad_plugin_sdk::{
        PodPhase,
        testing::{self, PodExt, ServiceExt},
    };

    /// A Service with the given annotations (besides the network one).
    fn service(annotations: &[(&str, &str)]) -> Service {
        annotations
            .iter()
            .fold(testing::service("web"), |service, (key, value)| {
                service.annotation(key, value)
            })
    }

    /// A Service preferring `zones` through the default annotation.
    fn preferring(zones: &str) -> Service {
        service(&[(DEFAULT_ANNOTATION, zones)])
    }

    /// A running, ready pod in `zone`.
    fn pod(name: &str, zone: &str) -> Pod {
        testing::pod(name).zone(zone).node(&format!("node-{name}"))
    }

    fn with_phase(mut p: Pod, phase: PodPhase) -> Pod {
        p.phase = phase;
        p
    }

    fn cond(ready: bool, serving: bool, terminating: bool) -> Conditions {
        Conditions {
            ready,
            serving,
            terminating,
        }
    }

    const READY: Decision = Decision::Include(Conditions {
        ready: true,
        serving: true,
        terminating: false,
    });

    fn eval(service: &Service, pods: &[Pod]) -> Outcome {
        evaluate(service, pods, &Config::default())
    }

    fn excluded(decision: &Decision) -> &str {
        match decision {
            Decision::Exclude(reason) => reason,
            Decision::Include(c) => panic!("expected exclude, got include: {c:?}"),
        }
    }

    fn included(decision: &Decision) -> Conditions {
        match decision {
            Decision::Include(c) => *c,
            Decision::Exclude(reason) => panic!("expected include, got exclude: {reason}"),
        }
    }

    // ---- info ----

    #[test]
    fn info_declares_name_version_and_no_pod_keys() {
        let info = info();
        assert_eq!(info.name, "preferred-zones");
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert!(info.label_keys.is_empty());
        assert!(info.annotation_keys.is_empty());
    }

    // ---- zones ----

    #[test]
    fn pods_in_a_preferred_zone_are_included() {
        let out = eval(
            &preferring("zone-a,zone-b"),
            &[pod("a", "zone-a"), pod("b", "zone-b")],
        );
        assert_eq!(out.decisions, vec![READY, READY]);
        assert_eq!(out.in_zone, 2);
        assert!(!out.fell_back);
    }

    #[test]
    fn pods_out_of_zone_are_excluded_naming_their_zone_and_the_list() {
        let out = eval(
            &preferring("zone-a, zone-b"),
            &[pod("a", "zone-a"), pod("c", "zone-c")],
        );
        assert_eq!(out.decisions[0], READY);
        assert_eq!(
            excluded(&out.decisions[1]),
            r#"pod zone "zone-c" is not one of the preferred zones ["zone-a", "zone-b"]"#
        );
        assert!(!out.fell_back);
    }

    #[test]
    fn pods_with_an_unknown_zone_are_excluded_when_others_are_in_zone() {
        let out = eval(&preferring("zone-a"), &[pod("a", "zone-a"), pod("u", "")]);
        assert_eq!(out.decisions[0], READY);
        let reason = excluded(&out.decisions[1]);
        assert!(reason.starts_with("pod zone is unknown"), "{reason}");
        assert!(reason.contains("topology.kubernetes.io/zone"), "{reason}");
        assert!(reason.contains(r#"["zone-a"]"#), "{reason}");
    }

    #[test]
    fn the_annotation_is_split_on_commas_and_trimmed() {
        let svc = preferring("  zone-a ,zone-b,, ,zone-a , zone-c  ");
        assert_eq!(
            preferred_zones(&svc, DEFAULT_ANNOTATION),
            Some(vec!["zone-a", "zone-b", "zone-c"])
        );
        let out = eval(
            &svc,
            &[pod("a", "zone-a"), pod("c", "zone-c"), pod("d", "zone-d")],
        );
        assert_eq!(out.decisions[0], READY);
        assert_eq!(out.decisions[1], READY);
        excluded(&out.decisions[2]);
    }

    #[test]
    fn zones_match_exactly() {
        let out = eval(
            &preferring("zone-a"),
            &[
                pod("a", "zone-a"),
                pod("upper", "Zone-A"),
                pod("prefix", "zone-ab"),
                pod("space", "zone-a "),
            ],
        );
        assert_eq!(out.decisions[0], READY);
        for d in &out.decisions[1..] {
            excluded(d);
        }
    }

    #[test]
    fn an_empty_zone_entry_never_matches_pods_of_unknown_zone() {
        // "zone-a," has an empty entry; it must not select pods whose zone is unknown.
        let out = eval(&preferring("zone-a,"), &[pod("a", "zone-a"), pod("u", "")]);
        assert_eq!(out.decisions[0], READY);
        excluded(&out.decisions[1]);
    }

    // ---- no annotation ----

    #[test]
    fn without_the_annotation_every_pod_is_included() {
        let pods = [pod("a", "zone-a"), pod("u", ""), pod("c", "zone-c")];
        let out = eval(&service(&[]), &pods);
        assert_eq!(out.decisions, vec![READY, READY, READY]);
        assert_eq!(out.zones, None);
        assert!(!out.fell_back);
    }

    #[test]
    fn an_annotation_naming_no_zone_means_every_pod() {
        for value in ["", " ", ",", " , ,"] {
            let svc = preferring(value);
            assert_eq!(preferred_zones(&svc, DEFAULT_ANNOTATION), None, "{value:?}");
            let out = eval(&svc, &[pod("a", "zone-a"), pod("u", "")]);
            assert_eq!(out.decisions, vec![READY, READY], "{value:?}");
            assert!(!out.fell_back);
        }
    }

    #[test]
    fn a_configured_annotation_replaces_the_default() {
        let config = Config::parse(r#"{"annotation": "example.com/zones"}"#).unwrap();
        let svc = service(&[
            ("example.com/zones", "zone-b"),
            (DEFAULT_ANNOTATION, "zone-a"),
        ]);
        let out = evaluate(&svc, &[pod("a", "zone-a"), pod("b", "zone-b")], &config);
        excluded(&out.decisions[0]);
        assert_eq!(out.decisions[1], READY);
        // The default annotation alone is not read any more.
        let out = evaluate(
            &preferring("zone-a"),
            &[pod("a", "zone-a"), pod("b", "zone-b")],
            &config,
        );
        assert_eq!(out.decisions, vec![READY, READY]);
        assert_eq!(out.zones, None);
    }

    // ---- fallback ----

    #[test]
    fn fallback_includes_everything_when_no_pod_is_in_a_preferred_zone() {
        let out = eval(
            &preferring("zone-a"),
            &[pod("b", "zone-b"), pod("u", ""), pod("c", "zone-c")],
        );
        assert_eq!(out.decisions, vec![READY, READY, READY]);
        assert!(out.fell_back);
        assert_eq!(out.in_zone, 0);
    }

    #[test]
    fn fallback_ignores_ineligible_pods_in_a_preferred_zone() {
        // The only pod in zone-a has finished: it would not be published, so it does not count,
        // and the pods elsewhere are published.
        let out = eval(
            &preferring("zone-a"),
            &[
                with_phase(pod("done", "zone-a"), PodPhase::Succeeded),
                pod("b", "zone-b"),
            ],
        );
        assert_eq!(excluded(&out.decisions[0]), "pod phase is Succeeded");
        assert_eq!(out.decisions[1], READY);
        assert!(out.fell_back);
    }

    #[test]
    fn fallback_still_excludes_terminal_pods() {
        let out = eval(
            &preferring("zone-a"),
            &[
                pod("b", "zone-b"),
                with_phase(pod("f", "zone-b"), PodPhase::Failed),
            ],
        );
        assert_eq!(out.decisions[0], READY);
        assert_eq!(excluded(&out.decisions[1]), "pod phase is Failed");
        assert!(out.fell_back);
    }

    #[test]
    fn a_not_ready_pod_in_zone_is_enough_to_stay_zonal() {
        // Eligibility is about being published, not about readiness: a not-ready pod in a
        // preferred zone keeps the Service zone-local (documented in the README).
        let mut in_zone = pod("a", "zone-a");
        in_zone.ready = false;
        let out = eval(&preferring("zone-a"), &[in_zone, pod("b", "zone-b")]);
        assert_eq!(included(&out.decisions[0]), cond(false, false, false));
        excluded(&out.decisions[1]);
        assert!(!out.fell_back);
    }

    #[test]
    fn without_fallback_nothing_outside_the_zones_is_included() {
        let config = Config::parse(r#"{"fallback": false}"#).unwrap();
        let out = evaluate(
            &preferring("zone-a"),
            &[pod("b", "zone-b"), pod("u", "")],
            &config,
        );
        assert!(!out.fell_back);
        let reason = excluded(&out.decisions[0]);
        assert!(
            reason.starts_with(r#"pod zone "zone-b" is not one of the preferred zones"#),
            "{reason}"
        );
        assert!(reason.ends_with("and the fallback is off"), "{reason}");
        assert!(excluded(&out.decisions[1]).starts_with("pod zone is unknown"));
    }

    #[test]
    fn without_fallback_pods_in_zone_are_still_included() {
        let config = Config::parse(r#"{"fallback": false}"#).unwrap();
        let out = evaluate(
            &preferring("zone-a"),
            &[pod("a", "zone-a"), pod("b", "zone-b")],
            &config,
        );
        assert_eq!(out.decisions[0], READY);
        let reason = excluded(&out.decisions[1]);
        assert!(!reason.contains("fallback"), "{reason}");
    }

    #[test]
    fn no_fallback_reported_without_eligible_pods() {
        let out = eval(
            &preferring("zone-a"),
            &[with_phase(pod("f", "zone-b"), PodPhase::Failed)],
        );
        assert!(!out.fell_back);
        let out = eval(&preferring("zone-a"), &[]);
        assert!(out.decisions.is_empty());
        assert!(!out.fell_back);
    }

    // ---- phases ----

    #[test]
    fn phases() {
        let cases = [
            (PodPhase::Pending, None),
            (PodPhase::Running, None),
            (PodPhase::Unknown, None),
            (PodPhase::Succeeded, Some("pod phase is Succeeded")),
            (PodPhase::Failed, Some("pod phase is Failed")),
        ];
        for svc in [service(&[]), preferring("zone-a")] {
            for (phase, reason) in cases {
                let out = eval(&svc, &[with_phase(pod("p", "zone-a"), phase)]);
                match reason {
                    None => assert_eq!(out.decisions, vec![READY], "{phase:?}"),
                    Some(reason) => assert_eq!(excluded(&out.decisions[0]), reason),
                }
            }
        }
    }

    #[test]
    fn the_phase_reason_wins_over_the_zone_reason() {
        let out = eval(
            &preferring("zone-a"),
            &[
                pod("a", "zone-a"),
                with_phase(pod("f", "zone-b"), PodPhase::Failed),
            ],
        );
        assert_eq!(excluded(&out.decisions[1]), "pod phase is Failed");
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
        // Without zones, in a preferred zone, and through the fallback: the same conditions.
        for (svc, zone) in [
            (service(&[]), "zone-x"),
            (preferring("zone-a"), "zone-a"),
            (preferring("zone-a"), "zone-b"),
        ] {
            for ((ready, terminating, pnra), expected) in table {
                let mut svc = svc.clone();
                svc.publish_not_ready_addresses = pnra;
                let mut p = pod("p", zone);
                p.ready = ready;
                p.terminating = terminating;
                let out = eval(&svc, &[p]);
                assert_eq!(
                    included(&out.decisions[0]),
                    expected,
                    "ready={ready} terminating={terminating} publishNotReadyAddresses={pnra} \
                     zone={zone}"
                );
            }
        }
    }

    // ---- order and count ----

    #[test]
    fn one_decision_per_pod_in_order() {
        let zones = ["zone-a", "zone-b", "zone-c", ""];
        let pods: Vec<Pod> = (0..40)
            .map(|i| pod(&format!("p{i}"), zones[i % zones.len()]))
            .collect();
        let out = eval(&preferring("zone-b"), &pods);
        assert_eq!(out.decisions.len(), pods.len());
        assert_eq!(out.in_zone, 10);
        for (i, d) in out.decisions.iter().enumerate() {
            assert_eq!(matches!(d, Decision::Include(_)), i % 4 == 1, "pod {i}");
        }
    }

    // ---- summary ----

    #[test]
    fn summaries() {
        let pods = [pod("a", "zone-a"), pod("b", "zone-b")];
        assert_eq!(
            eval(&service(&[]), &pods).summary(),
            "evaluated 2 pods: 2 included, 0 excluded; the Service names no preferred zones"
        );
        assert_eq!(
            eval(&preferring("zone-a"), &pods).summary(),
            r#"evaluated 2 pods: 1 included, 1 excluded; 1 in the preferred zones ["zone-a"]"#
        );
        assert_eq!(
            eval(&preferring("zone-x"), &pods).summary(),
            r#"evaluated 2 pods: 2 included, 0 excluded; 0 in the preferred zones ["zone-x"]; fallback: no eligible pod is in a preferred zone, so all are included"#
        );
    }

    // ---- config ----

    #[test]
    fn empty_configs_mean_the_defaults() {
        for text in ["", " ", "\n\t", "{}", " { } "] {
            assert_eq!(Config::parse(text), Ok(Config::default()), "{text:?}");
        }
        assert_eq!(
            Config::default(),
            Config {
                annotation: DEFAULT_ANNOTATION.to_owned(),
                fallback: true,
            }
        );
    }

    #[test]
    fn settings_are_read() {
        assert_eq!(
            Config::parse(r#"{"annotation": "example.com/zones", "fallback": false}"#),
            Ok(Config {
                annotation: "example.com/zones".to_owned(),
                fallback: false,
            })
        );
        assert_eq!(
            Config::parse(r#"{"fallback": true}"#),
            Ok(Config::default())
        );
    }

    #[test]
    fn bad_configuration_is_explained() {
        let cases = [
            (r#"{"fallbak": false}"#, "unknown field `fallbak`"),
            (r#"{"annotation": ""}"#, "\"annotation\" must not be empty"),
            (r#"{"annotation": "a b"}"#, "contains whitespace"),
            (r#"{"fallback": "no"}"#, "invalid type: string \"no\""),
            (r#"{"annotation": 1}"#, "invalid type: integer"),
            ("null", "expected a JSON object"),
            ("[]", "expected a JSON object"),
            (r#"["example.com/zones", false]"#, "expected a JSON object"),
            ("not json", "got \"not json\""),
            ("{", "EOF while parsing"),
            ("{} {}", "trailing characters"),
        ];
        for (text, expected) in cases {
            let err = Config::parse(text).unwrap_err();
            assert!(err.starts_with("preferred-zones configuration: "), "{err}");
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_long_rejected_configuration_is_shortened() {
        let text = format!("zones: {}", "é".repeat(500));
        let err = Config::parse(&text).unwrap_err();
        assert!(err.len() < 400, "{err}");
        assert!(
            err.ends_with(&format!("... ({} bytes)", text.len())),
            "{err}"
        );
    }
}
