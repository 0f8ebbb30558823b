//! Parsing of the Multus `k8s.v1.cni.cncf.io/network-status` pod annotation.
//!
//! Multus writes a JSON list with one entry per attachment. Only the entries for the network
//! asked about are read, and of them only `name`, `ips` and `default`; every other field
//! (`interface`, `mac`, `dns`, `device-info`, future additions) is ignored, never rejected. An
//! entry for another network is ignored whatever it holds: one bad attachment never hides a
//! pod's good one.

use std::net::IpAddr;

use serde_json::Value;

use crate::input::address::{self, Rejected, Unparsable};

/// The annotation Multus writes on every pod it attaches.
pub const ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// Why a pod's attachment to a network could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    #[error("annotation {ANNOTATION} is missing")]
    Missing,
    /// Not a JSON list: no entry of it can be trusted, for any network.
    #[error(
        "annotation {ANNOTATION} is not a JSON list of attachments ({0}); Multus writes it, so check the Multus daemon on the pod's node"
    )]
    Unreadable(String),
    /// The entry for the network itself is malformed.
    #[error(
        "annotation {ANNOTATION}: the entry for network {network} has an invalid {field:?} ({problem})"
    )]
    Malformed {
        network: String,
        field: &'static str,
        problem: String,
    },
    #[error("annotation {ANNOTATION} lists network {network} without any IP address")]
    NoIps { network: String },
    #[error("annotation {ANNOTATION} lists network {network} with no usable IP address: {}", list(.unusable))]
    NoUsableIps {
        network: String,
        unusable: Vec<Unusable>,
    },
    /// A DRA network's devices (`network` is its key) whose driver reported no address.
    #[error(
        "no device of network {network} has networkData.ips in its claim's status ({}); the DRA driver writes them once it has configured the device, so check the driver on the pod's node",
        .devices.join("; ")
    )]
    NoDeviceIps {
        network: String,
        devices: Vec<String>,
    },
    /// A DRA network's devices whose reported addresses all are unusable.
    #[error("the devices of network {network} report no usable IP address in networkData.ips: {}", list(.unusable))]
    NoUsableDeviceIps {
        network: String,
        unusable: Vec<Unusable>,
    },
}

/// Why one entry of an attachment's `ips` is left out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnusableReason {
    Unparsable(Unparsable),
    /// An address, but one the EndpointSlice API rejects.
    Rejected(Rejected),
}

/// An entry of `ips` that is left out, as it was written, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unusable {
    pub value: String,
    pub reason: UnusableReason,
}

impl Unusable {
    /// A stable name of the rule, for logs.
    pub fn rule(&self) -> &'static str {
        match &self.reason {
            UnusableReason::Rejected(r) => r.rule(),
            UnusableReason::Unparsable(Unparsable::NotAString) => "not-a-string",
            UnusableReason::Unparsable(Unparsable::Cidr) => "cidr",
            UnusableReason::Unparsable(Unparsable::Zone) => "zone",
            UnusableReason::Unparsable(Unparsable::NotAnAddress) => "not-an-address",
        }
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            UnusableReason::Unparsable(why) => write!(f, "{:?} {why}", self.value),
            UnusableReason::Rejected(why) => write!(f, "{} {why}", self.value),
        }
    }
}

fn list(unusable: &[Unusable]) -> String {
    unusable
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A pod's usable addresses on one network, plus the entries left out (reported, not used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub ips: Box<[IpAddr]>,
    pub unusable: Box<[Unusable]>,
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

fn entries(annotation: Option<&str>) -> Result<Vec<Value>, StatusError> {
    let raw = annotation.ok_or(StatusError::Missing)?;
    serde_json::from_str(raw).map_err(|e| StatusError::Unreadable(e.to_string()))
}

/// The entry's network, when it names one (an entry without a string `name` is nobody's).
fn entry_network(entry: &Value, pod_namespace: &str) -> Option<String> {
    Some(qualified(entry.get("name")?.as_str()?, pod_namespace))
}

/// JSON text of a value for a message, cut to a readable length.
fn shown(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 64 {
        let mut cut = 61;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// Returns the pod's usable IPs on `network` (`<namespace>/<name>`), `Ok(None)` when the pod
/// is not attached to it.
///
/// Several entries for the same network (several interfaces) are merged in order; duplicate
/// addresses are dropped. The cluster default network (`default: true`) never matches.
pub fn attachment(
    annotation: Option<&str>,
    pod_namespace: &str,
    network: &str,
) -> Result<Option<Attachment>, StatusError> {
    attachment_in(&entries(annotation)?, pod_namespace, network)
}

/// A pod's attachment to each network (`<namespace>/<name>`) it is on, or why the annotation
/// cannot be read at all (then the pod is on no network).
pub type Attachments = Result<Vec<(String, Result<Attachment, StatusError>)>, StatusError>;

/// A pod's attachment to each network the annotation lists (see [`attachment`]), parsing the
/// JSON once. A missing annotation lists no network.
pub fn attachments(annotation: Option<&str>, pod_namespace: &str) -> Attachments {
    let entries = match entries(annotation) {
        Ok(entries) => entries,
        Err(StatusError::Missing) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names: Vec<String> = entries
        .iter()
        .filter(|e| e.get("default").and_then(Value::as_bool) != Some(true))
        .filter_map(|e| entry_network(e, pod_namespace))
        .collect();
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        .filter_map(
            |network| match attachment_in(&entries, pod_namespace, &network) {
                Ok(Some(attachment)) => Some((network, Ok(attachment))),
                Ok(None) => None,
                Err(e) => Some((network, Err(e))),
            },
        )
        .collect())
}

fn attachment_in(
    entries: &[Value],
    pod_namespace: &str,
    network: &str,
) -> Result<Option<Attachment>, StatusError> {
    let malformed = |field, problem: String| StatusError::Malformed {
        network: network.to_owned(),
        field,
        problem,
    };
    let mut found = false;
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut unusable = Vec::new();
    for entry in entries {
        if entry_network(entry, pod_namespace).as_deref() != Some(network) {
            continue;
        }
        let is_default = match entry.get("default") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(malformed(
                    "default",
                    format!("{} is not true or false", shown(other)),
                ));
            }
        };
        if is_default {
            continue;
        }
        found = true;
        let listed = match entry.get("ips") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(other) => {
                return Err(malformed(
                    "ips",
                    format!("{} is not a list of addresses", shown(other)),
                ));
            }
        };
        for item in listed {
            let (value, parsed) = match item.as_str() {
                Some(text) => (text.to_owned(), address::parse(text)),
                None => (shown(item), Err(Unparsable::NotAString)),
            };
            let reason = match parsed {
                Ok(ip) => match address::check(ip) {
                    Ok(ip) => {
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                        continue;
                    }
                    Err(rejected) => UnusableReason::Rejected(rejected),
                },
                Err(unparsable) => UnusableReason::Unparsable(unparsable),
            };
            unusable.push(Unusable { value, reason });
        }
    }
    if !found {
        return Ok(None);
    }
    if ips.is_empty() {
        return Err(if unusable.is_empty() {
            StatusError::NoIps {
                network: network.to_owned(),
            }
        } else {
            StatusError::NoUsableIps {
                network: network.to_owned(),
                unusable,
            }
        });
    }
    Ok(Some(Attachment {
        ips: ips.into(),
        unusable: unusable.into(),
    }))
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

    fn on_m(ips: &str) -> String {
        format!(r#"[{{"name":"default/m","ips":{ips}}}]"#)
    }

    #[test]
    fn reads_ips_of_the_named_network_and_ignores_unknown_fields() {
        let got = attachment(Some(KIND), "default", "default/macvlan").unwrap();
        assert_eq!(
            got,
            Some(Attachment {
                ips: [ip("192.168.2.4"), ip("fd00::4")].into(),
                unusable: Box::default()
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
        assert_eq!(*got.ips, [ip("192.168.2.1"), ip("192.168.2.2")]);
    }

    #[test]
    fn unreadable_annotations_are_errors_that_say_why() {
        assert_eq!(
            attachment(None, "default", "default/m"),
            Err(StatusError::Missing)
        );
        for raw in ["{not json", r#"{"name":"default/m"}"#, "null", "\"[]\""] {
            let err = attachment(Some(raw), "default", "default/m").unwrap_err();
            assert!(matches!(err, StatusError::Unreadable(_)), "{raw}: {err}");
            assert!(err.to_string().contains(ANNOTATION));
        }
    }

    /// Whatever an entry for another network holds, the pod's entry for this one is used.
    #[test]
    fn malformed_entries_for_other_networks_are_ignored() {
        let others = [
            r#"{"ips":["1.2.3.4"]}"#,
            r#"{"name":null,"ips":["1.2.3.4"]}"#,
            r#"{"name":7}"#,
            r#"{"name":"default/other","ips":null}"#,
            r#"{"name":"default/other","ips":"10.0.0.1"}"#,
            r#"{"name":"default/other","ips":[1,2]}"#,
            r#"{"name":"default/other","default":"true"}"#,
            r#"{"name":"default/other","ips":["127.0.0.1","fe80::1","nope"]}"#,
            r#""a string""#,
            "42",
            "null",
            "[]",
        ];
        for other in others {
            let raw = format!(r#"[{other},{{"name":"default/m","ips":["192.168.2.7"]}}]"#);
            assert_eq!(
                attachment(Some(&raw), "default", "default/m"),
                Ok(Some(Attachment {
                    ips: [ip("192.168.2.7")].into(),
                    unusable: Box::default()
                })),
                "{raw}"
            );
        }
    }

    #[test]
    fn a_malformed_entry_for_the_network_names_the_field() {
        let raw = r#"[{"name":"default/m","ips":"192.168.2.7"}]"#;
        let err = attachment(Some(raw), "default", "default/m").unwrap_err();
        assert!(
            matches!(err, StatusError::Malformed { field: "ips", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("\"ips\""), "{err}");
        let raw = r#"[{"name":"default/m","ips":["192.168.2.7"],"default":"true"}]"#;
        let err = attachment(Some(raw), "default", "default/m").unwrap_err();
        assert!(
            matches!(
                err,
                StatusError::Malformed {
                    field: "default",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_network_without_ips_is_an_error() {
        for raw in [
            r#"[{"name":"default/m","interface":"net1"}]"#,
            r#"[{"name":"default/m","ips":null}]"#,
            r#"[{"name":"default/m","ips":[]}]"#,
        ] {
            assert_eq!(
                attachment(Some(raw), "default", "default/m"),
                Err(StatusError::NoIps {
                    network: "default/m".into()
                }),
                "{raw}"
            );
        }
    }

    #[test]
    fn unusable_ips_are_reported_and_usable_ones_kept() {
        let raw = on_m(r#"["192.168.2.300","127.0.0.1","192.168.2.7",5,"fe80::1%eth0"]"#);
        let got = attachment(Some(&raw), "default", "default/m")
            .unwrap()
            .unwrap();
        assert_eq!(*got.ips, [ip("192.168.2.7")]);
        let rules: Vec<_> = got.unusable.iter().map(Unusable::rule).collect();
        assert_eq!(
            rules,
            vec!["not-an-address", "loopback", "not-a-string", "zone"]
        );
        assert_eq!(got.unusable[2].value, "5");
        assert!(got.unusable[1].to_string().contains("127.0.0.1"));

        let raw = on_m(r#"["bogus","10.0.0.1/24","169.254.1.29"]"#);
        let err = attachment(Some(&raw), "default", "default/m").unwrap_err();
        let StatusError::NoUsableIps { unusable, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(unusable.len(), 3);
        let text = err.to_string();
        assert!(
            text.contains("bogus") && text.contains("prefix length") && text.contains("link-local"),
            "{text}"
        );
    }

    #[test]
    fn addresses_come_out_canonical() {
        let raw = on_m(r#"["FD00:0:0:0:0:0:0:4"]"#);
        let got = attachment(Some(&raw), "default", "default/m")
            .unwrap()
            .unwrap();
        assert_eq!(got.ips[0].to_string(), "fd00::4");
    }

    #[test]
    fn networks_lists_attachments_except_the_default() {
        let networks = |raw: Option<&str>, ns: &str| {
            attachments(raw, ns).map(|all| all.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
        };
        assert_eq!(
            networks(Some(KIND), "default").unwrap(),
            vec!["default/macvlan"]
        );
        assert!(matches!(
            networks(Some("nope"), "default"),
            Err(StatusError::Unreadable(_))
        ));
        assert!(networks(None, "default").unwrap().is_empty());
        let raw = r#"[{"ips":[]},{"name":"b","ips":null},{"name":"a","default":"yes"}]"#;
        assert_eq!(
            networks(Some(raw), "ns").unwrap(),
            vec!["ns/a", "ns/b"],
            "malformed entries count for the network they name"
        );
    }
}
