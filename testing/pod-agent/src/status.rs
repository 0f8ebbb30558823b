//! A pod's status as kubelet reports it, from what the agent knows: pure.
//!
//! The status is written as a strategic merge patch of `pods/status`, in which `conditions`
//! merge by `type`: the agent writes only the condition types kubelet owns ([`OWN_CONDITIONS`])
//! and leaves every other one (a readiness gate's, a network controller's) as its writer set it.
//! `Ready` follows kubelet's rules, readiness gates included ([`conditions`]), and each
//! condition keeps its `lastTransitionTime` while its status does not change.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The condition types the agent writes, as kubelet does (`PodScheduled` because the agent
/// also plays the scheduler). Any other type belongs to another writer.
pub const OWN_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// Kubelet's reasons.
const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// One container as the agent runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    pub name: String,
    pub image: String,
    pub ready: bool,
    pub restart_count: u32,
    /// Running since (RFC 3339), or why it waits.
    pub state: Run,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    Running { started_at: String },
    Waiting { reason: String, message: String },
}

/// One condition the agent owns, without its times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Condition {
    fn new(type_: &'static str, status: bool) -> Self {
        Self {
            type_,
            status,
            reason: None,
            message: None,
        }
    }

    fn status_str(&self) -> &'static str {
        if self.status { "True" } else { "False" }
    }
}

/// The agent's conditions for `pod` (the latest seen, whose `status.conditions` hold the
/// readiness gates' conditions), as kubelet generates them: `ContainersReady` when every
/// container is ready; `Ready` when it is and every readiness gate's condition is present
/// and `True`, otherwise `False` with kubelet's reason and message.
pub fn conditions(pod: &Pod, sandbox_ready: bool, containers: &[ContainerState]) -> Vec<Condition> {
    let unready: Vec<&str> = containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let containers_ready = if containers.is_empty() {
        Condition {
            reason: Some("UnknownContainerStatuses".into()),
            ..Condition::new("ContainersReady", false)
        }
    } else if unready.is_empty() {
        Condition::new("ContainersReady", true)
    } else {
        Condition {
            reason: Some(CONTAINERS_NOT_READY.into()),
            // Go's %s of a []string: [a b].
            message: Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
            ..Condition::new("ContainersReady", false)
        }
    };
    let ready = if containers_ready.status {
        let gates = gate_messages(pod);
        if gates.is_empty() {
            Condition::new("Ready", true)
        } else {
            Condition {
                reason: Some(READINESS_GATES_NOT_READY.into()),
                message: Some(gates.join(", ")),
                ..Condition::new("Ready", false)
            }
        }
    } else {
        Condition {
            type_: "Ready",
            ..containers_ready.clone()
        }
    };
    vec![
        Condition::new("PodScheduled", true),
        Condition::new("PodReadyToStartContainers", sandbox_ready),
        Condition::new("Initialized", true),
        containers_ready,
        ready,
    ]
}

/// Kubelet's message for each readiness gate that does not hold.
fn gate_messages(pod: &Pod) -> Vec<String> {
    let current = current_conditions(pod);
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .filter_map(|gate| {
            let kind = &gate.condition_type;
            match current.iter().find(|c| c.type_ == *kind) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {kind:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {kind:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect()
}

fn current_conditions(pod: &Pod) -> &[k8s_openapi::api::core::v1::PodCondition] {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// Whether `pod`'s status lacks any of `wanted` (status, reason or message differing): then
/// the agent writes them again (as when another writer turned a readiness gate).
pub fn outdated(pod: &Pod, wanted: &[Condition]) -> bool {
    let current = current_conditions(pod);
    wanted.iter().any(|w| {
        current.iter().find(|c| c.type_ == w.type_).is_none_or(|c| {
            c.status != w.status_str()
                || c.reason.as_deref().filter(|r| !r.is_empty()) != w.reason.as_deref()
                || c.message.as_deref().filter(|m| !m.is_empty()) != w.message.as_deref()
        })
    })
}

/// `wanted` as patch entries: each keeps the `lastTransitionTime` of `pod`'s condition of its
/// type while the status is the same, else gets `now`. `reason` and `message` are always
/// written (`null` removes an old one: the patch merges into the existing entry).
fn condition_entries(pod: &Pod, wanted: &[Condition], now: &str) -> Vec<Value> {
    let current = current_conditions(pod);
    let generation = pod.metadata.generation;
    wanted
        .iter()
        .map(|w| {
            debug_assert!(OWN_CONDITIONS.contains(&w.type_), "{} is not kubelet's", w.type_);
            let since = current
                .iter()
                .find(|c| c.type_ == w.type_ && c.status == w.status_str())
                .and_then(|c| c.last_transition_time.as_ref())
                .map_or_else(|| now.to_owned(), |t| t.0.to_string());
            json!({"type": w.type_, "status": w.status_str(), "reason": w.reason, "message": w.message,
                   "lastTransitionTime": since, "lastProbeTime": null, "observedGeneration": generation})
        })
        .collect()
}

fn container_statuses(containers: &[ContainerState]) -> Vec<Value> {
    containers
        .iter()
        .map(|c| {
            let state = match &c.state {
                Run::Running { started_at } => json!({"running": {"startedAt": started_at}}),
                Run::Waiting { reason, message } => {
                    json!({"waiting": {"reason": reason, "message": message}})
                }
            };
            json!({"name": c.name, "image": c.image, "imageID": "", "ready": c.ready,
                   "started": matches!(c.state, Run::Running { .. }),
                   "restartCount": c.restart_count, "state": state})
        })
        .collect()
}

/// A list of `{"ip": …}` that replaces the old one (`podIPs` and `hostIPs` merge by `ip` in a
/// strategic merge patch; a new sandbox's addresses must not join the old ones).
fn ip_list(ips: &[IpAddr]) -> Vec<Value> {
    ips.iter()
        .map(|ip| json!({"ip": ip.to_string()}))
        .chain([json!({"$patch": "replace"})])
        .collect()
}

/// The status patch (strategic merge) of `pod` whose sandbox could not be set up (yet).
pub fn pending(pod: &Pod, host_ip: IpAddr, containers: &[ContainerState], now: &str) -> Value {
    let wanted = conditions(pod, false, containers);
    json!({"status": {
        "phase": "Pending",
        "observedGeneration": pod.metadata.generation,
        "hostIP": host_ip.to_string(),
        "hostIPs": ip_list(&[host_ip]),
        "conditions": condition_entries(pod, &wanted, now),
        "containerStatuses": container_statuses(containers),
    }})
}

/// The status patch (strategic merge) of running `pod`, whose conditions were `wanted`
/// ([`conditions`]).
pub fn running(
    pod: &Pod,
    host_ip: IpAddr,
    pod_ips: &[IpAddr],
    start_time: &str,
    containers: &[ContainerState],
    now: &str,
) -> Value {
    let wanted = conditions(pod, true, containers);
    json!({"status": {
        "phase": "Running",
        "observedGeneration": pod.metadata.generation,
        "hostIP": host_ip.to_string(),
        "hostIPs": ip_list(&[host_ip]),
        "podIP": pod_ips.first().map(ToString::to_string),
        "podIPs": ip_list(pod_ips),
        "startTime": start_time,
        "conditions": condition_entries(pod, &wanted, now),
        "containerStatuses": container_statuses(containers),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(ready: bool) -> ContainerState {
        ContainerState {
            name: "nginx".into(),
            image: "nginx:1.27".into(),
            ready,
            restart_count: 0,
            state: Run::Running {
                started_at: "2026-12-01T00:00:00Z".into(),
            },
        }
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    fn ready(conditions: &[Condition]) -> &Condition {
        conditions.iter().find(|c| c.type_ == "Ready").unwrap()
    }

    #[test]
    fn the_pod_is_ready_when_every_container_is() {
        let ip: IpAddr = "10.244.0.5".parse().unwrap();
        let host: IpAddr = "172.30.0.10".parse().unwrap();
        let p = pod(json!({"metadata": {"name": "p", "generation": 3}}));
        let mut second = container(false);
        second.name = "sidecar".into();
        let status = running(&p, host, &[ip], "t", &[container(true), second], "now");
        let ready = condition(&status, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "ContainersNotReady");
        assert_eq!(
            ready["message"],
            "containers with unready status: [sidecar]"
        );
        assert_eq!(ready["observedGeneration"], 3);
        assert_eq!(status["status"]["podIP"], "10.244.0.5");
        assert_eq!(status["status"]["podIPs"][0]["ip"], "10.244.0.5");
        assert_eq!(status["status"]["podIPs"][1]["$patch"], "replace");
        assert_eq!(status["status"]["hostIP"], "172.30.0.10");
        let status = running(&p, host, &[ip], "t", &[container(true)], "now");
        let ready = condition(&status, "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], Value::Null, "an old reason is removed");
        assert_eq!(status["status"]["containerStatuses"][0]["started"], true);
    }

    #[test]
    fn only_the_agents_own_condition_types_are_written() {
        let p = pod(json!({"metadata": {"name": "p"}, "status": {"conditions": [
            {"type": "network-ready.isim.dev/default.macvlan-conf", "status": "True"}]}}));
        let status = running(
            &p,
            "172.30.0.10".parse().unwrap(),
            &[],
            "t",
            &[container(true)],
            "now",
        );
        let types: Vec<&str> = status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, OWN_CONDITIONS);
    }

    #[test]
    fn readiness_gates_hold_ready_with_kubelets_messages() {
        let gated = |conditions: Value| {
            pod(json!({"metadata": {"name": "p"},
                "spec": {"containers": [], "readinessGates": [{"conditionType": "example.com/a"}, {"conditionType": "example.com/b"}]},
                "status": {"conditions": conditions}}))
        };
        let none = conditions(&gated(json!([])), true, &[container(true)]);
        let r = ready(&none);
        assert!(!r.status);
        assert_eq!(r.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            r.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/a\" does not exist., \
                 corresponding condition of pod readiness gate \"example.com/b\" does not exist."
            )
        );
        let one_false = conditions(
            &gated(json!([{"type": "example.com/a", "status": "True"},
                          {"type": "example.com/b", "status": "False"}])),
            true,
            &[container(true)],
        );
        assert_eq!(
            ready(&one_false).message.as_deref(),
            Some("the status of pod readiness gate \"example.com/b\" is not \"True\", but False")
        );
        let both = conditions(
            &gated(json!([{"type": "example.com/a", "status": "True"},
                          {"type": "example.com/b", "status": "True"}])),
            true,
            &[container(true)],
        );
        assert_eq!(ready(&both), &Condition::new("Ready", true));
        // Containers not ready: their reason wins, as in kubelet.
        let unready = conditions(&gated(json!([])), true, &[container(false)]);
        assert_eq!(
            ready(&unready).reason.as_deref(),
            Some("ContainersNotReady")
        );
        assert!(conditions(&gated(json!([])), true, &[container(true)])[3].status);
    }

    #[test]
    fn a_gate_turning_makes_the_status_outdated() {
        let mut p = pod(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": [{"conditionType": "example.com/a"}]}}));
        let wanted = conditions(&p, true, &[container(true)]);
        let written = running(
            &p,
            "172.30.0.10".parse().unwrap(),
            &[],
            "t",
            &[container(true)],
            "2026-12-01T00:00:00Z",
        );
        p.status = Some(
            serde_json::from_value(json!({"conditions": written["status"]["conditions"]})).unwrap(),
        );
        assert!(!outdated(&p, &wanted), "just written");
        let mut with_gate = p.clone();
        with_gate
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(
                serde_json::from_value(json!({"type": "example.com/a", "status": "True"})).unwrap(),
            );
        let wanted = conditions(&with_gate, true, &[container(true)]);
        assert!(ready(&wanted).status);
        assert!(outdated(&with_gate, &wanted));
        // The transition time moves only with the status.
        let again = running(
            &with_gate,
            "172.30.0.10".parse().unwrap(),
            &[],
            "t",
            &[container(true)],
            "2026-12-02T00:00:00Z",
        );
        assert_eq!(
            condition(&again, "Ready")["lastTransitionTime"],
            "2026-12-02T00:00:00Z"
        );
        let kept = condition(&again, "PodScheduled")["lastTransitionTime"].clone();
        assert_ne!(kept, "2026-12-02T00:00:00Z", "{kept}");
    }

    #[test]
    fn a_pod_without_a_sandbox_is_pending_with_the_reason() {
        let mut c = container(false);
        c.state = Run::Waiting {
            reason: "CreatePodSandboxError".into(),
            message: "CNI ADD failed".into(),
        };
        let p = pod(json!({"metadata": {"name": "p"}}));
        let status = pending(&p, "172.30.0.10".parse().unwrap(), &[c], "now");
        assert_eq!(status["status"]["phase"], "Pending");
        let waiting = &status["status"]["containerStatuses"][0]["state"]["waiting"];
        assert_eq!(waiting["reason"], "CreatePodSandboxError");
        assert_eq!(status["status"]["containerStatuses"][0]["started"], false);
        assert_eq!(
            condition(&status, "PodReadyToStartContainers")["status"],
            "False"
        );
        assert_eq!(condition(&status, "Ready")["status"], "False");
    }
}
