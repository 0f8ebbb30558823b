//! A Kubernetes client error as one line, for a log line or an Event: what the API server
//! answered (`<code> <reason>: <message>`), or the chain of causes of a transport failure,
//! never a dump of the client's structs; and whether it looks like the API server being away
//! ([`looks_unreachable`]) rather than an answer about the request.

use kube::runtime::watcher;

/// One line for a client error: `<code> <reason>: <message>` for an answer of the API server;
/// the chain of causes, without repeats, for anything else (`connection refused`, a timeout).
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => describe_status(status),
        other => causes(other),
    }
}

/// One line for a watch error, as [`describe`].
pub fn describe_watch(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e) => format!("listing: {}", describe(e)),
        watcher::Error::WatchStartFailed(e) => format!("starting the watch: {}", describe(e)),
        watcher::Error::WatchFailed(e) => format!("watching: {}", describe(e)),
        watcher::Error::WatchError(status) => format!("watching: {}", describe_status(status)),
        watcher::Error::NoResourceVersion => error.to_string(),
    }
}

fn describe_status(status: &kube::core::Status) -> String {
    let reason = if status.reason.is_empty() {
        "Failure"
    } else {
        status.reason.as_str()
    };
    if status.message.is_empty() {
        format!("{} {reason}", status.code)
    } else {
        format!("{} {reason}: {}", status.code, status.message)
    }
}

/// The messages of an error and its sources, each without the text of its source (which many
/// errors repeat) and without the client's variant names.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut messages = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        messages.push(e.to_string());
        current = e.source();
    }
    let mut parts: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let mut text = message.as_str();
        if let Some(next) = messages.get(i + 1) {
            text = text.strip_suffix(next.as_str()).unwrap_or(text);
        }
        let text = text
            .trim_start_matches("ServiceError: ")
            .trim_start_matches("HyperError: ")
            .trim_end_matches([' ', ':'])
            .trim();
        if !text.is_empty() && !parts.iter().any(|p| p == text) {
            parts.push(text.to_owned());
        }
    }
    parts.join(": ")
}

/// Whether a failed request looks like the API server (or etcd behind it) being away, rather
/// than an answer about the request itself.
pub fn looks_unreachable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 500 | 502 | 503 | 504 | 429),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(message, reason).with_code(code),
        ))
    }

    #[test]
    fn api_errors_are_one_line_without_the_client_struct() {
        let e = api_error(
            422,
            "Invalid",
            "EndpointSlice.discovery.k8s.io \"web-ipv4-0\" is invalid: endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range",
        );
        assert_eq!(
            describe(&e),
            "422 Invalid: EndpointSlice.discovery.k8s.io \"web-ipv4-0\" is invalid: endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range"
        );
        assert_eq!(describe(&api_error(503, "", "")), "503 Failure");
    }

    #[test]
    fn transport_errors_are_their_causes_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("tcp connect error: {0}")]
        struct Connect(#[source] std::io::Error);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = kube::Error::Service(Box::new(Connect(io)));
        assert_eq!(describe(&e), "tcp connect error: Connection refused");
        let watch = watcher::Error::InitialListFailed(e);
        assert_eq!(
            describe_watch(&watch),
            "listing: tcp connect error: Connection refused"
        );
        let status = watcher::Error::WatchError(Box::new(
            kube::core::Status::failure("too old resource version: 412 (432)", "Expired")
                .with_code(410),
        ));
        assert_eq!(
            describe_watch(&status),
            "watching: 410 Expired: too old resource version: 412 (432)"
        );
    }

    #[test]
    fn answers_about_the_request_are_not_outages() {
        let api = |code| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "y").with_code(code),
            ))
        };
        for code in [400, 403, 404, 409, 410, 422] {
            assert!(!looks_unreachable(&api(code)), "{code}");
        }
        for code in [429, 500, 503, 504] {
            assert!(looks_unreachable(&api(code)), "{code}");
        }
        assert!(looks_unreachable(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }
}
