//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly
//! one reconciles.
//!
//! The holder renews the Lease every [`RETRY`]; a Lease not renewed for its duration is
//! expired and may be taken over. Updates use the Lease's resourceVersion, so two candidates
//! never both win. A leader that cannot renew within the Lease duration stops (and its
//! process exits, to be restarted as a candidate).

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use nad_process::kube_error::describe;

/// How often a candidate tries and a leader renews.
pub const RETRY: Duration = Duration::from_secs(2);
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

impl LeaderElector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: String) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn spec(&self, now: Timestamp, acquired: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt: `Ok(true)` when this process holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(seconds)) => renewed
                .0
                .checked_add(SignedDuration::from_secs(i64::from(seconds)))
                .map_or(true, |until| until < now),
            _ => true,
        };
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if ours {
            self.spec(now, spec.acquire_time.map_or(now, |t| t.0), transitions)
        } else {
            self.spec(now, now, transitions + 1)
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this process leads. Returns `false` if `stop` resolved first.
    pub async fn acquire(&self, stop: impl std::future::Future<Output = ()>) -> bool {
        tokio::pin!(stop);
        let mut logged = false;
        let mut failing = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return true;
                }
                Ok(false) if !logged => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "another replica leads; standing by");
                    logged = true;
                    failing = false;
                }
                Ok(false) => failing = false,
                Err(e) if failing => {
                    tracing::debug!(lease = %self.name, error = %describe(&e), "leader election attempt failed again");
                }
                Err(e) => {
                    failing = true;
                    tracing::warn!(lease = %self.name, error = %describe(&e), "leader election attempt failed; retrying every 2 s");
                }
            }
            tokio::select! {
                () = &mut stop => return false,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// Renews until renewal has failed for a whole Lease duration; then returns.
    pub async fn hold(&self) {
        let mut last_renewed = tokio::time::Instant::now();
        let mut failing = false;
        loop {
            tokio::time::sleep(RETRY).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    if failing {
                        tracing::info!(lease = %self.name, "renewed the lease again");
                    }
                    failing = false;
                    last_renewed = tokio::time::Instant::now();
                }
                Ok(false) => {
                    tracing::error!(lease = %self.name, "another replica took the lease");
                    return;
                }
                Err(e) if failing => {
                    tracing::debug!(lease = %self.name, error = %describe(&e), "renewing the lease failed again");
                }
                Err(e) => {
                    failing = true;
                    tracing::warn!(lease = %self.name, error = %describe(&e), "renewing the lease failed; retrying every 2 s");
                }
            }
            // Stop before the lease can expire in others' eyes.
            if last_renewed.elapsed() + RETRY >= LEASE_DURATION {
                tracing::error!(lease = %self.name, "could not renew the lease in time");
                return;
            }
        }
    }

    /// Gives the Lease up on a clean shutdown, so a standby replica takes over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "released the lease"),
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %describe(&e), "could not release the lease")
            }
        }
    }
}
