//! Reconcile errors: what failed, its cause, and how the controller reacts.

use std::time::Duration;

use crate::plugin::{PluginError, UnknownPlugin};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy plugin gave no usable answer; the Service's slices stay as last applied.
    #[error(transparent)]
    Plugin(#[from] PluginError),

    /// The Service names a plugin that is not loaded; its slices stay as last applied.
    #[error(transparent)]
    UnknownPlugin(#[from] UnknownPlugin),

    #[error("the plugin call did not complete: {0}")]
    PluginTask(#[from] tokio::task::JoinError),

    #[error("applying EndpointSlice {namespace}/{name}: {source}")]
    Apply {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("deleting EndpointSlice {namespace}/{name}: {source}")]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("the watch caches stopped before they were ready")]
    CachesNotReady,
}

impl Error {
    /// A stable name for metric labels and Event reasons.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Plugin(e) => match e {
                PluginError::Rejected { .. } => "plugin_rejected",
                _ => "plugin_failed",
            },
            Error::UnknownPlugin(_) => "unknown_plugin",
            Error::PluginTask(_) => "plugin_task",
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::CachesNotReady => "caches_not_ready",
        }
    }

    /// The Event reason shown by `kubectl describe service`.
    pub fn event_reason(&self) -> &'static str {
        match self {
            Error::Plugin(_) | Error::PluginTask(_) => "PluginFailed",
            Error::UnknownPlugin(_) => "UnknownPlugin",
            Error::Apply { .. } | Error::Delete { .. } => "EndpointSliceWriteFailed",
            Error::CachesNotReady => "NotReady",
        }
    }

    /// Transient errors are retried with backoff; the others wait for a change (with a slow
    /// retry, since a change elsewhere, such as a fixed plugin, may cure them).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Plugin(e) => matches!(
                e,
                PluginError::Timeout { .. } | PluginError::Instantiate { .. }
            ),
            Error::Apply { source, .. } | Error::Delete { source, .. } => !is_invalid(source),
            Error::UnknownPlugin(_) => false,
            Error::PluginTask(_) | Error::CachesNotReady => true,
        }
    }
}

fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 422 || status.code == 400)
}

/// Per-object retry delays: exponential for transient errors, slow for permanent ones.
pub fn retry_delay(error: &Error, failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(300);
    if !error.is_transient() {
        return MAX;
    }
    FIRST
        .checked_mul(2_u32.saturating_pow(failures.saturating_sub(1).min(20)))
        .map_or(MAX, |d| d.min(MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout() -> Error {
        Error::Plugin(PluginError::Timeout {
            plugin: "p".into(),
            function: "evaluate",
            deadline: Duration::from_millis(100),
        })
    }

    #[test]
    fn transient_errors_back_off_exponentially_up_to_five_minutes() {
        let e = timeout();
        assert!(e.is_transient());
        let delays: Vec<_> = [1, 2, 3, 4, 30]
            .iter()
            .map(|n| retry_delay(&e, *n))
            .collect();
        assert_eq!(
            delays,
            vec![
                Duration::from_millis(500),
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(4),
                Duration::from_secs(300)
            ]
        );
    }

    #[test]
    fn permanent_errors_wait_long() {
        let e = Error::Plugin(PluginError::WrongAnswer {
            plugin: "p".into(),
            expected: 2,
            got: 1,
        });
        assert!(!e.is_transient());
        assert_eq!(retry_delay(&e, 1), Duration::from_secs(300));
        assert_eq!(e.metric_label(), "plugin_failed");
        assert_eq!(e.event_reason(), "PluginFailed");
        assert!(e.to_string().contains("plugin p"), "{e}");
    }
}
