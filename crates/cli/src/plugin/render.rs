//! How `plugin eval` shows an [`Evaluation`]: the EndpointSlices (YAML), one decision per pod
//! (text, for people and golden files), or everything as JSON; and, on request, what crossed
//! the boundary.

use std::{fmt::Write as _, io::Write};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    eval::{Evaluation, Verdict},
    source::Loaded,
};
use nad_plugin_runtime::wit;

/// What `plugin eval -o` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// The EndpointSlices the controller would apply, as YAML documents.
    #[default]
    Slices,
    /// One line per pod of the pods file, in its order: include with the conditions, exclude
    /// with the plugin's reason, or skipped with the host's reason.
    Decisions,
    /// Everything: plugin, decisions, slices, notes, warnings, call timings (and the inputs
    /// with --show-inputs).
    Json,
}

/// The EndpointSlices as YAML documents.
pub fn slices(evaluation: &Evaluation) -> anyhow::Result<String> {
    let mut text = String::new();
    for slice in &evaluation.slices {
        let yaml = serde_saphyr::to_string(slice).context("rendering an EndpointSlice as YAML")?;
        text.push_str("---\n");
        text.push_str(&yaml);
    }
    Ok(text)
}

/// One line per pod: `<pod>  include  ready=… serving=… terminating=…`, `<pod>  exclude
/// <reason>` or `<pod>  skipped  <reason>`. Pods of other namespaces are `namespace/name`.
pub fn decisions(evaluation: &Evaluation) -> String {
    let names: Vec<String> = evaluation
        .rows
        .iter()
        .map(|row| {
            if row.namespace == evaluation.target.namespace {
                row.name.clone()
            } else {
                format!("{}/{}", row.namespace, row.name)
            }
        })
        .collect();
    let width = names.iter().map(String::len).max().unwrap_or(0);
    let mut text = String::new();
    for (name, row) in names.iter().zip(&evaluation.rows) {
        let line = match &row.verdict {
            Verdict::Include(c) => format!(
                "{name:<width$}  include  ready={} serving={} terminating={}",
                c.ready, c.serving, c.terminating
            ),
            Verdict::Exclude(reason) => format!("{name:<width$}  exclude  {reason}"),
            Verdict::Skipped(_, reason) => format!("{name:<width$}  skipped  {reason}"),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

fn pairs(list: &[wit::KeyValue]) -> String {
    if list.is_empty() {
        return "(none)".to_owned();
    }
    list.iter()
        .map(|kv| format!("{}={:?}", kv.key, kv.value))
        .collect::<Vec<_>>()
        .join(" ")
}

fn keys(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

fn phase(phase: wit::PodPhase) -> &'static str {
    match phase {
        wit::PodPhase::Pending => "pending",
        wit::PodPhase::Running => "running",
        wit::PodPhase::Succeeded => "succeeded",
        wit::PodPhase::Failed => "failed",
        wit::PodPhase::Unknown => "unknown",
    }
}

fn target_port(port: &wit::TargetPort) -> String {
    match port {
        wit::TargetPort::Number(n) => n.to_string(),
        wit::TargetPort::Name(name) => format!("{name:?}"),
    }
}

/// Exactly what crossed the boundary: the Service record and each candidate's pod record.
pub fn inputs(evaluation: &Evaluation, loaded: &Loaded) -> String {
    let info = loaded.configured.plugin.info();
    let s = &evaluation.service_view;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "input service {}/{}: network {}, publish-not-ready-addresses {}",
        s.namespace, s.name, s.network, s.publish_not_ready_addresses
    );
    let _ = writeln!(text, "  labels:      {}", pairs(&s.labels));
    let _ = writeln!(text, "  annotations: {}", pairs(&s.annotations));
    for port in &s.ports {
        let _ = writeln!(
            text,
            "  port:        {:?} {} {} -> {}{}",
            port.name,
            port.protocol,
            port.port,
            target_port(&port.target_port),
            port.app_protocol
                .as_ref()
                .map(|p| format!(" (app-protocol {p})"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        text,
        "input pods: {} (the plugin declares label keys: {}; annotation keys: {})",
        evaluation.pod_views.len(),
        keys(&info.label_keys),
        keys(&info.annotation_keys)
    );
    for pod in &evaluation.pod_views {
        let _ = writeln!(
            text,
            "  {}: uid {:?}, phase {}, ready {}, terminating {}, node {:?}, zone {:?}, ips {}",
            pod.name,
            pod.uid,
            phase(pod.phase),
            pod.ready,
            pod.terminating,
            pod.node_name,
            pod.zone,
            pod.ips.join(" ")
        );
        let _ = writeln!(text, "    labels:      {}", pairs(&pod.labels));
        let _ = writeln!(text, "    annotations: {}", pairs(&pod.annotations));
    }
    text
}

/// The warning for keys the candidates carry that the plugin never receives.
pub fn undeclared_warning(evaluation: &Evaluation) -> Option<String> {
    let u = &evaluation.undeclared;
    if u.is_empty() {
        return None;
    }
    let list = |what: &str, keys: &std::collections::BTreeMap<String, usize>| {
        keys.iter()
            .map(|(key, n)| {
                format!(
                    "{what} {key} ({n} {})",
                    if *n == 1 { "pod" } else { "pods" }
                )
            })
            .collect::<Vec<_>>()
    };
    let mut all = list("label", &u.labels);
    all.extend(list("annotation", &u.annotations));
    Some(format!(
        "the pods carry keys the plugin does not declare in plugin-info, so it never sees them: \
         {}; if it reads one of them, add it to label-keys or annotation-keys",
        all.join(", ")
    ))
}

/// The calls made, for a person: "1 call of 5 pods in 0.41 ms".
pub fn timing(evaluation: &Evaluation) -> String {
    let pods: usize = evaluation.calls.iter().map(|(n, _)| n).sum();
    let total: f64 = evaluation
        .calls
        .iter()
        .map(|(_, d)| d.as_secs_f64() * 1e3)
        .sum();
    let calls = evaluation.calls.len();
    format!(
        "{calls} {} of {pods} {} in {total:.2} ms (instantiation included)",
        if calls == 1 { "call" } else { "calls" },
        if pods == 1 { "pod" } else { "pods" }
    )
}

/// What the plugin's `candidate-labels` select, for a person: "its candidate-labels select
/// app=\"web\": the controller asks it about 3 of the 9 candidates".
pub fn selection(evaluation: &Evaluation) -> Option<String> {
    let (selection, asked) = evaluation.selection.as_ref()?;
    Some(format!(
        "its candidate-labels select {selection}: the controller asks it about {asked} of the {} \
         candidates (the decisions are the same)",
        evaluation.candidates
    ))
}

/// Everything, as one JSON document.
pub fn json(evaluation: &Evaluation, loaded: &Loaded, show_inputs: bool) -> Value {
    let info = loaded.configured.plugin.info();
    let pods: Vec<Value> = evaluation
        .rows
        .iter()
        .map(|row| {
            let mut pod = json!({"namespace": row.namespace, "name": row.name});
            match &row.verdict {
                Verdict::Include(c) => {
                    pod["decision"] = json!("include");
                    pod["conditions"] = json!({
                        "ready": c.ready, "serving": c.serving, "terminating": c.terminating
                    });
                }
                Verdict::Exclude(reason) => {
                    pod["decision"] = json!("exclude");
                    pod["reason"] = json!(reason);
                }
                Verdict::Skipped(_, reason) => {
                    pod["decision"] = json!("skipped");
                    pod["reason"] = json!(reason);
                }
            }
            pod
        })
        .collect();
    let mut doc = json!({
        "plugin": {
            "name": loaded.name,
            "infoName": info.name,
            "version": info.version,
            "sha256": loaded.configured.hash,
            "decisions": loaded.configured.plugin.decision_scope().as_str(),
            "labelKeys": info.label_keys,
            "annotationKeys": info.annotation_keys,
        },
        "service": format!("{}/{}", evaluation.target.namespace, evaluation.target.name),
        "network": evaluation.target.network,
        "candidates": evaluation.candidates,
        "summary": evaluation.candidate_summary(),
        "pods": pods,
        "endpointSlices": evaluation.slices,
        "notes": evaluation.notes,
        "warnings": warnings(evaluation),
        "calls": evaluation.calls.iter().map(|(pods, elapsed)| json!({
            "pods": pods, "seconds": elapsed.as_secs_f64()
        })).collect::<Vec<_>>(),
    });
    if let Some((selection, asked)) = &evaluation.selection {
        let labels: serde_json::Map<String, Value> = selection
            .labels()
            .iter()
            .map(|(key, value)| (key.clone(), json!(value)))
            .collect();
        doc["candidateLabels"] = json!({"labels": labels, "asked": asked});
    }
    if show_inputs {
        doc["inputs"] = json!({
            "service": service_json(&evaluation.service_view),
            "pods": evaluation.pod_views.iter().map(pod_json).collect::<Vec<_>>(),
        });
    }
    doc
}

/// The warnings of an evaluation, the undeclared keys' among them.
pub fn warnings(evaluation: &Evaluation) -> Vec<String> {
    let mut all = evaluation.warnings.clone();
    all.extend(undeclared_warning(evaluation));
    all
}

fn pairs_json(list: &[wit::KeyValue]) -> Value {
    list.iter()
        .map(|kv| (kv.key.clone(), Value::String(kv.value.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn service_json(s: &wit::Service) -> Value {
    json!({
        "name": s.name, "namespace": s.namespace, "network": s.network,
        "labels": pairs_json(&s.labels), "annotations": pairs_json(&s.annotations),
        "publishNotReadyAddresses": s.publish_not_ready_addresses,
        "ports": s.ports.iter().map(|p| json!({
            "name": p.name, "protocol": p.protocol, "port": p.port,
            "targetPort": match &p.target_port {
                wit::TargetPort::Number(n) => json!(n),
                wit::TargetPort::Name(name) => json!(name),
            },
            "appProtocol": p.app_protocol,
        })).collect::<Vec<_>>(),
    })
}

fn pod_json(p: &wit::Pod) -> Value {
    json!({
        "name": p.name, "namespace": p.namespace, "uid": p.uid,
        "labels": pairs_json(&p.labels), "annotations": pairs_json(&p.annotations),
        "phase": phase(p.phase), "ready": p.ready, "terminating": p.terminating,
        "nodeName": p.node_name, "zone": p.zone, "ips": p.ips,
    })
}

/// Writes `text` to `out` (stdout) as is.
pub fn emit(out: &mut impl Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes()).context("writing the output")
}
