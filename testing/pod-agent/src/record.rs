//! What the agent created, noted as it creates it: `<state>/created` lists each network
//! namespace and each file outside the state directory, one per line (`netns nsc-node-0`,
//! `file /etc/netns/nsc-p-…`). `hack/pod-agent.sh down` removes what it lists, and by prefix
//! anything a record missed. Processes need no line: every one the agent starts runs inside
//! one of its namespaces, where `ip netns pids` finds it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static RECORD: OnceLock<PathBuf> = OnceLock::new();

/// Records into `<state>/created` from now on, starting it afresh (what an earlier run
/// created is found by the prefix at start-up).
pub fn init(state: &Path) {
    let path = state.join("created");
    let _ = std::fs::remove_file(&path);
    let _ = RECORD.set(path);
}

/// Notes that `what` (a `netns` or a `file`) was created.
pub fn note(kind: &str, what: &str) {
    let Some(path) = RECORD.get() else { return };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{kind} {what}"));
    if let Err(e) = written {
        tracing::warn!(record = %path.display(), error = %e, "could not note what was created");
    }
}
