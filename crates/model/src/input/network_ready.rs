//! The pod condition that says whether a pod answers on one of its secondary networks: its
//! type, derived from the network's NetworkAttachmentDefinition, and its status.
//!
//! The network prober (`nad-network-prober`) writes one such condition per network
//! on each pod it probes; the controller reads it back for the Service on that network. A
//! pod's owner may also list it in `spec.readinessGates`, so that the pod's own `Ready` waits
//! for it.
//!
//! # The type of the condition
//!
//! A condition type (and a `readinessGates` entry) is a qualified name: an optional DNS
//! subdomain prefix and `/`, then a name of at most 63 characters of `[-A-Za-z0-9_.]` that
//! begins and ends with a letter or digit. A network `<namespace>/<name>` (a DNS label and a
//! DNS subdomain of up to 253 characters) does not always fit, so:
//!
//! - `network-ready.isim.dev/<namespace>.<name>` when `<namespace>.<name>` has at most 63
//!   characters (`network-ready.isim.dev/default.macvlan-conf`). A namespace holds no dot, so
//!   the first dot tells the two apart;
//! - otherwise `network-ready.isim.dev/<the first 46 characters of <namespace>.<name>>_<16 hex
//!   digits of the SHA-256 of <namespace>/<name>>`. Names never hold `_`, so a long form never
//!   equals a short one.
//!
//! `nad-service-controller explain` prints the type of a Service's network.

use sha2::{Digest, Sha256};

/// The prefix of every network-readiness condition type.
pub const PREFIX: &str = "network-ready.isim.dev/";
/// The longest name part of a qualified name.
const MAX_NAME: usize = 63;
/// How many hex digits of the hash a long form keeps.
const HASH_DIGITS: usize = 16;

/// The condition type for `network` (`<namespace>/<name>` of a NetworkAttachmentDefinition).
pub fn condition_type(network: &str) -> String {
    let (namespace, name) = network.split_once('/').unwrap_or(("", network));
    let dotted = format!("{namespace}.{name}");
    if dotted.len() <= MAX_NAME {
        return format!("{PREFIX}{dotted}");
    }
    let digest = Sha256::digest(network.as_bytes());
    let hex: String = digest
        .iter()
        .take(HASH_DIGITS / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    // Names are ASCII: any byte index is a character boundary.
    let keep = MAX_NAME - 1 - HASH_DIGITS;
    format!("{PREFIX}{}_{hex}", &dotted[..keep])
}

/// Whether `condition_type` is a network-readiness condition.
pub fn is_network_ready(condition_type: &str) -> bool {
    condition_type.starts_with(PREFIX)
}

/// A condition's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    /// `True`, `False`, and anything else as `Unknown` (as Kubernetes reads it).
    pub fn parse(status: &str) -> Self {
        match status {
            "True" => Status::True,
            "False" => Status::False,
            _ => Status::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' `IsQualifiedName` (apimachinery validation), as the API server checks a
    /// custom pod condition type and a readiness gate.
    fn is_qualified_name(value: &str) -> bool {
        let (prefix, name) = match value.rsplit_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, value),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        let prefix_ok = prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
        });
        name_ok && prefix_ok
    }

    #[test]
    fn short_networks_are_named_in_full() {
        assert_eq!(
            condition_type("default/macvlan-conf"),
            "network-ready.isim.dev/default.macvlan-conf"
        );
        assert!(is_network_ready(&condition_type("default/macvlan-conf")));
        assert!(!is_network_ready("Ready"));
    }

    #[test]
    fn every_valid_network_gives_a_valid_and_distinct_type() {
        let label63 = "n".repeat(63);
        let long_name = format!("{}.{}", "a".repeat(63), "b".repeat(189)); // 253 characters
        let cases = [
            "default/macvlan-conf".to_owned(),
            "a/b".to_owned(),
            "team-a/net.with.dots".to_owned(),
            format!("{label63}/x"),
            format!("ns/{long_name}"),
            format!("{label63}/{long_name}"),
            // 63 characters exactly, and one more.
            format!("ns/{}", "c".repeat(60)),
            format!("ns/{}", "c".repeat(61)),
            // Long networks that share their first 46 characters.
            format!("ns/{}-1", "d".repeat(70)),
            format!("ns/{}-2", "d".repeat(70)),
        ];
        let types: Vec<String> = cases.iter().map(|n| condition_type(n)).collect();
        for (network, t) in cases.iter().zip(&types) {
            assert!(is_qualified_name(t), "{network} -> {t}");
        }
        let distinct: std::collections::BTreeSet<&String> = types.iter().collect();
        assert_eq!(distinct.len(), types.len(), "{types:#?}");
        assert_eq!(
            types[6],
            format!("network-ready.isim.dev/ns.{}", "c".repeat(60))
        );
        assert!(types[7].contains('_') && types[7].len() == PREFIX.len() + 63);
    }

    #[test]
    fn statuses_read_as_kubernetes_reads_them() {
        assert_eq!(Status::parse("True"), Status::True);
        assert_eq!(Status::parse("False"), Status::False);
        assert_eq!(Status::parse("maybe"), Status::Unknown);
        assert_eq!(Status::False.as_str(), "False");
    }
}
