//! Parsing of the Multus `k8s.v1.cni.cncf.io/network-status` pod annotation.
//!
//! Multus writes a JSON list with one entry per attachment. Only `name`, `ips` and `default`
//! are read; every other field (`interface`, `mac`, `dns`, `device-info`, future additions) is
//! ignored, never rejected.

use std::net::IpAddr;

use serde::Deserialize;

/// The annotation Multus writes on every pod it attaches.
pub const ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// Why a pod's attachment to a network could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    #[error("annotation {ANNOTATION} is missing")]
    Missing,
    #[error("annotation {ANNOTATION} is not a JSON list of attachments: {0}")]
    InvalidJson(String),
    #[error("annotation {ANNOTATION} lists network {network} without any IP address")]
    NoIps { network: String },
    #[error(
        "annotation {ANNOTATION} lists network {network} with no valid IP address (unparsable: {invalid:?})"
    )]
    InvalidIps {
        network: String,
        invalid: Vec<String>,
    },
}

#[derive(Debug, Deserialize)]
struct Entry {
    name: String,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    default: bool,
}

/// A pod's addresses on one network, plus IP strings that did not parse (reported, not used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub ips: Vec<IpAddr>,
    pub invalid: Vec<String>,
}

/// Normalises an attachment name to `<namespace>/<name>`: Multus reports networks as
/// `namespace/name`; a bare name refers to the pod's own namespace.
fn qualified(name: &str, pod_namespace: &str) -> String {
    if name.contains('/') {
        name.to_owned()
    } else {
        format!("{pod_namespace}/{name}")
    }
}

/// Returns the pod's IPs on `network` (`<namespace>/<name>`), `Ok(None)` when the pod is not
/// attached to it.
///
/// Several entries for the same network (several interfaces) are merged in order; duplicate
/// addresses are dropped. The cluster default network (`default: true`) never matches.
pub fn attachment(
    annotation: Option<&str>,
    pod_namespace: &str,
    network: &str,
) -> Result<Option<Attachment>, StatusError> {
    let raw = annotation.ok_or(StatusError::Missing)?;
    let entries: Vec<Entry> =
        serde_json::from_str(raw).map_err(|e| StatusError::InvalidJson(e.to_string()))?;
    let mut found = false;
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut invalid = Vec::new();
    for entry in entries
        .iter()
        .filter(|e| !e.default && qualified(&e.name, pod_namespace) == network)
    {
        found = true;
        for text in &entry.ips {
            match text.trim().parse::<IpAddr>() {
                Ok(ip) if !ips.contains(&ip) => ips.push(ip),
                Ok(_) => {}
                Err(_) => invalid.push(text.clone()),
            }
        }
    }
    if !found {
        return Ok(None);
    }
    if ips.is_empty() {
        return Err(if invalid.is_empty() {
            StatusError::NoIps {
                network: network.to_owned(),
            }
        } else {
            StatusError::InvalidIps {
                network: network.to_owned(),
                invalid,
            }
        });
    }
    Ok(Some(Attachment { ips, invalid }))
}

/// Stands for "any network" where an annotation cannot be read: every managed Service of the
/// pod's namespace must look at the pod (and report it).
pub const ANY_NETWORK: &str = "*";

/// Every network (`<namespace>/<name>`, default network excluded) the annotation lists;
/// [`ANY_NETWORK`] when it cannot be read.
pub fn networks(annotation: Option<&str>, pod_namespace: &str) -> Vec<String> {
    let Some(raw) = annotation else {
        return Vec::new();
    };
    let Ok(entries) = serde_json::from_str::<Vec<Entry>>(raw) else {
        return vec![ANY_NETWORK.to_owned()];
    };
    let mut names: Vec<String> = entries
        .iter()
        .filter(|e| !e.default)
        .map(|e| qualified(&e.name, pod_namespace))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: &str = r#"[
      {"name":"kindnet","interface":"eth0","ips":["10.244.1.5"],"mac":"aa:bb","default":true,"dns":{}},
      {"name":"default/macvlan","interface":"net1","ips":["192.168.2.4","fd00::4"],"mac":"cc:dd","dns":{},
       "device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:1f.0"}}}
    ]"#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn reads_ips_of_the_named_network_and_ignores_unknown_fields() {
        let got = attachment(Some(KIND), "default", "default/macvlan").unwrap();
        assert_eq!(
            got,
            Some(Attachment {
                ips: vec![ip("192.168.2.4"), ip("fd00::4")],
                invalid: vec![]
            })
        );
    }

    #[test]
    fn bare_names_mean_the_pods_namespace() {
        let raw = r#"[{"name":"macvlan","ips":["192.168.2.9"]}]"#;
        assert!(
            attachment(Some(raw), "team-a", "team-a/macvlan")
                .unwrap()
                .is_some()
        );
        assert!(
            attachment(Some(raw), "team-a", "default/macvlan")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn cross_namespace_networks_match_only_their_own_namespace() {
        let raw = r#"[{"name":"infra/macvlan","ips":["192.168.2.9"]}]"#;
        assert!(
            attachment(Some(raw), "team-a", "infra/macvlan")
                .unwrap()
                .is_some()
        );
        assert!(
            attachment(Some(raw), "team-a", "team-a/macvlan")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn default_network_never_matches() {
        let raw = r#"[{"name":"default/kindnet","ips":["10.0.0.1"],"default":true}]"#;
        assert_eq!(
            attachment(Some(raw), "default", "default/kindnet"),
            Ok(None)
        );
    }

    #[test]
    fn other_networks_mean_not_attached() {
        assert_eq!(attachment(Some(KIND), "default", "default/sriov"), Ok(None));
        assert_eq!(attachment(Some("[]"), "default", "default/sriov"), Ok(None));
    }

    #[test]
    fn several_interfaces_on_one_network_are_merged_without_duplicates() {
        let raw = r#"[{"name":"default/m","ips":["192.168.2.1"]},{"name":"default/m","ips":["192.168.2.2","192.168.2.1"]}]"#;
        let got = attachment(Some(raw), "default", "default/m")
            .unwrap()
            .unwrap();
        assert_eq!(got.ips, vec![ip("192.168.2.1"), ip("192.168.2.2")]);
    }

    #[test]
    fn bad_annotations_are_errors_that_say_why() {
        assert_eq!(
            attachment(None, "default", "default/m"),
            Err(StatusError::Missing)
        );
        let err = attachment(Some("{not json"), "default", "default/m").unwrap_err();
        assert!(matches!(err, StatusError::InvalidJson(_)));
        assert!(err.to_string().contains(ANNOTATION));
        let err = attachment(Some(r#"{"name":"default/m"}"#), "default", "default/m").unwrap_err();
        assert!(
            matches!(err, StatusError::InvalidJson(_)),
            "an object is not a list"
        );
        let err = attachment(Some(r#"[{"ips":["1.2.3.4"]}]"#), "default", "default/m").unwrap_err();
        assert!(
            matches!(err, StatusError::InvalidJson(_)),
            "name is required"
        );
    }

    #[test]
    fn a_network_without_ips_is_an_error() {
        let raw = r#"[{"name":"default/m","interface":"net1"}]"#;
        assert_eq!(
            attachment(Some(raw), "default", "default/m"),
            Err(StatusError::NoIps {
                network: "default/m".into()
            })
        );
        let raw = r#"[{"name":"default/m","ips":[]}]"#;
        assert!(matches!(
            attachment(Some(raw), "default", "default/m"),
            Err(StatusError::NoIps { .. })
        ));
    }

    #[test]
    fn unparsable_ips_are_reported_and_valid_ones_kept() {
        let raw = r#"[{"name":"default/m","ips":["192.168.2.300","192.168.2.7"]}]"#;
        let got = attachment(Some(raw), "default", "default/m")
            .unwrap()
            .unwrap();
        assert_eq!(got.ips, vec![ip("192.168.2.7")]);
        assert_eq!(got.invalid, vec!["192.168.2.300".to_string()]);
        let raw = r#"[{"name":"default/m","ips":["bogus","10.0.0.1/24"]}]"#;
        assert_eq!(
            attachment(Some(raw), "default", "default/m"),
            Err(StatusError::InvalidIps {
                network: "default/m".into(),
                invalid: vec!["bogus".into(), "10.0.0.1/24".into()]
            })
        );
    }

    #[test]
    fn networks_lists_attachments_except_the_default() {
        assert_eq!(networks(Some(KIND), "default"), vec!["default/macvlan"]);
        assert_eq!(networks(Some("nope"), "default"), vec![ANY_NETWORK]);
        assert!(networks(None, "default").is_empty());
    }
}
