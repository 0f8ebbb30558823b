//! The fetcher's settings as flags and files: how plugins named by `oci://` reference are
//! fetched, the same for the controller (`run`) and the plugin commands.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::{Credentials, GivenIn, Policy, Puller, RegistryCas, RegistryOptions, Verifier};

/// Where a pulled plugin is cached: the user's cache directory, or (in a container, without
/// one) `/var/cache/nad-service-controller/plugins`, which the Deployment mounts.
fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("nad-service-controller").join("plugins")
}

#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// Where plugins pulled from OCI registries are kept by digest: a pinned plugin pulled
    /// once loads again with its registry unreachable.
    #[arg(long, env = "NSC_PLUGIN_CACHE_DIR", default_value_os_t = default_cache_dir())]
    pub plugin_cache_dir: PathBuf,

    /// A registry (`host[:port]`) reached over plain HTTP instead of HTTPS, such as one on
    /// loopback; repeat the flag (or separate with commas) for several.
    #[arg(long, env = "NSC_PLUGIN_REGISTRY_HTTP", value_delimiter = ',')]
    pub plugin_registry_http: Vec<String>,

    /// A CA (a PEM bundle) to trust for one registry, and that registry only:
    /// `<host[:port]>=<file>`; repeat the flag (or separate with commas) for several.
    #[arg(
        long,
        env = "NSC_REGISTRY_CA",
        value_name = "REGISTRY=FILE",
        value_delimiter = ','
    )]
    pub registry_ca: Vec<String>,

    /// A verification policy (YAML: allOf, anyOf, trustRoot): every plugin artifact must carry
    /// the cosign signatures it asks for, or it is not loaded; a component given as it is
    /// (not by reference) does not load either.
    #[arg(long, env = "NSC_VERIFICATION_POLICY", value_name = "FILE")]
    pub verification_policy: Option<PathBuf>,

    /// Registry credentials: a Docker config file (the format of `~/.docker/config.json` and
    /// of a `kubernetes.io/dockerconfigjson` Secret). A registry it names is spoken to with
    /// its credential only, never anonymously; the others anonymously. Read once, at start.
    #[arg(long, env = "NSC_REGISTRY_CONFIG", value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
}

impl RegistryArgs {
    /// The CAs of the `--registry-ca` files.
    pub fn cas(&self) -> anyhow::Result<RegistryCas> {
        let mut cas = RegistryCas::new(GivenIn::Flag);
        for item in &self.registry_ca {
            let (registry, path) = item.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--registry-ca {item}: write <host[:port]>=<PEM file>")
            })?;
            let pem = std::fs::read(path)
                .with_context(|| format!("reading --registry-ca {registry}={path}"))?;
            cas.add_pem(registry, path, &pem)
                .map_err(|e| anyhow::anyhow!("--registry-ca: {e}"))?;
        }
        Ok(cas)
    }

    pub fn puller(&self) -> anyhow::Result<Puller> {
        let puller = Puller::new(&RegistryOptions {
            http: self.plugin_registry_http.clone(),
            cache_dir: Some(self.plugin_cache_dir.clone()),
            ..RegistryOptions::default()
        })?;
        if let Some(path) = &self.registry_config {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading --registry-config {}", path.display()))?;
            let credentials = Credentials::parse(&path.display().to_string(), &bytes)?;
            puller.set_credentials(Some(credentials))?;
        }
        let cas = self.cas()?;
        if cas.registries().next().is_some() {
            puller.set_cas(cas)?;
        }
        if let Some(path) = &self.verification_policy {
            puller.set_policy(Some(read_policy(path)?))?;
        }
        Ok(puller)
    }
}

/// The verification policy of the file at `path`, ready to check with.
pub fn read_policy(path: &std::path::Path) -> anyhow::Result<Verifier> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the verification policy {}", path.display()))?;
    parse_policy(&path.display().to_string(), &text).map_err(anyhow::Error::msg)
}

/// A verification policy in YAML (or JSON) from `source`; an unknown or misspelt field is
/// refused with its path.
pub fn parse_policy(source: &str, text: &str) -> Result<Verifier, String> {
    let document: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| format!("{source}: not YAML: {e}"))?;
    let policy: Policy = serde_path_to_error::deserialize(document).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("{source}: {}", e.inner())
        } else {
            format!("{source}: {path}: {}", e.inner())
        }
    })?;
    Verifier::new(source, &policy)
}
