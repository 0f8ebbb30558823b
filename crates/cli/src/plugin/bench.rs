//! `plugin bench`: what a plugin's calls cost, split into making the instance and the call
//! itself, on generated pods that carry the keys the plugin declares.
//!
//! Each call runs as in the controller: a fresh instance in a fresh store, under the deadline
//! and the memory limit. The numbers are wall-clock times of this machine, for comparing two
//! builds of a plugin; `make bench` measures the controller itself.

use std::{io::Write, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use serde_json::json;

use super::{
    render,
    sandbox::SandboxArgs,
    source::{self, Loaded, PluginArg},
};
use nad_plugin_runtime::{CallError, wit};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The plugin component (`.wasm`), or `default` for the built-in plugin.
    #[arg(long, value_parser = PluginArg::parse)]
    pub plugin: PluginArg,
    /// Its configuration (JSON).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Pods per call.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub pods: u32,
    /// Calls to time.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Print the figures as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Generated inputs: a Service whose labels and annotations are the declared keys, and `n`
/// ready, running pods that carry them (a `*` gets a few typical keys), spread over 3 zones,
/// each with one IPv4 address.
fn inputs(info: &wit::PluginInfo, n: usize) -> (wit::Service, Vec<wit::Pod>) {
    let typical = ["app", "app.kubernetes.io/name", "pod-template-hash", "team"];
    let keys = |declared: &[String]| -> Vec<String> {
        if declared.iter().any(|k| k == "*") {
            typical.iter().map(|k| (*k).to_owned()).collect()
        } else {
            declared.to_vec()
        }
    };
    let pairs = |keys: &[String]| -> Vec<wit::KeyValue> {
        keys.iter()
            .map(|key| wit::KeyValue {
                key: key.clone(),
                value: "bench".to_owned(),
            })
            .collect()
    };
    let labels = pairs(&keys(&info.label_keys));
    let annotations = pairs(&keys(&info.annotation_keys));
    let service = wit::Service {
        name: "bench".into(),
        namespace: "bench".into(),
        labels: labels.clone(),
        annotations: vec![wit::KeyValue {
            key: "isim.dev/network".into(),
            value: "bench".into(),
        }],
        ports: vec![wit::ServicePort {
            name: "http".into(),
            protocol: "TCP".into(),
            port: 80,
            target_port: wit::TargetPort::Number(8080),
            app_protocol: None,
        }],
        publish_not_ready_addresses: false,
        network: "bench/bench".into(),
    };
    let pods = (0..n)
        .map(|i| wit::Pod {
            name: format!("bench-{i:05}"),
            namespace: "bench".into(),
            uid: format!("00000000-0000-0000-0000-{i:012}"),
            labels: labels.clone(),
            annotations: annotations.clone(),
            phase: wit::PodPhase::Running,
            ready: true,
            terminating: false,
            node_name: format!("node-{}", i % 10),
            zone: format!("zone-{}", i % 3),
            ips: vec![format!(
                "10.{}.{}.{}",
                (i >> 16) & 255,
                (i >> 8) & 255,
                i & 255
            )],
        })
        .collect();
    (service, pods)
}

/// The `q`-quantile (0..=1) of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What the timed calls cost, each series sorted, and what the last call decided.
struct Measured {
    instantiate: Vec<Duration>,
    run: Vec<Duration>,
    total: Vec<Duration>,
    /// The most linear memory any call's instance had, in bytes.
    peak: usize,
    /// How many of the pods the last call included.
    included: usize,
}

/// Times the plugin's calls on generated pods and prints what they cost.
pub fn bench(args: &BenchArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let config = source::config(args.config.as_deref())?;
    let loaded = source::load(&runtime, &args.sandbox.registry, &args.plugin, &config)?;
    let (service, pods) = inputs(loaded.configured.plugin.info(), args.pods as usize);
    let measured = measure(&loaded, &service, &pods, &config, args.iterations as usize)?;
    if args.json {
        write_json(args, &loaded, &measured, out)
    } else {
        write_text(args, &loaded, &measured, out)
    }
}

/// Times `iterations` calls on the inputs, after a few calls to warm up; fails when the
/// plugin rejects the Service, fails, or does not decide every pod.
fn measure(
    loaded: &Loaded,
    service: &wit::Service,
    pods: &[wit::Pod],
    config: &str,
    iterations: usize,
) -> anyhow::Result<Measured> {
    let plugin = &loaded.configured.plugin;
    // Warm up: the first calls fault in the compiled code and the allocator's pages.
    for _ in 0..iterations.min(5) {
        let _ = plugin.evaluate_with_stats(service, pods, None, config);
    }
    let mut measured = Measured {
        instantiate: Vec::with_capacity(iterations),
        run: Vec::with_capacity(iterations),
        total: Vec::with_capacity(iterations),
        peak: 0,
        included: 0,
    };
    for _ in 0..iterations {
        let (answer, stats) = plugin.evaluate_with_stats(service, pods, None, config);
        let decisions = decisions(&loaded.name, answer, pods.len())?;
        measured.included = decisions
            .iter()
            .filter(|d| matches!(d, wit::Decision::Include(_)))
            .count();
        measured.instantiate.push(stats.instantiate);
        measured.run.push(stats.run);
        measured.total.push(stats.instantiate + stats.run);
        measured.peak = measured.peak.max(stats.memory_peak);
    }
    for series in [
        &mut measured.instantiate,
        &mut measured.run,
        &mut measured.total,
    ] {
        series.sort();
    }
    Ok(measured)
}

/// The decisions of one call; fails when the plugin rejected the Service, failed, or
/// answered for another number of pods than `pods`.
fn decisions(
    plugin: &str,
    answer: Result<Result<Vec<wit::Decision>, String>, CallError>,
    pods: usize,
) -> anyhow::Result<Vec<wit::Decision>> {
    let decisions = match answer {
        Ok(Ok(decisions)) => decisions,
        Ok(Err(message)) => bail!(
            "{plugin}: rejected the generated Service ({message}); bench needs one it decides"
        ),
        Err(e) => bail!("{plugin}: {e}"),
    };
    if decisions.len() != pods {
        bail!(
            "{plugin}: returned {} decisions for {pods} pods",
            decisions.len()
        );
    }
    Ok(decisions)
}

/// Microseconds per pod of a call that took `d` on `pods` pods.
fn per_pod(d: Duration, pods: u32) -> f64 {
    micros(d) / f64::from(pods)
}

/// The figures as a JSON document.
fn write_json(
    args: &BenchArgs,
    loaded: &Loaded,
    measured: &Measured,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let series = |s: &[Duration]| json!({"p50Micros": micros(quantile(s, 0.5)), "p99Micros": micros(quantile(s, 0.99))});
    let limit = args.sandbox.plugin_memory_limit_mib as usize * 1024 * 1024;
    let doc = json!({
        "plugin": loaded.name,
        "decisions": loaded.configured.plugin.decision_scope().as_str(),
        "pods": args.pods,
        "iterations": args.iterations,
        "included": measured.included,
        "instantiate": series(&measured.instantiate),
        "evaluate": series(&measured.run),
        "total": series(&measured.total),
        "evaluatePerPodMicros": per_pod(quantile(&measured.run, 0.5), args.pods),
        "memoryPeakBytes": measured.peak,
        "memoryLimitBytes": limit,
        "codeBytes": loaded.configured.plugin.code_bytes(),
    });
    let text = serde_json::to_string_pretty(&doc).context("rendering JSON")?;
    render::emit(out, &format!("{text}\n"))
}

/// The figures as a table, after what was called and the keys the plugin declares.
fn write_text(
    args: &BenchArgs,
    loaded: &Loaded,
    measured: &Measured,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let plugin = &loaded.configured.plugin;
    let info = plugin.info();
    writeln!(
        out,
        "plugin {} ({}), {} generated pods ({} included), {} calls, each in a fresh instance",
        loaded.name,
        plugin.decision_scope().as_str(),
        args.pods,
        measured.included,
        args.iterations
    )?;
    writeln!(
        out,
        "declared keys: labels {}; annotations {}",
        listed(&info.label_keys),
        listed(&info.annotation_keys)
    )?;
    writeln!(
        out,
        "{:<13}{:>12}{:>12}{:>16}",
        "", "p50", "p99", "per pod (p50)"
    )?;
    for (name, series, pod) in [
        ("instantiate", &measured.instantiate, false),
        ("evaluate", &measured.run, true),
        ("total", &measured.total, true),
    ] {
        let p50 = quantile(series, 0.5);
        writeln!(
            out,
            "{name:<13}{:>9.1} µs{:>9.1} µs{}",
            micros(p50),
            micros(quantile(series, 0.99)),
            if pod {
                format!("{:>13.3} µs", per_pod(p50, args.pods))
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        out,
        "guest memory peak: {:.2} MiB of linear memory a call (limit {} MiB); compiled code: \
         {:.2} MiB, kept once for all calls",
        measured.peak as f64 / (1024.0 * 1024.0),
        args.sandbox.plugin_memory_limit_mib,
        loaded.configured.plugin.code_bytes() as f64 / (1024.0 * 1024.0),
    )?;
    Ok(())
}

/// The keys, comma-separated, or `none`.
fn listed(keys: &[String]) -> String {
    if keys.is_empty() {
        "none".to_owned()
    } else {
        keys.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pods_carry_the_declared_keys() {
        let info = wit::PluginInfo {
            name: "p".into(),
            version: "1".into(),
            label_keys: vec!["app".into()],
            annotation_keys: vec!["*".into()],
        };
        let (service, pods) = inputs(&info, 3);
        assert_eq!(pods.len(), 3);
        assert_eq!(service.labels.len(), 1);
        assert_eq!(pods[2].labels[0].key, "app");
        assert_eq!(pods[2].annotations.len(), 4, "a * gets typical keys");
        assert_eq!(pods[2].ips, vec!["10.0.0.2".to_owned()]);
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(quantile(&sorted, 0.5), Duration::from_micros(51));
        assert_eq!(quantile(&sorted, 0.99), Duration::from_micros(99));
    }
}
