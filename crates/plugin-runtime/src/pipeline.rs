//! The pipeline every plugin file goes through before it serves: size limit, content hash,
//! parse, compile, WIT world version, link, `info`, configuration, and a self-test call.
//!
//! The same pipeline serves the controller's plugin directory and the `plugin eval` and
//! `plugin inspect` commands, so what an author tests offline is what the controller runs.

use nad_model::digest::sha256_hex;

use super::{
    CallError, LoadError, Rejected,
    bindings::{HOST_WIT_VERSION, WIT_PACKAGE},
    diagnose,
    runtime::{Plugin, Runtime},
    wit,
};
use nad_model::{decision::Decision, fetch::MAX_PLUGIN_BYTES, input::target::POLICY_ANNOTATION};

const POLICY_INTERFACE: &str = "isim:nad-endpoints/policy";

/// The step of the pipeline a plugin failed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An OCI artifact could not be had: its reference, the registry, or the artifact.
    Fetch,
    /// An OCI artifact's signatures do not pass the verification policy (or a component that
    /// cannot be signed, while one is in force).
    Signature,
    Size,
    Parse,
    Compile,
    World,
    Link,
    Info,
    Config,
    SelfTest,
    /// A call while loading (`info`, `validate-config`, the self-test) hit the memory limit, or
    /// the component defines more memories or tables than the sandbox allows.
    MemoryLimit,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Fetch => "fetch",
            Step::Signature => "signature",
            Step::Size => "size",
            Step::Parse => "parse",
            Step::Compile => "compile",
            Step::World => "world",
            Step::Link => "link",
            Step::Info => "info",
            Step::Config => "config",
            Step::SelfTest => "self-test",
            Step::MemoryLimit => "memory-limit",
        }
    }
}

/// A plugin file that cannot serve, with the step and the cause.
#[derive(Debug, thiserror::Error)]
pub struct PipelineError {
    pub plugin: String,
    pub hash: String,
    pub step: Step,
    pub message: String,
    /// The self-test ran out of time: perhaps a busy machine, so worth another try later.
    pub timed_out: bool,
    /// The wasm frames of a trap, innermost first (the CLI shows them with `-v`).
    pub frames: Vec<String>,
}

impl std::fmt::Display for PipelineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (plugin, message) = (&self.plugin, &self.message);
        match self.step {
            // Nothing was read: there is no content to name.
            Step::Fetch => write!(f, "plugin {plugin}: cannot fetch it: {message}"),
            Step::Signature => write!(f, "plugin {plugin}: not loaded unverified: {message}"),
            step => write!(
                f,
                "plugin {plugin} (sha256 {}): {} check failed: {message}",
                self.hash,
                step.as_str()
            ),
        }
    }
}

impl PipelineError {
    /// A plugin whose component could not be fetched.
    pub fn fetch(plugin: &str, message: String) -> Self {
        PipelineError {
            plugin: plugin.to_owned(),
            hash: String::new(),
            step: Step::Fetch,
            message,
            timed_out: false,
            frames: Vec::new(),
        }
    }

    /// A plugin whose signatures do not pass the verification policy.
    pub fn signature(plugin: &str, message: String) -> Self {
        PipelineError {
            step: Step::Signature,
            ..Self::fetch(plugin, message)
        }
    }

    /// The failure of a call made while loading: the memory limit is a step of its own.
    fn call(step: Step, e: &CallError, fail: impl Fn(Step, String) -> Self, plugin: &str) -> Self {
        let step = if matches!(e, CallError::MemoryLimit { .. }) {
            Step::MemoryLimit
        } else {
            step
        };
        let frames = match e {
            CallError::Trap { trap, .. } => trap.frames.clone(),
            _ => Vec::new(),
        };
        PipelineError {
            timed_out: matches!(e, CallError::Timeout { .. }),
            frames,
            ..fail(step, error_text(e, plugin))
        }
    }
}

/// A warning when a plugin's file name (the name Services select) and the name it gives
/// itself in `info` differ.
pub fn name_mismatch(selected: &str, info: &wit::PluginInfo) -> Option<String> {
    (info.name != selected).then(|| {
        format!(
            "plugin file {selected}.wasm calls itself {:?} in info(): Services select it by \
             its file name ({}: {selected}); rename the file or change info().name",
            info.name, POLICY_ANNOTATION
        )
    })
}

/// `isim:nad-endpoints/policy@1.2.3` -> `(1, 2, 3)`.
fn policy_version(exports: &[String]) -> Option<(u64, u64, u64)> {
    exports.iter().find_map(|name| {
        let version = name.strip_prefix(POLICY_INTERFACE)?.strip_prefix('@')?;
        let mut parts = version.split(['.', '-', '+']).map(str::parse::<u64>);
        Some((
            parts.next()?.ok()?,
            parts.next()?.ok()?,
            parts.next()?.ok()?,
        ))
    })
}

/// Whether this host can run a plugin built for `version` of the WIT package.
pub fn supported(version: (u64, u64, u64)) -> bool {
    version.0 == HOST_WIT_VERSION.0 && version.1 <= HOST_WIT_VERSION.1
}

/// The self-test: one `evaluate` on a made-up Service and two pods. A refusal of the made-up
/// Service is still an answer.
pub fn self_test(
    plugin: &Plugin,
    config: &str,
) -> Result<Result<Vec<Decision>, Rejected>, CallError> {
    let (service, pods) = self_test_input();
    plugin.evaluate(&service, &pods, None, config)
}

fn self_test_input() -> (wit::Service, Vec<wit::Pod>) {
    let service = wit::Service {
        name: "self-test".into(),
        namespace: "self-test".into(),
        labels: vec![],
        annotations: vec![],
        ports: vec![wit::ServicePort {
            name: "http".into(),
            protocol: "TCP".into(),
            port: 80,
            target_port: wit::TargetPort::Number(8080),
            app_protocol: None,
        }],
        publish_not_ready_addresses: false,
        network: "self-test/net".into(),
    };
    let pod = |name: &str, ready: bool, ip: &str| wit::Pod {
        name: name.into(),
        namespace: "self-test".into(),
        uid: format!("uid-{name}"),
        labels: vec![],
        annotations: vec![],
        phase: wit::PodPhase::Running,
        ready,
        terminating: false,
        node_name: "node".into(),
        zone: "zone".into(),
        ips: vec![ip.into()],
    };
    (
        service,
        vec![pod("a", true, "192.0.2.1"), pod("b", false, "2001:db8::2")],
    )
}

/// Whether the component targets a WIT version this host runs; else why not.
fn world_check(exports: &[String]) -> Result<(), String> {
    match policy_version(exports) {
        Some(version) if supported(version) => Ok(()),
        Some((major, minor, patch)) => Err(format!(
            "built for {WIT_PACKAGE}@{major}.{minor}.{patch}; this host runs {WIT_PACKAGE}@{}.x up to {}.{}",
            HOST_WIT_VERSION.0, HOST_WIT_VERSION.0, HOST_WIT_VERSION.1
        )),
        None => Err(format!(
            "does not export {POLICY_INTERFACE}@{}.x (exports: {}); implement world {WIT_PACKAGE}/endpoint-policy",
            HOST_WIT_VERSION.0,
            if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            }
        )),
    }
}

/// A plugin with the configuration it was validated with.
#[derive(Debug, Clone)]
pub struct Configured {
    pub plugin: Plugin,
    pub config: String,
    /// sha256 of the component.
    pub hash: String,
}

/// Runs a plugin file through every step. `config` is its configuration document ("" for
/// none). On success the plugin is ready to serve.
pub fn prepare(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    config: &str,
) -> Result<Configured, PipelineError> {
    let hash = sha256_hex(bytes);
    let fail = |step: Step, message: String| PipelineError {
        plugin: name.to_owned(),
        hash: hash.clone(),
        step,
        message,
        timed_out: false,
        frames: Vec::new(),
    };
    if bytes.len() as u64 > MAX_PLUGIN_BYTES {
        return Err(fail(
            Step::Size,
            format!(
                "{} bytes is over the limit of {} bytes",
                bytes.len(),
                MAX_PLUGIN_BYTES
            ),
        ));
    }
    // A component starts with the Wasm magic and the component-model layer (0x0d 00 01 00).
    if !bytes.starts_with(b"\0asm") {
        return Err(fail(
            Step::Parse,
            "not a WebAssembly file (no \\0asm header)".into(),
        ));
    }
    if bytes.get(4..8) != Some(&[0x0d, 0x00, 0x01, 0x00]) {
        return Err(fail(
            Step::Parse,
            "a core WebAssembly module, not a component: build for wasm32-wasip2 (or wrap the module with `wasm-tools component new`)".into(),
        ));
    }
    let component = runtime
        .compile(name, bytes)
        .map_err(|e| fail(Step::Compile, error_text(&e, name)))?;
    world_check(&runtime.exports(&component)).map_err(|message| fail(Step::World, message))?;
    let unprovided = diagnose::unprovided_imports(runtime.engine(), &component);
    if !unprovided.is_empty() {
        return Err(fail(Step::Link, diagnose::unprovided_message(&unprovided)));
    }
    let plugin = match runtime.link(name, &component) {
        Ok(plugin) => plugin,
        // The types of the exports are checked when an instance is made, at the first call.
        Err(LoadError::Call(e @ CallError::Instantiate { .. })) => {
            return Err(match runtime.explain_link(&component) {
                Some(message) => fail(Step::Link, message),
                None => PipelineError::call(Step::Info, &e, fail, name),
            });
        }
        Err(LoadError::Call(e)) => return Err(PipelineError::call(Step::Info, &e, fail, name)),
        Err(e @ LoadError::Resources { .. }) => {
            return Err(fail(Step::MemoryLimit, error_text(&e, name)));
        }
        Err(e) => {
            let message = runtime
                .explain_link(&component)
                .unwrap_or_else(|| error_text(&e, name));
            return Err(fail(Step::Link, message));
        }
    };
    match plugin.validate_config(config) {
        Ok(Ok(())) => {}
        Ok(Err(refused)) => return Err(fail(Step::Config, error_text(&refused, name))),
        Err(e) => return Err(PipelineError::call(Step::Config, &e, fail, name)),
    }
    if let Err(e) = self_test(&plugin, config) {
        return Err(PipelineError::call(Step::SelfTest, &e, fail, name));
    }
    Ok(Configured {
        plugin,
        config: config.to_owned(),
        hash,
    })
}

/// The cause alone: the plugin's name is already in [`PipelineError`].
fn error_text(e: &impl std::fmt::Display, plugin: &str) -> String {
    let text = e.to_string();
    let prefix = format!("plugin {plugin}: ");
    text.strip_prefix(&prefix).unwrap_or(&text).to_owned()
}

/// What `plugin inspect` reports about a file.
#[derive(Debug)]
pub struct Inspection {
    pub size: usize,
    pub hash: String,
    /// The WIT package version the component's policy export targets, if any.
    pub wit_version: Option<(u64, u64, u64)>,
    /// The component's imports and exports (empty when it does not compile).
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// The plugin, ready to serve, when the whole pipeline passes.
    pub result: Result<Configured, PipelineError>,
}

pub fn inspect(runtime: &Runtime, name: &str, bytes: &[u8], config: &str) -> Inspection {
    let component = runtime.compile(name, bytes).ok();
    let (imports, exports) = component
        .as_ref()
        .map(|c| (runtime.imports(c), runtime.exports(c)))
        .unwrap_or_default();
    Inspection {
        size: bytes.len(),
        hash: sha256_hex(bytes),
        wit_version: policy_version(&exports),
        imports,
        exports,
        result: prepare(runtime, name, bytes, config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_policy_export() {
        let exports = |v: &str| {
            vec![
                "wasi:cli/run@0.2.0".to_string(),
                format!("{POLICY_INTERFACE}@{v}"),
            ]
        };
        assert_eq!(policy_version(&exports("1.0.0")), Some((1, 0, 0)));
        assert_eq!(policy_version(&exports("1.3.2-rc.1")), Some((1, 3, 2)));
        assert_eq!(policy_version(&["other:pkg/policy@1.0.0".into()]), None);
        assert_eq!(policy_version(&[POLICY_INTERFACE.into()]), None);
    }

    #[test]
    fn the_host_runs_its_major_version_up_to_its_minor() {
        assert!(supported((1, 0, 0)));
        assert!(supported((1, 0, 9)));
        assert!(!supported((1, HOST_WIT_VERSION.1 + 1, 0)));
        assert!(!supported((2, 0, 0)));
        assert!(!supported((0, 9, 0)));
    }
}
