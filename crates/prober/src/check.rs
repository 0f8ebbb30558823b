//! One attempt of a check on one address, from the prober's own network namespace (so over
//! the secondary network, as a client's connection goes): a TCP connect, or an HTTP `GET`
//! whose status line is read (as kubelet: 200 to 399 unless one status is asked for).
//!
//! The pod answering is a tenant's, so what it sends is read with a bound: the status line
//! only, at most [`MAX_STATUS_LINE_BYTES`] of it, never the headers or the body; the answer
//! quoted in a failure is cut to [`MAX_QUOTED_CHARS`] characters and escaped.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
};

use super::targets::Resolved;

/// The most of an answer read: its status line (`HTTP/1.1 200 OK\r\n`), ended within this.
pub const MAX_STATUS_LINE_BYTES: u64 = 1024;
/// The most of a bad answer quoted in a failure (and so in the pod's condition message).
pub const MAX_QUOTED_CHARS: usize = 64;

/// One probe of a pod: every check on every address at once; the first failure, if any. A
/// pod with an IPv4 and an IPv6 address answers only if both do: DNS hands out each, so a dead
/// family is a dead endpoint for the clients that get it.
pub async fn probe(addresses: &[IpAddr], checks: &[Resolved], timeout: Duration) -> Option<String> {
    let attempts = addresses
        .iter()
        .flat_map(|address| checks.iter().map(move |c| attempt(*address, c, timeout)));
    futures::future::join_all(attempts)
        .await
        .into_iter()
        .find_map(Result::err)
}

/// Checks `check` on `address` within `timeout`: `Err` says what failed, for the condition's
/// message (`192.168.2.4:80: connection refused`).
pub async fn attempt(address: IpAddr, check: &Resolved, timeout: Duration) -> Result<(), String> {
    let port = match check {
        Resolved::Tcp(port) | Resolved::Http { port, .. } => *port,
    };
    let socket = SocketAddr::new(address, port);
    let run = async {
        let mut stream = TcpStream::connect(socket)
            .await
            .map_err(|e| e.to_string())?;
        let Resolved::Http {
            path,
            headers,
            status,
            ..
        } = check
        else {
            return Ok(());
        };
        let host = match address {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        stream
            .write_all(request(path, &host, headers).as_bytes())
            .await
            .map_err(|e| format!("sending GET {path}: {e}"))?;
        let mut line = Vec::new();
        BufReader::new((&mut stream).take(MAX_STATUS_LINE_BYTES))
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| format!("reading the answer to GET {path}: {e}"))?;
        if !line.ends_with(b"\n") && line.len() as u64 >= MAX_STATUS_LINE_BYTES {
            return Err(format!(
                "GET {path}: the status line is longer than {MAX_STATUS_LINE_BYTES} bytes ({})",
                quote(&line)
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let code: u16 = text
            .split_whitespace()
            .nth(1)
            .filter(|_| text.starts_with("HTTP/"))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("GET {path}: not an HTTP answer ({})", quote(&line)))?;
        let good = match status {
            Some(wanted) => code == *wanted,
            None => (200..400).contains(&code),
        };
        if good {
            Ok(())
        } else {
            Err(format!("GET {path}: status {code}"))
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{socket}: {e}")),
        Err(_) => Err(format!(
            "{socket}: no answer within {}s",
            timeout.as_secs_f32()
        )),
    }
}

/// The request: the prober's headers, each replaced by one of `headers` of the same name (as
/// kubelet lets a probe set Host, User-Agent or Accept), then the others of `headers`. The
/// path and headers were checked when the annotation was read: no CR or LF in them.
fn request(path: &str, host: &str, headers: &[(String, String)]) -> String {
    let mut text = format!("GET {path} HTTP/1.1\r\n");
    let given = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for (name, value) in [
        ("Host", host),
        ("User-Agent", "nad-service-controller-probe"),
        ("Accept", "*/*"),
    ] {
        if !given(name) {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("Connection") {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    text.push_str("Connection: close\r\n\r\n");
    text
}

/// At most [`MAX_QUOTED_CHARS`] characters of an answer, escaped (quotes, control characters),
/// for a message.
fn quote(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    let cut: String = text.trim_end().chars().take(MAX_QUOTED_CHARS).collect();
    let more = if cut.len() < text.trim_end().len() {
        "…"
    } else {
        ""
    };
    format!("{cut:?}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::{io::AsyncReadExt, net::TcpListener};

    /// An HTTP server on loopback answering every request with `status`.
    async fn serve(status: u16) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn tcp_and_http_checks_answer_as_kubelets_do() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let second = Duration::from_secs(1);
        let ok = serve(204).await;
        let not_found = serve(404).await;
        assert_eq!(attempt(loopback, &Resolved::Tcp(ok), second).await, Ok(()));
        let http = |port, status| Resolved::Http {
            port,
            path: "/healthz".into(),
            headers: Vec::new(),
            status,
        };
        assert_eq!(attempt(loopback, &http(ok, None), second).await, Ok(()));
        assert_eq!(
            attempt(loopback, &http(ok, Some(204)), second).await,
            Ok(())
        );
        let err = attempt(loopback, &http(ok, Some(200)), second)
            .await
            .unwrap_err();
        assert_eq!(err, format!("127.0.0.1:{ok}: GET /healthz: status 204"));
        let err = attempt(loopback, &http(not_found, None), second)
            .await
            .unwrap_err();
        assert!(err.ends_with("status 404"), "{err}");
        // Nothing listens on a port just released.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = attempt(loopback, &Resolved::Tcp(closed), second)
            .await
            .unwrap_err();
        assert!(err.starts_with(&format!("127.0.0.1:{closed}: ")), "{err}");
    }

    #[tokio::test]
    async fn a_dual_stack_pod_answers_only_if_every_address_does() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        // A server on the IPv4 address only (as an application bound to one family).
        let port = serve(200).await;
        let second = Duration::from_secs(1);
        let checks = [Resolved::Tcp(port)];
        assert_eq!(probe(&[v4], &checks, second).await, None);
        let failure = probe(&[v4, v6], &checks, second).await.unwrap();
        assert!(failure.starts_with(&format!("[::1]:{port}: ")), "{failure}");
        let both = [
            Resolved::Tcp(port),
            Resolved::Http {
                port,
                path: "/".into(),
                headers: Vec::new(),
                status: Some(200),
            },
        ];
        assert_eq!(probe(&[v4], &both, second).await, None);
    }

    /// A server on loopback that answers each connection with `answer` (then, with `endless`,
    /// header lines until the client goes), and sends what it was asked on `asked`.
    async fn serve_raw(
        answer: Vec<u8>,
        endless: bool,
    ) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (asked, heard) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = vec![0u8; 8192];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let _ = asked.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let answer = answer.clone();
                tokio::spawn(async move {
                    if conn.write_all(&answer).await.is_err() {
                        return;
                    }
                    while endless && conn.write_all(b"X-More: yes\r\n").await.is_ok() {}
                });
            }
        });
        (port, heard)
    }

    #[tokio::test]
    async fn a_tenants_answer_is_read_to_a_bound_and_quoted_short_and_escaped() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let http = |port| Resolved::Http {
            port,
            path: "/healthz".into(),
            headers: Vec::new(),
            status: None,
        };
        let second = Duration::from_secs(2);
        // A megabyte-long status line: refused after MAX_STATUS_LINE_BYTES, not read whole.
        let (long, _) = serve_raw(vec![b'A'; 1 << 20], false).await;
        let err = attempt(loopback, &http(long), second).await.unwrap_err();
        assert!(
            err.contains("the status line is longer than 1024 bytes"),
            "{err}"
        );
        assert!(err.len() < 200, "{} bytes: {err}", err.len());
        // A status line, then headers that never end: the status line is all that is read.
        let (endless, _) = serve_raw(b"HTTP/1.1 200 OK\r\n".to_vec(), true).await;
        assert_eq!(attempt(loopback, &http(endless), second).await, Ok(()));
        // Not HTTP, with control characters: quoted escaped, cut short.
        let mut junk = b"\x1b[31mnot http\"\t".to_vec();
        junk.extend(std::iter::repeat_n(b'z', 500));
        junk.extend(b"\r\n");
        let (junk, _) = serve_raw(junk, false).await;
        let err = attempt(loopback, &http(junk), second).await.unwrap_err();
        assert!(
            err.contains(r#"not an HTTP answer ("\u{1b}[31mnot http\"\tzzz"#)
                && err.ends_with("\"…)"),
            "{err}"
        );
        assert!(err.len() < 200, "{} bytes: {err}", err.len());
    }

    #[tokio::test]
    async fn a_probes_headers_are_sent_and_may_replace_the_probers_own() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let (port, mut heard) = serve_raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(), false).await;
        let check = Resolved::Http {
            port,
            path: "/ready?x=1".into(),
            headers: vec![
                ("Host".into(), "web.example".into()),
                ("X-Probe".into(), "network".into()),
            ],
            status: None,
        };
        assert_eq!(
            attempt(loopback, &check, Duration::from_secs(2)).await,
            Ok(())
        );
        let request = heard.recv().await.unwrap();
        assert_eq!(
            request,
            "GET /ready?x=1 HTTP/1.1\r\nUser-Agent: nad-service-controller-probe\r\nAccept: */*\r\n\
             Host: web.example\r\nX-Probe: network\r\nConnection: close\r\n\r\n"
        );
    }
}
