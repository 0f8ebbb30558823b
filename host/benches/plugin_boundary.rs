//! The cost of the plugin boundary, measured with Criterion.
//!
//! Run with `cargo bench -p nad-service-controller --bench plugin_boundary` (about 2–3 minutes
//! on 2 cores). Every figure lands in
//! `$CARGO_TARGET_DIR/criterion/<group>/<function>/<param>/new/estimates.json` (no `<param>`
//! level for benchmarks without a parameter). The benchmark IDs are stable:
//!
//! | ID | what one iteration is |
//! |---|---|
//! | `evaluate/wasm/{1,10,100,1000,10000}` | `Plugin::evaluate` of the default plugin on N pods: a fresh Store and instance under the deadline and memory limit, one call, the answer converted (the controller's path) |
//! | `evaluate/native/{1,10,100,1000,10000}` | the same policy run natively (`nad_test_kit::native`: the default plugin's own `policy` module) on the same records, converted to the policy's types before timing: the baseline |
//! | `convert/pod_view/1000` | `pod_view` of 1000 candidates for the default plugin (host-side copying of what crosses) |
//! | `convert/service_view` | `service_view` of one Service |
//! | `fields/declared/1000` | `evaluate/wasm` at 1000 pods with the records the default plugin really gets (labels filtered to its declared keys) |
//! | `fields/extra-labels/{0,4,16}` | as `declared`, each pod carrying 0, 4 or 16 more labels (as sent to a plugin declaring `*`): the slope is the cost of one label crossing |
//! | `fields/all/1000` | what a plugin declaring `*` gets from the same pods (all labels and annotations) |
//! | `fields/empty-strings/1000` | as `declared` with `name`, `namespace`, `uid`, `node-name`, `zone` empty (they still cross, without bytes) |
//! | `fields/no-ips/1000` | as `declared` with `ips` empty (one list and one string less per pod) |
//! | `fields/minimal/1000` | both of the above: only what the default plugin reads carries data |
//! | `component/compile` | `Runtime::compile` of the default plugin (Cranelift) |
//! | `component/link` | `Runtime::link`: pre-instantiation plus the `info` call (a fresh Store and instance) |
//! | `component/instantiate` | `Plugin::evaluate` with 0 pods: fresh Store, instantiate, an empty call |
//! | `component/prepare` | the whole load pipeline: hash, compile, world check, link, `info`, config, self-test |
//! | `component/cached-load` | `PluginDir::scan` of an unchanged directory holding one plugin (stat only: the controller's reuse path) |
//! | `component/cached-load-rehash` | the same after the file's mtime changed (as on a ConfigMap `..data` swap): read, sha256, skip |
//! | `component/deserialize` | `Component::deserialize` of a serialized component (what a precompiled on-disk cache would cost) |
//!
//! Throughput is set to the number of pods, so Criterion also reports time per pod.

// Benchmarks may fail loudly: a broken setup must not produce figures.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::{
    fs::File,
    hint::black_box,
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime},
};

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use k8s_openapi::api::core::v1::{Pod, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nad_model::input::target::ServiceTarget;
use nad_model::{candidate::Candidate, decision::Decision, keys::Keys, pod::PodRecord};
use nad_plugin_runtime::{
    DEFAULT_PLUGIN_WASM, Limits, Plugin, PluginDir, Plugins, Runtime, decision, pod_view, prepare,
    service_view, wit,
};
use nad_test_kit::{native, wit::PodBuilder};
use serde_json::json;

const SIZES: [usize; 5] = [1, 10, 100, 1_000, 10_000];
const FIELDS_PODS: usize = 1_000;

// ---------------------------------------------------------------------------------------------
// Inputs: a realistic Service and its pods.
// ---------------------------------------------------------------------------------------------

const NAMESPACE: &str = "shop";
const TEMPLATE_HASH: &str = "7d4b9c8f6";

fn target() -> ServiceTarget {
    let port = |name: &str, port: i32, target: IntOrString| ServicePort {
        name: Some(name.into()),
        protocol: Some("TCP".into()),
        port,
        target_port: Some(target),
        ..ServicePort::default()
    };
    ServiceTarget {
        name: "web".into(),
        namespace: NAMESPACE.into(),
        uid: "0b7c4b0e-6f7d-4d3e-9a51-3f0d6c1e2a10".into(),
        network: format!("{NAMESPACE}/macvlan-storage"),
        labels: [("app", "web"), ("tier", "frontend")].into(),
        annotations: [("isim.dev/network", "macvlan-storage")].into(),
        ports: vec![
            port("http", 80, IntOrString::Int(8080)),
            port("metrics", 9090, IntOrString::String("metrics".into())),
        ],
        ip_families: None,
        publish_not_ready_addresses: false,
    }
}

/// Pod `i` of a Deployment: unique name and uid, Running, one pod in ten not ready, one IPv4
/// address on the secondary network, spread over 3 zones and 20 nodes.
fn candidate(i: usize) -> Candidate {
    let name = format!("web-{TEMPLATE_HASH}-{i:05x}");
    let uid = format!("3f6c1e2a-{:04x}-4d3e-9a51-{:012x}", i % 0x1_0000, i);
    let ip = format!("10.20.{}.{}", i / 250, i % 250 + 1);
    let zone = format!("zone-{}", ["a", "b", "c"][i % 3]);
    let node = format!("worker-{:02}", i % 20);
    let status = json!([
        {"name": "cbr0", "interface": "eth0", "ips": [format!("10.244.{}.{}", i / 250, i % 250 + 1)], "default": true},
        {"name": format!("{NAMESPACE}/macvlan-storage"), "interface": "net1", "ips": [ip]},
    ]);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "labels": {"app": "web", "pod-template-hash": TEMPLATE_HASH},
            "annotations": {
                "k8s.v1.cni.cncf.io/networks": "macvlan-storage",
                "k8s.v1.cni.cncf.io/network-status": status.to_string(),
            },
        },
        "spec": {"containers": [{"name": "web", "image": "registry.example/web:1.4.2"}], "nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": if i % 10 == 9 { "False" } else { "True" }}],
        },
    }))
    .expect("a valid pod");
    Candidate {
        pod: Arc::new(PodRecord::from_pod(&pod, &Keys::all())),
        ips: [ip.parse().expect("an IPv4 address")].into(),
        zone: Some(zone),
    }
}

fn candidates(n: usize) -> Vec<Candidate> {
    (0..n).map(candidate).collect()
}

fn runtime() -> Runtime {
    Runtime::new(Limits::default()).expect("a runtime")
}

fn default_plugin(runtime: &Runtime) -> Plugin {
    prepare(runtime, "default", DEFAULT_PLUGIN_WASM, "")
        .expect("the default plugin loads")
        .plugin
}

/// The records the default plugin gets for `n` pods, as the controller builds them.
fn views(plugin: &Plugin, n: usize) -> Vec<wit::Pod> {
    candidates(n).iter().map(|c| pod_view(c, plugin)).collect()
}

/// What a plugin declaring `*` for labels and annotations gets.
fn view_all(candidate: &Candidate) -> wit::Pod {
    let pod = &candidate.pod;
    nad_test_kit::wit::pod(&pod.name)
        .namespace(&*pod.namespace)
        .uid(pod.uid.to_string())
        .labels(pod.labels().iter().map(|(k, v)| (&**k, &**v)))
        .annotations(pod.annotations().iter().map(|(k, v)| (&**k, &**v)))
        .phase(wit::PodPhase::Running)
        .ready(candidate.is_ready())
        .terminating(candidate.is_terminating())
        .node(candidate.node_name().unwrap_or_default())
        .zone(candidate.zone.as_deref().unwrap_or_default())
        .ips(candidate.ips.iter().map(ToString::to_string))
        .build()
}

/// The baseline must decide exactly as the plugin does, or the comparison means nothing.
fn check_native_matches(plugin: &Plugin, service: &wit::Service, pods: &[wit::Pod]) {
    let wasm = plugin
        .evaluate(service, pods, None, "")
        .expect("the plugin evaluates")
        .expect("the plugin decides");
    let native: Vec<Decision> = native::evaluate(service, pods, "")
        .expect("the policy evaluates natively")
        .into_iter()
        .map(decision)
        .collect();
    assert_eq!(
        wasm, native,
        "the native reference disagrees with the plugin"
    );
    assert_eq!(
        wasm.iter()
            .filter(|d| matches!(d, Decision::Include(c) if !c.ready))
            .count(),
        pods.iter().filter(|p| !p.ready).count(),
        "every pod is selected; the not-ready ones are published not ready"
    );
}

// ---------------------------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------------------------

fn evaluate(c: &mut Criterion) {
    let runtime = runtime();
    let plugin = default_plugin(&runtime);
    let service = service_view(&target());
    let all = views(&plugin, SIZES[SIZES.len() - 1]);
    check_native_matches(&plugin, &service, &all[..100]);

    let mut group = c.benchmark_group("evaluate");
    for n in SIZES {
        let pods = &all[..n];
        group.throughput(Throughput::Elements(n as u64));
        if n >= 10_000 {
            group.sample_size(10);
        } else {
            group.sample_size(25);
        }
        group.bench_with_input(BenchmarkId::new("wasm", n), pods, |b, pods| {
            b.iter(|| {
                plugin
                    .evaluate(black_box(&service), black_box(pods), None, "")
                    .expect("the plugin evaluates")
            });
        });
        // Converted once: the iterations time the policy, not the copying into its types.
        let prepared = native::prepare(&service, pods);
        group.bench_with_input(BenchmarkId::new("native", n), &prepared, |b, prepared| {
            b.iter(|| {
                native::evaluate_prepared(black_box(prepared), "")
                    .expect("the policy evaluates natively")
            });
        });
    }
    group.finish();
}

fn convert(c: &mut Criterion) {
    let runtime = runtime();
    let plugin = default_plugin(&runtime);
    let target = target();
    let pods = candidates(FIELDS_PODS);

    let mut group = c.benchmark_group("convert");
    group.sample_size(25);
    group.throughput(Throughput::Elements(FIELDS_PODS as u64));
    group.bench_with_input(
        BenchmarkId::new("pod_view", FIELDS_PODS),
        &pods,
        |b, pods| {
            b.iter(|| {
                pods.iter()
                    .map(|c| pod_view(black_box(c), &plugin))
                    .collect::<Vec<_>>()
            });
        },
    );
    group.throughput(Throughput::Elements(1));
    group.bench_function("service_view", |b| {
        b.iter(|| service_view(black_box(&target)));
    });
    group.finish();
}

/// The records of [`fields`]: each variant of what crosses for the same 1000 pods, by
/// benchmark ID. `declared` is what the default plugin gets.
fn field_variants(declared: &[wit::Pod], pods: &[Candidate]) -> Vec<(BenchmarkId, Vec<wit::Pod>)> {
    let with_extra_labels = |extra: usize| -> Vec<wit::Pod> {
        declared
            .iter()
            .map(|p| {
                PodBuilder::from(p.clone())
                    .labels((0..extra).map(|j| {
                        (
                            format!("example.com/extra-label-{j:02}"),
                            format!("value-{j:02}"),
                        )
                    }))
                    .build()
            })
            .collect()
    };
    let without_strings = |p: &wit::Pod| {
        PodBuilder::from(p.clone())
            .name("")
            .namespace("")
            .uid("")
            .node("")
            .zone("")
    };
    vec![
        (BenchmarkId::new("declared", FIELDS_PODS), declared.to_vec()),
        (BenchmarkId::new("extra-labels", 0), with_extra_labels(0)),
        (BenchmarkId::new("extra-labels", 4), with_extra_labels(4)),
        (BenchmarkId::new("extra-labels", 16), with_extra_labels(16)),
        (
            BenchmarkId::new("all", FIELDS_PODS),
            pods.iter().map(view_all).collect(),
        ),
        (
            BenchmarkId::new("empty-strings", FIELDS_PODS),
            declared
                .iter()
                .map(|p| without_strings(p).build())
                .collect(),
        ),
        (
            BenchmarkId::new("no-ips", FIELDS_PODS),
            declared
                .iter()
                .map(|p| PodBuilder::from(p.clone()).no_ips().build())
                .collect(),
        ),
        (
            BenchmarkId::new("minimal", FIELDS_PODS),
            declared
                .iter()
                .map(|p| without_strings(p).no_ips().build())
                .collect(),
        ),
    ]
}

fn fields(c: &mut Criterion) {
    let runtime = runtime();
    let plugin = default_plugin(&runtime);
    let service = service_view(&target());
    let pods = candidates(FIELDS_PODS);
    let declared: Vec<wit::Pod> = pods.iter().map(|c| pod_view(c, &plugin)).collect();
    assert!(
        declared
            .iter()
            .all(|p| p.labels.len() == 1 && p.annotations.is_empty()),
        "the default plugin declares the label keys app and app.kubernetes.io/name only"
    );

    let mut group = c.benchmark_group("fields");
    group.sample_size(25);
    group.throughput(Throughput::Elements(FIELDS_PODS as u64));
    for (id, pods) in &field_variants(&declared, &pods) {
        check_native_matches(&plugin, &service, pods);
        group.bench_with_input(id.clone(), pods, |b, pods| {
            b.iter(|| {
                plugin
                    .evaluate(black_box(&service), black_box(pods), None, "")
                    .expect("the plugin evaluates")
            });
        });
    }
    group.finish();
}

/// A scratch directory for the plugin directory benchmarks, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("nsc-bench-plugins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `Component::deserialize` of what `Component::serialize` wrote, in an engine configured like
/// the runtime's (epoch interruption on). Reference figure for a precompiled on-disk cache,
/// which the controller does not have.
// `deserialize` is unsafe because it trusts its input to be wasmtime's own output; here the
// bytes were produced a moment earlier by this same process and engine configuration.
#[allow(unsafe_code)]
fn bench_deserialize(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let engine = wasmtime::Engine::new(&config).expect("an engine");
    let serialized = wasmtime::component::Component::new(&engine, DEFAULT_PLUGIN_WASM)
        .and_then(|component| component.serialize())
        .expect("the default plugin compiles and serializes");
    group.bench_function("deserialize", |b| {
        b.iter(|| {
            // SAFETY: `serialized` comes from `Component::serialize` in this process, with an
            // engine of the same configuration.
            unsafe { wasmtime::component::Component::deserialize(&engine, black_box(&serialized)) }
                .expect("the component deserializes")
        });
    });
}

fn component(c: &mut Criterion) {
    let runtime = runtime();
    let plugin = default_plugin(&runtime);
    let service = service_view(&target());
    let compiled = runtime
        .compile("default", DEFAULT_PLUGIN_WASM)
        .expect("the default plugin compiles");

    let mut group = c.benchmark_group("component");
    group.sample_size(20);

    // Tens of milliseconds per iteration: the same iteration count in every sample.
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("compile", |b| {
        b.iter(|| {
            runtime
                .compile("default", black_box(DEFAULT_PLUGIN_WASM))
                .expect("the default plugin compiles")
        });
    });
    group.bench_function("prepare", |b| {
        b.iter(|| {
            prepare(&runtime, "default", black_box(DEFAULT_PLUGIN_WASM), "")
                .expect("the default plugin loads")
        });
    });

    group.sampling_mode(SamplingMode::Auto);
    group.bench_function("link", |b| {
        b.iter(|| {
            runtime
                .link("default", black_box(&compiled))
                .expect("the default plugin links")
        });
    });
    group.bench_function("instantiate", |b| {
        b.iter(|| {
            plugin
                .evaluate(black_box(&service), &[], None, "")
                .expect("the plugin evaluates")
        });
    });

    let scratch = ScratchDir::new();
    let wasm_path = scratch.0.join("default.wasm");
    std::fs::write(&wasm_path, DEFAULT_PLUGIN_WASM).expect("write the plugin file");
    let mut dir = PluginDir::new(&scratch.0);
    let mut plugins = Plugins::built_in(&runtime).expect("the built-in plugin loads");
    let first = dir.scan(&runtime, &mut plugins);
    assert_eq!(first.loaded, ["default"], "the first scan loads the plugin");
    group.bench_function("cached-load", |b| {
        b.iter(|| {
            let scan = dir.scan(&runtime, &mut plugins);
            assert!(scan.is_empty(), "an unchanged directory changes nothing");
            scan
        });
    });
    let mut tick = 0_u64;
    group.bench_function("cached-load-rehash", |b| {
        b.iter_batched(
            || {
                // A new mtime, same content: the scan must re-read and re-hash the file.
                tick += 1;
                let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + tick);
                File::options()
                    .write(true)
                    .open(&wasm_path)
                    .and_then(|f| f.set_modified(mtime))
                    .expect("touch the plugin file");
            },
            |()| {
                let scan = dir.scan(&runtime, &mut plugins);
                assert!(scan.is_empty(), "unchanged content is not loaded again");
                scan
            },
            BatchSize::PerIteration,
        );
    });

    bench_deserialize(&mut group);
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    targets = evaluate, convert, fields, component
}
criterion_main!(benches);
