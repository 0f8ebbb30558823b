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

/// The plugin's own log lines follow `-v`: its debug lines show with it and not without. (The
/// filter named the runtime by the path the controller once re-exported it under, which no log
/// line carries, so `-v` showed none of them.)
#[test]
fn verbose_shows_the_plugins_own_debug_lines() {
    let line = "evaluated 5 pods: 3 included, 2 excluded";
    let quiet = eval("default", &["-o", "decisions"]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert!(
        !text(&quiet.stderr).contains(line),
        "{}",
        text(&quiet.stderr)
    );
    let verbose = eval("default", &["-o", "decisions", "-v"]);
    let stderr = text(&verbose.stderr);
    assert!(verbose.status.success(), "{stderr}");
    let logged = stderr
        .lines()
        .find(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no plugin debug line in: {stderr}"));
    assert!(
        logged.contains("DEBUG")
            && logged.contains("plugin=\"default\"")
            && logged.contains("service=\"default/nginx-nad\""),
        "{logged}"
    );
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
        "targets:         isim:nad-endpoints@1.4.0",
        "name:            opt-out",
        "decisions:       per-pod",
        "conditions:      network readiness\n",
        "devices:         no (it does not import network-devices)\n",
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

// ---- the author's kit ----------------------------------------------------------------------

const PREFERRED_ZONES: &str = env!("NSC_EXAMPLE_PREFERRED_ZONES_WASM");
const STALE_WIT: &str = env!("NSC_TEST_STALE_WIT_WASM");
const IMPORTS_FILESYSTEM: &str = env!("NSC_TEST_IMPORTS_FILESYSTEM_WASM");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A directory of its own for one test, removed when it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("nsc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The repository's own plugins pass their fixtures: the same cases a plugin author's
/// `plugin test` runs.
#[test]
fn the_repositorys_plugins_pass_their_fixtures() {
    for (plugin, dir) in [
        ("default", "plugins/default/testdata"),
        (DEFAULT, "plugins/default/testdata"),
        (OPT_OUT, "plugins/examples/opt-out/testdata"),
        (PREFERRED_ZONES, "plugins/examples/preferred-zones/testdata"),
    ] {
        let out = run(&[
            "plugin",
            "test",
            "--plugin",
            plugin,
            repo(dir).to_str().unwrap(),
        ]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{plugin}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains(" failed") && stdout.contains(", 0 failed"),
            "{stdout}"
        );
        assert!(
            stdout.lines().filter(|l| l.starts_with("ok ")).count() >= 2,
            "{stdout}"
        );
    }
}

/// A difference fails with a diff naming the file; --update rewrites the expectation; a
/// case without expectations fails and says how to write them.
#[test]
fn plugin_test_diffs_fails_and_updates() {
    let scratch = Scratch::new("fixtures");
    let case = repo("plugins/default/testdata/name-label");
    for file in ["service.yaml", "pods.yaml"] {
        std::fs::copy(case.join(file), scratch.path(&format!("case/{file}")))
            .or_else(|_| {
                std::fs::create_dir_all(scratch.path("case"))?;
                std::fs::copy(case.join(file), scratch.path(&format!("case/{file}")))
            })
            .unwrap();
    }
    let dir = scratch.path("case");
    let dir = dir.to_str().unwrap();
    let out = run(&["plugin", "test", "--plugin", "default", dir]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("no decisions.txt, slices.yaml or error.txt to compare with: run with --update to write them"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["plugin", "test", "--plugin", "default", "--update", dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(scratch.path("case/decisions.txt")).unwrap();
    assert_eq!(
        written,
        std::fs::read_to_string(case.join("decisions.txt")).unwrap()
    );
    assert!(scratch.path("case/slices.yaml").is_file());
    // Break the expectation: the run fails and shows the line that changed.
    scratch.write(
        "case/decisions.txt",
        &written.replace("include  ready=true", "include  ready=false"),
    );
    let out = run(&["plugin", "test", "--plugin", "default", dir]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL    "), "{stdout}");
    assert!(stdout.contains("--- expected decisions.txt"), "{stdout}");
    assert!(
        stdout.contains("-named-web    include  ready=false")
            && stdout.contains("+named-web    include  ready=true"),
        "{stdout}"
    );
    assert!(stdout.contains("1 case: 0 passed, 1 failed"), "{stdout}");
    assert!(
        text(&out.stderr).contains("rerun with --update"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn eval_prints_one_decision_per_pod_in_the_files_order() {
    let out = eval("default", &["-o", "decisions"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let rows: Vec<(&str, &str)> = stdout
        .lines()
        .map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next().unwrap(), parts.next().unwrap())
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("nginx-nad-65c7f7c6dc-b4zg8", "include"),
            ("nginx-nad-65c7f7c6dc-jkx5z", "include"),
            ("nginx-nad-65c7f7c6dc-old01", "include"),
            ("nginx-nad-65c7f7c6dc-done1", "exclude"),
            ("netutils-nad-6d66668db6-kxhsj", "exclude"),
            ("nginx-nad-65c7f7c6dc-broken", "skipped"),
            ("nginx-basic-747cff5f4d-g4cwn", "skipped"),
        ]
    );
    assert!(
        stdout.contains(
            "nginx-nad-65c7f7c6dc-old01     include  ready=false serving=true terminating=true"
        ),
        "{stdout}"
    );
}

#[test]
fn eval_prints_everything_as_json_for_scripts() {
    let out = eval("default", &["-o", "json", "--show-inputs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["plugin"]["name"], "default");
    assert_eq!(doc["plugin"]["decisions"], "per-pod");
    assert_eq!(doc["service"], "default/nginx-nad");
    assert_eq!(doc["candidates"], 5);
    let pods = doc["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 7);
    assert_eq!(pods[0]["decision"], "include");
    assert_eq!(pods[0]["conditions"]["serving"], true);
    assert_eq!(pods[3]["decision"], "exclude");
    assert_eq!(pods[3]["reason"], "pod phase is Succeeded");
    assert_eq!(pods[6]["decision"], "skipped");
    assert_eq!(doc["endpointSlices"].as_array().unwrap().len(), 1);
    assert_eq!(doc["calls"][0]["pods"], 5);
    // What crossed the boundary: the declared labels only.
    let inputs = doc["inputs"]["pods"].as_array().unwrap();
    assert_eq!(inputs.len(), 5);
    assert_eq!(
        inputs[0]["labels"],
        serde_json::json!({"app": "netutils-nad"})
    );
    assert_eq!(doc["inputs"]["service"]["network"], "default/macvlan");
}

/// A plugin that reads an annotation it forgot to declare sees nothing: --show-inputs shows
/// what it got, and warns about the keys the pods carry that it never receives.
#[test]
fn show_inputs_prints_the_records_and_warns_about_undeclared_keys() {
    let scratch = Scratch::new("inputs");
    let pods = scratch.write(
        "pods.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web-1
  labels: {app: nginx-nad, team: red}
  annotations:
    example.com/tier: gold
    k8s.v1.cni.cncf.io/network-status: '[{"name": "default/macvlan", "ips": ["10.1.0.1"]}]'
spec: {nodeName: node-a}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
"#,
    );
    let service = testdata("20-nginx-nad.yaml");
    let args = |extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "eval",
            "--plugin",
            "default",
            "--service",
            service.to_str().unwrap(),
            "--pods",
            &pods,
            "-o",
            "decisions",
        ];
        args.extend_from_slice(extra);
        run(&args
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>())
    };
    let out = args(&[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("note: the pods carry 2 label or annotation keys the plugin does not declare (it never sees them); --show-inputs lists them"),
        "{stderr}"
    );
    let out = args(&["--show-inputs"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("input service default/nginx-nad: network default/macvlan, publish-not-ready-addresses false"),
        "{stderr}"
    );
    assert!(
        stderr.contains("input pods: 1 (the plugin declares label keys: app.kubernetes.io/name, app; annotation keys: none)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  web-1: uid \"\", phase running, ready true, terminating false, node \"node-a\", zone \"\", ips 10.1.0.1\n    labels:      app=\"nginx-nad\"\n    annotations: (none)\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: the pods carry keys the plugin does not declare in plugin-info, so it never sees them: label team (1 pod), annotation example.com/tier (1 pod)"),
        "{stderr}"
    );
}

/// `plugin eval` of the built-in plugin on the demo's pods, for the demo's Service with `from`
/// replaced by `to` in its manifest.
fn eval_demo_service(scratch: &Scratch, from: &str, to: &str, extra: &[&str]) -> Output {
    let manifest = std::fs::read_to_string(testdata("20-nginx-nad.yaml")).unwrap();
    assert!(
        manifest.contains(from),
        "{from:?} is not in the demo's Service"
    );
    let service = scratch.write("service.yaml", &manifest.replace(from, to));
    let pods = testdata("eval/pods.yaml");
    let mut args = vec![
        "plugin",
        "eval",
        "--plugin",
        "default",
        "--service",
        &service,
        "--pods",
        pods.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// No candidate: the plugin is never called, and that is explained and fails.
#[test]
fn an_empty_candidate_set_is_explained_and_fails() {
    let scratch = Scratch::new("empty");
    let out = eval_demo_service(
        &scratch,
        "\n    isim.dev/network: macvlan",
        "\n    isim.dev/network: shop/macvlan",
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: 0 of 7 pods are candidates: 1 has no k8s.v1.cni.cncf.io/network-status annotation, 5 have no network-status entry for shop/macvlan, 1 has a network-status annotation that is not a JSON list; the plugin was not called"),
        "{stderr}"
    );
    assert!(
        stderr.contains("skipped pod nginx-nad-65c7f7c6dc-b4zg8: annotation k8s.v1.cni.cncf.io/network-status has no entry for network shop/macvlan (it lists: default/macvlan)"),
        "{stderr}"
    );
}

/// The Service names another plugin than the one evaluated: the controller would not use it.
#[test]
fn eval_warns_when_the_service_selects_another_plugin() {
    let scratch = Scratch::new("selects");
    let out = eval_demo_service(
        &scratch,
        "\n    isim.dev/network: macvlan",
        "\n    isim.dev/network: macvlan\n    isim.dev/endpoint-policy: zones",
        &["-o", "decisions"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: Service default/nginx-nad selects plugin \"zones\" (isim.dev/endpoint-policy), not \"default\": the controller would decide it with zones.wasm"),
        "{stderr}"
    );
}

/// A plugin's `candidate-labels` claim is checked on every evaluation: the default plugin's
/// holds and the summary says how many candidates the controller asks it about; a claim that
/// changes what the plugin decides fails the evaluation, naming the pods.
#[test]
fn plugin_eval_checks_the_plugins_candidate_labels_claim() {
    let out = eval("default", &["-o", "decisions"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"its candidate-labels select app="nginx-nad": the controller asks it about 4 of the 5 candidates"#),
        "{stderr}"
    );
    let out = eval("default", &["-o", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["candidateLabels"],
        serde_json::json!({"labels": {"app": "nginx-nad"}, "asked": 4})
    );
    // Rows still give the plugin's own reason for the pod its claim leaves out.
    let rows = text(&eval("default", &["-o", "decisions"]).stdout);
    assert!(
        rows.contains(r#"pod label app="netutils-nad" does not match"#),
        "{rows}"
    );

    let scratch = Scratch::new("claim");
    let config = scratch.write("false-claim.json", "false-claim");
    let out = eval(MISBEHAVING, &["--config", &config, "-o", "decisions"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains(r#"the plugin's candidate-labels claim (team="blue") changes its decisions"#)
            && stderr.contains(
                "include ready=true serving=true terminating=false when asked about every \
                 candidate, exclude when asked about those it selects"
            ),
        "{stderr}"
    );
}

/// A panic: the guest's message first, the wasm frames once and only with -v, no Rust
/// backtrace even with RUST_BACKTRACE set.
#[test]
fn a_panic_shows_its_message_first_and_frames_only_with_verbose() {
    let scratch = Scratch::new("panic");
    let config = scratch.write("trap.json", "trap");
    let service = testdata("20-nginx-nad.yaml");
    let pods = testdata("eval/pods.yaml");
    let args = [
        "plugin",
        "eval",
        "--plugin",
        MISBEHAVING,
        "--config",
        &config,
        "--service",
        service.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ];
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("self-test check failed: call to evaluate panicked: deliberate trap (at plugins/testing/misbehaving/src/lib.rs:"),
        "{stderr}"
    );
    assert!(stderr.contains(" wasm frames: -v shows them)"), "{stderr}");
    for noise in [
        "wasm function",
        "RUST_BACKTRACE",
        "stack backtrace",
        "Stack backtrace",
    ] {
        assert!(!stderr.contains(noise), "{noise:?} in {stderr}");
    }
    let mut verbose = args.to_vec();
    verbose.push("-v");
    let out = Command::new(BIN)
        .args(&verbose)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("wasm backtrace (innermost first):\n   0: 0x"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("   0: 0x").count(),
        1,
        "the frames once: {stderr}"
    );
    assert!(!stderr.contains("Stack backtrace"), "{stderr}");
}

#[test]
fn inspect_lists_imports_and_exports_the_config_and_the_self_test() {
    let out = run(&["plugin", "inspect", "default"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for line in [
        "file:            the built-in plugin",
        "imports:\n  isim:nad-endpoints/pod-conditions@1.4.0\n  isim:nad-endpoints/log@1.4.0\n",
        "exports:\n  isim:nad-endpoints/candidate-labels@1.4.0\n  isim:nad-endpoints/condition-keys@1.4.0\n  isim:nad-endpoints/decisions@1.4.0\n  isim:nad-endpoints/policy@1.4.0\n",
        "candidates:      those with the labels it names per Service (it exports candidate-labels)",
        "config:          accepted (none: the empty document)",
        "self-test:       a (ready, IPv4): include ready=true serving=true terminating=false; b (not ready, IPv6): include ready=false serving=false terminating=false",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("warning:"), "{stdout}");
    // The file name is not the plugin's own name.
    let out = run(&["plugin", "inspect", OPT_OUT]);
    assert!(
        text(&out.stdout).contains("warning:         plugin file nad_plugin_opt_out.wasm calls itself \"opt-out\" in info()"),
        "{}",
        text(&out.stdout)
    );
    // A plugin that imports the filesystem: the imports are listed, and the error names them.
    let out = run(&["plugin", "inspect", IMPORTS_FILESYSTEM]);
    let stdout = text(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("  wasi:filesystem/preopens@0.2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runs here:       no (link step failed)"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("which this host does not provide; a plugin may import only"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["plugin", "inspect", STALE_WIT]);
    assert!(
        text(&out.stderr).contains("record pod has field owner, which the host's does not"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn wit_prints_or_writes_the_package_this_host_speaks() {
    let out = run(&["plugin", "wit"]);
    assert!(out.status.success());
    let wit = std::fs::read_to_string(repo("wit/nad-endpoints.wit")).unwrap();
    assert_eq!(text(&out.stdout), wit);
    let scratch = Scratch::new("wit");
    let dir = scratch.path("wit");
    let out = run(&["plugin", "wit", "--out-dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.join("nad-endpoints.wit")).unwrap(),
        wit
    );
}

#[test]
fn subcommand_help_shows_only_its_own_flags() {
    let out = run(&["plugin", "eval", "--help"]);
    let help = text(&out.stdout);
    assert!(
        help.contains("--show-inputs") && help.contains("--output"),
        "{help}"
    );
    for flag in [
        "--metrics-address",
        "--leader-election",
        "--plugin-dir",
        "--log-format",
    ] {
        assert!(!help.contains(flag), "{flag} in {help}");
    }
}

#[test]
fn bench_times_instantiation_and_evaluation_on_generated_pods() {
    let out = run(&[
        "plugin",
        "bench",
        "--plugin",
        "default",
        "--pods",
        "300",
        "--iterations",
        "20",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["pods"], 300);
    // The generated pods carry the declared label keys, and the Service selects on them.
    assert_eq!(doc["included"], 300);
    for series in ["instantiate", "evaluate", "total"] {
        let (p50, p99) = (
            doc[series]["p50Micros"].as_f64().unwrap(),
            doc[series]["p99Micros"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99, "{series}: {doc}");
    }
    let per_pod = doc["evaluatePerPodMicros"].as_f64().unwrap();
    let evaluate = doc["evaluate"]["p50Micros"].as_f64().unwrap();
    assert!((per_pod * 300.0 - evaluate).abs() < 1e-6, "{doc}");
    let peak = doc["memoryPeakBytes"].as_u64().unwrap();
    assert!(
        peak >= 64 * 1024 && peak < doc["memoryLimitBytes"].as_u64().unwrap(),
        "{doc}"
    );
    // The compiled code the controller keeps for the plugin: there is some, and it is far
    // from the per-call limit.
    let code = doc["codeBytes"].as_u64().unwrap();
    assert!((4 * 1024..64 << 20).contains(&code), "{doc}");
    let out = run(&[
        "plugin",
        "bench",
        "--plugin",
        "default",
        "--pods",
        "10",
        "--iterations",
        "5",
    ]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("instantiate ") && stdout.contains("per pod (p50)"),
        "{stdout}"
    );
    assert!(stdout.contains("guest memory peak: "), "{stdout}");
    assert!(stdout.contains("compiled code: "), "{stdout}");
}

/// `plugin new` makes a project of its own that builds and passes its own `plugin test` on the
/// first try, from a directory outside this repository.
#[test]
fn plugin_new_makes_a_rust_project_that_builds_and_passes_its_own_test() {
    let scratch = Scratch::new("new-rust");
    let dir = scratch.path("my-policy");
    let out = run(&["plugin", "new", "my-policy", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("next: cd "),
        "{}",
        text(&out.stdout)
    );
    for file in [
        "Cargo.toml",
        "Makefile",
        "src/lib.rs",
        "src/policy.rs",
        "wit/nad-endpoints.wit",
        "testdata/basic/decisions.txt",
    ] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    // A second time into the same place is refused.
    let again = run(&["plugin", "new", "my-policy", "--dir", dir.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("the directory exists and is not empty"));
    let bad = run(&[
        "plugin",
        "new",
        "My_Policy",
        "--dir",
        scratch.path("x").to_str().unwrap(),
    ]);
    assert!(
        text(&bad.stderr).contains("is not a plugin name"),
        "{}",
        text(&bad.stderr)
    );

    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| PathBuf::from(t).join("plugin-new"))
        .unwrap_or_else(|| scratch.path("target"));
    let out = Command::new("make")
        .current_dir(&dir)
        .arg("test")
        .arg(format!("NSC={BIN}"))
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .unwrap();
    let inspected = passed_and_inspected(&dir, "my-policy", &out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("test result: ok."),
        "the unit tests ran: {stdout}"
    );
    assert!(
        inspected.contains("decisions:       per-pod"),
        "{inspected}"
    );
}

/// A scaffolded project's `make test` (`out`) passed its fixture case, and what it built is
/// the plugin `name`, under the name Services select it by; returns `plugin inspect`'s report.
fn passed_and_inspected(dir: &Path, name: &str, out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "make test failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("1 case: 1 passed, 0 failed"), "{stdout}");
    let wasm = dir.join(format!("build/{name}.wasm"));
    let inspected = text(&run(&["plugin", "inspect", wasm.to_str().unwrap()]).stdout);
    assert!(
        inspected.contains(&format!("name:            {name}")),
        "{inspected}"
    );
    assert!(
        !inspected.contains("warning:"),
        "the file and the plugin agree on the name: {inspected}"
    );
    inspected
}

/// The C toolchain as `hack/c-plugin-toolchain.sh` prints it (installing what is missing:
/// `make test` runs it once before the tests).
fn c_toolchain() -> Vec<String> {
    let out = Command::new(repo("hack/c-plugin-toolchain.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// The C version of the default policy builds, and decides exactly as the Rust default plugin
/// on the default plugin's fixtures (whose expectations the Rust plugin wrote).
#[test]
fn the_c_example_builds_and_decides_as_the_default_plugin() {
    let scratch = Scratch::new("default-c");
    let out = Command::new("make")
        .arg("-C")
        .arg(repo("plugins/examples/default-c"))
        .arg("test")
        .arg(format!("NSC={BIN}"))
        .arg(format!("BUILD={}", scratch.path("build").display()))
        .args(c_toolchain())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("11 cases: 11 passed, 0 failed"), "{stdout}");
    for case in [
        "app-label",
        "network-not-ready",
        "rules/app",
        "rules/name-label",
        "rules/publish-not-ready",
        "default-c/testdata/config-refused",
    ] {
        assert!(
            stdout.contains(&format!("{case}\n")),
            "{case} ran: {stdout}"
        );
    }
    let inspect = run(&[
        "plugin",
        "inspect",
        scratch.path("build/default-c.wasm").to_str().unwrap(),
    ]);
    let inspected = text(&inspect.stdout);
    assert!(inspected.contains("runs here:       yes"), "{inspected}");
    assert!(
        inspected.contains(
            "imports:\n  isim:nad-endpoints/pod-conditions@1.4.0\n  isim:nad-endpoints/log@1.4.0\n  isim:nad-endpoints/types@1.4.0\nexports:"
        ),
        "no WASI import at all without stdio: {inspected}"
    );
    assert!(
        inspected.contains("candidates:      every one (it does not export candidate-labels)"),
        "{inspected}"
    );
}

#[test]
fn plugin_new_makes_a_c_project_that_builds_and_passes_its_own_test() {
    let scratch = Scratch::new("new-c");
    let dir = scratch.path("c-policy");
    let out = run(&[
        "plugin",
        "new",
        "c-policy",
        "--lang",
        "c",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for file in [
        "Makefile",
        "policy.c",
        "rust_str.h",
        "wit/nad-endpoints.wit",
        "adapter/wasi_snapshot_preview1.reactor.wasm",
        "testdata/basic/slices.yaml",
    ] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    let out = Command::new("make")
        .current_dir(&dir)
        .arg("test")
        .arg(format!("NSC={BIN}"))
        .args(
            c_toolchain()
                .iter()
                .filter(|v| !v.starts_with("WASI_ADAPTER=")),
        )
        .output()
        .unwrap();
    passed_and_inspected(&dir, "c-policy", &out);
}
