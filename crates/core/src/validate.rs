//! What the EndpointSlice API validates, checked before a slice is written, so that a `422` from
//! the API server can only mean a bug in this controller.
//!
//! The rules are those of Kubernetes 1.37 (`pkg/apis/discovery/validation`, with the name, label
//! and DNS rules of `apimachinery/pkg/util/validation`). Endpoints are checked one by one while
//! planning, so one pod's bad data only drops that pod's endpoint; the slice check is the last
//! line of defence for what the Service itself contributes (name, labels, ports).

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use kube_core::ResourceExt;

use nad_model::input::address;

/// The API's limits.
pub const MAX_ENDPOINTS: usize = 1000;
pub const MAX_ADDRESSES: usize = 100;
pub const MAX_PORTS: usize = 20000;
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// One thing the API would reject: the field (as the API names it), the value and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub value: String,
    pub rule: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?} {}", self.field, self.value, self.rule)
    }
}

fn violation(field: String, value: &str, rule: impl Into<String>) -> Violation {
    Violation {
        field,
        value: value.to_owned(),
        rule: rule.into(),
    }
}

fn alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: at most 63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum_lower(c) || c == '-')
        && s.starts_with(alnum_lower)
        && s.ends_with(alnum_lower)
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| alnum_lower(c) || c == '-')
                && label.starts_with(alnum_lower)
                && label.ends_with(alnum_lower)
        })
}

fn alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// A label key or `appProtocol`: `[prefix/]name`, the prefix a DNS subdomain, the name at most
/// 63 of `[A-Za-z0-9-_.]` starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain)
        && !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9-_.]` starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
            && s.starts_with(alnum)
            && s.ends_with(alnum))
}

/// Checks one endpoint of a slice of `address_type`; `field` is its path (`endpoints[3]`).
pub fn endpoint(e: &Endpoint, address_type: &str, field: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    if e.addresses.is_empty() {
        out.push(violation(
            format!("{field}.addresses"),
            "",
            "must contain at least 1 address",
        ));
    } else if e.addresses.len() > MAX_ADDRESSES {
        out.push(violation(
            format!("{field}.addresses"),
            &e.addresses.len().to_string(),
            format!("must have at most {MAX_ADDRESSES} items"),
        ));
    }
    for (i, text) in e.addresses.iter().enumerate() {
        let at = format!("{field}.addresses[{i}]");
        let ip = match text.parse::<std::net::IpAddr>() {
            Ok(ip) => ip,
            Err(_) => {
                out.push(violation(at, text, "must be a valid IP address"));
                continue;
            }
        };
        // An unknown address type is reported once, by the slice check.
        let family_ok = match address_type {
            "IPv4" => ip.is_ipv4(),
            "IPv6" => ip.is_ipv6(),
            _ => true,
        };
        if !family_ok {
            out.push(violation(
                at.clone(),
                text,
                format!("must be an {address_type} address"),
            ));
        }
        if ip.to_string() != *text {
            out.push(violation(
                at.clone(),
                text,
                format!("must be in canonical form ({ip})"),
            ));
        }
        if let Err(rejected) = address::check(ip) {
            out.push(violation(at, text, rejected.to_string()));
        }
    }
    if let Some(node) = &e.node_name
        && !is_dns_subdomain(node)
    {
        out.push(violation(
            format!("{field}.nodeName"),
            node,
            "must be a lowercase RFC 1123 subdomain",
        ));
    }
    if let Some(hostname) = &e.hostname
        && !is_dns_label(hostname)
    {
        out.push(violation(
            format!("{field}.hostname"),
            hostname,
            "must be a lowercase RFC 1123 label",
        ));
    }
    if let Some(zone) = &e.zone
        && !is_label_value(zone)
    {
        out.push(violation(
            format!("{field}.zone"),
            zone,
            "must be a valid label value",
        ));
    }
    out
}

/// Checks a whole slice as the API would on create or update.
pub fn slice(s: &EndpointSlice) -> Vec<Violation> {
    let mut out = slice_metadata(s);
    if !matches!(s.address_type.as_str(), "IPv4" | "IPv6") {
        out.push(violation(
            "addressType".into(),
            &s.address_type,
            "must be IPv4 or IPv6",
        ));
    }
    out.extend(slice_ports(s.ports.as_deref().unwrap_or_default()));
    out.extend(slice_endpoints(
        s.endpoints.as_deref().unwrap_or_default(),
        &s.address_type,
    ));
    out
}

/// What the API would reject in a slice's name and labels.
fn slice_metadata(s: &EndpointSlice) -> Vec<Violation> {
    let mut out = Vec::new();
    let name = s.name_any();
    if !is_dns_subdomain(&name) {
        out.push(violation(
            "metadata.name".into(),
            &name,
            "must be a lowercase RFC 1123 subdomain",
        ));
    }
    for (key, value) in s.labels() {
        if !is_qualified_name(key) {
            out.push(violation(
                format!("metadata.labels[{key}]"),
                key,
                "must be a qualified name",
            ));
        }
        if !is_label_value(value) {
            out.push(violation(
                format!("metadata.labels[{key}]"),
                value,
                "must be a valid label value",
            ));
        }
    }
    out
}

/// What the API would reject in a slice's ports: too many, or one with a bad or repeated
/// name, a bad protocol or a bad `appProtocol`.
fn slice_ports(ports: &[EndpointPort]) -> Vec<Violation> {
    let mut out = Vec::new();
    if ports.len() > MAX_PORTS {
        out.push(violation(
            "ports".into(),
            &ports.len().to_string(),
            format!("must have at most {MAX_PORTS} items"),
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let name = port.name.as_deref().unwrap_or_default();
        if !name.is_empty() && !is_dns_label(name) {
            out.push(violation(
                format!("ports[{i}].name"),
                name,
                "must be a lowercase RFC 1123 label",
            ));
        }
        if names.contains(&name) {
            out.push(violation(
                format!("ports[{i}].name"),
                name,
                "is a duplicate",
            ));
        }
        names.push(name);
        match port.protocol.as_deref() {
            Some(p) if PROTOCOLS.contains(&p) => {}
            other => out.push(violation(
                format!("ports[{i}].protocol"),
                other.unwrap_or_default(),
                "must be TCP, UDP or SCTP",
            )),
        }
        if let Some(app) = &port.app_protocol
            && !is_qualified_name(app)
        {
            out.push(violation(
                format!("ports[{i}].appProtocol"),
                app,
                "must be a qualified name",
            ));
        }
    }
    out
}

/// What the API would reject in a slice's endpoints of `address_type`: too many, and each
/// one's own violations.
fn slice_endpoints(endpoints: &[Endpoint], address_type: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    if endpoints.len() > MAX_ENDPOINTS {
        out.push(violation(
            "endpoints".into(),
            &endpoints.len().to_string(),
            format!("must have at most {MAX_ENDPOINTS} items"),
        ));
    }
    for (i, e) in endpoints.iter().enumerate() {
        out.extend(endpoint(e, address_type, &format!("endpoints[{i}]")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice_of(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).unwrap()
    }

    fn fields(violations: &[Violation]) -> Vec<&str> {
        violations.iter().map(|v| v.field.as_str()).collect()
    }

    #[test]
    fn names_and_labels_follow_the_dns_and_label_rules() {
        for ok in ["a", "web-1", "0a", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("web-ipv4-0"));
        assert!(is_dns_subdomain("sim-node-1.example"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        for ok in [
            "app",
            "app.kubernetes.io/name",
            "kubernetes.io/service-name",
            "A_b.c",
        ] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in ["", "/a", "a/", "-a", "Bad_Prefix/a", &"a".repeat(64)] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        assert!(is_label_value(""));
        assert!(is_label_value("zone-1"));
        assert!(!is_label_value("-x"));
    }

    #[test]
    fn a_good_slice_has_no_violations() {
        let s = slice_of(json!({
            "metadata": {"name": "web-ipv4-0", "labels": {"kubernetes.io/service-name": "web",
                "service.kubernetes.io/headless": ""}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
                      {"name": "", "port": 81, "protocol": "UDP"}],
            "endpoints": [{"addresses": ["192.168.2.4"], "nodeName": "sim-node-1",
                "hostname": "web-0", "zone": "zone-a"}],
        }));
        assert_eq!(slice(&s), vec![]);
    }

    #[test]
    fn every_rule_the_api_applies_is_checked() {
        let s = slice_of(json!({
            "metadata": {"name": "Web", "labels": {"bad key!": "-v"}},
            "addressType": "FQDN",
            "ports": [{"name": "http", "protocol": "TCP"}, {"name": "http", "protocol": "ICMP"},
                      {"name": "Bad", "protocol": "TCP", "appProtocol": "not valid"}],
            "endpoints": [
                {"addresses": []},
                {"addresses": ["127.0.0.1", "10.0.0.1"], "nodeName": "Node_1", "hostname": "web.0"},
            ],
        }));
        let got = slice(&s);
        assert_eq!(
            fields(&got),
            vec![
                "metadata.name",
                "metadata.labels[bad key!]",
                "metadata.labels[bad key!]",
                "addressType",
                "ports[1].name",
                "ports[1].protocol",
                "ports[2].name",
                "ports[2].appProtocol",
                "endpoints[0].addresses",
                "endpoints[1].addresses[0]",
                "endpoints[1].nodeName",
                "endpoints[1].hostname",
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn endpoint_addresses_are_checked_for_family_form_and_range() {
        let e: Endpoint =
            serde_json::from_value(json!({"addresses": ["fd00:0::4", "fe80::1", "10.0.0.1"]}))
                .unwrap();
        let got = endpoint(&e, "IPv6", "endpoints[0]");
        let rules: Vec<_> = got
            .iter()
            .map(|v| (v.value.as_str(), v.rule.as_str()))
            .collect();
        assert_eq!(
            rules,
            vec![
                ("fd00:0::4", "must be in canonical form (fd00::4)"),
                (
                    "fe80::1",
                    "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
                ),
                ("10.0.0.1", "must be an IPv6 address"),
            ]
        );
        let many: Endpoint = serde_json::from_value(json!({
            "addresses": (0..101).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)).collect::<Vec<_>>()
        }))
        .unwrap();
        assert_eq!(fields(&endpoint(&many, "IPv4", "e")), vec!["e.addresses"]);
    }

    #[test]
    fn more_than_a_thousand_endpoints_are_refused() {
        let endpoints: Vec<_> = (0..1001)
            .map(|i| json!({"addresses": [format!("10.1.{}.{}", i / 250, i % 250 + 1)]}))
            .collect();
        let s = slice_of(
            json!({"metadata": {"name": "w"}, "addressType": "IPv4", "endpoints": endpoints}),
        );
        assert_eq!(fields(&slice(&s)), vec!["endpoints"]);
    }
}
