//! What can go wrong with a plugin, kept apart by who is at fault: the component cannot be
//! loaded ([`LoadError`]), a call gave no usable answer ([`CallError`]: the sandbox stopped
//! it, or it answered malformed), or the guest answered with its own `err(...)`
//! ([`Rejected`], [`InvalidConfig`]): a verdict of the policy, not a failure of the host.

use std::time::Duration;

/// Why a component cannot serve: it does not compile, does not link against what this host
/// provides, or a call made while loading it (`info`, `decisions.scope`) failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {plugin}: cannot compile the component: {source:#}")]
    Compile {
        plugin: String,
        #[source]
        source: wasmtime::Error,
    },
    #[error(
        "plugin {plugin}: the component does not implement world isim:nad-endpoints/endpoint-policy@1.x with only the imports this host provides: {source:#}"
    )]
    Link {
        plugin: String,
        #[source]
        source: wasmtime::Error,
    },
    #[error(transparent)]
    Call(#[from] CallError),
}

/// Why a call gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("plugin {plugin}: cannot instantiate: {source:#}")]
    Instantiate {
        plugin: String,
        #[source]
        source: wasmtime::Error,
    },
    #[error("plugin {plugin}: call to {function} exceeded its deadline of {deadline:?}")]
    Timeout {
        plugin: String,
        function: &'static str,
        deadline: Duration,
    },
    #[error("plugin {plugin}: call to {function} exceeded its memory limit of {limit} bytes")]
    MemoryLimit {
        plugin: String,
        function: &'static str,
        limit: usize,
    },
    #[error(
        "plugin {plugin}: call to {function} trapped: {source:#}{}",
        guest_output(output)
    )]
    Trap {
        plugin: String,
        function: &'static str,
        #[source]
        source: wasmtime::Error,
        /// What the guest wrote to stdout/stderr during the call (e.g. its panic message).
        output: String,
    },
    #[error("plugin {plugin}: returned {got} decisions for {expected} pods")]
    WrongAnswer {
        plugin: String,
        expected: usize,
        got: usize,
    },
}

fn guest_output(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!(" (plugin output: {output})")
    }
}

impl CallError {
    /// A stable, low-cardinality name of the cause, for metric labels.
    pub fn cause(&self) -> &'static str {
        match self {
            CallError::Instantiate { .. } => "instantiate",
            CallError::Timeout { .. } => "timeout",
            CallError::MemoryLimit { .. } => "memory_limit",
            CallError::Trap { .. } => "trap",
            CallError::WrongAnswer { .. } => "wrong_answer",
        }
    }

    /// A busy machine may be the cause: worth a retry with backoff.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CallError::Timeout { .. } | CallError::Instantiate { .. }
        )
    }
}

/// The guest's own `err(...)` from `evaluate`: it cannot decide for this Service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin}: rejected the Service: {message}")]
pub struct Rejected {
    pub plugin: String,
    pub message: String,
}

/// The guest's own `err(...)` from `validate-config`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin}: invalid configuration: {message}")]
pub struct InvalidConfig {
    pub plugin: String,
    pub message: String,
}
