//! A registry (or token server, or blob store) that misbehaves on purpose, written for the
//! tests: plain HTTP/1.1 on a free loopback port, from a thread and runtime of its own, one
//! request a connection. A handler given at start answers each request, well or badly: it
//! stalls before answering or in the middle of its body, trickles a byte at a time, sends a
//! body far larger than any limit or one that never ends. The server records what it was asked
//! (headers and bodies, to prove where a credential went) and how many bytes of its bad bodies
//! the client took before it hung up.

#![allow(dead_code)] // not every test binary uses every part

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

/// One request, as received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a request is answered.
pub enum Reply {
    /// A whole answer.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Nothing, ever: the request is read and the connection held open.
    Stall,
    /// The headers of a body of `declared` bytes, `sent` of them, then nothing.
    StallMidBody { declared: usize, sent: usize },
    /// The headers of a body of `declared` bytes, then one byte every 100 ms: each read
    /// returns something, so a timeout per read never trips.
    Trickle { declared: usize },
    /// A body of `declared` bytes, its length announced, written as fast as the client reads.
    Huge { declared: usize },
    /// A chunked body that never ends.
    Endless,
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    pub fn with_header(status: u16, name: &str, value: &str) -> Self {
        Reply::Full {
            status,
            headers: vec![(name.into(), value.into())],
            body: Vec::new(),
        }
    }
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// What the server saw, shared with its connections.
#[derive(Default)]
struct Record {
    seen: Mutex<Vec<Seen>>,
    /// Bytes of bad bodies written.
    sent: AtomicU64,
    /// A client hung up while a bad body was being written.
    hung_up: AtomicBool,
}

pub struct Hostile {
    /// `127.0.0.1:<port>`.
    pub host: String,
    record: Arc<Record>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Hostile {
    pub fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let record = Arc::new(Record::default());
        let handler: Arc<Handler> = Arc::new(handler);
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let served = record.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stop => break,
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            tokio::spawn(serve(stream, handler.clone(), served.clone()));
                        }
                    }
                }
            });
            // Dropping the runtime ends the stalled connections.
        });
        Hostile {
            host,
            record,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.host)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.record.seen.lock().unwrap().clone()
    }

    /// Bytes of bad bodies written so far.
    pub fn sent(&self) -> u64 {
        self.record.sent.load(Ordering::SeqCst)
    }

    /// Whether a client hung up in the middle of a bad body.
    pub fn hung_up(&self) -> bool {
        self.record.hung_up.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request (headers, and a body of its `content-length`).
async fn request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buffer.len() > 64 << 10 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Seen {
        method,
        path,
        headers,
        body,
    })
}

fn head(status: u16, headers: &[(String, String)]) -> Vec<u8> {
    let mut text = format!("HTTP/1.1 {status} X\r\nconnection: close\r\n");
    for (name, value) in headers {
        text += &format!("{name}: {value}\r\n");
    }
    text += "\r\n";
    text.into_bytes()
}

/// Writes `bytes` of a bad body, counting them; false once the client hung up.
async fn bad(stream: &mut TcpStream, record: &Record, bytes: &[u8]) -> bool {
    if stream.write_all(bytes).await.is_err() {
        record.hung_up.store(true, Ordering::SeqCst);
        return false;
    }
    record.sent.fetch_add(bytes.len() as u64, Ordering::SeqCst);
    true
}

async fn serve(mut stream: TcpStream, handler: Arc<Handler>, record: Arc<Record>) {
    let Some(seen) = request(&mut stream).await else {
        return;
    };
    let reply = handler(&seen);
    record.seen.lock().unwrap().push(seen);
    let length = |n: usize| vec![("content-length".to_owned(), n.to_string())];
    match reply {
        Reply::Full {
            status,
            mut headers,
            body,
        } => {
            headers.extend(length(body.len()));
            let _ = stream.write_all(&head(status, &headers)).await;
            let _ = stream.write_all(&body).await;
        }
        Reply::Stall => std::future::pending::<()>().await,
        Reply::StallMidBody { declared, sent } => {
            let _ = stream.write_all(&head(200, &length(declared))).await;
            bad(&mut stream, &record, &vec![b' '; sent]).await;
            std::future::pending::<()>().await;
        }
        Reply::Trickle { declared } => {
            let _ = stream.write_all(&head(200, &length(declared))).await;
            for _ in 0..declared {
                if !bad(&mut stream, &record, b" ").await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Reply::Huge { declared } => {
            let _ = stream.write_all(&head(200, &length(declared))).await;
            let mut left = declared;
            while left > 0 {
                let n = left.min(64 << 10);
                if !bad(&mut stream, &record, &vec![b' '; n]).await {
                    return;
                }
                left -= n;
            }
        }
        Reply::Endless => {
            let headers = vec![("transfer-encoding".to_owned(), "chunked".to_owned())];
            let _ = stream.write_all(&head(200, &headers)).await;
            let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, " ".repeat(64 << 10));
            while bad(&mut stream, &record, chunk.as_bytes()).await {}
        }
    }
}
