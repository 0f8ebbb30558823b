//! A container's environment as kubelet makes it: pure.
//!
//! - The `kubernetes` Service of namespace `default` as `KUBERNETES_SERVICE_HOST`,
//!   `KUBERNETES_SERVICE_PORT` (and `_PORT_<NAME>` per named port) and the Docker-link
//!   variables `KUBERNETES_PORT`, `KUBERNETES_PORT_443_TCP{,_PROTO,_PORT,_ADDR}`: kubelet's
//!   `envvars.FromServices`, which it applies to that Service even with
//!   `enableServiceLinks: false`. (The namespace's own Services are not added.)
//! - The container's `env`: `value` (with `$(VAR)` references to variables defined before it
//!   or to the Service variables expanded, `$$` for a `$`) and `valueFrom.fieldRef`
//!   (`metadata.name`, `.namespace`, `.uid`, `.labels`, `.annotations` and their `['key']`
//!   forms, `spec.nodeName`, `spec.serviceAccountName`, `status.podIP(s)`,
//!   `status.hostIP(s)`). A later entry of the same name wins. Other sources (`envFrom`,
//!   `configMapKeyRef`, `secretKeyRef`, `resourceFieldRef`) are refused: the container then
//!   waits with kubelet's reason `CreateContainerConfigError`.
//! - `command` and `args` expanded against the result, as kubelet does.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Service};

/// What kubelet knows of a pod beyond its object: where it runs.
pub struct Addresses<'a> {
    pub pod_ips: &'a [IpAddr],
    pub host_ip: IpAddr,
}

/// The variables kubelet derives from a Service with a cluster IP (none without one).
pub fn service_variables(service: &Service) -> Vec<(String, String)> {
    let name = service
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_");
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let Some(ip) = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None")
    else {
        return Vec::new();
    };
    let ports = spec.ports.as_deref().unwrap_or_default();
    let Some(first) = ports.first() else {
        return Vec::new();
    };
    let mut vars = vec![
        (format!("{name}_SERVICE_HOST"), ip.to_owned()),
        (format!("{name}_SERVICE_PORT"), first.port.to_string()),
    ];
    for port in ports {
        if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let suffix = port_name.to_uppercase().replace('-', "_");
            vars.push((
                format!("{name}_SERVICE_PORT_{suffix}"),
                port.port.to_string(),
            ));
        }
    }
    // Docker-link variables; the first port also as <NAME>_PORT.
    let host_port = |port: i32| match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        _ => format!("{ip}:{port}"),
    };
    for (index, port) in ports.iter().enumerate() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let url = format!("{}://{}", protocol.to_lowercase(), host_port(port.port));
        if index == 0 {
            vars.push((format!("{name}_PORT"), url.clone()));
        }
        let prefix = format!("{name}_PORT_{}_{}", port.port, protocol.to_uppercase());
        vars.push((prefix.clone(), url));
        vars.push((format!("{prefix}_PROTO"), protocol.to_lowercase()));
        vars.push((format!("{prefix}_PORT"), port.port.to_string()));
        vars.push((format!("{prefix}_ADDR"), ip.to_owned()));
    }
    vars
}

/// The environment of `container` of `pod`: its `env` over `services` (the Service
/// variables), in the order defined (a redefined name keeps its first place). `Err` says why
/// kubelet could not make it.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    addresses: &Addresses<'_>,
    services: &[(String, String)],
) -> Result<Vec<(String, String)>, String> {
    if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(format!(
            "container {}: envFrom is not supported by the pod agent (env with value or fieldRef is)",
            container.name
        ));
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = value_of(pod, container, var, addresses, &env, services)?;
        match env.iter_mut().find(|(name, _)| *name == var.name) {
            Some(slot) => slot.1 = value,
            None => env.push((var.name.clone(), value)),
        }
    }
    for (name, value) in services {
        if !env.iter().any(|(n, _)| n == name) {
            env.push((name.clone(), value.clone()));
        }
    }
    Ok(env)
}

fn value_of(
    pod: &Pod,
    container: &Container,
    var: &EnvVar,
    addresses: &Addresses<'_>,
    defined: &[(String, String)],
    services: &[(String, String)],
) -> Result<String, String> {
    if let Some(value) = var.value.as_deref().filter(|v| !v.is_empty()) {
        return Ok(expand(value, |name| {
            defined
                .iter()
                .chain(services)
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }));
    }
    let Some(source) = &var.value_from else {
        return Ok(String::new());
    };
    let unsupported = |kind: &str| {
        Err(format!(
            "container {}: env {} uses valueFrom.{kind}, which the pod agent does not support \
             (value and valueFrom.fieldRef are)",
            container.name, var.name
        ))
    };
    if let Some(field) = &source.field_ref {
        return field_value(pod, &field.field_path, addresses)
            .map_err(|why| format!("container {}: env {}: {why}", container.name, var.name));
    }
    if source.config_map_key_ref.is_some() {
        return unsupported("configMapKeyRef");
    }
    if source.secret_key_ref.is_some() {
        return unsupported("secretKeyRef");
    }
    if source.resource_field_ref.is_some() {
        return unsupported("resourceFieldRef");
    }
    unsupported("(an unknown source)")
}

/// The downward API's value of `path` for `pod`.
fn field_value(pod: &Pod, path: &str, addresses: &Addresses<'_>) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let join = |ips: &mut dyn Iterator<Item = &IpAddr>| {
        ips.map(ToString::to_string).collect::<Vec<_>>().join(",")
    };
    if let Some((map, key)) = subscripted(path) {
        return match map {
            "metadata.labels" => Ok(meta
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()),
            "metadata.annotations" => Ok(meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
                .unwrap_or_default()),
            _ => Err(format!("fieldPath {map:?} does not support subscript")),
        };
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => addresses.host_ip.to_string(),
        "status.hostIPs" => join(&mut std::iter::once(&addresses.host_ip)),
        "status.podIP" => addresses
            .pod_ips
            .first()
            .map(ToString::to_string)
            .unwrap_or_default(),
        "status.podIPs" => join(&mut addresses.pod_ips.iter()),
        other => return Err(format!("unsupported fieldPath: {other}")),
    })
}

/// `metadata.labels['key']` as (`metadata.labels`, `key`).
fn subscripted(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (map, key) = inner.split_once("['")?;
    (!map.is_empty()).then_some((map, key))
}

/// kubelet's `FormatMap`: `key="value"` lines, sorted by key.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
/// left as written, `$$` is a `$`, any other `$` stays.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(reference) = after.strip_prefix('(')
            && let Some(end) = reference.find(')')
        {
            let name = &reference[..end];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &reference[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `container` with its `command` and `args` expanded against `env`, as kubelet runs it.
pub fn expand_command(container: &Container, env: &[(String, String)]) -> Container {
    let lookup = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let expand_all = |list: &Option<Vec<String>>| {
        list.as_ref()
            .map(|l| l.iter().map(|s| expand(s, lookup)).collect())
    };
    Container {
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        ..container.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kubernetes() -> Service {
        serde_json::from_value(json!({"metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 16443}]}}))
        .unwrap()
    }

    #[test]
    fn the_kubernetes_service_gives_kubelets_variables() {
        let vars: BTreeMap<String, String> = service_variables(&kubernetes()).into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(vars, want);
        let headless: Service = serde_json::from_value(json!({"metadata": {"name": "x"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}))
        .unwrap();
        assert!(service_variables(&headless).is_empty());
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "prober-x7", "namespace": "net", "uid": "u-1",
                         "labels": {"app": "prober", "tier": "b"}},
            "spec": {"nodeName": "nsc-node-1", "serviceAccountName": "prober", "containers": []}}))
        .unwrap()
    }

    fn container(env: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "image": "x", "env": env,
            "command": ["probe", "--node=$(NODE_NAME)"], "args": ["$(MISSING)", "$$(NODE_NAME)"]}))
        .unwrap()
    }

    fn field(name: &str, path: &str) -> serde_json::Value {
        json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}})
    }

    #[test]
    fn env_takes_values_field_refs_and_the_service_variables() {
        let ips: Vec<IpAddr> = vec!["10.244.1.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let addresses = Addresses {
            pod_ips: &ips,
            host_ip: "172.30.0.11".parse().unwrap(),
        };
        let c = container(json!([
            field("POD_NAME", "metadata.name"),
            field("POD_NAMESPACE", "metadata.namespace"),
            field("POD_UID", "metadata.uid"),
            field("NODE_NAME", "spec.nodeName"),
            field("SA", "spec.serviceAccountName"),
            field("POD_IP", "status.podIP"),
            field("POD_IPS", "status.podIPs"),
            field("HOST_IP", "status.hostIP"),
            field("APP", "metadata.labels['app']"),
            field("LABELS", "metadata.labels"),
            {"name": "GREETING", "value": "$(POD_NAME) on $(NODE_NAME) via $(KUBERNETES_SERVICE_HOST), $(LATER)"},
            {"name": "LATER", "value": "x"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": "8443"},
        ]));
        let services = service_variables(&kubernetes());
        let env: BTreeMap<String, String> = container_env(&pod(), &c, &addresses, &services)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["POD_NAME"], "prober-x7");
        assert_eq!(env["POD_NAMESPACE"], "net");
        assert_eq!(env["POD_UID"], "u-1");
        assert_eq!(env["NODE_NAME"], "nsc-node-1");
        assert_eq!(env["SA"], "prober");
        assert_eq!(env["POD_IP"], "10.244.1.5");
        assert_eq!(env["POD_IPS"], "10.244.1.5,fd00::5");
        assert_eq!(env["HOST_IP"], "172.30.0.11");
        assert_eq!(env["APP"], "prober");
        assert_eq!(env["LABELS"], "app=\"prober\"\ntier=\"b\"");
        assert_eq!(
            env["GREETING"],
            "prober-x7 on nsc-node-1 via 10.96.0.1, $(LATER)"
        );
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(
            env["KUBERNETES_SERVICE_PORT"], "8443",
            "the container's own wins"
        );
        let env: Vec<(String, String)> = env.into_iter().collect();
        let expanded = expand_command(&c, &env);
        assert_eq!(expanded.command.unwrap(), ["probe", "--node=nsc-node-1"]);
        assert_eq!(expanded.args.unwrap(), ["$(MISSING)", "$(NODE_NAME)"]);
    }

    #[test]
    fn unsupported_sources_say_which() {
        let addresses = Addresses {
            pod_ips: &[],
            host_ip: "172.30.0.11".parse().unwrap(),
        };
        let secret = container(json!([{"name": "TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]));
        let why = container_env(&pod(), &secret, &addresses, &[]).unwrap_err();
        assert!(
            why.contains("TOKEN") && why.contains("secretKeyRef"),
            "{why}"
        );
        let bad = container(json!([field("X", "spec.hostname")]));
        let why = container_env(&pod(), &bad, &addresses, &[]).unwrap_err();
        assert!(why.contains("spec.hostname"), "{why}");
    }

    #[test]
    fn expansion_follows_kubernetes() {
        let lookup = |n: &str| (n == "A").then(|| "1".to_owned());
        assert_eq!(expand("$(A)-$(B)-$$-$x-$(A", lookup), "1-$(B)-$-$x-$(A");
        assert_eq!(expand("$", lookup), "$");
        assert_eq!(expand("a$$(A)b", lookup), "a$(A)b");
    }
}
