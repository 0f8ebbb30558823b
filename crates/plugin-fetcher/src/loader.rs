//! The [`Puller`] as the plugin runtime's loader asks for it: a source's reference text is
//! parsed, pulled and verified here, and the loader gets back the component and the reference
//! pinned to the digest pulled.

use nad_model::fetch::{Fetch, FetchFailure, Fetched, Pending};

use crate::{FetchError, OciRef, Puller};

impl Fetch for Puller {
    fn verifies(&self) -> bool {
        Puller::verifies(self)
    }

    fn generation(&self) -> u64 {
        Puller::generation(self)
    }

    fn policy_generation(&self) -> u64 {
        Puller::policy_generation(self)
    }

    fn fetch<'a>(&'a self, reference: &'a str) -> Pending<'a, Fetched> {
        Box::pin(async move {
            let reference = parse(reference)?;
            let pulled = self.pull(&reference).await.map_err(failure)?;
            Ok(Fetched {
                pinned: reference.pinned(&pulled.digest).to_string(),
                component: pulled.component,
            })
        })
    }

    fn verify<'a>(&'a self, pinned: &'a str) -> Pending<'a, ()> {
        Box::pin(async move {
            let reference = parse(pinned)?;
            Puller::verify(self, &reference).await.map_err(failure)?;
            Ok(())
        })
    }
}

/// A source's reference text, or why it is refused (for good: the text must change).
fn parse(text: &str) -> Result<OciRef, FetchFailure> {
    OciRef::parse(text).map_err(|message| FetchFailure {
        message,
        unverified: false,
        transient: false,
    })
}

fn failure(e: FetchError) -> FetchFailure {
    FetchFailure {
        message: e.to_string(),
        unverified: e.unverified,
        transient: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegistryOptions;

    #[tokio::test]
    async fn a_malformed_reference_is_refused_for_good_without_the_registry() {
        let puller = Puller::new(&RegistryOptions::default()).expect("puller");
        let e = Fetch::fetch(&puller, "https://r.example/p:1")
            .await
            .expect_err("not a reference");
        assert!(!e.transient && !e.unverified, "{e:?}");
        assert!(e.message.contains("oci://"), "{}", e.message);
    }

    #[tokio::test]
    async fn with_no_policy_a_pinned_reference_verifies_without_the_registry() {
        let puller = Puller::new(&RegistryOptions::default()).expect("puller");
        let pinned = format!("oci://127.0.0.1:1/p@sha256:{}", "ab".repeat(32));
        Fetch::verify(&puller, &pinned).await.expect("no policy");
        puller
            .set_policy_unavailable("the policy ConfigMap is missing".to_owned())
            .expect("settings");
        let e = Fetch::verify(&puller, &pinned)
            .await
            .expect_err("unavailable");
        assert!(e.unverified && e.transient, "{e:?}");
        assert!(
            e.message.contains("the policy ConfigMap is missing"),
            "{}",
            e.message
        );
    }
}
