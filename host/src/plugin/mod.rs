//! The plugin runtime: Wasm components that decide which pods a Service publishes.
//!
//! One [`Engine`] for the process; each component compiled once and pre-instantiated; a fresh
//! [`Store`] per call with an epoch deadline and a memory limit; WASI linked with an empty
//! context (no files, environment, clock-based sleeps are bounded by the deadline, no network).
//! A plugin that traps, loops, runs out of memory or answers malformed fails only the call it
//! was in, with a [`PluginError`] that names the plugin and the cause.

mod bindings;
mod convert;
mod pipeline;
mod registry;
mod reload;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use wasmtime::{
    Config, Engine, Store, Trap,
    component::{Component, HasSelf, Linker, ResourceTable},
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use bindings::EndpointPolicyPre;
pub use bindings::isim::nad_endpoints::types as wit;
pub use convert::{decision, pod_view, service_view};
pub use pipeline::{
    HOST_WIT_VERSION, Inspection, PipelineError, Step, WIT_PACKAGE, inspect, prepare,
};
pub use registry::{
    BUILT_IN, Configured, FailurePolicy, MAX_PLUGIN_BYTES, POLICY_ANNOTATION, Plugins,
    SharedPlugins, UnknownPlugin,
};
pub use reload::{PluginDir, Scan};

use crate::reconcile::plan::Decision;

/// The default plugin, built from `plugins/default` by the build script.
pub const DEFAULT_PLUGIN_WASM: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));

/// How often the epoch advances; deadlines are rounded up to whole ticks.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// At most this many log lines per call reach the host log; the rest are counted.
const MAX_LOG_LINES_PER_CALL: usize = 64;
/// Longer guest log messages are cut.
const MAX_LOG_MESSAGE: usize = 2048;

/// Limits every call runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(100),
            memory_bytes: 64 << 20,
        }
    }
}

/// Why a plugin could not be loaded or gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
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
    #[error("plugin {plugin}: rejected the Service: {message}")]
    Rejected { plugin: String, message: String },
    #[error("plugin {plugin}: invalid configuration: {message}")]
    InvalidConfig { plugin: String, message: String },
}

fn guest_output(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!(" (plugin output: {output})")
    }
}

impl PluginError {
    /// A stable, low-cardinality name of the cause, for metric labels and Event reasons.
    pub fn cause(&self) -> &'static str {
        match self {
            PluginError::Compile { .. } => "compile",
            PluginError::Link { .. } => "link",
            PluginError::Instantiate { .. } => "instantiate",
            PluginError::Timeout { .. } => "timeout",
            PluginError::MemoryLimit { .. } => "memory_limit",
            PluginError::Trap { .. } => "trap",
            PluginError::WrongAnswer { .. } => "wrong_answer",
            PluginError::Rejected { .. } => "rejected",
            PluginError::InvalidConfig { .. } => "invalid_config",
        }
    }
}

/// Links only the WASI interfaces a Rust `wasm32-wasip2` guest imports through its standard
/// library (streams for stdio, cli environment/exit/std streams), all backed by an empty
/// context: no arguments, no environment, stdin empty, stdout and stderr captured. Clocks,
/// random numbers, the filesystem and sockets are not linked, so a plugin that imports them
/// is refused at load (a clock would let it sleep past its deadline: epoch interruption only
/// stops guest code).
fn link_minimal_wasi(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    use wasmtime::component::HasData;
    use wasmtime_wasi::{
        cli::{WasiCli, WasiCliView},
        p2::bindings::{cli, sync::io},
    };

    struct Io;
    impl HasData for Io {
        type Data<'a> = &'a mut ResourceTable;
    }
    let l = linker;
    io::error::add_to_linker::<CallState, Io>(l, |t| &mut t.table)?;
    io::poll::add_to_linker::<CallState, Io>(l, |t| &mut t.table)?;
    io::streams::add_to_linker::<CallState, Io>(l, |t| &mut t.table)?;
    cli::exit::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::environment::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stdin::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stdout::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stderr::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_input::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_output::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stdin::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stdout::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stderr::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    Ok(())
}

/// The exports of one instance: the typed `policy`, and the raw instance for the optional
/// interfaces of newer minor versions.
struct Exports<'a> {
    policy: &'a bindings::exports::isim::nad_endpoints::policy::Guest,
    raw: &'a wasmtime::component::Instance,
}

/// The interface a 1.1 plugin may export to declare its decision scope.
const DECISIONS_INTERFACE: &str = "isim:nad-endpoints/decisions@";

/// What a plugin's decisions depend on: `decision-scope` of the `decisions` interface (since
/// 1.1); `whole-set` for a plugin that does not declare it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, wasmtime::component::ComponentType, wasmtime::component::Lift,
)]
#[component(enum)]
#[repr(u8)]
pub enum DecisionScope {
    #[component(name = "per-pod")]
    PerPod,
    #[component(name = "whole-set")]
    WholeSet,
}

impl DecisionScope {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionScope::PerPod => "per-pod",
            DecisionScope::WholeSet => "whole-set",
        }
    }
}

/// The `decisions.scope` function, when the component exports the interface (of any 1.x).
fn decisions_scope(component: &Component) -> Option<wasmtime::component::ComponentExportIndex> {
    let engine = component.engine();
    let name = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .find(|name| name.starts_with(DECISIONS_INTERFACE))?;
    let (_, interface) = component.get_export(None, &name)?;
    let (_, function) = component.get_export(Some(&interface), "scope")?;
    Some(function)
}

/// How much of a guest's stdout/stderr (e.g. a panic message) is kept for error messages.
const MAX_GUEST_OUTPUT: usize = 1024;

/// Per-call state: an empty WASI context and the call's resource accounting.
struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    plugin: Arc<str>,
    /// `namespace/name` of the Service being evaluated, for the plugin's log lines.
    service: Option<String>,
    log_lines: usize,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::isim::nad_endpoints::log::Host for CallState {
    fn log(&mut self, level: bindings::isim::nad_endpoints::log::Level, message: String) {
        use bindings::isim::nad_endpoints::log::Level;
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            return;
        }
        let mut message = message;
        if message.len() > MAX_LOG_MESSAGE {
            let mut cut = MAX_LOG_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let plugin = &*self.plugin;
        let service = self.service.as_deref().unwrap_or_default();
        match level {
            Level::Trace => tracing::trace!(plugin, service, "{message}"),
            Level::Debug => tracing::debug!(plugin, service, "{message}"),
            Level::Info => tracing::info!(plugin, service, "{message}"),
            Level::Warn => tracing::warn!(plugin, service, "{message}"),
            Level::Error => tracing::error!(plugin, service, "{message}"),
        }
    }
}

impl bindings::isim::nad_endpoints::types::Host for CallState {}

/// Caps linear memory and records whether the cap was hit (a denied growth is reported as a
/// trap by the guest, which would otherwise hide the cause).
struct MemoryLimiter {
    limit: usize,
    hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit = true;
            return Err(wasmtime::format_err!(
                "memory limit of {} bytes reached (wanted {desired})",
                self.limit
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The process-wide Wasm engine and the host functions plugins may import.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    limits: Limits,
    ticker_stop: Arc<AtomicBool>,
}

impl Runtime {
    pub fn new(limits: Limits) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        link_minimal_wasi(&mut linker)?;
        bindings::EndpointPolicy::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (ticker_engine, stop) = (engine.clone(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })?;
        Ok(Self {
            engine,
            linker,
            limits,
            ticker_stop,
        })
    }

    /// Compiles and links a component and asks it for its `info`.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<Plugin, PluginError> {
        let component = self.compile(name, bytes)?;
        self.link(name, &component)
    }

    /// Compiles a component (no code of it runs).
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Component, PluginError> {
        Component::new(&self.engine, bytes).map_err(|source| PluginError::Compile {
            plugin: name.to_owned(),
            source,
        })
    }

    /// Links a compiled component against the host's imports and asks it for its `info`.
    pub fn link(&self, name: &str, component: &Component) -> Result<Plugin, PluginError> {
        let pre = self
            .linker
            .instantiate_pre(component)
            .and_then(EndpointPolicyPre::new)
            .map_err(|source| PluginError::Link {
                plugin: name.to_owned(),
                source,
            })?;
        let mut plugin = Plugin {
            name: Arc::from(name),
            pre,
            engine: self.engine.clone(),
            limits: self.limits,
            info: wit::PluginInfo {
                name: String::new(),
                version: String::new(),
                label_keys: Vec::new(),
                annotation_keys: Vec::new(),
            },
            scope: DecisionScope::WholeSet,
        };
        plugin.info = plugin.call("info", None, |exports, store| {
            exports.policy.call_info(store)
        })?;
        if let Some(scope) = decisions_scope(component) {
            let answer = plugin.call("decisions.scope", None, |exports, store| {
                let scope = exports
                    .raw
                    .get_typed_func::<(), (DecisionScope,)>(&mut *store, &scope)?;
                Ok(scope.call(&mut *store, ())?.0)
            })?;
            plugin.scope = answer;
        }
        Ok(plugin)
    }

    /// Names (with versions) of the component's exports, e.g.
    /// `isim:nad-endpoints/policy@1.0.0`.
    pub fn exports(&self, component: &Component) -> Vec<String> {
        component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// A loaded plugin, ready to be called from any thread.
#[derive(Clone)]
pub struct Plugin {
    name: Arc<str>,
    pre: EndpointPolicyPre<CallState>,
    engine: Engine,
    limits: Limits,
    info: wit::PluginInfo,
    /// What each pod's decision depends on, as the plugin declares it.
    scope: DecisionScope,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the plugin said about itself when it was loaded.
    pub fn info(&self) -> &wit::PluginInfo {
        &self.info
    }

    /// Whether each pod's decision depends on the Service, that pod and the configuration
    /// alone, so that after a pod change only that pod needs asking.
    pub fn per_pod(&self) -> bool {
        self.scope == DecisionScope::PerPod
    }

    /// What the plugin declares its decisions depend on.
    pub fn decision_scope(&self) -> DecisionScope {
        self.scope
    }

    /// Whether the plugin reads the pod label `key`.
    pub fn reads_label(&self, key: &str) -> bool {
        self.info.label_keys.iter().any(|k| k == "*" || k == key)
    }

    /// Whether the plugin reads the pod annotation `key`.
    pub fn reads_annotation(&self, key: &str) -> bool {
        self.info
            .annotation_keys
            .iter()
            .any(|k| k == "*" || k == key)
    }

    pub fn validate_config(&self, config: &str) -> Result<(), PluginError> {
        self.call("validate-config", None, |exports, store| {
            exports.policy.call_validate_config(store, config)
        })?
        .map_err(|message| PluginError::InvalidConfig {
            plugin: self.name.to_string(),
            message,
        })
    }

    /// One decision per pod, in order.
    pub fn evaluate(
        &self,
        service: &wit::Service,
        pods: &[wit::Pod],
        config: &str,
    ) -> Result<Vec<Decision>, PluginError> {
        let answer = self
            .call("evaluate", Some(service), |exports, store| {
                exports.policy.call_evaluate(store, service, pods, config)
            })?
            .map_err(|message| PluginError::Rejected {
                plugin: self.name.to_string(),
                message,
            })?;
        if answer.len() != pods.len() {
            return Err(PluginError::WrongAnswer {
                plugin: self.name.to_string(),
                expected: pods.len(),
                got: answer.len(),
            });
        }
        Ok(answer.into_iter().map(convert::decision).collect())
    }

    /// Runs `f` on a fresh instance in a fresh Store under the deadline and memory limit.
    fn call<R>(
        &self,
        function: &'static str,
        service: Option<&wit::Service>,
        f: impl FnOnce(Exports<'_>, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let output = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(MAX_GUEST_OUTPUT);
        let mut store = Store::new(
            &self.engine,
            CallState {
                wasi: WasiCtx::builder()
                    .stdout(output.clone())
                    .stderr(output.clone())
                    .build(),
                table: ResourceTable::new(),
                limiter: MemoryLimiter {
                    limit: self.limits.memory_bytes,
                    hit: false,
                },
                plugin: self.name.clone(),
                service: service.map(|s| format!("{}/{}", s.namespace, s.name)),
                log_lines: 0,
            },
        );
        store.limiter(|state| &mut state.limiter);
        let ticks = self
            .limits
            .deadline
            .as_nanos()
            .div_ceil(EPOCH_TICK.as_nanos())
            .max(1);
        // The ticker may advance between two ticks of the deadline: allow one more.
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1));
        let started = Instant::now();
        let result = self
            .pre
            .instance_pre()
            .instantiate(&mut store)
            .and_then(|raw| Ok((bindings::EndpointPolicy::new(&mut store, &raw)?, raw)))
            .map_err(|e| (true, e))
            .and_then(|(typed, raw)| {
                let exports = Exports {
                    policy: typed.isim_nad_endpoints_policy(),
                    raw: &raw,
                };
                f(exports, &mut store).map_err(|e| (false, e))
            });
        let dropped = store
            .data()
            .log_lines
            .saturating_sub(MAX_LOG_LINES_PER_CALL);
        if dropped > 0 {
            tracing::warn!(
                plugin = &*self.name,
                dropped,
                "plugin log lines over the per-call limit were dropped"
            );
        }
        tracing::trace!(plugin = &*self.name, function, elapsed = ?started.elapsed(), "plugin call");
        result.map_err(|(instantiating, source)| {
            let plugin = self.name.to_string();
            if store.data().limiter.hit {
                PluginError::MemoryLimit {
                    plugin,
                    function,
                    limit: self.limits.memory_bytes,
                }
            } else if source.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                PluginError::Timeout {
                    plugin,
                    function,
                    deadline: self.limits.deadline,
                }
            } else if instantiating {
                PluginError::Instantiate { plugin, source }
            } else {
                let output = String::from_utf8_lossy(&output.contents())
                    .trim()
                    .to_owned();
                PluginError::Trap {
                    plugin,
                    function,
                    source,
                    output,
                }
            }
        })
    }
}
