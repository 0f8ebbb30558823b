//! Reconcile errors: what failed, its cause, and how the controller reacts; and one-line
//! descriptions of Kubernetes client errors (never a dump of the client's structs).

use nad_model::reason::Reason;
use std::time::Duration;

use nad_process::kube_error::describe;

use nad_plugin_policy::PolicyError;
use nad_plugin_runtime::{CallError, Rejected, UnknownPlugin};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy plugin gave no usable answer; the Service's slices stay as last applied.
    #[error(transparent)]
    PluginCall(#[from] CallError),

    /// The policy plugin refused to decide for the Service (its own `err`); the Service's
    /// slices stay as last applied.
    #[error(transparent)]
    PluginRejected(#[from] Rejected),

    /// The Service names a plugin that is not loaded; its slices stay as last applied.
    #[error(transparent)]
    UnknownPlugin(#[from] UnknownPlugin),

    #[error("the plugin call did not complete: {0}")]
    PluginTask(#[from] tokio::task::JoinError),

    #[error("applying EndpointSlice {namespace}/{name}: {}", describe(source))]
    Apply {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("deleting EndpointSlice {namespace}/{name}: {}", describe(source))]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("the watch caches stopped before they were ready")]
    CachesNotReady,
}

/// What kind of failure an [`Error`] is: the one source of its metric label and Event reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    PluginFailed,
    PluginRejected,
    UnknownPlugin,
    PluginTask,
    Apply,
    Delete,
    CachesNotReady,
}

impl Category {
    /// Every category, for the series that exist from the start.
    pub const ALL: [Category; 7] = [
        Category::PluginFailed,
        Category::PluginRejected,
        Category::UnknownPlugin,
        Category::PluginTask,
        Category::Apply,
        Category::Delete,
        Category::CachesNotReady,
    ];

    /// A stable name for metric labels.
    pub fn metric_label(self) -> &'static str {
        match self {
            Category::PluginFailed => "plugin_failed",
            Category::PluginRejected => "plugin_rejected",
            Category::UnknownPlugin => "unknown_plugin",
            Category::PluginTask => "plugin_task",
            Category::Apply => "apply",
            Category::Delete => "delete",
            Category::CachesNotReady => "caches_not_ready",
        }
    }

    /// The Event reason shown by `kubectl describe service`.
    pub fn event_reason(self) -> Reason {
        match self {
            Category::PluginFailed | Category::PluginRejected | Category::PluginTask => {
                Reason::PluginFailed
            }
            Category::UnknownPlugin => Reason::UnknownPlugin,
            Category::Apply | Category::Delete => Reason::EndpointSliceWriteFailed,
            Category::CachesNotReady => Reason::NotReady,
        }
    }
}

impl From<PolicyError> for Error {
    fn from(e: PolicyError) -> Self {
        match e {
            PolicyError::Call(e) => Error::PluginCall(e),
            PolicyError::Rejected(e) => Error::PluginRejected(e),
            PolicyError::Unknown(e) => Error::UnknownPlugin(e),
        }
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::PluginCall(_) => Category::PluginFailed,
            Error::PluginRejected(_) => Category::PluginRejected,
            Error::UnknownPlugin(_) => Category::UnknownPlugin,
            Error::PluginTask(_) => Category::PluginTask,
            Error::Apply { .. } => Category::Apply,
            Error::Delete { .. } => Category::Delete,
            Error::CachesNotReady => Category::CachesNotReady,
        }
    }

    pub fn metric_label(&self) -> &'static str {
        self.category().metric_label()
    }

    pub fn event_reason(&self) -> Reason {
        self.category().event_reason()
    }

    /// Transient errors are retried with backoff; the others wait for a change (with a slow
    /// retry, since a change elsewhere, such as a fixed plugin, may cure them).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::PluginCall(e) => e.is_transient(),
            Error::Apply { source, .. } | Error::Delete { source, .. } => !is_invalid(source),
            Error::PluginRejected(_) | Error::UnknownPlugin(_) => false,
            Error::PluginTask(_) | Error::CachesNotReady => true,
        }
    }
}

impl Error {
    /// The Service's plugin gave no answer (the Service is told with an Event).
    pub fn is_plugin_failure(&self) -> bool {
        matches!(
            self,
            Error::PluginCall(_)
                | Error::PluginRejected(_)
                | Error::PluginTask(_)
                | Error::UnknownPlugin(_)
        )
    }

    /// Whether the failure looks like the API server (or its etcd) being away, so that the
    /// controller should notice when it is back ([`crate::watch::recovery`]).
    pub fn looks_unreachable(&self) -> bool {
        match self {
            Error::Apply { source, .. } | Error::Delete { source, .. } => {
                nad_process::kube_error::looks_unreachable(source)
            }
            _ => false,
        }
    }
}

/// The API server refused the request itself (`400`, `422`): sending it again cannot help.
pub fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 422 || status.code == 400)
}

/// The first retry of a Service after a transient error.
pub const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait after transient errors. An event about the Service, or the API server
/// becoming ready after an outage ([`crate::watch::recovery`]), retries it sooner.
pub const MAX_TRANSIENT_RETRY: Duration = Duration::from_secs(30);
/// The slow retry of a permanent error, in case a change elsewhere cures it.
pub const PERMANENT_RETRY: Duration = Duration::from_secs(300);

/// Per-object retry delays: exponential for transient errors, slow for permanent ones.
pub fn retry_delay(error: &Error, failures: u32) -> Duration {
    if !error.is_transient() {
        return PERMANENT_RETRY;
    }
    FIRST_RETRY
        .checked_mul(2_u32.saturating_pow(failures.saturating_sub(1).min(20)))
        .map_or(MAX_TRANSIENT_RETRY, |d| d.min(MAX_TRANSIENT_RETRY))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout() -> Error {
        Error::PluginCall(CallError::Timeout {
            plugin: "p".into(),
            function: "evaluate",
            deadline: Duration::from_millis(100),
        })
    }

    #[test]
    fn transient_errors_back_off_exponentially_up_to_thirty_seconds() {
        let e = timeout();
        assert!(e.is_transient());
        let delays: Vec<_> = [1, 2, 3, 4, 8, 30]
            .iter()
            .map(|n| retry_delay(&e, *n))
            .collect();
        assert_eq!(
            delays,
            vec![
                Duration::from_millis(250),
                Duration::from_millis(500),
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(30),
                Duration::from_secs(30)
            ]
        );
    }

    #[test]
    fn a_refused_write_is_one_line_naming_the_slice() {
        let e = Error::Apply {
            namespace: "team-a".into(),
            name: "web-ipv4-0".into(),
            source: kube::Error::Api(Box::new(
                kube::core::Status::failure(
                    "endpoints[0].addresses[0]: may not be in the loopback range",
                    "Invalid",
                )
                .with_code(422),
            )),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "applying EndpointSlice team-a/web-ipv4-0: 422 Invalid: endpoints[0].addresses[0]: may not be in the loopback range"
        );
        assert!(!text.contains("Status {"), "{text}");
        assert!(!e.is_transient());
    }

    #[test]
    fn permanent_errors_wait_long() {
        let e = Error::PluginCall(CallError::WrongAnswer {
            plugin: "p".into(),
            expected: 2,
            got: 1,
        });
        assert!(!e.is_transient());
        assert_eq!(retry_delay(&e, 1), Duration::from_secs(300));
        assert_eq!(e.metric_label(), "plugin_failed");
        assert_eq!(e.event_reason(), Reason::PluginFailed);
        assert!(e.to_string().contains("plugin p"), "{e}");
        let refused = Error::from(Rejected {
            plugin: "p".into(),
            message: "no zones".into(),
        });
        assert!(!refused.is_transient(), "a verdict, not a hiccup");
        assert_eq!(refused.metric_label(), "plugin_rejected");
    }
}
