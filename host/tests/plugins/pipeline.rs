//! The load pipeline, step by step, and the plugin directory's reloads (plain files, kubelet's
//! `..data` symlink swap, deletions), with real components built from source.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::{os::unix::fs::symlink, path::Path, time::Duration};

use crate::runtime_with_tight_limits as runtime;
use nad_model::decision::{Conditions, Decision};
use nad_model::fetch::MAX_PLUGIN_BYTES;
use nad_plugin_runtime::{
    DecisionScope, HOST_WIT_VERSION, Limits, PluginDir, Plugins, Runtime, Step, inspect, prepare,
};
use nad_test_kit::wit as records;

const DEFAULT: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));
const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
const MISBEHAVING: &[u8] = include_bytes!(env!("NSC_TEST_MISBEHAVING_WASM"));
const CONTRACT_1_0: &[u8] = include_bytes!(env!("NSC_TEST_CONTRACT_1_0_WASM"));
const CONTRACT_1_1: &[u8] = include_bytes!(env!("NSC_TEST_CONTRACT_1_1_WASM"));
const CONTRACT_1_2: &[u8] = include_bytes!(env!("NSC_TEST_CONTRACT_1_2_WASM"));
const PREFERRED_ZONES: &[u8] = include_bytes!(env!("NSC_EXAMPLE_PREFERRED_ZONES_WASM"));
const STALE_WIT: &[u8] = include_bytes!(env!("NSC_TEST_STALE_WIT_WASM"));
const IMPORTS_FILESYSTEM: &[u8] = include_bytes!(env!("NSC_TEST_IMPORTS_FILESYSTEM_WASM"));

fn failed_step(bytes: &[u8], config: &str) -> (Step, String) {
    let err = prepare(&runtime(), "p", bytes, config).unwrap_err();
    (err.step, err.to_string())
}

#[test]
fn a_good_plugin_passes_every_step() {
    let configured = prepare(&runtime(), "opt-out", OPT_OUT, r#"{"label": "drain"}"#).unwrap();
    assert_eq!(configured.plugin.info().name, "opt-out");
    assert_eq!(configured.config, r#"{"label": "drain"}"#);
    assert_eq!(configured.hash.len(), 64);
}

/// The package's compatibility rule: a host speaking a newer 1.x runs a plugin built for 1.0
/// unchanged, and, since 1.0 had no way to declare it, treats its decisions as depending on
/// the whole set of candidates. 1.1 plugins declare per-pod decisions or do not.
#[test]
fn a_1_0_plugin_runs_unchanged_and_counts_as_deciding_on_the_whole_set() {
    let runtime = runtime();
    let inspection = inspect(&runtime, "contract-1-0", CONTRACT_1_0, "");
    assert_eq!(inspection.wit_version, Some((1, 0, 0)));
    let configured = inspection.result.unwrap();
    assert_eq!(configured.plugin.info().name, "contract-1-0");
    assert_eq!(configured.plugin.decision_scope(), DecisionScope::WholeSet);
    assert!(
        HOST_WIT_VERSION >= (1, 1, 0),
        "this host speaks a newer 1.x"
    );

    let configured = prepare(&runtime, "contract-1-0", CONTRACT_1_0, "").unwrap();
    assert!(!configured.plugin.per_pod());
    let pod = |name: &str, app: &str, ready: bool| {
        records::pod(name).label("app", app).ready(ready).build()
    };
    let service = records::service("web").label("app", "web").build();
    let decisions = configured
        .plugin
        .evaluate(
            &service,
            &[
                pod("a", "web", true),
                pod("b", "db", true),
                pod("c", "web", false),
            ],
            None,
            "",
        )
        .unwrap()
        .unwrap();
    let ready = Conditions {
        ready: true,
        serving: true,
        terminating: false,
    };
    let not_ready = Conditions {
        ready: false,
        serving: false,
        terminating: false,
    };
    assert_eq!(
        decisions,
        [
            Decision::Include(ready),
            Decision::Exclude("another app".into()),
            Decision::Include(not_ready)
        ]
    );

    for (name, bytes, scope) in [
        ("default", DEFAULT, DecisionScope::PerPod),
        ("opt-out", OPT_OUT, DecisionScope::PerPod),
        ("preferred-zones", PREFERRED_ZONES, DecisionScope::WholeSet),
    ] {
        let inspection = inspect(&runtime, name, bytes, "");
        assert_eq!(inspection.wit_version, Some(HOST_WIT_VERSION), "{name}");
        assert_eq!(
            inspection.result.unwrap().plugin.decision_scope(),
            scope,
            "{name}"
        );
    }
}

/// 1.2 added pod conditions beside the call (an import and an optional export), so a 1.1
/// plugin links and keeps its declared scope; it reads no conditions. The 1.2 plugins built
/// here import them, and the built-in one declares no other condition type.
#[test]
fn a_1_1_plugin_runs_unchanged_and_reads_no_conditions() {
    let runtime = runtime();
    let inspection = inspect(&runtime, "contract-1-1", CONTRACT_1_1, "");
    assert_eq!(inspection.wit_version, Some((1, 1, 0)));
    let configured = inspection.result.unwrap();
    assert_eq!(configured.plugin.decision_scope(), DecisionScope::PerPod);
    assert!(!configured.plugin.reads_conditions());
    assert!(
        !configured
            .plugin
            .reads_condition("network-ready.isim.dev/ns.net")
    );
    for bytes in [CONTRACT_1_0, CONTRACT_1_1] {
        let plugin = prepare(&runtime, "old", bytes, "").unwrap().plugin;
        assert!(!plugin.reads_conditions());
        assert!(plugin.condition_types().is_empty());
    }
    for (name, bytes) in [("default", DEFAULT), ("opt-out", OPT_OUT)] {
        let plugin = prepare(&runtime, name, bytes, "").unwrap().plugin;
        assert!(plugin.reads_conditions(), "{name}");
        assert!(plugin.condition_types().is_empty(), "{name}");
    }
}

/// 1.3 added the DRA devices beside the call (an import), so a 1.2 plugin links, reads its
/// pods' conditions as before and no devices; the plugins built here call no device function,
/// so they import none, but for the misbehaving one.
#[test]
fn a_1_2_plugin_runs_unchanged_and_reads_no_devices() {
    let runtime = runtime();
    let inspection = inspect(&runtime, "contract-1-2", CONTRACT_1_2, "");
    assert_eq!(inspection.wit_version, Some((1, 2, 0)));
    let plugin = inspection.result.unwrap().plugin;
    assert_eq!(plugin.decision_scope(), DecisionScope::PerPod);
    assert!(plugin.reads_conditions());
    assert!(!plugin.reads_devices());
    for bytes in [CONTRACT_1_0, CONTRACT_1_1] {
        assert!(
            !prepare(&runtime, "old", bytes, "")
                .unwrap()
                .plugin
                .reads_devices()
        );
    }
    for (name, bytes, config, reads) in [
        ("default", DEFAULT, "", false),
        ("opt-out", OPT_OUT, "", false),
        ("misbehaving", MISBEHAVING, "echo", true),
    ] {
        let plugin = prepare(&runtime, name, bytes, config).unwrap().plugin;
        assert_eq!(plugin.reads_devices(), reads, "{name}");
    }
}

/// 1.4 added `candidate-labels` (an optional export): a plugin built before it declares no
/// labels and is asked about every candidate, as a plugin that exports it and claims none.
#[test]
fn a_plugin_without_candidate_labels_is_asked_about_every_candidate() {
    let runtime = runtime();
    let target = nad_model::input::target::ServiceTarget {
        name: "web".into(),
        namespace: "team-a".into(),
        uid: "svc-uid".into(),
        network: "team-a/macvlan".into(),
        labels: [("app", "web")].into(),
        annotations: Default::default(),
        ports: vec![],
        ip_families: None,
        publish_not_ready_addresses: false,
    };
    for (name, bytes, config, selects) in [
        ("contract-1-0", CONTRACT_1_0, "", false),
        ("contract-1-1", CONTRACT_1_1, "", false),
        ("contract-1-2", CONTRACT_1_2, "", false),
        ("opt-out", OPT_OUT, "", true),
        ("preferred-zones", PREFERRED_ZONES, "", true),
        ("default", DEFAULT, "", true),
    ] {
        let plugin = prepare(&runtime, name, bytes, config).unwrap().plugin;
        assert_eq!(plugin.selects(), selects, "{name}");
        let selection = plugin.selection(&target, config).unwrap();
        let everything = name != "default";
        assert_eq!(selection.is_everything(), everything, "{name}: {selection}");
    }
}

#[test]
fn files_over_the_size_limit_are_refused_before_parsing() {
    let mut big = b"\0asm\x0d\0\x01\0".to_vec();
    big.resize(MAX_PLUGIN_BYTES as usize + 1, 0);
    let (step, message) = failed_step(&big, "");
    assert_eq!(step, Step::Size);
    assert!(message.contains("over the limit"), "{message}");
}

#[test]
fn non_wasm_files_and_core_modules_fail_to_parse() {
    let (step, message) = failed_step(b"#!/bin/sh\necho hi\n", "");
    assert_eq!(step, Step::Parse);
    assert!(message.contains("not a WebAssembly file"), "{message}");
    let (step, message) = failed_step(&wat::parse_str("(module)").unwrap(), "");
    assert_eq!(step, Step::Parse);
    assert!(message.contains("not a component"), "{message}");
}

#[test]
fn a_corrupt_component_fails_to_compile() {
    let mut corrupt = DEFAULT.to_vec();
    corrupt.truncate(corrupt.len() / 2);
    assert_eq!(failed_step(&corrupt, "").0, Step::Compile);
}

#[test]
fn a_component_of_another_world_is_refused_with_what_it_exports() {
    let other = wat::parse_str("(component)").unwrap();
    let (step, message) = failed_step(&other, "");
    assert_eq!(step, Step::World);
    assert!(
        message.contains("does not export isim:nad-endpoints/policy@1.x"),
        "{message}"
    );
    assert!(message.contains("exports: none"), "{message}");
}

#[test]
fn a_configuration_the_plugin_rejects_is_refused() {
    let err = prepare(&runtime(), "opt-out", OPT_OUT, r#"{"lable": "x"}"#).unwrap_err();
    assert_eq!(err.step, Step::Config);
    assert!(err.to_string().contains("unknown field"), "{err}");
    assert!(err.to_string().contains("plugin opt-out"), "{err}");
}

#[test]
fn the_self_test_catches_plugins_that_trap_loop_or_answer_wrong() {
    for (mode, step, cause) in [
        // A Rust guest's panic message comes first, without its useless RUST_BACKTRACE note.
        (
            "trap",
            Step::SelfTest,
            "call to evaluate panicked: deliberate trap (at plugins/testing/misbehaving/src/lib.rs:",
        ),
        ("loop", Step::SelfTest, "deadline"),
        // The memory limit is a step of its own, whichever call hits it.
        ("memory-bomb", Step::MemoryLimit, "memory limit"),
        (
            "short-answer",
            Step::SelfTest,
            "returned 1 decisions for 2 pods",
        ),
    ] {
        let err = prepare(&runtime(), "misbehaving", MISBEHAVING, mode).unwrap_err();
        assert_eq!(err.step, step, "{mode}: {err}");
        assert!(err.to_string().contains(cause), "{mode}: {err}");
        assert!(!err.to_string().contains("RUST_BACKTRACE"), "{mode}: {err}");
        assert!(!err.to_string().contains("wasm function"), "{mode}: {err}");
    }
    let err = prepare(&runtime(), "misbehaving", MISBEHAVING, "trap").unwrap_err();
    assert!(
        err.frames.len() > 3,
        "the frames are kept apart: {:?}",
        err.frames
    );
    // A policy error is an answer, not a failure.
    prepare(&runtime(), "misbehaving", MISBEHAVING, "policy-error").unwrap();
}

#[test]
fn a_memory_limit_hit_while_loading_is_its_own_step() {
    let tiny = Runtime::new(Limits {
        deadline: Duration::from_millis(100),
        memory_bytes: 1 << 20,
    })
    .unwrap();
    let err = prepare(&tiny, "default", DEFAULT, "").unwrap_err();
    assert_eq!(err.step, Step::MemoryLimit, "{err}");
    assert!(
        err.to_string().contains(
            "memory-limit check failed: call to info exceeded its memory limit of 1048576 bytes"
        ),
        "{err}"
    );
}

/// A plugin built against a WIT copy with one more `pod` field: the message names the
/// function, the parameter, the record and the field, not "expected record of 11 fields".
#[test]
fn a_stale_wit_is_refused_naming_the_function_record_and_field() {
    let (step, message) = failed_step(STALE_WIT, "");
    assert_eq!(step, Step::Link, "{message}");
    assert!(
        message.contains(
            "its isim:nad-endpoints/policy interface differs from this host's: function \
             evaluate, parameter pods: list element: record pod has field owner, which the \
             host's does not (12 fields, the host's 11)"
        ),
        "{message}"
    );
    assert!(!message.contains("expected record of"), "{message}");
}

/// A plugin that touches the filesystem (as C's printf does): the message names the imports
/// this host does not provide, lists those it does, and says what pulls them in.
#[test]
fn an_import_the_host_does_not_provide_is_named_with_what_it_provides() {
    let (step, message) = failed_step(IMPORTS_FILESYSTEM, "");
    assert_eq!(step, Step::Link, "{message}");
    assert!(
        message.contains("imports ") && message.contains("wasi:filesystem/preopens@0.2"),
        "{message}"
    );
    assert!(
        message.contains("which this host does not provide; a plugin may import only isim:nad-endpoints/types, isim:nad-endpoints/log, isim:nad-endpoints/pod-conditions, isim:nad-endpoints/network-devices, wasi:io/error"),
        "{message}"
    );
    assert!(message.contains("printf"), "{message}");
    assert!(
        !message.contains("resource implementation is missing"),
        "{message}"
    );
}

// ---- the plugin directory ----------------------------------------------------------------------

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nsc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn serving_hash(plugins: &Plugins, name: &str) -> Option<String> {
    plugins.get(name).ok().map(|c| c.hash.clone())
}

#[test]
fn files_added_changed_broken_and_deleted_are_followed() {
    let rt = runtime();
    let dir = temp_dir("reload");
    let mut plugins = Plugins::built_in(&rt).unwrap();
    let mut watch = PluginDir::new(&dir);
    assert!(watch.scan(&rt, &mut plugins).is_empty());

    std::fs::write(dir.join("team.wasm"), OPT_OUT).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a plugin").unwrap();
    let scan = watch.scan(&rt, &mut plugins);
    assert_eq!(scan.loaded, vec!["team"]);
    let first = serving_hash(&plugins, "team").unwrap();
    assert!(watch.scan(&rt, &mut plugins).is_empty(), "nothing changed");

    // The same bytes written again: not loaded again.
    std::fs::write(dir.join("team.wasm"), OPT_OUT).unwrap();
    assert!(watch.scan(&rt, &mut plugins).is_empty());

    // A configuration file beside it is a new version.
    std::fs::write(dir.join("team.json"), r#"{"label": "drain"}"#).unwrap();
    assert_eq!(watch.scan(&rt, &mut plugins).loaded, vec!["team"]);
    assert_eq!(plugins.get("team").unwrap().config, r#"{"label": "drain"}"#);

    // Another component under the same name.
    std::fs::remove_file(dir.join("team.json")).unwrap();
    std::fs::write(dir.join("team.wasm"), DEFAULT).unwrap();
    assert_eq!(watch.scan(&rt, &mut plugins).loaded, vec!["team"]);
    assert_eq!(plugins.get("team").unwrap().plugin.info().name, "default");
    let second = serving_hash(&plugins, "team").unwrap();
    assert_ne!(first, second);

    // A broken file never serves: the previous version does, and the failure is recorded.
    std::fs::write(dir.join("team.wasm"), b"garbage").unwrap();
    let scan = watch.scan(&rt, &mut plugins);
    assert_eq!(scan.failed.len(), 1);
    assert_eq!(scan.failed[0].step, Step::Parse);
    assert_eq!(serving_hash(&plugins, "team"), Some(second.clone()));
    assert!(
        plugins
            .failure("team")
            .unwrap()
            .contains("parse check failed")
    );

    // Fixed again: serving, failure cleared.
    std::fs::write(dir.join("team.wasm"), OPT_OUT).unwrap();
    assert_eq!(watch.scan(&rt, &mut plugins).loaded, vec!["team"]);
    assert_eq!(plugins.failure("team"), None);

    std::fs::remove_file(dir.join("team.wasm")).unwrap();
    assert_eq!(watch.scan(&rt, &mut plugins).removed, vec!["team"]);
    assert!(plugins.get("team").is_err());
    assert!(plugins.get("default").is_ok(), "the built-in plugin stays");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes a kubelet-style ConfigMap volume generation: `..<gen>/<files>`, `..data -> ..<gen>`.
fn configmap_generation(dir: &Path, generation: &str, files: &[(&str, &[u8])]) {
    let gen_dir = dir.join(format!("..{generation}"));
    std::fs::create_dir_all(&gen_dir).unwrap();
    for (name, bytes) in files {
        std::fs::write(gen_dir.join(name), bytes).unwrap();
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(name), &link).unwrap();
        }
    }
    // Atomic swap, as kubelet does it: a new link renamed over ..data.
    let tmp = dir.join("..data_tmp");
    symlink(format!("..{generation}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

#[test]
fn configmap_volume_updates_through_the_data_symlink_are_seen() {
    let rt = runtime();
    let dir = temp_dir("configmap");
    let mut plugins = Plugins::built_in(&rt).unwrap();
    let mut watch = PluginDir::new(&dir);

    configmap_generation(&dir, "2026_11_29_1", &[("zones.wasm", OPT_OUT)]);
    assert_eq!(watch.scan(&rt, &mut plugins).loaded, vec!["zones"]);
    assert_eq!(plugins.get("zones").unwrap().plugin.info().name, "opt-out");

    configmap_generation(
        &dir,
        "2026_11_29_2",
        &[("zones.wasm", DEFAULT), ("zones.json", b"{}")],
    );
    assert_eq!(watch.scan(&rt, &mut plugins).loaded, vec!["zones"]);
    assert_eq!(plugins.get("zones").unwrap().plugin.info().name, "default");
    assert_eq!(plugins.get("zones").unwrap().config, "{}");
    assert!(
        !plugins.names().any(|n| n.starts_with('.')),
        "kubelet's hidden entries are no plugins"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_plugin_named_default_shadows_the_built_in_one_until_removed() {
    let rt = runtime();
    let dir = temp_dir("shadow");
    let mut plugins = Plugins::built_in(&rt).unwrap();
    let mut watch = PluginDir::new(&dir);
    std::fs::write(dir.join("default.wasm"), OPT_OUT).unwrap();
    watch.scan(&rt, &mut plugins);
    assert_eq!(plugins.select(None).unwrap().plugin.info().name, "opt-out");
    std::fs::remove_file(dir.join("default.wasm")).unwrap();
    watch.scan(&rt, &mut plugins);
    assert_eq!(plugins.select(None).unwrap().plugin.info().name, "default");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn services_select_by_annotation_else_the_configured_default() {
    let rt = runtime();
    let mut plugins = Plugins::built_in(&rt).unwrap();
    plugins.insert("opt-out", prepare(&rt, "opt-out", OPT_OUT, "").unwrap());
    assert_eq!(plugins.select(None).unwrap().plugin.info().name, "default");
    assert_eq!(
        plugins
            .select(Some(" opt-out "))
            .unwrap()
            .plugin
            .info()
            .name,
        "opt-out"
    );
    let err = plugins.select(Some("nope")).unwrap_err();
    assert!(err.to_string().contains("default, opt-out"), "{err}");
    plugins.set_default("opt-out");
    assert_eq!(plugins.select(None).unwrap().plugin.info().name, "opt-out");
    assert_eq!(
        plugins.select(Some("")).unwrap().plugin.info().name,
        "opt-out"
    );
}
