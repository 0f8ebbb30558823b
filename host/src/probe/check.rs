//! One attempt of a check on one address, from the prober's own network namespace (so over
//! the secondary network, as a client's connection goes): a TCP connect, or an HTTP `GET`
//! whose status line is read (as kubelet: 200 to 399 unless one status is asked for).

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
};

use super::targets::Resolved;

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
        let Resolved::Http { path, status, .. } = check else {
            return Ok(());
        };
        let host = match address {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: nad-service-controller-probe\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending GET {path}: {e}"))?;
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .await
            .map_err(|e| format!("reading the answer to GET {path}: {e}"))?;
        let code: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("GET {path}: not an HTTP answer ({:?})", line.trim_end()))?;
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
                status: Some(200),
            },
        ];
        assert_eq!(probe(&[v4], &both, second).await, None);
    }
}
