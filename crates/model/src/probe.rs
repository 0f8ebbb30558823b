//! What a probe is, as a Service asks for it: the `isim.dev/probe` annotation, read as a
//! kubelet readiness probe is written, with the same names, defaults close to kubelet's and
//! bounds.
//!
//! ```yaml
//! isim.dev/probe: '{"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 2}'
//! isim.dev/probe: '{"tcpSocket": {"port": "metrics"}, "failureThreshold": 5}'
//! ```
//!
//! Without a handler (`httpGet` or `tcpSocket`), or without the annotation, the probe is a
//! TCP connect to each of the Service's target ports. Any bad value makes the whole
//! annotation void: the default probe is used, and the problems name each field.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

/// The annotation a Service asks for another probe with.
pub const ANNOTATION: &str = "isim.dev/probe";

/// `periodSeconds`: how often a pod is probed.
pub const PERIOD: Bound = Bound {
    field: "periodSeconds",
    default: 2,
    min: 1,
    max: 300,
};
/// `timeoutSeconds`: how long one attempt may take; at most the period.
pub const TIMEOUT: Bound = Bound {
    field: "timeoutSeconds",
    default: 1,
    min: 1,
    max: 60,
};
/// `successThreshold`: answers in a row that make a not-ready pod ready.
pub const SUCCESS: Bound = Bound {
    field: "successThreshold",
    default: 1,
    min: 1,
    max: 10,
};
/// `failureThreshold`: failures in a row that make a ready pod not ready.
pub const FAILURE: Bound = Bound {
    field: "failureThreshold",
    default: 3,
    min: 1,
    max: 10,
};

/// A numeric field's default and bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub field: &'static str,
    pub default: u32,
    pub min: u32,
    pub max: u32,
}

/// A port: a number, or a container port's name resolved per pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Port {
    Number(u16),
    Name(String),
}

/// What one attempt checks on each address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Check {
    /// A TCP connect to each of the Service's target ports.
    #[default]
    ServicePorts,
    /// A TCP connect to this port.
    Tcp(Port),
    /// `GET path` on this port over HTTP, with `headers` (name, value) beside the prober's
    /// own; success is `status` when given, else 200 to 399 (as kubelet).
    Http {
        port: Port,
        path: String,
        headers: Vec<(String, String)>,
        status: Option<u16>,
    },
}

/// The longest `httpGet.path`, header name and header value, and the most headers: what
/// goes into a request line and its headers is written by a Service's owner and sent by every
/// prober to every pod, so it is kept small and free of anything that would end a line.
pub const MAX_PATH_BYTES: usize = 2048;
pub const MAX_HEADER_NAME_BYTES: usize = 128;
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
pub const MAX_HEADERS: usize = 16;

/// When a probe runs and when a pod counts as answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timing {
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            period: Duration::from_secs(u64::from(PERIOD.default)),
            timeout: Duration::from_secs(u64::from(TIMEOUT.default)),
            success_threshold: SUCCESS.default,
            failure_threshold: FAILURE.default,
        }
    }
}

/// A probe: what to check, and its timing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ProbeSpec {
    pub check: Check,
    pub timing: Timing,
}

/// The annotation as written: kubelet's field names.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Written {
    http_get: Option<HttpGet>,
    tcp_socket: Option<TcpSocket>,
    period_seconds: Option<i64>,
    timeout_seconds: Option<i64>,
    success_threshold: Option<i64>,
    failure_threshold: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HttpGet {
    port: IntOrString,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    http_headers: Vec<HttpHeader>,
    #[serde(default)]
    expected_status: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpHeader {
    name: String,
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TcpSocket {
    port: IntOrString,
}

/// The probe a Service's annotation asks for, and what is wrong with it. With problems, the
/// probe is the default one.
pub fn parse(annotation: Option<&str>) -> (ProbeSpec, Vec<String>) {
    let Some(text) = annotation else {
        return (ProbeSpec::default(), Vec::new());
    };
    let written = match read_written(text) {
        Ok(written) => written,
        Err(problem) => return (ProbeSpec::default(), vec![problem]),
    };
    let mut problems = Vec::new();
    let timing = read_timing(&written, &mut problems);
    let check = read_check(&written, &mut problems);
    if !problems.is_empty() {
        return (ProbeSpec::default(), problems);
    }
    let spec = ProbeSpec {
        check: check.unwrap_or(Check::ServicePorts),
        timing,
    };
    (spec, problems)
}

/// The annotation's JSON as kubelet's fields, or the one problem that says where it is not
/// and how to write it.
fn read_written(text: &str) -> Result<Written, String> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text)).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        format!(
            "{ANNOTATION}: {at}{}; write kubelet's probe fields as JSON, e.g. \
             {{\"httpGet\": {{\"path\": \"/healthz\", \"port\": 8080}}}}",
            e.inner()
        )
    })
}

/// The timing the annotation asks for. A number out of its bounds counts as its default and
/// is a problem, as is a timeout longer than the period.
fn read_timing(written: &Written, problems: &mut Vec<String>) -> Timing {
    let period = bounded(PERIOD, written.period_seconds, problems);
    let timeout = bounded(TIMEOUT, written.timeout_seconds, problems);
    let success_threshold = bounded(SUCCESS, written.success_threshold, problems);
    let failure_threshold = bounded(FAILURE, written.failure_threshold, problems);
    if timeout > period {
        problems.push(format!(
            "{ANNOTATION}: timeoutSeconds ({timeout}) is longer than periodSeconds ({period})"
        ));
    }
    Timing {
        period: Duration::from_secs(u64::from(period)),
        timeout: Duration::from_secs(u64::from(timeout)),
        success_threshold,
        failure_threshold,
    }
}

/// A numeric field's value: as written when within `bound`, else its default (and, when
/// written out of bounds, a problem naming the field).
fn bounded(bound: Bound, value: Option<i64>, problems: &mut Vec<String>) -> u32 {
    match value {
        None => bound.default,
        Some(v) if v >= i64::from(bound.min) && v <= i64::from(bound.max) => {
            u32::try_from(v).unwrap_or(bound.default)
        }
        Some(v) => {
            problems.push(format!(
                "{ANNOTATION}: {} is {v}, out of its range {} to {}",
                bound.field, bound.min, bound.max
            ));
            bound.default
        }
    }
}

/// What the handlers ask to check: the Service's ports without one, `None` (and a problem)
/// when both are given or the one given is bad.
fn read_check(written: &Written, problems: &mut Vec<String>) -> Option<Check> {
    match (&written.http_get, &written.tcp_socket) {
        (Some(_), Some(_)) => {
            problems.push(format!(
                "{ANNOTATION}: httpGet and tcpSocket are both set; give one"
            ));
            None
        }
        (Some(http), None) => read_http_get(http, problems),
        (None, Some(tcp)) => read_port("tcpSocket", &tcp.port, problems).map(Check::Tcp),
        (None, None) => Some(Check::ServicePorts),
    }
}

/// The `httpGet` check, its path `/` unless given; `None` when its port is bad. A bad port,
/// path or expected status is a problem.
fn read_http_get(http: &HttpGet, problems: &mut Vec<String>) -> Option<Check> {
    let port = read_port("httpGet", &http.port, problems);
    let path = http.path.clone().unwrap_or_else(|| "/".to_owned());
    if !path.starts_with('/') {
        problems.push(format!(
            "{ANNOTATION}: httpGet.path is {:?}; it must start with '/'",
            excerpt(&path)
        ));
    } else if path.len() > MAX_PATH_BYTES {
        problems.push(format!(
            "{ANNOTATION}: httpGet.path is {} bytes long, more than {MAX_PATH_BYTES}",
            path.len()
        ));
    } else if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
        problems.push(format!(
            "{ANNOTATION}: httpGet.path {:?} has {c:?}, which cannot go in a request line: \
             percent-encode it (a space is %20)",
            excerpt(&path)
        ));
    }
    let headers = read_headers(&http.http_headers, problems);
    let status = match http.expected_status {
        None => None,
        Some(s) if (100..=599).contains(&s) => u16::try_from(s).ok(),
        Some(s) => {
            problems.push(format!(
                "{ANNOTATION}: httpGet.expectedStatus is {s}, not an HTTP status (100 to 599)"
            ));
            None
        }
    };
    port.map(|port| Check::Http {
        port,
        path,
        headers,
        status,
    })
}

/// The `httpGet.httpHeaders` as (name, value); a name that is not an HTTP token, a value with
/// a control character (a CR or LF would start another header), or one too long is a problem
/// naming the entry.
fn read_headers(written: &[HttpHeader], problems: &mut Vec<String>) -> Vec<(String, String)> {
    if written.len() > MAX_HEADERS {
        problems.push(format!(
            "{ANNOTATION}: httpGet.httpHeaders has {} entries, more than {MAX_HEADERS}",
            written.len()
        ));
        return Vec::new();
    }
    let mut headers = Vec::new();
    for (i, header) in written.iter().enumerate() {
        let field = format!("{ANNOTATION}: httpGet.httpHeaders[{i}]");
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if header.name.is_empty()
            || header.name.len() > MAX_HEADER_NAME_BYTES
            || !header.name.chars().all(token)
        {
            problems.push(format!(
                "{field}.name is {:?}: give a header name (letters, digits and !#$%&'*+-.^_`|~, up \
                 to {MAX_HEADER_NAME_BYTES} bytes)",
                excerpt(&header.name)
            ));
        } else if header.value.len() > MAX_HEADER_VALUE_BYTES {
            problems.push(format!(
                "{field}.value is {} bytes long, more than {MAX_HEADER_VALUE_BYTES}",
                header.value.len()
            ));
        } else if let Some(c) = header.value.chars().find(|c| c.is_control() && *c != '\t') {
            problems.push(format!(
                "{field}.value {:?} has {c:?}: a header value cannot hold a control character \
                 (a CR or LF would end the header)",
                excerpt(&header.value)
            ));
        } else {
            headers.push((header.name.clone(), header.value.clone()));
        }
    }
    headers
}

/// At most the first 64 characters of `text`, for a message.
fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(64).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// A handler's port: a number from 1 to 65535 or a container port name; `None` (and a
/// problem naming `field`) when it is neither.
fn read_port(field: &str, port: &IntOrString, problems: &mut Vec<String>) -> Option<Port> {
    match port {
        IntOrString::Int(n) => match u16::try_from(*n) {
            Ok(n) if n > 0 => Some(Port::Number(n)),
            _ => {
                problems.push(format!(
                    "{ANNOTATION}: {field}.port is {n}, not a port (1 to 65535)"
                ));
                None
            }
        },
        IntOrString::String(name) if is_port_name(name) => Some(Port::Name(name.clone())),
        IntOrString::String(name) => {
            problems.push(format!(
                "{ANNOTATION}: {field}.port is {name:?}, neither a number nor a container port \
                 name (up to 15 lowercase letters, digits and '-')"
            ));
            None
        }
    }
}

/// A container port name (an IANA service name): 1 to 15 of `[a-z0-9-]`, a letter among
/// them, no leading, trailing or double `-`.
fn is_port_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.chars().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_annotation_is_a_tcp_connect_to_the_service_ports_with_the_defaults() {
        let (spec, problems) = parse(None);
        assert!(problems.is_empty());
        assert_eq!(spec.check, Check::ServicePorts);
        let t = spec.timing;
        assert_eq!(t.period, Duration::from_secs(2));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!((t.success_threshold, t.failure_threshold), (1, 3));
        // With the defaults, a dead link fails 3 probes 2 s apart, each given at most 1 s:
        // out of the slices within 10 s of going dead.
        let window = t.period * t.failure_threshold + t.timeout;
        assert!(window <= Duration::from_secs(8), "{window:?}");
    }

    #[test]
    fn kubelets_fields_are_read() {
        let (spec, problems) = parse(Some(
            r#"{"httpGet": {"path": "/healthz", "port": "http", "expectedStatus": 204,
                            "httpHeaders": [{"name": "X-Probe", "value": "network\tready"}]},
                "periodSeconds": 5, "timeoutSeconds": 2, "successThreshold": 2, "failureThreshold": 4}"#,
        ));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            spec.check,
            Check::Http {
                port: Port::Name("http".into()),
                path: "/healthz".into(),
                headers: vec![("X-Probe".into(), "network\tready".into())],
                status: Some(204)
            }
        );
        let t = spec.timing;
        assert_eq!(t.period, Duration::from_secs(5));
        assert_eq!(t.timeout, Duration::from_secs(2));
        assert_eq!((t.success_threshold, t.failure_threshold), (2, 4));
        let (spec, problems) = parse(Some(r#"{"tcpSocket": {"port": 9090}}"#));
        assert!(problems.is_empty());
        assert_eq!(spec.check, Check::Tcp(Port::Number(9090)));
        let (spec, _) = parse(Some(r#"{"httpGet": {"port": 80}}"#));
        assert!(matches!(spec.check, Check::Http { ref path, status: None, .. } if path == "/"));
        let (spec, problems) = parse(Some(r#"{"failureThreshold": 5}"#));
        assert!(problems.is_empty());
        assert_eq!(
            (spec.check, spec.timing.failure_threshold),
            (Check::ServicePorts, 5)
        );
    }

    #[test]
    fn bad_values_name_the_field_and_leave_the_default_probe() {
        for (annotation, field) in [
            (
                r#"{"periodSeconds": 0}"#,
                "periodSeconds is 0, out of its range 1 to 300",
            ),
            (
                r#"{"failureThreshold": 11}"#,
                "failureThreshold is 11, out of its range 1 to 10",
            ),
            (
                r#"{"periodSeconds": 1, "timeoutSeconds": 2}"#,
                "timeoutSeconds (2) is longer than periodSeconds (1)",
            ),
            (
                r#"{"tcpSocket": {"port": 70000}}"#,
                "tcpSocket.port is 70000, not a port",
            ),
            (
                r#"{"tcpSocket": {"port": "Not_A_Name"}}"#,
                "tcpSocket.port is \"Not_A_Name\"",
            ),
            (
                r#"{"httpGet": {"port": 80, "path": "healthz"}}"#,
                "httpGet.path is \"healthz\"",
            ),
            (
                r#"{"httpGet": {"port": 80, "path": "/a b"}}"#,
                "httpGet.path \"/a b\" has ' ', which cannot go in a request line",
            ),
            (
                r#"{"httpGet": {"port": 80, "path": "/ok\r\nX-Injected: 1"}}"#,
                "has '\\r', which cannot go in a request line",
            ),
            (
                r#"{"httpGet": {"port": 80, "httpHeaders": [{"name": "X-A", "value": "1\r\nX-B: 2"}]}}"#,
                "httpGet.httpHeaders[0].value \"1\\r\\nX-B: 2\" has '\\r': a header value cannot hold a control character",
            ),
            (
                r#"{"httpGet": {"port": 80, "httpHeaders": [{"name": "X A", "value": "1"}]}}"#,
                "httpGet.httpHeaders[0].name is \"X A\": give a header name",
            ),
            (
                r#"{"httpGet": {"port": 80, "expectedStatus": 42}}"#,
                "httpGet.expectedStatus is 42",
            ),
            (
                r#"{"httpGet": {"port": 80}, "tcpSocket": {"port": 80}}"#,
                "both set",
            ),
            (r#"{"periodSecond": 2}"#, "unknown field `periodSecond`"),
            (r#"{"periodSeconds": "2s"}"#, "periodSeconds: invalid type"),
            ("tcp:80", "write kubelet's probe fields as JSON"),
        ] {
            let (spec, problems) = parse(Some(annotation));
            assert_eq!(spec, ProbeSpec::default(), "{annotation}");
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with(ANNOTATION) && p.contains(field)),
                "{annotation}: {problems:?}"
            );
        }
    }
}
