//! `plugin bench`: what a plugin's calls cost, split into making the instance and the call
//! itself, on generated pods that carry the keys the plugin declares.
//!
//! Each call runs as in the controller: a fresh instance in a fresh store, under the deadline
//! and the memory limit. The numbers are wall-clock times of this machine, for comparing two
//! builds of a plugin; `make bench` measures the controller itself.

use std::{io::Write, time::Duration};

use anyhow::{Context as _, bail};
use serde_json::json;

use super::{BenchArgs, render, source};
use crate::plugin::wit;

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

pub fn bench(args: &BenchArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let config = source::config(args.config.as_deref())?;
    let loaded = source::load(&runtime, &args.sandbox.registry, &args.plugin, &config)?;
    let plugin = &loaded.configured.plugin;
    let iterations = args.iterations as usize;
    let n = args.pods as usize;
    let (service, pods) = inputs(plugin.info(), n);
    // Warm up: the first calls fault in the compiled code and the allocator's pages.
    for _ in 0..iterations.min(5) {
        let _ = plugin.evaluate_with_stats(&service, &pods, None, &config);
    }
    let mut instantiate = Vec::with_capacity(iterations);
    let mut run = Vec::with_capacity(iterations);
    let mut total = Vec::with_capacity(iterations);
    let mut peak = 0;
    let mut included = 0;
    for _ in 0..iterations {
        let (answer, stats) = plugin.evaluate_with_stats(&service, &pods, None, &config);
        let decisions = match answer {
            Ok(Ok(decisions)) => decisions,
            Ok(Err(message)) => bail!(
                "{}: rejected the generated Service ({message}); bench needs one it decides",
                loaded.name
            ),
            Err(e) => bail!("{}: {e}", loaded.name),
        };
        if decisions.len() != pods.len() {
            bail!(
                "{}: returned {} decisions for {} pods",
                loaded.name,
                decisions.len(),
                pods.len()
            );
        }
        included = decisions
            .iter()
            .filter(|d| matches!(d, wit::Decision::Include(_)))
            .count();
        instantiate.push(stats.instantiate);
        run.push(stats.run);
        total.push(stats.instantiate + stats.run);
        peak = peak.max(stats.memory_peak);
    }
    for series in [&mut instantiate, &mut run, &mut total] {
        series.sort();
    }
    let per_pod = |d: Duration| micros(d) / n as f64;
    let limit = args.sandbox.plugin_memory_limit_mib as usize * 1024 * 1024;
    if args.json {
        let series = |s: &[Duration]| json!({"p50Micros": micros(quantile(s, 0.5)), "p99Micros": micros(quantile(s, 0.99))});
        let doc = json!({
            "plugin": loaded.name,
            "decisions": plugin.decision_scope().as_str(),
            "pods": args.pods,
            "iterations": args.iterations,
            "included": included,
            "instantiate": series(&instantiate),
            "evaluate": series(&run),
            "total": series(&total),
            "evaluatePerPodMicros": per_pod(quantile(&run, 0.5)),
            "memoryPeakBytes": peak,
            "memoryLimitBytes": limit,
        });
        let text = serde_json::to_string_pretty(&doc).context("rendering JSON")?;
        return render::emit(out, &format!("{text}\n"));
    }
    let info = plugin.info();
    writeln!(
        out,
        "plugin {} ({}), {} generated pods ({} included), {} calls, each in a fresh instance",
        loaded.name,
        plugin.decision_scope().as_str(),
        args.pods,
        included,
        args.iterations
    )?;
    writeln!(
        out,
        "declared keys: labels {}; annotations {}",
        if info.label_keys.is_empty() {
            "none".to_owned()
        } else {
            info.label_keys.join(", ")
        },
        if info.annotation_keys.is_empty() {
            "none".to_owned()
        } else {
            info.annotation_keys.join(", ")
        }
    )?;
    writeln!(
        out,
        "{:<13}{:>12}{:>12}{:>16}",
        "", "p50", "p99", "per pod (p50)"
    )?;
    for (name, series, pod) in [
        ("instantiate", &instantiate, false),
        ("evaluate", &run, true),
        ("total", &total, true),
    ] {
        let p50 = quantile(series, 0.5);
        writeln!(
            out,
            "{name:<13}{:>9.1} µs{:>9.1} µs{}",
            micros(p50),
            micros(quantile(series, 0.99)),
            if pod {
                format!("{:>13.3} µs", per_pod(p50))
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        out,
        "guest memory peak: {:.2} MiB of linear memory (limit {} MiB)",
        peak as f64 / (1024.0 * 1024.0),
        args.sandbox.plugin_memory_limit_mib
    )?;
    Ok(())
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
