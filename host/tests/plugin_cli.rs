//! `plugin eval` and `plugin inspect`, run as the built binary on the files in `testdata/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use k8s_openapi::api::discovery::v1::EndpointSlice;

const BIN: &str = env!("CARGO_BIN_EXE_nad-service-controller");
const DEFAULT: &str = env!("NSC_DEFAULT_PLUGIN_WASM");
const OPT_OUT: &str = env!("NSC_EXAMPLE_OPT_OUT_WASM");
const MISBEHAVING: &str = env!("NSC_TEST_MISBEHAVING_WASM");

fn testdata(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(path)
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn eval(plugin: &str, extra: &[&str]) -> Output {
    let service = testdata("20-nginx-nad.yaml");
    let pods = testdata("eval/pods.yaml");
    let nodes = testdata("eval/nodes.yaml");
    let mut args = vec![
        "plugin",
        "eval",
        "--plugin",
        plugin,
        "--service",
        service.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn slices(stdout: &[u8]) -> Vec<EndpointSlice> {
    serde_saphyr::from_str_multiple(&text(stdout)).unwrap()
}

/// (address, ready, serving, terminating, zone)
fn endpoints(slice: &EndpointSlice) -> Vec<(String, bool, bool, bool, Option<String>)> {
    slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let c = e.conditions.clone().unwrap();
            (
                e.addresses[0].clone(),
                c.ready.unwrap(),
                c.serving.unwrap(),
                c.terminating.unwrap(),
                e.zone.clone(),
            )
        })
        .collect()
}

#[test]
fn eval_prints_the_slices_the_controller_would_apply_for_the_demo() {
    let out = eval(DEFAULT, &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let slices = slices(&out.stdout);
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    assert_eq!(slice.metadata.name.as_deref(), Some("nginx-nad-ipv4-0"));
    assert_eq!(
        slice.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/managed-by"],
        "nad-service-controller.isim.dev"
    );
    assert_eq!(
        endpoints(slice),
        vec![
            (
                "192.168.2.4".into(),
                true,
                true,
                false,
                Some("zone-a".into())
            ),
            (
                "192.168.2.5".into(),
                true,
                true,
                false,
                Some("zone-b".into())
            ),
            (
                "192.168.2.9".into(),
                false,
                true,
                true,
                Some("zone-b".into())
            ),
        ]
    );
    let ports: Vec<_> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.port.unwrap()))
        .collect();
    assert_eq!(
        ports,
        vec![("http".to_string(), 80), ("https".to_string(), 443)]
    );
    // Everything left out is on stderr with its reason; stdout is only YAML.
    assert!(stderr.contains("skipped pod nginx-nad-65c7f7c6dc-broken: annotation k8s.v1.cni.cncf.io/network-status is not a JSON list"), "{stderr}");
    assert!(
        stderr.contains("excluded pod nginx-nad-65c7f7c6dc-done1: pod phase is Succeeded"),
        "{stderr}"
    );
    assert!(
        stderr.contains("excluded pod netutils-nad-6d66668db6-kxhsj"),
        "{stderr}"
    );
    // The file's name is not the name the plugin gives itself: Services could not select it.
    assert!(
        stderr.contains("warning: plugin file nad_default_plugin.wasm calls itself \"default\" in info(): Services select it by its file name (isim.dev/endpoint-policy: nad_default_plugin); rename the file or change info().name"),
        "{stderr}"
    );
    // So is every pod that is not a candidate, with the reason.
    assert!(
        stderr.contains("skipped pod nginx-basic-747cff5f4d-g4cwn: annotation k8s.v1.cni.cncf.io/network-status is missing (Multus attached it to no secondary network)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nad_default_plugin: 5 of 7 pods are candidates: 1 has no k8s.v1.cni.cncf.io/network-status annotation, 1 has a network-status annotation that is not a JSON list; 3 included; 1 call of 5 pods in "),
        "{stderr}"
    );
}

#[test]
fn eval_runs_other_plugins_with_their_configuration() {
    let dir = std::env::temp_dir().join(format!("nsc-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("opt-out.json");
    std::fs::write(&config, r#"{"label": "app"}"#).unwrap();
    // Every pod has an `app` label: with it as the opt-out label, all are excluded.
    let out = eval(OPT_OUT, &["--config", config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(slices(&out.stdout).is_empty());
    assert!(
        text(&out.stderr).contains("pod opted out with label app="),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("no EndpointSlices"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn eval_names_the_file_and_field_of_bad_input() {
    let dir = std::env::temp_dir().join(format!("nsc-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pods = dir.join("pods.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    ports:\n    - containerPort: eighty\n",
    )
    .unwrap();
    let service = testdata("20-nginx-nad.yaml");
    let out = run(&[
        "plugin",
        "eval",
        "--plugin",
        DEFAULT,
        "--service",
        service.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "pods.yaml: Pod \"p\" (document 1): field spec.containers[0].ports[0].containerPort"
        ),
        "{stderr}"
    );

    // A Service the controller would refuse: the problems are the error.
    let svc = dir.join("svc.yaml");
    std::fs::write(&svc, "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  annotations:\n    isim.dev/network: macvlan\nspec:\n  selector: {app: x}\n  ports: [{port: 80}]\n").unwrap();
    let out = run(&[
        "plugin",
        "eval",
        "--plugin",
        DEFAULT,
        "--service",
        svc.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("svc.yaml: Service s cannot be served")
            && stderr.contains("spec.selector is set"),
        "{stderr}"
    );

    // A plugin that fails the pipeline: the file and the step.
    let bad = dir.join("bad.wasm");
    std::fs::write(&bad, b"garbage").unwrap();
    let out = run(&[
        "plugin",
        "eval",
        "--plugin",
        bad.to_str().unwrap(),
        "--service",
        svc.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bad.wasm: plugin bad"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("parse check failed"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_describes_a_plugin_and_whether_it_runs_here() {
    let out = run(&["plugin", "inspect", OPT_OUT]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "targets:         isim:nad-endpoints@1.1.0",
        "name:            opt-out",
        "decisions:       per-pod",
        "label keys:      *",
        "annotation keys: (none)",
        "runs here:       yes",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    let size = std::fs::metadata(OPT_OUT).unwrap().len();
    assert!(
        stdout.contains(&format!("size:            {size} bytes")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sha256:")
                && l.trim_end().len() == "sha256:          ".len() + 64),
        "{stdout}"
    );
}

#[test]
fn inspect_reports_a_plugin_that_fails_and_survives_its_panic() {
    let dir = std::env::temp_dir().join(format!("nsc-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("trap.json");
    std::fs::write(&config, "trap").unwrap();
    let out = run(&[
        "plugin",
        "inspect",
        MISBEHAVING,
        "--config",
        config.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "a clean failure, not a crash: {stdout}{stderr}"
    );
    assert!(
        stdout.contains("runs here:       no (self-test step failed)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("deliberate trap"),
        "the guest's panic message is reported: {stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
