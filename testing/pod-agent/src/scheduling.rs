//! Which local nodes a pending pod may be bound to, as the scheduler's `NodeAffinity` filter
//! decides: pure. A node fits when it has every label of `spec.nodeSelector` and, if the pod
//! has a required node affinity, matches one of its terms (the terms are ORed; in a term,
//! `matchExpressions` on labels and `matchFields` on `metadata.name` are ANDed). The
//! DaemonSet controller pins each of its pods so: `matchFields metadata.name In [<node>]`.
//! A pod that fits none of the agent's nodes stays pending (it may be for another node, the
//! node simulator's for instance). A pod created bound to a node it does not fit is rejected
//! there, as kubelet's admission does ([`NODE_AFFINITY_FAILED`]).

use std::collections::BTreeMap;

/// Kubelet's admission message for a pod on a node it does not fit (reason `NodeAffinity`).
pub const NODE_AFFINITY_FAILED: &str =
    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector";

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};

/// Whether `pod` may go to the node `name` with `labels`.
pub fn fits(pod: &Pod, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_holds = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_holds = required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, name, labels))
    });
    selector_holds && affinity_holds
}

/// Whether `pod` waits for its scheduling gates to be removed (not to be bound yet).
pub fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// A term with no requirement matches nothing, as in the scheduler.
fn term_matches(term: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let fields_hold = fields.iter().all(|r| {
        let node_name = BTreeMap::from([("metadata.name".to_owned(), name.to_owned())]);
        r.key == "metadata.name"
            && matches!(r.operator.as_str(), "In" | "NotIn")
            && requirement_holds(r, &node_name)
    });
    fields_hold && expressions.iter().all(|r| requirement_holds(r, labels))
}

fn requirement_holds(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn labels(node: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), node.to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("pod-agent.isim.dev/local".to_owned(), "true".to_owned()),
            ("rank".to_owned(), "5".to_owned()),
        ])
    }

    fn pinned(node: &str) -> serde_json::Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}})
    }

    #[test]
    fn a_daemonset_pod_goes_to_its_node_only() {
        let p = pod(json!({"affinity": pinned("nsc-node-1"),
                           "nodeSelector": {"pod-agent.isim.dev/local": "true"}}));
        assert!(fits(&p, "nsc-node-1", &labels("nsc-node-1")));
        assert!(!fits(&p, "nsc-node-0", &labels("nsc-node-0")));
        let elsewhere = pod(json!({"affinity": pinned("sim-node-3")}));
        assert!(!fits(&elsewhere, "nsc-node-0", &labels("nsc-node-0")));
    }

    #[test]
    fn the_node_selector_needs_every_label() {
        let p = pod(
            json!({"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": "nsc-node-0"}}),
        );
        assert!(fits(&p, "nsc-node-0", &labels("nsc-node-0")));
        assert!(!fits(&p, "nsc-node-1", &labels("nsc-node-1")));
        assert!(fits(&pod(json!({})), "nsc-node-1", &labels("nsc-node-1")));
        let missing = pod(json!({"nodeSelector": {"gpu": "yes"}}));
        assert!(!fits(&missing, "nsc-node-0", &labels("nsc-node-0")));
    }

    #[test]
    fn expressions_and_terms_combine_as_in_the_scheduler() {
        let affinity = |terms: serde_json::Value| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}),
            )
        };
        let l = labels("nsc-node-0");
        let either = affinity(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["4"]},
                                  {"key": "zone", "operator": "DoesNotExist"}]}]));
        assert!(fits(&either, "nsc-node-0", &l));
        let both = affinity(
            json!([{"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["5"]}],
                                     "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["nsc-node-0"]}]}]),
        );
        assert!(!fits(&both, "nsc-node-0", &l), "rank 5 is not below 5");
        let not_in = affinity(
            json!([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["nsc-node-0"]}]}]),
        );
        assert!(!fits(&not_in, "nsc-node-0", &l));
        assert!(fits(&not_in, "nsc-node-1", &labels("nsc-node-1")));
        assert!(
            !fits(&affinity(json!([{}])), "nsc-node-0", &l),
            "an empty term matches nothing"
        );
    }

    #[test]
    fn gated_pods_wait() {
        assert!(gated(&pod(
            json!({"schedulingGates": [{"name": "example.com/wait"}]})
        )));
        assert!(!gated(&pod(json!({}))));
    }
}
