//! `--plugin`: a component file, an `oci://` reference, or `default` for the plugin built into
//! this binary, run through the controller's load pipeline.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use nad_plugin_fetcher::{OciRef, SCHEME};

use nad_plugin_fetcher::RegistryArgs;
use nad_plugin_runtime::{BUILT_IN, Configured, DEFAULT_PLUGIN_WASM, PipelineError, Runtime};

/// Where a plugin comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginArg {
    /// The plugin built into this binary (`--plugin default`).
    BuiltIn,
    File(PathBuf),
    /// An artifact in an OCI registry, pulled (or read from the cache) as the controller does.
    Oci(OciRef),
}

impl PluginArg {
    /// `default` names the built-in plugin, `oci://…` an artifact; anything else is a file
    /// (`./default` for a file of that name).
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "" => Err(
                "give a .wasm file, an oci:// reference, or `default` for the built-in plugin"
                    .to_owned(),
            ),
            BUILT_IN => Ok(PluginArg::BuiltIn),
            oci if oci.starts_with(SCHEME) => OciRef::parse(oci).map(PluginArg::Oci),
            path => Ok(PluginArg::File(PathBuf::from(path))),
        }
    }

    /// The name Services select it by: the file name without `.wasm`, or the repository's
    /// last segment.
    pub fn name(&self) -> String {
        match self {
            PluginArg::BuiltIn => BUILT_IN.to_owned(),
            PluginArg::Oci(reference) => reference.name().to_owned(),
            PluginArg::File(path) => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    pub fn bytes(&self, registry: &RegistryArgs) -> anyhow::Result<Vec<u8>> {
        match self {
            PluginArg::BuiltIn => Ok(DEFAULT_PLUGIN_WASM.to_vec()),
            PluginArg::File(path) => {
                std::fs::read(path).with_context(|| format!("{}: cannot read it", path.display()))
            }
            PluginArg::Oci(reference) => {
                let puller = registry.puller()?;
                // The plugin commands run without an async runtime; this one is for the pull.
                let pulled = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(puller.pull(reference))?;
                tracing::info!(
                    digest = %pulled.digest,
                    cached = pulled.cached,
                    bytes = pulled.component.len(),
                    "{reference}"
                );
                Ok(pulled.component)
            }
        }
    }
}

impl fmt::Display for PluginArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginArg::BuiltIn => f.write_str("the built-in plugin"),
            PluginArg::File(path) => write!(f, "{}", path.display()),
            PluginArg::Oci(reference) => write!(f, "{reference}"),
        }
    }
}

/// A plugin that passed the pipeline, with what an author should hear about it.
pub struct Loaded {
    /// The name Services select it by.
    pub name: String,
    pub configured: Configured,
    pub warnings: Vec<String>,
}

/// The configuration document: the file's contents, or none.
pub fn config(path: Option<&Path>) -> anyhow::Result<String> {
    path.map(super::files::read)
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Runs the plugin through the load pipeline with `config`.
pub fn load(
    runtime: &Runtime,
    registry: &RegistryArgs,
    plugin: &PluginArg,
    config: &str,
) -> anyhow::Result<Loaded> {
    let bytes = plugin.bytes(registry)?;
    load_bytes(runtime, &plugin.name(), &bytes, config, &plugin.to_string())
}

/// Runs the component `bytes`, which Services select as `name` and which came from `origin`,
/// through the load pipeline with `config`.
pub fn load_bytes(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    config: &str,
    origin: &str,
) -> anyhow::Result<Loaded> {
    let configured = nad_plugin_runtime::prepare(runtime, name, bytes, config)
        .map_err(|e| anyhow::Error::new(Failed(origin.to_owned(), e)))?;
    let warnings = nad_plugin_runtime::name_mismatch(name, configured.plugin.info())
        .into_iter()
        .collect();
    Ok(Loaded {
        name: name.to_owned(),
        configured,
        warnings,
    })
}

/// A plugin that failed the pipeline; the CLI shows the details (e.g. a trap's wasm frames)
/// with `-v`.
#[derive(Debug, thiserror::Error)]
#[error("{0}: {1}")]
pub struct Failed(pub String, pub PipelineError);
