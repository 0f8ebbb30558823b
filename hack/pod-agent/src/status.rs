//! A pod's status as kubelet reports it, from what the agent knows: pure.

use std::net::IpAddr;

use serde_json::{Value, json};

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

/// The `status` of a pod whose sandbox could not be set up (yet).
pub fn pending(host_ip: IpAddr, containers: &[ContainerState]) -> Value {
    json!({"status": {
        "phase": "Pending",
        "hostIP": host_ip.to_string(),
        "containerStatuses": container_statuses(containers),
    }})
}

/// The `status` of a running pod (a merge patch: lists are replaced whole).
pub fn running(
    host_ip: IpAddr,
    pod_ips: &[IpAddr],
    start_time: &str,
    containers: &[ContainerState],
) -> Value {
    let ready = !containers.is_empty() && containers.iter().all(|c| c.ready);
    let condition = |kind: &str, ok: bool| {
        json!({"type": kind, "status": if ok { "True" } else { "False" },
               "lastTransitionTime": start_time})
    };
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip.to_string(),
        "hostIPs": [{"ip": host_ip.to_string()}],
        "podIP": pod_ips.first().map(ToString::to_string),
        "podIPs": pod_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>(),
        "startTime": start_time,
        "conditions": [
            condition("PodReadyToStartContainers", true),
            condition("Initialized", true),
            condition("ContainersReady", ready),
            condition("Ready", ready),
            condition("PodScheduled", true),
        ],
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

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a str {
        status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()["status"]
            .as_str()
            .unwrap()
    }

    #[test]
    fn the_pod_is_ready_when_every_container_is() {
        let ip: IpAddr = "10.244.0.5".parse().unwrap();
        let host: IpAddr = "172.30.0.10".parse().unwrap();
        let status = running(host, &[ip], "t", &[container(true), container(false)]);
        assert_eq!(condition(&status, "Ready"), "False");
        assert_eq!(status["status"]["podIP"], "10.244.0.5");
        assert_eq!(status["status"]["hostIP"], "172.30.0.10");
        let status = running(host, &[ip], "t", &[container(true)]);
        assert_eq!(condition(&status, "Ready"), "True");
        assert_eq!(status["status"]["containerStatuses"][0]["started"], true);
    }

    #[test]
    fn a_pod_without_a_sandbox_is_pending_with_the_reason() {
        let mut c = container(false);
        c.state = Run::Waiting {
            reason: "CreatePodSandboxError".into(),
            message: "CNI ADD failed".into(),
        };
        let status = pending("172.30.0.10".parse().unwrap(), &[c]);
        assert_eq!(status["status"]["phase"], "Pending");
        let waiting = &status["status"]["containerStatuses"][0]["state"]["waiting"];
        assert_eq!(waiting["reason"], "CreatePodSandboxError");
        assert_eq!(status["status"]["containerStatuses"][0]["started"], false);
    }
}
