//! How the controller's watches fail and recover.
//!
//! Bounds (the README's "Faults and recovery" lists them for operators):
//! - a failed watch or list is retried after 125–250 ms, then twice as long each time, at most
//!   1–2 s (the jitter spreads replicas and controllers apart), so a watch is back within 2 s of
//!   its API server;
//! - a watch that expired (`410 Gone`: its resource version was compacted away, typically after
//!   an API server restart) lists again at once; the reflector swaps in the new list whole;
//! - errors never leave the watch streams: each is logged (one line, the first of a run at
//!   warn, repeats at debug, the recovery at info) and reported to [`Recovery`], so no
//!   controller-wide trigger backoff ever pauses the other watches;
//! - each event, completed list and error is counted ([`crate::metrics::watch`]): errors that
//!   keep coming are a watch that does not progress.

use std::time::{Duration, Instant};

use kube::{
    Resource,
    runtime::{utils::Backoff, watcher},
};

use nad_process::kube_error::describe_watch;

use super::recovery::Recovery;
use crate::metrics::watch::{WatchProgress, unix_now};

/// The first retry delay of a failed watch, before jitter (which adds up to as much again).
pub const FIRST_RETRY: Duration = Duration::from_millis(125);
/// The longest delay between two attempts of a failed watch, before jitter.
pub const MAX_RETRY: Duration = Duration::from_secs(1);

/// The bounded, jittered exponential backoff of every watch (and of the controller's trigger
/// stream, which with [`Health`] never sees an error).
pub fn backoff() -> impl Backoff + 'static {
    watcher::ExponentialBackoff::from(
        backon::ExponentialBuilder::default()
            .with_min_delay(FIRST_RETRY)
            .with_max_delay(MAX_RETRY)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

/// Whether a watch error is a `410`: the watcher lists again, which is routine.
fn expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// Counts one item of a watch stream in `progress`: an event (and, for the end of a list, the
/// list's time), or an error; a `410` is routine and not counted.
pub(crate) fn count<K: Resource>(
    progress: &WatchProgress,
    item: &Result<watcher::Event<K>, watcher::Error>,
) {
    match item {
        Ok(event) => {
            progress.event();
            match event {
                watcher::Event::InitDone => progress.listed(unix_now()),
                watcher::Event::Apply(object)
                | watcher::Event::InitApply(object)
                | watcher::Event::Delete(object) => {
                    progress.saw(object.meta().resource_version.as_deref());
                }
                watcher::Event::Init => {}
            }
        }
        Err(e) if expired(e) => {}
        Err(_) => progress.error(),
    }
}

/// The health of one watch, for its log lines and its metrics.
pub struct Health {
    watch: &'static str,
    recovery: std::sync::Arc<Recovery>,
    progress: WatchProgress,
    failing_since: Option<(Instant, u32)>,
}

impl Health {
    pub fn new(
        watch: &'static str,
        recovery: std::sync::Arc<Recovery>,
        progress: WatchProgress,
    ) -> Self {
        Self {
            watch,
            recovery,
            progress,
            failing_since: None,
        }
    }

    /// One item of a watch stream: the event, or `None` for an error (logged and reported).
    pub fn observe<K: Resource>(
        &mut self,
        item: Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<watcher::Event<K>> {
        count(&self.progress, &item);
        match item {
            Ok(event) => {
                self.ok();
                Some(event)
            }
            Err(e) => {
                self.error(&e);
                None
            }
        }
    }

    /// An event arrived: the watch works (again).
    fn ok(&mut self) {
        if let Some((since, errors)) = self.failing_since.take() {
            tracing::info!(
                watch = self.watch,
                errors,
                down_for = ?since.elapsed(),
                "watch working again"
            );
        }
    }

    /// The watch failed; the watcher retries by itself after [`backoff`].
    fn error(&mut self, error: &watcher::Error) {
        if expired(error) {
            tracing::info!(
                watch = self.watch,
                error = %describe_watch(error),
                "watch expired; listing again"
            );
            return;
        }
        self.recovery.unreachable();
        match &mut self.failing_since {
            Some((_, errors)) => {
                *errors += 1;
                tracing::debug!(watch = self.watch, error = %describe_watch(error), "watch still failing; retrying");
            }
            None => {
                self.failing_since = Some((Instant::now(), 1));
                tracing::warn!(
                    watch = self.watch,
                    error = %describe_watch(error),
                    retry_within = ?(MAX_RETRY * 2),
                    "watch failed; retrying"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn the_backoff_starts_small_and_stays_bounded() {
        let delays: Vec<Duration> = backoff().take(12).collect();
        assert!(
            delays[0] >= FIRST_RETRY && delays[0] <= FIRST_RETRY * 2,
            "{delays:?}"
        );
        assert!(
            delays.iter().all(|d| *d <= MAX_RETRY * 2),
            "jitter adds at most one delay: {delays:?}"
        );
        assert!(delays[11] >= MAX_RETRY, "{delays:?}");
        let mut b = backoff();
        let _ = b.nth(10);
        b.reset();
        assert!(b.next().is_some_and(|d| d <= FIRST_RETRY * 2));
    }

    #[test]
    fn only_410_counts_as_expired() {
        let gone = Status::failure("too old resource version: 412 (432)", "Expired").with_code(410);
        assert!(expired(&watcher::Error::WatchError(Box::new(gone.clone()))));
        assert!(expired(&watcher::Error::InitialListFailed(
            kube::Error::Api(Box::new(gone))
        )));
        let unavailable = Status::failure("etcd", "ServiceUnavailable").with_code(503);
        assert!(!expired(&watcher::Error::WatchError(Box::new(unavailable))));
        assert!(!expired(&watcher::Error::NoResourceVersion));
    }
}
