//! The plugin runtime with real components built from source: the default plugin's decisions,
//! and the sandbox limits proven with a deliberately misbehaving guest.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::{sync::Arc, time::Duration};

use crate::runtime_with_tight_limits as runtime;
use k8s_openapi::api::core::v1::Pod;
use nad_model::input::target::ServiceTarget;
use nad_model::{
    candidate::Candidate,
    decision::{Conditions, Decision},
    keys::Keys,
    pod::PodRecord,
};
use nad_plugin_runtime::{
    CallError, DEFAULT_PLUGIN_WASM, LoadError, Plugin, Rejected, Step, conditions_view, pod_view,
    prepare, service_view, wit,
};
use serde_json::json;

const MISBEHAVING: &[u8] = include_bytes!(env!("NSC_TEST_MISBEHAVING_WASM"));

fn target(labels: &[(&str, &str)], publish_not_ready: bool) -> ServiceTarget {
    ServiceTarget {
        name: "web".into(),
        namespace: "team-a".into(),
        uid: "svc-uid".into(),
        network: "team-a/macvlan".into(),
        labels: labels.iter().copied().collect(),
        annotations: Default::default(),
        ports: vec![],
        ip_families: None,
        publish_not_ready_addresses: publish_not_ready,
    }
}

struct PodSpec<'a> {
    name: &'a str,
    labels: serde_json::Value,
    phase: &'a str,
    ready: bool,
    terminating: bool,
}

fn candidate(p: PodSpec<'_>) -> Candidate {
    let deletion = p.terminating.then_some("2026-11-29T00:00:00Z");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": p.name, "namespace": "team-a", "uid": format!("uid-{}", p.name),
                     "labels": p.labels, "deletionTimestamp": deletion,
                     "annotations": {"note": "n", "k8s.v1.cni.cncf.io/network-status": "[]"}},
        "spec": {"containers": [], "nodeName": "node-1"},
        "status": {"phase": p.phase, "conditions": [{"type": "Ready", "status": if p.ready { "True" } else { "False" }}]},
    }))
    .unwrap();
    Candidate {
        pod: Arc::new(PodRecord::from_pod(&pod, &Keys::all())),
        ips: vec!["192.168.2.4".parse().unwrap(), "fd00::4".parse().unwrap()].into(),
        zone: Some("zone-a".into()),
    }
}

fn pod(name: &str, app: &str) -> Candidate {
    candidate(PodSpec {
        name,
        labels: json!({"app": app, "team": "blue", "other": "x"}),
        phase: "Running",
        ready: true,
        terminating: false,
    })
}

fn evaluate(
    plugin: &Plugin,
    target: &ServiceTarget,
    pods: &[Candidate],
    config: &str,
) -> Result<Vec<Decision>, CallError> {
    let views: Vec<wit::Pod> = pods.iter().map(|c| pod_view(c, plugin)).collect();
    let conditions = conditions_view(pods, plugin, &target.network).map(Arc::new);
    plugin
        .evaluate(&service_view(target), &views, conditions, config)
        .map(|answer| answer.expect("the plugin decides"))
}

/// The plugin's own refusal to decide.
fn rejected(plugin: &Plugin, target: &ServiceTarget, pods: &[Candidate], config: &str) -> Rejected {
    let views: Vec<wit::Pod> = pods.iter().map(|c| pod_view(c, plugin)).collect();
    plugin
        .evaluate(&service_view(target), &views, None, config)
        .expect("the call completes")
        .expect_err("the plugin refuses")
}

fn include(ready: bool, serving: bool, terminating: bool) -> Decision {
    Decision::Include(Conditions {
        ready,
        serving,
        terminating,
    })
}

#[test]
fn the_default_plugin_describes_itself() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    assert_eq!(plugin.info().name, "default");
    assert_eq!(plugin.info().version, env!("CARGO_PKG_VERSION"));
    assert!(plugin.reads_label("app.kubernetes.io/name") && plugin.reads_label("app"));
    assert!(!plugin.reads_label("team"));
    plugin.validate_config("").unwrap().unwrap();
    plugin.validate_config(" {} ").unwrap().unwrap();
    let err = plugin
        .validate_config(r#"{"zones": ["a"]}"#)
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("invalid configuration"), "{err}");
    assert!(err.to_string().contains("plugin default"), "{err}");
}

#[test]
fn the_default_plugin_maps_conditions_exactly_as_kubernetes() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    // (ready, terminating, publishNotReadyAddresses) -> (ready, serving, terminating)
    let table = [
        ((true, false, false), (true, true, false)),
        ((false, false, false), (false, false, false)),
        ((true, true, false), (false, true, true)),
        ((false, true, false), (false, false, true)),
        ((true, false, true), (true, true, false)),
        ((false, false, true), (true, false, false)),
        ((true, true, true), (true, true, true)),
        ((false, true, true), (true, false, true)),
    ];
    for ((ready, terminating, pnra), (want_ready, want_serving, want_terminating)) in table {
        let c = candidate(PodSpec {
            name: "p",
            labels: json!({}),
            phase: "Running",
            ready,
            terminating,
        });
        let got = evaluate(&plugin, &target(&[], pnra), &[c], "").unwrap();
        assert_eq!(
            got,
            vec![include(want_ready, want_serving, want_terminating)],
            "ready={ready} terminating={terminating} publishNotReadyAddresses={pnra}"
        );
    }
}

#[test]
fn the_default_plugin_filters_by_label_and_phase() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    let by_name = candidate(PodSpec {
        name: "by-name",
        labels: json!({"app.kubernetes.io/name": "web", "app": "other"}),
        phase: "Running",
        ready: true,
        terminating: false,
    });
    let by_app = pod("by-app", "web");
    let done = candidate(PodSpec {
        name: "done",
        labels: json!({"app": "web"}),
        phase: "Succeeded",
        ready: false,
        terminating: false,
    });
    let failed = candidate(PodSpec {
        name: "failed",
        labels: json!({"app": "web"}),
        phase: "Failed",
        ready: false,
        terminating: false,
    });
    let pending = candidate(PodSpec {
        name: "pending",
        labels: json!({"app": "web"}),
        phase: "Pending",
        ready: false,
        terminating: false,
    });
    let pods = [by_name, by_app, done, failed, pending];

    // app.kubernetes.io/name wins over app.
    let got = evaluate(
        &plugin,
        &target(&[("app.kubernetes.io/name", "web"), ("app", "web")], false),
        &pods,
        "",
    )
    .unwrap();
    assert_eq!(got[0], include(true, true, false));
    assert!(
        matches!(&got[1], Decision::Exclude(r) if r.contains("app.kubernetes.io/name")),
        "{got:?}"
    );

    // Only app: the by-name pod's app label is "other".
    let got = evaluate(&plugin, &target(&[("app", "web")], false), &pods, "").unwrap();
    assert!(matches!(&got[0], Decision::Exclude(_)));
    assert_eq!(got[1], include(true, true, false));
    assert!(
        matches!(&got[2], Decision::Exclude(r) if r.contains("Succeeded")),
        "{got:?}"
    );
    assert!(
        matches!(&got[3], Decision::Exclude(r) if r.contains("Failed")),
        "{got:?}"
    );
    assert_eq!(
        got[4],
        include(false, false, false),
        "pending pods are not excluded"
    );

    // No label: every non-terminal pod.
    let got = evaluate(&plugin, &target(&[], false), &pods, "").unwrap();
    let included = got
        .iter()
        .filter(|d| matches!(d, Decision::Include(_)))
        .count();
    assert_eq!(included, 3);
}

/// The host's environment, arguments and working directory stay outside the sandbox.
#[test]
fn a_plugin_sees_an_empty_environment() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    assert!(
        std::env::vars().any(|(k, _)| k == "PATH"),
        "the test process has an environment to leak"
    );
    let got = evaluate(
        &guest,
        &target(&[], false),
        &[pod("a", "web")],
        "environment",
    )
    .unwrap();
    let Decision::Exclude(seen) = &got[0] else {
        panic!("{got:?}")
    };
    assert!(
        seen.starts_with("env=[] args=[] "),
        "the plugin saw: {seen}"
    );
}

#[test]
fn pods_carry_only_the_labels_and_annotations_the_plugin_declared() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    assert_eq!(guest.info().label_keys, vec!["team"]);
    let got = evaluate(
        &guest,
        &target(&[], false),
        &[pod("a", "web")],
        "show-inputs",
    )
    .unwrap();
    let Decision::Exclude(seen) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(
        seen,
        "labels=team=blue;annotations=k8s.v1.cni.cncf.io/network-status=[],note=n;ips=192.168.2.4,fd00::4;zone=zone-a;node=node-1;phase=running"
    );
    let default = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    let view = pod_view(&pod("a", "web"), &default);
    let keys: Vec<_> = view.labels.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, vec!["app"]);
    assert!(view.annotations.is_empty());
}

/// Pod conditions (WIT 1.2) travel beside the call: each pod's readiness on the Service's
/// network, and the condition types the plugin declared; no other condition, and none of
/// another network's.
#[test]
fn pods_carry_their_network_readiness_and_only_the_declared_conditions() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    assert!(guest.reads_conditions());
    assert_eq!(guest.condition_types(), ["example.com/disk-ready"]);
    let with_conditions = |name: &str, conditions: serde_json::Value| {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}")},
            "spec": {"containers": [], "nodeName": "node-1"},
            "status": {"phase": "Running", "conditions": conditions},
        }))
        .unwrap();
        let keys = Keys {
            conditions: nad_model::keys::KeySet::only(["example.com/disk-ready"]),
            ..Keys::default()
        };
        Candidate {
            pod: Arc::new(PodRecord::from_pod(&pod, &keys)),
            ips: vec!["192.168.2.4".parse().unwrap()].into(),
            zone: None,
        }
    };
    let down = with_conditions(
        "down",
        json!([
            {"type": "Ready", "status": "True"},
            {"type": "network-ready.isim.dev/team-a.macvlan", "status": "False", "reason": "ConnectFailed"},
            {"type": "network-ready.isim.dev/team-a.other", "status": "True", "reason": "Answered"},
            {"type": "example.com/disk-ready", "status": "Unknown", "reason": "Checking"},
            {"type": "example.com/undeclared", "status": "True"},
        ]),
    );
    let plain = with_conditions("plain", json!([{"type": "Ready", "status": "True"}]));
    let got = evaluate(
        &guest,
        &target(&[], false),
        &[down, plain],
        "show-conditions",
    )
    .unwrap();
    assert_eq!(
        got,
        [
            Decision::Exclude(
                "network: network-ready.isim.dev/team-a.macvlan=False(ConnectFailed); \
                 declared: [example.com/disk-ready=Unknown(Checking)]"
                    .into()
            ),
            Decision::Exclude("network: none; declared: []".into()),
        ]
    );
    // Outside a call's conditions (the load's self-test), a list per pod all the same.
    let views = vec![pod_view(&pod("a", "web"), &guest)];
    let answer = guest
        .evaluate(
            &service_view(&target(&[], false)),
            &views,
            None,
            "show-conditions",
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        answer,
        [Decision::Exclude("network: none; declared: []".into())]
    );
}

#[test]
fn an_endless_loop_hits_the_deadline() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let err = evaluate(&guest, &target(&[], false), &[pod("a", "web")], "loop").unwrap_err();
    assert!(
        matches!(err, CallError::Timeout { deadline, .. } if deadline == Duration::from_millis(50)),
        "{err}"
    );
    assert_eq!(err.cause(), "timeout");
    assert!(err.to_string().contains("plugin misbehaving"), "{err}");
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let err = evaluate(
        &guest,
        &target(&[], false),
        &[pod("a", "web")],
        "memory-bomb",
    )
    .unwrap_err();
    assert!(
        matches!(err, CallError::MemoryLimit { limit, .. } if limit == 16 << 20),
        "{err}"
    );
    assert_eq!(err.cause(), "memory_limit");
}

/// What each of the two core modules of [`several_memories`] defines.
#[derive(Clone, Copy)]
struct CoreModule {
    /// Its linear memories, each of this many 64 KiB pages.
    memories: usize,
    pages: usize,
    /// Its tables, each of this many elements.
    tables: usize,
    elements: usize,
}

impl CoreModule {
    fn memory(pages: usize) -> Self {
        CoreModule {
            memories: 1,
            pages,
            tables: 0,
            elements: 0,
        }
    }

    fn with_tables(self, tables: usize, elements: usize) -> Self {
        CoreModule {
            tables,
            elements,
            ..self
        }
    }

    /// Its memories and tables in the text format; the first memory is exported, as the one
    /// the canonical ABI uses (the main module's) or the one `grow` grows (the second's).
    fn fields(self) -> String {
        let mut text = format!("(memory (export \"memory\") {})\n", self.pages);
        for _ in 1..self.memories {
            text.push_str(&format!("(memory {})\n", self.pages));
        }
        for _ in 0..self.tables {
            text.push_str(&format!("(table {} funcref)\n", self.elements));
        }
        text
    }
}

/// The host's `types` interface, imported: the records the `policy` functions take and give.
const TYPES_IMPORT: &str = r#"
  (import "isim:nad-endpoints/types@1.2.0" (instance $types
    (type (;0;) (record (field "key" string) (field "value" string)))
    (export (;1;) "key-value" (type (eq 0)))
    (type (;2;) (variant (case "number" u16) (case "name" string)))
    (export (;3;) "target-port" (type (eq 2)))
    (type (;4;) (option string))
    (type (;5;) (record (field "name" string) (field "protocol" string) (field "port" u16)
      (field "target-port" 3) (field "app-protocol" 4)))
    (export (;6;) "service-port" (type (eq 5)))
    (type (;7;) (list 1))
    (type (;8;) (list 6))
    (type (;9;) (record (field "name" string) (field "namespace" string) (field "labels" 7)
      (field "annotations" 7) (field "ports" 8) (field "publish-not-ready-addresses" bool)
      (field "network" string)))
    (export (;10;) "service" (type (eq 9)))
    (type (;11;) (enum "pending" "running" "succeeded" "failed" "unknown"))
    (export (;12;) "pod-phase" (type (eq 11)))
    (type (;13;) (list string))
    (type (;14;) (record (field "name" string) (field "namespace" string) (field "uid" string)
      (field "labels" 7) (field "annotations" 7) (field "phase" 12) (field "ready" bool)
      (field "terminating" bool) (field "node-name" string) (field "zone" string)
      (field "ips" 13)))
    (export (;15;) "pod" (type (eq 14)))
    (type (;16;) (record (field "ready" bool) (field "serving" bool) (field "terminating" bool)))
    (export (;17;) "conditions" (type (eq 16)))
    (type (;18;) (variant (case "include" 17) (case "exclude" string)))
    (export (;19;) "decision" (type (eq 18)))
    (type (;20;) (record (field "name" string) (field "version" string) (field "label-keys" 13)
      (field "annotation-keys" 13)))
    (export (;21;) "plugin-info" (type (eq 20)))
  ))
"#;

/// A plugin component of two core modules, each with its own memories and tables, as a
/// component composed from several modules (or written in another language) may be; no Rust
/// guest has more than one memory. It answers `info` (`several-memories`), accepts any
/// configuration and decides nothing; `validate-config` of a non-empty document first grows the
/// main module's memory and then the second module's, by `grow` pages each.
fn several_memories(main: CoreModule, second: CoreModule, grow: usize) -> Vec<u8> {
    let (main_fields, second_fields) = (main.fields(), second.fields());
    let text = format!(
        r#"
(component
{TYPES_IMPORT}
  (alias export $types "service" (type $service))
  (alias export $types "pod" (type $pod))
  (alias export $types "decision" (type $decision))
  (alias export $types "plugin-info" (type $plugin-info))

  (core module $second
    {second_fields}
    (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  )
  (core instance $second (instantiate $second))

  (core module $main
    (import "second" "grow" (func $grow-second (param i32) (result i32)))
    {main_fields}
    (global $next (mut i32) (i32.const 1024))
    ;; plugin-info: name (256, 16), version (288, 5), no label or annotation keys.
    (data (i32.const 0) "\00\01\00\00\10\00\00\00\20\01\00\00\05\00\00\00")
    (data (i32.const 256) "several-memories")
    (data (i32.const 288) "0.0.0")
    (func (export "info") (result i32) (i32.const 0))
    ;; Both answers are `ok` (a zero discriminant at 512), `evaluate`'s with no decisions.
    (func (export "validate-config") (param i32 i32) (result i32)
      (if (local.get 1)
        (then
          (drop (memory.grow (i32.const {grow})))
          (drop (call $grow-second (i32.const {grow})))))
      (i32.const 512))
    (func (export "evaluate") (param i32) (result i32) (i32.const 512))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at
        (i32.and
          (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get 2))))
      (global.set $next (i32.add (local.get $at) (local.get 3)))
      (local.get $at))
  )
  (core instance $main (instantiate $main (with "second" (instance $second))))
  (alias core export $main "memory" (core memory $memory))
  (alias core export $main "realloc" (core func $realloc))
  (alias core export $main "info" (core func $core-info))
  (alias core export $main "validate-config" (core func $core-validate-config))
  (alias core export $main "evaluate" (core func $core-evaluate))

  (func $info (result $plugin-info)
    (canon lift (core func $core-info) (memory $memory) string-encoding=utf8))
  (func $validate-config (param "config" string) (result (result (error string)))
    (canon lift (core func $core-validate-config) (memory $memory) (realloc $realloc)
      string-encoding=utf8))
  (func $evaluate (param "service" $service) (param "pods" (list $pod)) (param "config" string)
    (result (result (list $decision) (error string)))
    (canon lift (core func $core-evaluate) (memory $memory) (realloc $realloc)
      string-encoding=utf8))
  (instance $policy
    (export "info" (func $info))
    (export "validate-config" (func $validate-config))
    (export "evaluate" (func $evaluate)))
  (export "isim:nad-endpoints/policy@1.2.0" (instance $policy))
)
"#
    );
    wat::parse_str(text).unwrap()
}

/// The memory limit (16 MiB here) refused at load, as a host failure naming the plugin.
fn assert_memory_limit(err: LoadError) {
    let LoadError::Call(err) = err else {
        panic!("not a call failure: {err}");
    };
    assert!(
        matches!(err, CallError::MemoryLimit { limit, .. } if limit == 16 << 20),
        "{err}"
    );
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("plugin several-memories"), "{err}");
}

/// Each memory under the limit alone, together over it: the limit holds for the instance (the
/// component's Store), not for each memory.
#[test]
fn several_memories_share_one_memory_limit() {
    let rt = runtime();
    // 96 + 96 pages = 12 MiB: within 16 MiB.
    let fits = several_memories(CoreModule::memory(96), CoreModule::memory(96), 0);
    let plugin = rt.load("several-memories", &fits).unwrap();
    assert_eq!(plugin.info().name, "several-memories");
    // 160 pages = 10 MiB alone is within the limit too.
    rt.load(
        "several-memories",
        &several_memories(CoreModule::memory(160), CoreModule::memory(1), 0),
    )
    .unwrap();
    // 160 + 160 pages = 20 MiB.
    let over = several_memories(CoreModule::memory(160), CoreModule::memory(160), 0);
    assert_memory_limit(rt.load("several-memories", &over).unwrap_err());
    let err = prepare(&rt, "several-memories", &over, "").unwrap_err();
    assert_eq!(err.step, Step::MemoryLimit, "{err}");
}

/// The same when the memories grow during a call: each by 10 MiB, from 64 KiB.
#[test]
fn memories_grown_in_one_call_share_one_memory_limit() {
    let rt = runtime();
    let small = CoreModule::memory(1);
    let by_6_mib = rt
        .load("several-memories", &several_memories(small, small, 96))
        .unwrap();
    by_6_mib.validate_config("grow").unwrap().unwrap();
    let by_10_mib = rt
        .load("several-memories", &several_memories(small, small, 160))
        .unwrap();
    let err = by_10_mib.validate_config("grow").unwrap_err();
    assert!(
        matches!(
            err,
            CallError::MemoryLimit {
                function: "validate-config",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("plugin several-memories"), "{err}");
}

/// Tables count against the same limit (a pointer per element), whatever their number: 24
/// tables of 100 000 elements take 19.2 MB, 16 take 12.8 MB.
#[test]
fn tables_share_the_memory_limit() {
    let rt = runtime();
    let module = |tables| CoreModule::memory(1).with_tables(tables, 100_000);
    rt.load(
        "several-memories",
        &several_memories(module(8), module(8), 0),
    )
    .unwrap();
    let over = several_memories(module(12), module(12), 0);
    assert_memory_limit(rt.load("several-memories", &over).unwrap_err());
}

/// More memories or tables than a call's sandbox may create are refused before any instance
/// is made, with the limit named.
#[test]
fn more_memories_or_tables_than_the_sandbox_allows_are_refused_at_load() {
    let rt = runtime();
    let memories = |memories| CoreModule {
        memories,
        ..CoreModule::memory(1)
    };
    rt.load(
        "several-memories",
        &several_memories(memories(4), memories(4), 0),
    )
    .unwrap();
    let err = rt
        .load(
            "several-memories",
            &several_memories(memories(5), memories(4), 0),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::Resources {
                resource: "linear memories",
                count: 9,
                limit: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("plugin several-memories"), "{err}");

    let tables = |tables| CoreModule::memory(1).with_tables(tables, 1);
    rt.load(
        "several-memories",
        &several_memories(tables(32), tables(32), 0),
    )
    .unwrap();
    let many = several_memories(tables(33), tables(32), 0);
    let err = rt.load("several-memories", &many).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::Resources {
                resource: "tables",
                count: 65,
                limit: 64,
                ..
            }
        ),
        "{err}"
    );
    let err = prepare(&rt, "several-memories", &many, "").unwrap_err();
    assert_eq!(err.step, Step::MemoryLimit, "{err}");
    assert!(
        err.to_string().contains("the sandbox allows at most 64"),
        "{err}"
    );
}

#[test]
fn a_trap_is_reported_and_the_next_call_runs_in_a_fresh_instance() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let err = evaluate(&guest, &target(&[], false), &[pod("a", "web")], "trap").unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Trap {
                function: "evaluate",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.cause(), "trap");
    let got = evaluate(&guest, &target(&[], false), &[pod("a", "web")], "echo").unwrap();
    assert_eq!(got, vec![include(true, true, false)]);
}

#[test]
fn the_default_plugin_declares_the_label_its_service_selects_and_the_answer_is_kept() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    assert!(plugin.selects());
    let web = target(&[("app", "web"), ("tier", "a")], false);
    let first = plugin.selection(&web, "").unwrap();
    assert_eq!(first.to_string(), r#"app="web""#);
    assert!(
        Arc::ptr_eq(&first, &plugin.selection(&web, "").unwrap()),
        "kept, not asked again"
    );
    let named = target(&[("app", "web"), ("app.kubernetes.io/name", "shop")], false);
    let by_name = plugin.selection(&named, "").unwrap();
    assert_eq!(by_name.to_string(), r#"app.kubernetes.io/name="shop""#);
    assert!(
        plugin
            .selection(&target(&[("tier", "a")], false), "")
            .unwrap()
            .is_everything()
    );
    // Another configuration is another answer (a refused one claims nothing).
    assert!(
        plugin
            .selection(&web, r#"{"x": 1}"#)
            .unwrap()
            .is_everything()
    );
}

#[test]
fn a_claim_on_a_label_the_plugin_does_not_read_is_ignored() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    // It claims team=blue and app=web, and reads the label team only.
    let selection = guest.selection(&target(&[], false), "false-claim").unwrap();
    assert_eq!(selection.to_string(), r#"team="blue""#);
    assert!(
        guest
            .selection(&target(&[], false), "echo")
            .unwrap()
            .is_everything()
    );
}

#[test]
fn a_trap_in_selected_by_fails_the_call_naming_the_function() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let err = guest
        .selection(&target(&[], false), "trap-on-claim")
        .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Trap {
                function: "candidate-labels.selected-by",
                ..
            }
        ),
        "{err}"
    );
}

/// Every call runs on an instance from the pool, whose memory is reset in between: a plugin
/// that leaves markers in a static and in pages it grows the memory by (past what a slot keeps
/// resident) finds none of them in the next call, from one thread or several.
#[test]
fn no_call_finds_what_an_earlier_call_left_in_memory() {
    let rt = runtime();
    let guest = Arc::new(rt.load("misbehaving", MISBEHAVING).unwrap());
    let clean = "static 0x0, first grown page 0x0, last grown page 0x0";
    let call = |guest: &Plugin| {
        let decisions = evaluate(guest, &target(&[], false), &[pod("a", "web")], "remember");
        match decisions.unwrap().pop() {
            Some(Decision::Exclude(found)) => found,
            other => panic!("{other:?}"),
        }
    };
    for _ in 0..20 {
        assert_eq!(call(&guest), clean);
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let guest = guest.clone();
            std::thread::spawn(move || (0..20).map(|_| call(&guest)).collect::<Vec<_>>())
        })
        .collect();
    for thread in threads {
        for found in thread.join().unwrap() {
            assert_eq!(found, clean);
        }
    }
}

#[test]
fn a_wrong_number_of_decisions_is_refused() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let err = evaluate(
        &guest,
        &target(&[], false),
        &[pod("a", "web"), pod("b", "web")],
        "short-answer",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::WrongAnswer {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("returned 1 decisions for 2 pods"),
        "{err}"
    );
}

#[test]
fn a_policy_error_is_an_answer_not_a_crash() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    let verdict = rejected(
        &guest,
        &target(&[], false),
        &[pod("a", "web")],
        "policy-error",
    );
    assert_eq!(verdict.message, "deliberate policy error");
    assert!(
        verdict
            .to_string()
            .contains("plugin misbehaving: rejected the Service"),
        "{verdict}"
    );
    let refused = guest.validate_config("bad-config").unwrap().unwrap_err();
    assert_eq!(refused.plugin, "misbehaving");
}

#[test]
fn files_that_are_not_components_are_refused_at_load() {
    let rt = runtime();
    let err = rt.load("garbage", b"not wasm at all").unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    assert!(err.to_string().contains("plugin garbage"), "{err}");
    // A core module (not a component).
    let err = rt.load("core", b"\0asm\x01\0\0\0").unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
}

#[test]
fn one_plugin_serves_calls_from_many_threads() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    let pods: Vec<_> = (0..100).map(|i| pod(&format!("p{i}"), "web")).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10 {
                    let got =
                        evaluate(&plugin, &target(&[("app", "web")], false), &pods, "").unwrap();
                    assert_eq!(got.len(), 100);
                }
            });
        }
    });
}

/// A pod on the DRA network `deviceclass:dranet`, its device's `Ready` as given.
fn on_device(name: &str, device_ready: &str) -> Candidate {
    use nad_model::input::device_network::ClaimRecord;
    let uid = format!("uid-{name}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team-a", "uid": uid, "labels": {"app": "web"}},
        "spec": {"containers": [], "nodeName": "node-1",
                 "resourceClaims": [{"name": "nic", "resourceClaimName": format!("{name}-nic")}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    let claim = ClaimRecord::read(
        &serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-nic"), "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "nic", "driver": "dra.net", "pool": "node-1", "device": "eth1"}]}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
                "devices": [{"driver": "dra.net", "pool": "node-1", "device": "eth1",
                    "conditions": [{"type": "Ready", "status": device_ready, "reason": "NetworkDeviceReady",
                                    "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"}],
                    "networkData": {"interfaceName": "net1", "ips": ["192.168.2.4/24", "fd00::4/64"]}}],
            },
        }))
        .unwrap(),
    );
    let record = PodRecord::from_pod(&pod, &Keys::all());
    let record = record.with_devices(&[&claim]).unwrap();
    Candidate {
        ips: record.ips("deviceclass:dranet").into(),
        pod: Arc::new(record),
        zone: Some("zone-a".into()),
    }
}

fn on_dranet(labels: &[(&str, &str)]) -> ServiceTarget {
    ServiceTarget {
        network: "deviceclass:dranet".into(),
        ..target(labels, false)
    }
}

/// 1.3's `network-devices`: a plugin that imports it gets each pod's devices on a DRA
/// network, in the call's order; on a NetworkAttachmentDefinition's network, none.
#[test]
fn a_plugin_reads_the_devices_behind_its_pods_addresses() {
    let rt = runtime();
    let guest = rt.load("misbehaving", MISBEHAVING).unwrap();
    assert!(guest.reads_devices());
    let pods = [on_device("up", "True"), on_device("down", "False")];
    let got = evaluate(&guest, &on_dranet(&[]), &pods, "show-devices").unwrap();
    assert_eq!(
        got,
        [
            Decision::Exclude(
                "devices: [up-nic:dra.net/node-1/eth1@net1[192.168.2.4 fd00::4]{Ready=True(NetworkDeviceReady)}]"
                    .into()
            ),
            Decision::Exclude(
                "devices: [down-nic:dra.net/node-1/eth1@net1[192.168.2.4 fd00::4]{Ready=False(NetworkDeviceReady)}]"
                    .into()
            ),
        ]
    );
    let got = evaluate(&guest, &target(&[], false), &pods, "show-devices").unwrap();
    assert_eq!(
        got,
        [
            Decision::Exclude("devices: []".into()),
            Decision::Exclude("devices: []".into())
        ]
    );
}

/// On a DRA network, a pod's network readiness is its devices' as their drivers report it:
/// the default plugin publishes a pod whose device is not Ready as not serving.
#[test]
fn the_default_plugin_publishes_a_pod_whose_device_is_not_ready_as_not_serving() {
    let rt = runtime();
    let plugin = rt.load("default", DEFAULT_PLUGIN_WASM).unwrap();
    assert!(
        !plugin.reads_devices(),
        "it calls no network-devices function, so imports none"
    );
    let pods = [on_device("up", "True"), on_device("down", "False")];
    let got = evaluate(&plugin, &on_dranet(&[("app", "web")]), &pods, "").unwrap();
    assert_eq!(
        got,
        [include(true, true, false), include(false, false, false)]
    );
}
