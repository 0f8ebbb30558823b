//! Which Services this controller manages: the opt-in annotations and the shape checks.
//!
//! A Service opts in by naming its network: a NetworkAttachmentDefinition (Multus) with
//! `isim.dev/network`, or a DeviceClass (DRA) with `isim.dev/device-class`, optionally narrowed
//! to one request with `isim.dev/device-request` ([`device_network`]). Pure: a Service in, a
//! [`Target`] out. The controller turns [`Target::Invalid`] into a Warning Event and removes
//! the Service's slices.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::{Service, ServicePort};
use kube_core::ResourceExt;

use crate::input::device_network::{self, CLASS_ANNOTATION, REQUEST_ANNOTATION};
use crate::pairs::Pairs;

/// The opt-in annotation: `<nad>` (the Service's namespace) or `<namespace>/<nad>`.
pub const NETWORK_ANNOTATION: &str = "isim.dev/network";
/// The annotation naming the plugin that decides the Service's pods (the default plugin when absent).
pub const POLICY_ANNOTATION: &str = "isim.dev/endpoint-policy";

/// An IP family of EndpointSlice addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The EndpointSlice `addressType`.
    pub fn address_type(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// The short form used in slice names.
    pub fn slug(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    pub fn of(ip: &std::net::IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }
}

/// A managed Service, reduced to what planning needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceTarget {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The network's key: `<namespace>/<name>` of the NetworkAttachmentDefinition, or a DRA
    /// network's ([`device_network::DeviceNetwork::key`]).
    pub network: String,
    pub labels: Pairs,
    pub annotations: Pairs,
    pub ports: Vec<ServicePort>,
    /// `spec.ipFamilies`, when set: only these families get slices.
    pub ip_families: Option<Vec<Family>>,
    pub publish_not_ready_addresses: bool,
}

impl ServiceTarget {
    pub fn wants(&self, family: Family) -> bool {
        self.ip_families
            .as_ref()
            .is_none_or(|families| families.contains(&family))
    }
}

/// What the controller should do with a Service.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Not annotated: this controller owns nothing for it (any old slices are removed).
    Unmanaged,
    /// Annotated but unusable. Each entry says what to change.
    Invalid(Vec<String>),
    Managed(Arc<ServiceTarget>),
}

/// Resolves the annotation value to `<namespace>/<nad>`, or says what is wrong with it.
pub fn resolve_network(value: &str, service_namespace: &str) -> Result<String, String> {
    let value = value.trim();
    let fix = "set it to the name of a NetworkAttachmentDefinition, as <name> (same namespace) \
               or <namespace>/<name>";
    if value.is_empty() {
        return Err(format!("annotation {NETWORK_ANNOTATION} is empty: {fix}"));
    }
    let (namespace, name) = match value.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (service_namespace, value),
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && part
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && part
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric())
    };
    if !valid(namespace) || !valid(name) {
        return Err(format!(
            "annotation {NETWORK_ANNOTATION}={value:?} is not a valid network name: {fix} \
             (lowercase letters, digits, '-' and '.')"
        ));
    }
    Ok(format!("{namespace}/{name}"))
}

/// Whether `annotations` opt a Service in (any of the network annotations, valid or not).
pub fn opted_in(annotations: &BTreeMap<String, String>) -> bool {
    [NETWORK_ANNOTATION, CLASS_ANNOTATION, REQUEST_ANNOTATION]
        .iter()
        .any(|key| annotations.contains_key(*key))
}

/// The key of the network the annotations name, or what is wrong with them.
fn network_of(
    annotations: &BTreeMap<String, String>,
    namespace: &str,
) -> Result<String, Vec<String>> {
    let nad = annotations.get(NETWORK_ANNOTATION);
    let class = annotations.get(CLASS_ANNOTATION);
    let request = annotations.get(REQUEST_ANNOTATION).map(String::as_str);
    match (nad, class) {
        (Some(_), Some(_)) => Err(vec![format!(
            "annotations {NETWORK_ANNOTATION} and {CLASS_ANNOTATION} both name a network: keep \
             {NETWORK_ANNOTATION} for a NetworkAttachmentDefinition (Multus) or \
             {CLASS_ANNOTATION} for a DeviceClass (DRA), not both"
        )]),
        (Some(nad), None) => {
            let mut problems = Vec::new();
            if request.is_some() {
                problems.push(format!(
                    "annotation {REQUEST_ANNOTATION} narrows a DeviceClass, and this Service \
                     names a NetworkAttachmentDefinition ({NETWORK_ANNOTATION}): remove \
                     {REQUEST_ANNOTATION}, or name the DeviceClass with {CLASS_ANNOTATION} \
                     instead of {NETWORK_ANNOTATION}"
                ));
            }
            match resolve_network(nad, namespace) {
                Ok(network) if problems.is_empty() => Ok(network),
                Ok(_) => Err(problems),
                Err(problem) => {
                    problems.insert(0, problem);
                    Err(problems)
                }
            }
        }
        (None, Some(class)) => device_network::resolve(class, request).map(|n| n.key()),
        (None, None) => Err(vec![format!(
            "annotation {REQUEST_ANNOTATION} is set without {CLASS_ANNOTATION}: add \
             {CLASS_ANNOTATION} with the name of the DeviceClass whose devices carry the \
             network, or remove {REQUEST_ANNOTATION}"
        )]),
    }
}

/// The annotations' network and every problem with the Service, read without copying it.
fn check(service: &Service) -> Option<(Option<String>, Vec<String>)> {
    let annotations = service.annotations();
    if !opted_in(annotations) {
        return None;
    }
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let empty = Default::default();
    let spec = service.spec.as_ref().unwrap_or(&empty);
    let (network, mut problems) = match network_of(annotations, namespace) {
        Ok(network) => (Some(network), Vec::new()),
        Err(problems) => (None, problems),
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        problems.push(
            "spec.type is ExternalName: use a headless Service (spec.clusterIP: None) without \
             a selector; ExternalName Services have no endpoints"
                .to_owned(),
        );
    } else if spec.cluster_ip.as_deref() != Some("None") {
        problems.push(format!(
            "spec.clusterIP is {:?}, not \"None\": make the Service headless (spec.clusterIP: \
             None); clusterIP cannot be changed in place, so delete and re-create the Service",
            spec.cluster_ip.as_deref().unwrap_or_default()
        ));
    }
    if spec.selector.as_ref().is_some_and(|s| !s.is_empty()) {
        problems.push(
            "spec.selector is set: remove it, so that Kubernetes' own EndpointSlice controller \
             does not publish primary-network addresses for this Service"
                .to_owned(),
        );
    }
    Some((network, problems))
}

/// The network of a managed Service (`None` for unannotated or invalid ones). Cheap: used to
/// route every pod event.
pub fn managed_network(service: &Service) -> Option<String> {
    match check(service)? {
        (Some(network), problems) if problems.is_empty() => Some(network),
        _ => None,
    }
}

/// Classifies a Service. Every problem is reported at once, so one Event tells the whole fix.
pub fn classify(service: &Service) -> Target {
    let Some((network, problems)) = check(service) else {
        return Target::Unmanaged;
    };
    let (Some(network), true) = (network, problems.is_empty()) else {
        return Target::Invalid(problems);
    };
    let namespace = service.namespace().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    let ip_families = spec.ip_families.map(|families| {
        families
            .iter()
            .filter_map(|f| match f.as_str() {
                "IPv4" => Some(Family::V4),
                "IPv6" => Some(Family::V6),
                _ => None,
            })
            .collect()
    });
    Target::Managed(Arc::new(ServiceTarget {
        name: service.name_any(),
        namespace,
        uid: service.uid().unwrap_or_default(),
        network,
        labels: service.labels().into(),
        annotations: service.annotations().into(),
        ports: spec.ports.unwrap_or_default(),
        ip_families,
        publish_not_ready_addresses: spec.publish_not_ready_addresses.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(annotations: serde_json::Value, spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "team-a", "uid": "u-1",
                         "labels": {"app": "web"}, "annotations": annotations},
            "spec": spec,
        }))
        .unwrap()
    }

    fn headless() -> serde_json::Value {
        json!({"clusterIP": "None", "ports": [{"port": 80, "targetPort": "http"}]})
    }

    #[test]
    fn without_the_annotation_a_service_is_unmanaged() {
        assert_eq!(classify(&service(json!({}), headless())), Target::Unmanaged);
    }

    #[test]
    fn a_bare_name_means_the_services_namespace() {
        let Target::Managed(t) =
            classify(&service(json!({NETWORK_ANNOTATION: "macvlan"}), headless()))
        else {
            panic!("expected managed")
        };
        assert_eq!(t.network, "team-a/macvlan");
        assert_eq!(t.name, "web");
        assert_eq!(t.uid, "u-1");
        assert_eq!(t.ports.len(), 1);
        assert!(!t.publish_not_ready_addresses);
        assert!(t.wants(Family::V4) && t.wants(Family::V6));
    }

    #[test]
    fn managed_network_agrees_with_classify() {
        let ok = service(json!({NETWORK_ANNOTATION: "macvlan"}), headless());
        assert_eq!(managed_network(&ok).as_deref(), Some("team-a/macvlan"));
        let not_headless = service(
            json!({NETWORK_ANNOTATION: "macvlan"}),
            json!({"clusterIP": "10.0.0.1"}),
        );
        assert_eq!(managed_network(&not_headless), None);
        assert_eq!(managed_network(&service(json!({}), headless())), None);
        assert_eq!(
            managed_network(&service(json!({NETWORK_ANNOTATION: ""}), headless())),
            None
        );
    }

    #[test]
    fn a_qualified_name_crosses_namespaces() {
        let Target::Managed(t) = classify(&service(
            json!({NETWORK_ANNOTATION: " infra/macvlan "}),
            headless(),
        )) else {
            panic!("expected managed")
        };
        assert_eq!(t.network, "infra/macvlan");
    }

    #[test]
    fn ip_families_limit_the_slices() {
        let spec =
            json!({"clusterIP": "None", "ipFamilies": ["IPv6"], "publishNotReadyAddresses": true});
        let Target::Managed(t) = classify(&service(json!({NETWORK_ANNOTATION: "m"}), spec)) else {
            panic!("expected managed")
        };
        assert!(!t.wants(Family::V4));
        assert!(t.wants(Family::V6));
        assert!(t.publish_not_ready_addresses);
    }

    #[test]
    fn invalid_network_names_say_how_to_fix_them() {
        for bad in ["", "  ", "/macvlan", "ns/", "Mac_VLAN", "a/b/c", "-x"] {
            let target = classify(&service(json!({NETWORK_ANNOTATION: bad}), headless()));
            let Target::Invalid(problems) = target else {
                panic!("{bad:?} should be invalid")
            };
            assert_eq!(problems.len(), 1, "{bad:?}: {problems:?}");
            assert!(problems[0].contains(NETWORK_ANNOTATION), "{problems:?}");
            assert!(problems[0].contains("<namespace>/<name>"), "{problems:?}");
        }
    }

    #[test]
    fn a_service_with_a_cluster_ip_must_become_headless() {
        let spec = json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]});
        let Target::Invalid(problems) = classify(&service(json!({NETWORK_ANNOTATION: "m"}), spec))
        else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("spec.clusterIP: None"), "{problems:?}");
        assert!(problems[0].contains("10.96.0.10"), "{problems:?}");
    }

    #[test]
    fn a_selector_must_be_removed_and_all_problems_are_listed() {
        let spec = json!({"clusterIP": "10.0.0.1", "selector": {"app": "web"}});
        let Target::Invalid(problems) = classify(&service(json!({NETWORK_ANNOTATION: ""}), spec))
        else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[2].contains("remove it"), "{problems:?}");
    }

    #[test]
    fn an_empty_selector_is_no_selector() {
        let spec = json!({"clusterIP": "None", "selector": {}});
        assert!(matches!(
            classify(&service(json!({NETWORK_ANNOTATION: "m"}), spec)),
            Target::Managed(_)
        ));
    }

    #[test]
    fn external_name_services_are_rejected() {
        let spec = json!({"type": "ExternalName", "externalName": "example.com"});
        let Target::Invalid(problems) = classify(&service(json!({NETWORK_ANNOTATION: "m"}), spec))
        else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("ExternalName"));
    }
    #[test]
    fn a_device_class_names_a_dra_network_optionally_narrowed_to_a_request() {
        let Target::Managed(t) =
            classify(&service(json!({CLASS_ANNOTATION: "dranet"}), headless()))
        else {
            panic!("expected managed")
        };
        assert_eq!(t.network, "deviceclass:dranet");
        let narrowed = service(
            json!({CLASS_ANNOTATION: "dranet", REQUEST_ANNOTATION: "nic"}),
            headless(),
        );
        assert_eq!(
            managed_network(&narrowed).as_deref(),
            Some("deviceclass:dranet/nic")
        );
    }

    #[test]
    fn both_kinds_of_network_or_a_stray_request_say_what_to_change() {
        let both = service(
            json!({NETWORK_ANNOTATION: "macvlan", CLASS_ANNOTATION: "dranet"}),
            headless(),
        );
        let Target::Invalid(problems) = classify(&both) else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("not both"), "{problems:?}");
        assert_eq!(managed_network(&both), None);

        let request_with_nad = service(
            json!({NETWORK_ANNOTATION: "macvlan", REQUEST_ANNOTATION: "nic"}),
            headless(),
        );
        let Target::Invalid(problems) = classify(&request_with_nad) else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains(&format!("remove {REQUEST_ANNOTATION}")),
            "{problems:?}"
        );

        let request_alone = service(json!({REQUEST_ANNOTATION: "nic"}), headless());
        let Target::Invalid(problems) = classify(&request_alone) else {
            panic!("expected invalid")
        };
        assert!(
            problems[0].contains(&format!("add {CLASS_ANNOTATION}")),
            "{problems:?}"
        );

        // Every problem at once: a bad class, a bad request and a cluster IP.
        let all = service(
            json!({CLASS_ANNOTATION: "Bad_Class", REQUEST_ANNOTATION: "a.b"}),
            json!({"clusterIP": "10.0.0.1"}),
        );
        let Target::Invalid(problems) = classify(&all) else {
            panic!("expected invalid")
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn any_network_annotation_opts_in() {
        let annotations = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(opted_in(&annotations(&[(NETWORK_ANNOTATION, "m")])));
        assert!(opted_in(&annotations(&[(CLASS_ANNOTATION, "dranet")])));
        assert!(opted_in(&annotations(&[(REQUEST_ANNOTATION, "nic")])));
        assert!(!opted_in(&annotations(&[(POLICY_ANNOTATION, "default")])));
    }
}
