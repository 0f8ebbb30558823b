//! The inputs of `plugin eval` and `plugin test`: a Service, Pods and Nodes read from YAML
//! manifests (`kubectl get -o yaml` output works), and the plugin file or the built-in one.

use std::{path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use nad_core::index::ZONE_LABEL;
use nad_model::input::target::{self, ServiceTarget, Target};
use nad_model::{keys::Keys, pod::PodRecord};

use super::case::{Case, Zones};

/// A Service, its pods and (optionally) the nodes, each from its file.
pub fn case(service: &Path, pods: &Path, nodes: Option<&Path>) -> anyhow::Result<Case> {
    let target = service_target(service)?;
    Ok(Case {
        pods: pod_records(pods, &target)?,
        zones: node_zones(nodes)?,
        target,
    })
}

pub fn read(path: &Path) -> anyhow::Result<String> {
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

/// Each node's zone, from the nodes file if there is one.
fn node_zones(path: Option<&Path>) -> anyhow::Result<Option<Zones>> {
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
