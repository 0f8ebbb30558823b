//! `plugin verify`: checks a plugin artifact's signatures against a verification policy file,
//! as the controller would with the same policy, so that a policy and a signing setup can be
//! tried before rollout.

use std::{io::Write, path::PathBuf};

use nad_plugin_fetcher::{OciRef, RegistryArgs, read_policy};

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The artifact: oci://<registry>/<repository>@sha256:<digest>.
    #[arg(value_parser = OciRef::parse)]
    pub reference: OciRef,
    /// The verification policy (YAML: allOf, anyOf, trustRoot), as the controller's
    /// --verification-policy or its policy ConfigMap holds it.
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn verify(args: &VerifyArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let Some(digest) = args.reference.digest() else {
        anyhow::bail!(
            "{}: a signature signs a digest: name the artifact by it (@sha256:…; plugin push prints it)",
            args.reference
        );
    };
    let puller = args.registry.puller()?;
    puller.set_policy(Some(read_policy(&args.policy)?))?;
    let verified = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(puller.verify(&args.reference))?
        .ok_or_else(|| anyhow::anyhow!("no verification policy in force"))?;
    writeln!(
        out,
        "{}: verified: {} signature(s); signed by {}",
        args.reference.pinned(digest),
        verified.signatures,
        verified.signers.join(", ")
    )?;
    Ok(())
}
