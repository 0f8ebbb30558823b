//! `plugin eval` and `plugin inspect`: a plugin run offline through the same pipeline,
//! observation and plan as in the controller, on Service, Pod and Node YAML files.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{EvalArgs, InspectArgs};
use crate::{
    index::{Keys, PodRecord, ZONE_LABEL},
    input::target::{self, ServiceTarget, Target},
    plugin::{self, HOST_WIT_VERSION, POLICY_ANNOTATION, Plugins, Runtime, WIT_PACKAGE},
    reconcile::{
        candidates::Observed,
        decide::{self, Inputs},
        observe::{self, Observation},
        plan,
        scope::Scope,
        slices,
    },
};

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read it", path.display()))
}

/// Every object in a YAML file: documents, with `List`s (e.g. `kubectl get -o yaml`) expanded.
fn documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = read(path)?;
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text)
        .map_err(|e| anyhow::anyhow!("{}: not valid YAML: {e}", path.display()))?;
    Ok(docs
        .into_iter()
        .filter(|d| !d.is_null())
        .flat_map(|d| match d.get("items").and_then(Value::as_array) {
            Some(items) if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) => items.clone(),
            _ => vec![d],
        })
        .collect())
}

/// The objects of one kind, each deserialized with the path of a bad field in the error.
fn objects<K: DeserializeOwned>(path: &Path, kind: &str) -> anyhow::Result<Vec<K>> {
    documents(path)?
        .into_iter()
        .enumerate()
        .filter(|(_, d)| d["kind"].as_str().is_none_or(|k| k == kind))
        .map(|(i, doc)| {
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or("<unnamed>")
                .to_owned();
            serde_path_to_error::deserialize(doc).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {kind} {name:?} (document {}): field {}: {}",
                    path.display(),
                    i + 1,
                    e.path(),
                    e.inner()
                )
            })
        })
        .collect()
}

fn plugin_file(path: &Path, config: Option<&PathBuf>) -> anyhow::Result<(String, Vec<u8>, String)> {
    let bytes =
        std::fs::read(path).with_context(|| format!("{}: cannot read it", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let config = config.map(|c| read(c)).transpose()?.unwrap_or_default();
    Ok((name, bytes, config))
}

/// Prints the slices the plugin would make (YAML documents) to `out`, and every pod left out
/// with its reason to `err`.
pub fn eval(
    runtime: &Runtime,
    args: &EvalArgs,
    max_endpoints: usize,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<()> {
    let (name, bytes, config) = plugin_file(&args.plugin, args.config.as_ref())?;
    let configured = plugin::prepare(runtime, &name, &bytes, &config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.plugin.display()))?;
    let target = service_target(&args.service)?;
    let pods = pod_records(&args.pods, &target)?;
    let zones = node_zones(args.nodes.as_ref())?;
    let zone = |name: &str| match &zones {
        Some(zones) => zones
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, z)| z.clone()),
        // Without a nodes file every node exists, without a zone.
        None => Some(None),
    };
    let observation = observe::candidates(&target, &pods, zone);
    report_observation(err, &observation)?;

    let observed = Observation {
        candidates: observation.candidates,
        ..Observation::default()
    };
    let decided = decide::decide(Inputs {
        // The file decides, whatever plugin the Service names.
        plugins: Arc::new(Plugins::only(
            plugin_name_for(&target).unwrap_or(&name),
            configured,
        )),
        target: target.clone(),
        scope: Scope::Full,
        remembered: None,
        changed: Observation::default(),
        touches_published: false,
        observe_all: Box::new(move || Observed::new(observed)),
    });
    let verdicts = decided.outcome?.unwrap_or_default();
    for (index, reason) in &verdicts.excluded {
        let pod = verdicts.observation.candidates[*index].name();
        writeln!(err, "excluded pod {pod}: {reason}")?;
    }
    let desired = plan::desired(&target, &verdicts.included());
    report_plan(err, &desired)?;
    let slices = slices::place(&target, &desired, &[], max_endpoints, None).apply;
    if slices.is_empty() {
        writeln!(err, "no EndpointSlices: no pod is included")?;
    }
    for slice in &slices {
        let yaml = serde_saphyr::to_string(slice).context("rendering an EndpointSlice as YAML")?;
        write!(out, "---\n{yaml}")?;
    }
    Ok(())
}

/// The one managed Service of the file, as the controller sees it.
fn service_target(path: &Path) -> anyhow::Result<Arc<ServiceTarget>> {
    let services: Vec<Service> = objects(path, "Service")?;
    let service = match services.as_slice() {
        [service] => service,
        [] => bail!("{}: no Service in it", path.display()),
        many => bail!(
            "{}: {} Services in it ({}); keep one",
            path.display(),
            many.len(),
            many.iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut service = service.clone();
    if service.metadata.namespace.is_none() {
        service.metadata.namespace = Some("default".to_owned());
    }
    if service.metadata.uid.is_none() {
        service.metadata.uid = Some("00000000-0000-0000-0000-000000000000".to_owned());
    }
    match target::classify(&service) {
        Target::Managed(target) => Ok(target),
        Target::Unmanaged => bail!(
            "{}: Service {} has no {} annotation, so the controller ignores it",
            path.display(),
            service.name_any(),
            target::NETWORK_ANNOTATION
        ),
        Target::Invalid(problems) => bail!(
            "{}: Service {} cannot be served: {}",
            path.display(),
            service.name_any(),
            problems.join("; ")
        ),
    }
}

/// The file's pods as the index keeps them (every label and annotation), in the Service's
/// namespace when they name none.
fn pod_records(path: &Path, target: &ServiceTarget) -> anyhow::Result<Vec<Arc<PodRecord>>> {
    let keys = Keys::all();
    Ok(objects::<Pod>(path, "Pod")?
        .into_iter()
        .map(|mut pod| {
            if pod.metadata.namespace.is_none() {
                pod.metadata.namespace = Some(target.namespace.clone());
            }
            Arc::new(PodRecord::from_pod(&pod, &keys))
        })
        .collect())
}

type Zones = Vec<(String, Option<String>)>;

/// Each node's zone, from the nodes file if there is one.
fn node_zones(path: Option<&PathBuf>) -> anyhow::Result<Option<Zones>> {
    path.map(|path| {
        objects::<Node>(path, "Node").map(|nodes| {
            nodes
                .iter()
                .map(|n| (n.name_any(), n.labels().get(ZONE_LABEL).cloned()))
                .collect()
        })
    })
    .transpose()
}

fn report_observation(err: &mut impl Write, observation: &Observation) -> anyhow::Result<()> {
    for skipped in &observation.skipped {
        writeln!(err, "skipped pod {}: {}", skipped.pod, skipped.reason)?;
    }
    for ignored in &observation.ignored_ips {
        for unusable in &ignored.unusable {
            writeln!(err, "pod {}: address left out: {unusable}", ignored.pod)?;
        }
    }
    for skipped in &observation.unreadable {
        writeln!(err, "skipped pod {}: {}", skipped.pod, skipped.reason)?;
    }
    Ok(())
}

fn report_plan(err: &mut impl Write, desired: &plan::Desired) -> anyhow::Result<()> {
    for conflict in &desired.conflicts {
        writeln!(
            err,
            "address {} is listed by pods {} and {}: only {} (the older) publishes it",
            conflict.address, conflict.kept, conflict.left_out, conflict.kept
        )?;
    }
    for dropped in &desired.dropped {
        let violations: Vec<String> = dropped.violations.iter().map(ToString::to_string).collect();
        writeln!(
            err,
            "pod {}: endpoint {} left out: {}",
            dropped.pod,
            dropped.address,
            violations.join("; ")
        )?;
    }
    Ok(())
}

/// The plugin the Service's annotation names, if any.
fn plugin_name_for(target: &ServiceTarget) -> Option<&str> {
    target
        .annotations
        .get(POLICY_ANNOTATION)
        .map(|name| name.trim())
        .filter(|name| !name.is_empty())
}

/// Prints what a plugin file is and whether this host runs it; fails when it does not.
pub fn inspect(runtime: &Runtime, args: &InspectArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let (name, bytes, config) = plugin_file(&args.plugin, args.config.as_ref())?;
    let report = plugin::inspect(runtime, &name, &bytes, &config);
    writeln!(out, "file:            {}", args.plugin.display())?;
    writeln!(out, "size:            {} bytes", report.size)?;
    writeln!(out, "sha256:          {}", report.hash)?;
    match report.wit_version {
        Some((major, minor, patch)) => writeln!(
            out,
            "targets:         {WIT_PACKAGE}@{major}.{minor}.{patch}"
        )?,
        None => writeln!(out, "targets:         (no {WIT_PACKAGE} policy export)")?,
    }
    writeln!(
        out,
        "host runs:       {WIT_PACKAGE}@{}.0 to {}.{}",
        HOST_WIT_VERSION.0, HOST_WIT_VERSION.0, HOST_WIT_VERSION.1
    )?;
    match &report.result {
        Ok((info, scope)) => {
            let keys = |k: &[String]| {
                if k.is_empty() {
                    "(none)".to_owned()
                } else {
                    k.join(", ")
                }
            };
            writeln!(out, "name:            {}", info.name)?;
            writeln!(out, "version:         {}", info.version)?;
            writeln!(out, "label keys:      {}", keys(&info.label_keys))?;
            writeln!(out, "annotation keys: {}", keys(&info.annotation_keys))?;
            writeln!(out, "decisions:       {}", scope.as_str())?;
            writeln!(out, "runs here:       yes")?;
            Ok(())
        }
        Err(e) => {
            writeln!(out, "runs here:       no ({} step failed)", e.step.as_str())?;
            bail!("{}: {e}", args.plugin.display())
        }
    }
}
