//! `plugin verify`: checks a plugin artifact's signatures against a verification policy file,
//! as the controller would with the same policy, so that a policy and a signing setup can be
//! tried before rollout.

use std::io::Write;

use super::VerifyArgs;
use nad_plugin_fetcher::read_policy;

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
