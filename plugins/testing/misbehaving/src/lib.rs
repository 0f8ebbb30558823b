//! A deliberately broken endpoint-policy plugin, used by the host's tests to prove the sandbox
//! limits (deadline, memory limit, traps, wrong answers). NEVER deploy it.
//!
//! The configuration document is a mode name (surrounding whitespace ignored):
//!
//! | mode           | `evaluate` does                                                      |
//! |----------------|----------------------------------------------------------------------|
//! | `loop`         | loops forever                                                        |
//! | `memory-bomb`  | allocates and touches 1 MiB chunks forever                           |
//! | `trap`         | panics with "deliberate trap"                                        |
//! | `short-answer` | returns one decision fewer than pods (1 decision for 0 pods)         |
//! | `policy-error` | returns `Err("deliberate policy error")`                             |
//! | `echo`         | includes every pod (ready = serving = pod.ready) and logs "echo"     |
//! | `show-inputs`  | excludes every pod with a reason describing what the plugin received |
//! | `trap-on-team-red` | like `echo`, but traps when a pod has the label `team=red` |
//! | `environment`  | excludes every pod with a reason listing the environment variables, arguments and working directory it sees |
//! | `show-conditions` | excludes every pod with a reason listing its network readiness and declared conditions (`pod-conditions`) |
//! | `show-devices` | excludes every pod with a reason listing its DRA devices on the Service's network (`network-devices`) |
//! | `false-claim`  | like `echo`, but `candidate-labels` claims `team=blue` (and `app=web`, a key it does not read): a claim its decisions break |
//! | `trap-on-claim` | like `echo`, but `candidate-labels.selected-by` panics |
//! | `remember`     | excludes every pod with a reason saying what it found of a previous call's markers (a static, and pages it grows the memory by), then leaves its own |
//!
//! Every other mode claims no labels (`candidate-labels`).
//! It declares the condition type `example.com/disk-ready` (`condition-keys`).
//! `bad-config` is always rejected by `validate-config` (and by `evaluate`); anything else is an
//! unknown mode.

use core::hint::black_box;

/// The WIT bindings and the component's exports (the generated ABI glue is `unsafe`).
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "selecting-endpoint-policy",
    });

    use super::Misbehaving;
    export!(Misbehaving);
}

use bindings::exports::isim::nad_endpoints::candidate_labels::Guest as CandidateLabels;
use bindings::exports::isim::nad_endpoints::condition_keys::Guest as ConditionKeys;
use bindings::exports::isim::nad_endpoints::decisions::{DecisionScope, Guest as Decisions};
use bindings::exports::isim::nad_endpoints::policy::Guest;
use bindings::isim::nad_endpoints::log::{Level, log};
use bindings::isim::nad_endpoints::network_devices::{self, NetworkDevice};
use bindings::isim::nad_endpoints::pod_conditions::{self, ConditionStatus, PodCondition};
use bindings::isim::nad_endpoints::types::{
    Conditions, Decision, KeyValue, PluginInfo, Pod, PodPhase, Service,
};

/// What `evaluate` does, chosen by the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Loop,
    MemoryBomb,
    Trap,
    ShortAnswer,
    PolicyError,
    Echo,
    ShowInputs,
    TrapOnTeamRed,
    Environment,
    ShowConditions,
    ShowDevices,
    FalseClaim,
    TrapOnClaim,
    Remember,
}

const MODES: &str = "loop, memory-bomb, trap, short-answer, policy-error, echo, show-inputs, \
                     trap-on-team-red, environment, show-conditions, show-devices, \
                     false-claim, trap-on-claim, remember";

impl Mode {
    fn parse(config: &str) -> Result<Self, String> {
        match config.trim() {
            "loop" => Ok(Self::Loop),
            "memory-bomb" => Ok(Self::MemoryBomb),
            "trap" => Ok(Self::Trap),
            "short-answer" => Ok(Self::ShortAnswer),
            "policy-error" => Ok(Self::PolicyError),
            "echo" => Ok(Self::Echo),
            "show-inputs" => Ok(Self::ShowInputs),
            "trap-on-team-red" => Ok(Self::TrapOnTeamRed),
            "environment" => Ok(Self::Environment),
            "show-conditions" => Ok(Self::ShowConditions),
            "show-devices" => Ok(Self::ShowDevices),
            "false-claim" => Ok(Self::FalseClaim),
            "trap-on-claim" => Ok(Self::TrapOnClaim),
            "remember" => Ok(Self::Remember),
            "bad-config" => Err("bad-config is never valid".to_string()),
            other => Err(format!("unknown mode {other:?} (expected one of: {MODES})")),
        }
    }
}

struct Misbehaving;

/// Its decisions depend on the whole set (some modes answer for all pods at once).
impl Decisions for Misbehaving {
    fn scope() -> DecisionScope {
        DecisionScope::WholeSet
    }
}

impl CandidateLabels for Misbehaving {
    fn selected_by(_service: Service, config: String) -> Vec<KeyValue> {
        match Mode::parse(&config) {
            Ok(Mode::FalseClaim) => vec![
                KeyValue {
                    key: "team".to_string(),
                    value: "blue".to_string(),
                },
                KeyValue {
                    key: "app".to_string(),
                    value: "web".to_string(),
                },
            ],
            Ok(Mode::TrapOnClaim) => panic!("deliberate trap in selected-by"),
            _ => Vec::new(),
        }
    }
}

impl ConditionKeys for Misbehaving {
    fn condition_types() -> Vec<String> {
        vec!["example.com/disk-ready".to_string()]
    }
}

/// `type=status(reason)`.
fn show_condition(c: &PodCondition) -> String {
    let status = match c.status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    };
    format!("{}={status}({})", c.type_, c.reason)
}

/// `claim:driver/pool/device@interface[ips]{conditions}`.
fn show_device(d: &NetworkDevice) -> String {
    let conditions: Vec<String> = d.conditions.iter().map(show_condition).collect();
    format!(
        "{}:{}/{}/{}@{}[{}]{{{}}}",
        d.claim,
        d.driver,
        d.pool,
        d.device,
        d.interface_name,
        d.ips.join(" "),
        conditions.join(", ")
    )
}

impl Guest for Misbehaving {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "misbehaving".to_string(),
            version: "0.0.0".to_string(),
            label_keys: vec!["team".to_string()],
            annotation_keys: vec!["*".to_string()],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        Mode::parse(&config).map(|_| ())
    }

    fn evaluate(
        _service: Service,
        pods: Vec<Pod>,
        config: String,
    ) -> Result<Vec<Decision>, String> {
        match Mode::parse(&config)? {
            Mode::Loop => spin_forever(),
            Mode::MemoryBomb => eat_memory_forever(),
            Mode::Trap => panic!("deliberate trap"),
            Mode::ShortAnswer => Ok(short_answer(&pods)),
            Mode::PolicyError => Err("deliberate policy error".to_string()),
            Mode::Echo => {
                log(Level::Info, "echo");
                Ok(pods.iter().map(echo).collect())
            }
            Mode::FalseClaim | Mode::TrapOnClaim => Ok(pods.iter().map(echo).collect()),
            Mode::Remember => Ok(exclude_all(&pods, &remember())),
            Mode::ShowInputs => Ok(pods
                .iter()
                .map(|pod| Decision::Exclude(show_inputs(pod)))
                .collect()),
            Mode::ShowConditions => {
                let network = pod_conditions::network_readiness();
                let declared = pod_conditions::declared();
                Ok((0..pods.len())
                    .map(|i| {
                        let network = network
                            .get(i)
                            .and_then(Option::as_ref)
                            .map_or_else(|| "none".to_string(), show_condition);
                        let declared: Vec<String> = declared
                            .get(i)
                            .into_iter()
                            .flatten()
                            .map(show_condition)
                            .collect();
                        Decision::Exclude(format!(
                            "network: {network}; declared: [{}]",
                            declared.join(", ")
                        ))
                    })
                    .collect())
            }
            Mode::ShowDevices => {
                let devices = network_devices::devices();
                Ok((0..pods.len())
                    .map(|i| {
                        let shown: Vec<String> = devices
                            .get(i)
                            .into_iter()
                            .flatten()
                            .map(show_device)
                            .collect();
                        Decision::Exclude(format!("devices: [{}]", shown.join(", ")))
                    })
                    .collect())
            }
            Mode::Environment => Ok(exclude_all(&pods, &environment())),
            // A bug that only some inputs reach (the host's self-test passes).
            Mode::TrapOnTeamRed => {
                if pods.iter().any(|p| {
                    p.labels
                        .iter()
                        .any(|kv| kv.key == "team" && kv.value == "red")
                }) {
                    panic!("deliberate trap on team=red");
                }
                Ok(pods.iter().map(echo).collect())
            }
        }
    }
}

/// The marker `remember` leaves, to be found by a later call if anything survives.
const MARKER: u64 = 0x5ee_1a57_ca11;

/// A static every call of `remember` sets.
static SEEN: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Pages `remember` grows the memory by: past the 2 MiB a host may keep resident.
#[cfg(target_arch = "wasm32")]
const GROWN_PAGES: usize = 48;

/// What `remember` finds of a previous call's markers, in the static and in the first and last
/// pages it grows the memory by; then it leaves its own there.
#[cfg(target_arch = "wasm32")]
fn remember() -> String {
    use core::sync::atomic::Ordering;
    let seen = SEEN.swap(MARKER, Ordering::Relaxed);
    let first = core::arch::wasm32::memory_grow(0, GROWN_PAGES);
    if first == usize::MAX {
        return "the memory did not grow".to_string();
    }
    let page = |n: usize| ((first + n) * 65_536) as *mut u64;
    let (start, end) = (page(0), page(GROWN_PAGES - 1));
    // SAFETY: both pages were just added to this instance's memory, which nothing else uses.
    #[allow(unsafe_code)]
    let found = unsafe {
        let found = (start.read_volatile(), end.read_volatile());
        start.write_volatile(MARKER);
        end.write_volatile(MARKER);
        found
    };
    format!(
        "static {seen:#x}, first grown page {:#x}, last grown page {:#x}",
        found.0, found.1
    )
}

#[cfg(not(target_arch = "wasm32"))]
fn remember() -> String {
    let seen = SEEN.swap(MARKER, core::sync::atomic::Ordering::Relaxed);
    format!("static {seen:#x} (not in Wasm: no memory to grow)")
}

/// What the process around the plugin would tell it: its environment variables, arguments and
/// working directory (a sandbox gives none).
fn environment() -> String {
    let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    let args: Vec<String> = std::env::args().collect();
    let cwd =
        std::env::current_dir().map_or_else(|e| format!("none ({e})"), |d| d.display().to_string());
    format!(
        "env=[{}] args=[{}] cwd={cwd}",
        vars.join(","),
        args.join(",")
    )
}

/// Never returns; the counter goes through `black_box` so the loop cannot be optimized away.
fn spin_forever() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 MiB chunks filled with a non-zero byte (so every page is written) and keeps them
/// all, until the host's memory limit stops it.
fn eat_memory_forever() -> ! {
    const CHUNK: usize = 1 << 20;
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        chunks.push(black_box(vec![0xA5_u8; CHUNK]));
        black_box(&chunks);
    }
}

/// Every pod excluded, with `reason`: how a mode reports what it found.
fn exclude_all(pods: &[Pod], reason: &str) -> Vec<Decision> {
    pods.iter()
        .map(|_| Decision::Exclude(reason.to_string()))
        .collect()
}

/// One decision fewer than pods, or one decision for no pods: always the wrong count.
fn short_answer(pods: &[Pod]) -> Vec<Decision> {
    let count = match pods.len() {
        0 => 1,
        n => n - 1,
    };
    (0..count)
        .map(|_| Decision::Exclude("short-answer".to_string()))
        .collect()
}

fn echo(pod: &Pod) -> Decision {
    Decision::Include(Conditions {
        ready: pod.ready,
        serving: pod.ready,
        terminating: pod.terminating,
    })
}

/// `labels=k1=v1,k2=v2;annotations=a=b;ips=1.2.3.4,fd00::1;zone=z;node=n;phase=running`, lists
/// in the order received.
fn show_inputs(pod: &Pod) -> String {
    format!(
        "labels={};annotations={};ips={};zone={};node={};phase={}",
        join_pairs(&pod.labels),
        join_pairs(&pod.annotations),
        pod.ips.join(","),
        pod.zone,
        pod.node_name,
        phase_name(pod.phase),
    )
}

fn join_pairs(pairs: &[KeyValue]) -> String {
    pairs
        .iter()
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect::<Vec<_>>()
        .join(",")
}

/// The phase as spelled in the WIT enum.
fn phase_name(phase: PodPhase) -> &'static str {
    match phase {
        PodPhase::Pending => "pending",
        PodPhase::Running => "running",
        PodPhase::Succeeded => "succeeded",
        PodPhase::Failed => "failed",
        PodPhase::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    fn pod() -> Pod {
        Pod {
            name: "p".to_string(),
            namespace: "ns".to_string(),
            uid: "uid".to_string(),
            labels: vec![kv("k1", "v1"), kv("k2", "v2")],
            annotations: vec![kv("a", "b")],
            phase: PodPhase::Running,
            ready: true,
            terminating: false,
            node_name: "n".to_string(),
            zone: "z".to_string(),
            ips: vec!["1.2.3.4".to_string(), "fd00::1".to_string()],
        }
    }

    #[test]
    fn modes_parse() {
        assert_eq!(Mode::parse(" loop\n"), Ok(Mode::Loop));
        assert_eq!(Mode::parse("memory-bomb"), Ok(Mode::MemoryBomb));
        assert_eq!(Mode::parse("show-inputs"), Ok(Mode::ShowInputs));
        assert_eq!(
            Mode::parse("bad-config"),
            Err("bad-config is never valid".to_string())
        );
        for bad in ["", "  ", "LOOP", "nope"] {
            assert!(
                Mode::parse(bad).is_err_and(|e| e.starts_with("unknown mode")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn show_inputs_text() {
        assert_eq!(
            show_inputs(&pod()),
            "labels=k1=v1,k2=v2;annotations=a=b;ips=1.2.3.4,fd00::1;zone=z;node=n;phase=running"
        );
        let mut empty = pod();
        empty.labels.clear();
        empty.annotations.clear();
        empty.zone.clear();
        empty.node_name.clear();
        empty.phase = PodPhase::Succeeded;
        assert_eq!(
            show_inputs(&empty),
            "labels=;annotations=;ips=1.2.3.4,fd00::1;zone=;node=;phase=succeeded"
        );
    }

    #[test]
    fn short_answer_is_always_wrong() {
        assert_eq!(short_answer(&[]).len(), 1);
        assert_eq!(short_answer(&[pod()]).len(), 0);
        assert_eq!(short_answer(&[pod(), pod(), pod()]).len(), 2);
    }

    #[test]
    fn echo_conditions() {
        let mut p = pod();
        p.ready = false;
        p.terminating = true;
        match echo(&p) {
            Decision::Include(c) => assert!(!c.ready && !c.serving && c.terminating),
            Decision::Exclude(r) => panic!("excluded: {r}"),
        }
    }
}
