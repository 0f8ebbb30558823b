//! `plugin push`: publishes a plugin as an OCI artifact (the CNCF Wasm layout: one
//! `application/wasm` layer), after it passes the load pipeline, and prints the reference
//! pinned by digest that a plugin source names.

use std::{collections::BTreeMap, io::Write, path::PathBuf};

use anyhow::Context as _;

use super::{
    sandbox::SandboxArgs,
    source::{self, PluginArg},
};
use nad_plugin_fetcher::{LAYER_MEDIA_TYPES, OciRef};
use nad_plugin_runtime::WIT_PACKAGE;

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The plugin component (`.wasm`).
    pub file: PathBuf,
    /// Where to publish it: oci://<registry>/<repository>[:<tag>]; without a tag it is
    /// pushed by digest only.
    #[arg(value_parser = OciRef::parse)]
    pub reference: OciRef,
    /// The layer's media type: the CNCF Wasm layout's (the default), wasm-to-oci's
    /// (Kubewarden's) or Istio's compat one; the controller reads all three.
    #[arg(long, default_value = LAYER_MEDIA_TYPES[0],
          value_parser = clap::builder::PossibleValuesParser::new(LAYER_MEDIA_TYPES))]
    pub layer_media_type: String,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

pub fn push(args: &PushArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(digest) = args.reference.digest() {
        anyhow::bail!(
            "{}: push to a repository or a tag, not a digest ({digest}): the digest is the content's, printed once pushed",
            args.reference
        );
    }
    let runtime = args.sandbox.runtime()?;
    // Only a plugin this host runs is published: the bytes read once, checked, then pushed.
    let plugin = PluginArg::File(args.file.clone());
    let component = plugin.bytes(&args.sandbox.registry)?;
    let loaded = source::load_bytes(
        &runtime,
        &plugin.name(),
        &component,
        "",
        &plugin.to_string(),
    )?;
    let info = loaded.configured.plugin.info();
    let annotations = BTreeMap::from([
        (
            "org.opencontainers.image.title".to_owned(),
            format!("{}.wasm", loaded.name),
        ),
        (
            "org.opencontainers.image.version".to_owned(),
            info.version.clone(),
        ),
        (
            "org.opencontainers.image.description".to_owned(),
            format!(
                "nad-service-controller plugin {} ({})",
                info.name, WIT_PACKAGE
            ),
        ),
    ]);
    let puller = args.sandbox.registry.puller()?;
    let digest = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(puller.push(
            &args.reference,
            &component,
            &args.layer_media_type,
            annotations,
        ))
        .with_context(|| format!("pushing {}", args.file.display()))?;
    let pinned = OciRef::parse(&format!(
        "oci://{}/{}@{digest}",
        args.reference.registry(),
        args.reference.repository()
    ))
    .map_err(anyhow::Error::msg)?;
    writeln!(out, "{pinned}")?;
    Ok(())
}
