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
    /// The component defines more linear memories or tables than a call's sandbox may create;
    /// refused before any instance is made, as the memory limit is.
    #[error(
        "plugin {plugin}: the component defines {count} {resource}; the sandbox allows at most {limit}"
    )]
    Resources {
        plugin: String,
        resource: &'static str,
        count: usize,
        limit: usize,
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
    #[error("plugin {plugin}: call to {function} {}", trap.summary())]
    Trap {
        plugin: String,
        function: &'static str,
        trap: Box<GuestTrap>,
    },
    #[error("plugin {plugin}: returned {got} decisions for {expected} pods")]
    WrongAnswer {
        plugin: String,
        expected: usize,
        got: usize,
    },
}

/// What stopped a guest: its panic message (a Rust guest prints one before it aborts), the
/// trap, what else it printed, and the wasm frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestTrap {
    /// `deliberate trap (at src/lib.rs:97:27)`, from a Rust guest's panic output.
    pub panic: Option<String>,
    /// wasmtime's description, e.g. "wasm `unreachable` instruction executed".
    pub trap: String,
    /// What the guest wrote to stdout/stderr during the call, but a panic message.
    pub output: String,
    /// The wasm frames, innermost first: shown by the CLI with `-v`.
    pub frames: Vec<String>,
}

impl GuestTrap {
    /// Reads a Rust panic message out of the guest's output: `thread '…' panicked at
    /// <file>:<line>:<col>:\n<message>\nnote: run with `RUST_BACKTRACE=1` …` (the note is
    /// useless for a guest, and dropped).
    pub fn new(trap: String, output: &str, frames: Vec<String>) -> Self {
        let mut panic = None;
        let mut rest = Vec::new();
        let mut lines = output.lines().peekable();
        while let Some(line) = lines.next() {
            if let Some(at) = line
                .split_once(" panicked at ")
                .map(|(_, at)| at.trim_end_matches(':'))
            {
                let mut message = Vec::new();
                while let Some(next) = lines.next_if(|l| !l.starts_with("note: run with")) {
                    message.push(next);
                }
                panic = Some(format!("{} (at {at})", message.join(" ").trim()));
            } else if !line.starts_with("note: run with `RUST_BACKTRACE") {
                rest.push(line);
            }
        }
        GuestTrap {
            panic,
            trap,
            output: rest.join("\n").trim().to_owned(),
            frames,
        }
    }

    /// One line: the panic message first, else the trap, and the rest of the guest's output.
    pub fn summary(&self) -> String {
        let mut text = match &self.panic {
            Some(panic) => format!("panicked: {panic}"),
            None => format!("trapped: {}", self.trap),
        };
        if !self.output.is_empty() {
            text.push_str(&format!(" (plugin output: {})", self.output));
        }
        text
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rust_panic_comes_first_without_the_backtrace_hint() {
        let output = "thread '<unnamed>' (1) panicked at src/lib.rs:97:27:\ndeliberate trap\n\
                      note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        let trap = GuestTrap::new(
            "wasm `unreachable` instruction executed".into(),
            output,
            vec!["0: 0x886e - <wasm function 138>".into()],
        );
        assert_eq!(
            trap.summary(),
            "panicked: deliberate trap (at src/lib.rs:97:27)"
        );
        let plain = GuestTrap::new(
            "wasm `unreachable` instruction executed".into(),
            "oops",
            vec![],
        );
        assert_eq!(
            plain.summary(),
            "trapped: wasm `unreachable` instruction executed (plugin output: oops)"
        );
    }
}
