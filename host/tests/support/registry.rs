//! The CNCF distribution registry (built from its Go module by `hack/tools.sh registry`),
//! serving plain HTTP on a free loopback port from a storage directory of its own, open to
//! anyone, to the users of an htpasswd file or to the holders of a token server's tokens;
//! stopped, and its directory removed, when dropped. With the helpers of the tests that push
//! and pull plugins.

#![allow(dead_code)] // not every test binary uses every part

use std::{
    collections::BTreeMap,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nad_plugin_fetcher::{OciRef, Puller, RegistryOptions};

pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    /// Served over HTTPS (with a certificate of a [`TestCa`]), not plain HTTP.
    pub tls: bool,
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

/// The `auth` section of a registry that serves only `users` (none: anyone), from an htpasswd
/// file of bcrypt hashes it writes in `dir`.
fn htpasswd(dir: &Path, users: &[(&str, &str)]) -> String {
    if users.is_empty() {
        return String::new();
    }
    let htpasswd: String = users
        .iter()
        .map(|(user, password)| format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap()))
        .collect();
    std::fs::write(dir.join("htpasswd"), htpasswd).unwrap();
    format!(
        "auth:\n  htpasswd:\n    realm: nsc-test\n    path: {}\n",
        dir.join("htpasswd").display()
    )
}

/// A CA made for a test, which signs registries' certificates.
pub struct TestCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// Its certificate, PEM.
    pub pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa { params, key, pem }
    }

    /// A certificate for 127.0.0.1 that it signs, and its key (PEM).
    pub fn loopback_certificate(&self) -> (String, String) {
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let certificate = params.signed_by(&key, &issuer).unwrap();
        (certificate.pem(), key.serialize_pem())
    }
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
        Self::start_auth(test, None, |dir| htpasswd(dir, users))
    }

    /// The same over HTTPS, with a certificate for 127.0.0.1 that `ca` signs.
    pub fn start_tls(test: &str, users: &[(&str, &str)], ca: &TestCa) -> Self {
        Self::start_auth(test, Some(ca), |dir| htpasswd(dir, users))
    }

    /// A registry that serves the holders of tokens from the token server at `realm` for
    /// `service`, issued by `issuer` and signed by a key of the `jwks` (a JWK set's JSON).
    pub fn start_token(test: &str, realm: &str, service: &str, issuer: &str, jwks: &str) -> Self {
        Self::start_auth(test, None, |dir| {
            std::fs::write(dir.join("jwks.json"), jwks).unwrap();
            format!(
                "auth:\n  token:\n    realm: {realm}\n    service: {service}\n    \
                 issuer: {issuer}\n    jwks: {}\n",
                dir.join("jwks.json").display()
            )
        })
    }

    /// The same over HTTPS, with a certificate for 127.0.0.1 that `ca` signs.
    pub fn start_token_tls(
        test: &str,
        ca: &TestCa,
        (realm, service, issuer, jwks): (&str, &str, &str, &str),
    ) -> Self {
        Self::start_auth(test, Some(ca), |dir| {
            std::fs::write(dir.join("jwks.json"), jwks).unwrap();
            format!(
                "auth:\n  token:\n    realm: {realm}\n    service: {service}\n    \
                 issuer: {issuer}\n    jwks: {}\n",
                dir.join("jwks.json").display()
            )
        })
    }

    /// A registry whose `auth` section `auth` writes (given the registry's directory), over
    /// HTTPS if a `ca` is given.
    fn start_auth(test: &str, ca: Option<&TestCa>, auth: impl FnOnce(&Path) -> String) -> Self {
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
        if let Some(ca) = ca {
            let (certificate, key) = ca.loopback_certificate();
            std::fs::write(dir.join("tls.crt"), certificate).unwrap();
            std::fs::write(dir.join("tls.key"), key).unwrap();
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("tls.crt").display(),
                dir.join("tls.key").display()
            );
        }
        config += &auth(&dir);
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let mut registry = Registry {
            host,
            tls: ca.is_some(),
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
        let child = self.child.insert(child);
        // Known by its handle, never by a name: an exit is told at once with its status, a
        // registry alive but not listening by the deadline is told as such.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.host).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the registry exited ({status}) before listening on {}; its log:\n{}",
                    self.host,
                    read_log(&self.dir)
                );
            }
            assert!(
                Instant::now() < deadline,
                "the registry (pid {}) is running but not listening on {} after 20 s; its log:\n{}",
                child.id(),
                self.host,
                read_log(&self.dir)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its log: warnings and one access-log line per request.
    pub fn log(&self) -> String {
        read_log(&self.dir)
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

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

/// A directory of the test's own, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("nsc-oci-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A puller that speaks plain HTTP to `registry` (unless it serves HTTPS), caching in `cache`
/// if given.
pub fn puller(registry: &Registry, cache: Option<&Path>) -> Puller {
    Puller::new(&RegistryOptions {
        http: if registry.tls {
            Vec::new()
        } else {
            vec![registry.host.clone()]
        },
        cache_dir: cache.map(Path::to_path_buf),
        ..RegistryOptions::default()
    })
    .unwrap()
}

pub fn oci(text: &str) -> OciRef {
    OciRef::parse(text).unwrap()
}

/// Pushes `component` to `reference`; returns the manifest's digest.
pub async fn push(puller: &Puller, reference: &str, component: &[u8], media_type: &str) -> String {
    puller
        .push(&oci(reference), component, media_type, BTreeMap::new())
        .await
        .unwrap()
}

/// Runs the controller's binary with `args`: whether it succeeded, its stdout and stderr.
pub fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nad-service-controller"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// cosign, with keys of its own in a scratch directory.
pub struct Cosign {
    bin: PathBuf,
    dir: Scratch,
}

impl Cosign {
    pub fn new(test: &str) -> Self {
        Cosign {
            bin: tool("cosign"),
            dir: Scratch::new(&format!("{test}-cosign")),
        }
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .env("COSIGN_PASSWORD", "")
            // No Docker config of the machine's: the registry is open.
            .env("DOCKER_CONFIG", &self.dir.0)
            .env("HOME", &self.dir.0)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "cosign {args:?}: {stdout}{stderr}");
        stdout.into_owned()
    }

    /// A new key pair `name`: the private key's path and the public key (PEM).
    pub fn key(&self, name: &str) -> (PathBuf, String) {
        let prefix = self.dir.0.join(name);
        self.run(&[
            "generate-key-pair",
            "--output-key-prefix",
            prefix.to_str().unwrap(),
        ]);
        let public = std::fs::read_to_string(prefix.with_extension("pub")).unwrap();
        (prefix.with_extension("key"), public)
    }

    /// Signs `reference` (`host/repository@digest`) with `key`, offline.
    pub fn sign(&self, key: &Path, reference: &str) {
        self.run(&[
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--tlog-upload=false",
            "--allow-http-registry",
            "--allow-insecure-registry",
            "--yes",
            reference,
        ]);
    }
}
