//! Readiness probes, run for real as kubelet runs them: from the node (the node's network
//! namespace) against the pod's IP, with the probe's period, timeout and thresholds.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpStream;

/// One container's readiness probe, resolved against the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub check: Check,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Http {
        port: u16,
        path: String,
    },
    Tcp {
        port: u16,
    },
    /// A command run in the pod's network namespace; exit 0 is success.
    Exec {
        command: Vec<String>,
    },
}

impl Readiness {
    /// The container's readiness probe; `Ok(None)` without one (ready once running), `Err`
    /// when it cannot be run (a named port the container does not declare, a gRPC probe).
    pub fn of(container: &Container) -> Result<Option<Self>, String> {
        let Some(probe) = container.readiness_probe.as_ref() else {
            return Ok(None);
        };
        let seconds = |v: Option<i32>, default: u64| {
            Duration::from_secs(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
        };
        let check = check(container, probe)?;
        Ok(Some(Self {
            check,
            initial_delay: seconds(probe.initial_delay_seconds, 0),
            period: seconds(probe.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: seconds(probe.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: threshold(probe.success_threshold, 1),
            failure_threshold: threshold(probe.failure_threshold, 3),
        }))
    }
}

fn threshold(value: Option<i32>, default: u32) -> u32 {
    value
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(default)
        .max(1)
}

fn check(container: &Container, probe: &Probe) -> Result<Check, String> {
    if let Some(http) = &probe.http_get {
        return Ok(Check::Http {
            port: port(container, &http.port)?,
            path: http.path.clone().unwrap_or_else(|| "/".into()),
        });
    }
    if let Some(tcp) = &probe.tcp_socket {
        return Ok(Check::Tcp {
            port: port(container, &tcp.port)?,
        });
    }
    if let Some(exec) = &probe.exec {
        return Ok(Check::Exec {
            command: exec.command.clone().unwrap_or_default(),
        });
    }
    Err("the readiness probe is neither httpGet, tcpSocket nor exec".into())
}

fn port(container: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("port {n} is out of range")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("the probe's port {name:?} is not a port of the container")),
    }
}

/// One HTTP probe: any status from 200 to 399 is success. Run inside the node's namespace.
pub async fn http(ip: IpAddr, port: u16, path: String, timeout: Duration) -> bool {
    let attempt = async {
        let stream = TcpStream::connect(SocketAddr::new(ip, port)).await.ok()?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .ok()?;
        tokio::spawn(connection);
        let request = hyper::Request::get(path)
            .header(hyper::header::HOST, format!("{ip}:{port}"))
            .header(hyper::header::USER_AGENT, "kube-probe/1.37")
            .body(Empty::<Bytes>::new())
            .ok()?;
        let response = sender.send_request(request).await.ok()?;
        Some((200..400).contains(&response.status().as_u16()))
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
}

/// One TCP probe: the connection opens. Run inside the node's namespace.
pub async fn tcp(ip: IpAddr, port: u16, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, TcpStream::connect(SocketAddr::new(ip, port))).await,
        Ok(Ok(_))
    )
}

/// Counts results against the thresholds: the readiness a probe reports.
#[derive(Debug, Default)]
pub struct Tally {
    successes: u32,
    failures: u32,
    pub ready: bool,
}

impl Tally {
    /// Records one result; returns whether readiness changed.
    pub fn record(&mut self, ok: bool, readiness: &Readiness) -> bool {
        let before = self.ready;
        if ok {
            self.failures = 0;
            self.successes += 1;
            if self.successes >= readiness.success_threshold {
                self.ready = true;
            }
        } else {
            self.successes = 0;
            self.failures += 1;
            if self.failures >= readiness.failure_threshold {
                self.ready = false;
            }
        }
        before != self.ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(probe: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "image": "nginx",
            "ports": [{"name": "http", "containerPort": 80}], "readinessProbe": probe}))
        .unwrap()
    }

    #[test]
    fn a_named_port_resolves_against_the_container() {
        let r = Readiness::of(&container(
            json!({"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            r.check,
            Check::Http {
                port: 80,
                path: "/".into()
            }
        );
        assert_eq!(r.period, Duration::from_secs(5));
        assert_eq!((r.success_threshold, r.failure_threshold), (1, 3));
        let bad = Readiness::of(&container(json!({"tcpSocket": {"port": "https"}})));
        assert!(bad.unwrap_err().contains("\"https\""));
    }

    #[test]
    fn readiness_follows_the_thresholds() {
        let r = Readiness::of(&container(
            json!({"tcpSocket": {"port": 80}, "failureThreshold": 2}),
        ))
        .unwrap()
        .unwrap();
        let mut tally = Tally::default();
        assert!(tally.record(true, &r), "ready after one success");
        assert!(!tally.record(false, &r), "one failure is not enough");
        assert!(tally.record(false, &r), "the second makes it unready");
        assert!(tally.record(true, &r));
    }
}
