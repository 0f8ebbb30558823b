//! The CNCF distribution registry (built from its Go module by `hack/tools.sh registry`),
//! serving plain HTTP on a free loopback port from a storage directory of its own, open to
//! anyone or to the users of an htpasswd file; stopped, and its directory removed, when dropped.

#![allow(dead_code)] // not every test binary uses every part

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    dir: PathBuf,
    child: Option<Child>,
}

/// A pinned tool of `hack/tools.sh`, installed into the tool cache on first use.
pub fn tool(name: &str) -> PathBuf {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/tools.sh");
    let out = Command::new(tools)
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running hack/tools.sh {name}: {e}"));
    assert!(out.status.success(), "hack/tools.sh {name} failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A loopback port no one listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    pub fn start(test: &str) -> Self {
        Self::start_with(test, &[])
    }

    /// A registry that serves only the `users` (name, password), by HTTP basic auth checked
    /// against an htpasswd file of bcrypt hashes; anyone when there are none.
    pub fn start_with(test: &str, users: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("nsc-registry-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let host = format!("127.0.0.1:{}", free_port());
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {host}\n  secret: nsc-test\n",
            dir.join("data").display()
        );
        if !users.is_empty() {
            let htpasswd: String = users
                .iter()
                .map(|(user, password)| format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap()))
                .collect();
            std::fs::write(dir.join("htpasswd"), htpasswd).unwrap();
            config += &format!(
                "auth:\n  htpasswd:\n    realm: nsc-test\n    path: {}\n",
                dir.join("htpasswd").display()
            );
        }
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let mut registry = Registry {
            host,
            dir,
            child: None,
        };
        registry.restart();
        registry
    }

    /// Starts it (again, after `stop`) on the same port, with the same storage.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the registry is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))
            .unwrap();
        let child = Command::new(tool("registry"))
            .arg("serve")
            .arg(self.dir.join("config.yml"))
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the registry");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.host).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its log: warnings and one access-log line per request.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `oci://<host>/<path>`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.host)
    }

    /// Stops it: the registry is unreachable from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
