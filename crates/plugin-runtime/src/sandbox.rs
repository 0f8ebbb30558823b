//! The sandbox every call runs in: a fresh Store with an empty WASI context (stdio captured),
//! a memory limit, an epoch deadline, and the host's `log` import.

use std::{sync::Arc, time::Duration};

use wasmtime::{
    Engine, Store, Trap,
    component::{Linker, ResourceTable},
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView, p2::pipe::MemoryOutputPipe};

use super::{
    CallError, GuestTrap, bindings,
    conditions::{self, CallConditions},
    wit,
};

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

/// How often the epoch advances; deadlines are rounded up to whole ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);
/// At most this many log lines per call reach the host log; the rest are counted.
/// The target of a plugin's own log lines (the `log` import), which a log filter names to show
/// or hide them: `nad_plugin_runtime::sandbox=debug`.
pub const PLUGIN_LOG_TARGET: &str = module_path!();
const MAX_LOG_LINES_PER_CALL: usize = 64;
/// Longer guest log messages are cut.
const MAX_LOG_MESSAGE: usize = 2048;

/// Links only the WASI interfaces a Rust `wasm32-wasip2` guest imports through its standard
/// library (streams for stdio, cli environment/exit/std streams), all backed by an empty
/// context: no arguments, no environment, stdin empty, stdout and stderr captured. Clocks,
/// random numbers, the filesystem and sockets are not linked, so a plugin that imports them
/// is refused at load (a clock would let it sleep past its deadline: epoch interruption only
/// stops guest code).
pub fn link_minimal_wasi(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
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

/// How much of a guest's stdout/stderr (e.g. a panic message) is kept for error messages.
const MAX_GUEST_OUTPUT: usize = 1024;

/// Per-call state: an empty WASI context and the call's resource accounting.
pub struct CallState {
    wasi: WasiCtx,
    pub(super) table: ResourceTable,
    limiter: MemoryLimiter,
    plugin: Arc<str>,
    /// `namespace/name` of the Service being evaluated, for the plugin's log lines.
    service: Option<String>,
    log_lines: usize,
    /// The conditions of the call's pods, for the `pod-conditions` import.
    pub(super) conditions: Arc<CallConditions>,
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
            Level::Trace => {
                tracing::trace!(target: PLUGIN_LOG_TARGET, plugin, service, "{message}")
            }
            Level::Debug => {
                tracing::debug!(target: PLUGIN_LOG_TARGET, plugin, service, "{message}")
            }
            Level::Info => tracing::info!(target: PLUGIN_LOG_TARGET, plugin, service, "{message}"),
            Level::Warn => tracing::warn!(target: PLUGIN_LOG_TARGET, plugin, service, "{message}"),
            Level::Error => {
                tracing::error!(target: PLUGIN_LOG_TARGET, plugin, service, "{message}")
            }
        }
    }
}

impl bindings::isim::nad_endpoints::types::Host for CallState {}

/// How many core instances, linear memories and tables one call's Store may create. A Rust
/// `wasm32-wasip2` plugin makes 3 instances, 1 memory and 2 tables; a component composed from
/// several modules needs a few more. Each memory reserves gigabytes of address space whatever
/// its size, and the Store counts every instance it makes, so the counts are bounded besides
/// the bytes.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_MEMORIES: usize = 8;
pub const MAX_TABLES: usize = 64;
/// What one table element costs the host (wasmtime keeps a pointer per element).
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// Holds the memory limit for the whole Store, not per memory: a component may hold several
/// core modules, each with its own linear memories and tables, and each of them under the limit
/// alone could still take it many times over together. Linear memory bytes and table elements
/// (at [`TABLE_ELEMENT_BYTES`] each) share one budget. Records whether the budget was hit (a
/// denied growth is reported as a trap by the guest, which would otherwise hide the cause).
struct MemoryLimiter {
    limit: usize,
    hit: bool,
    /// Bytes granted so far: linear memories and tables, of all the Store's instances. Nothing
    /// a Store allocates is freed before the Store is dropped, so this is also the peak.
    total: usize,
    /// The linear memory alone (what `plugin bench` reports).
    memory: usize,
}

impl MemoryLimiter {
    fn new(limit: usize) -> Self {
        MemoryLimiter {
            limit,
            hit: false,
            total: 0,
            memory: 0,
        }
    }

    /// Grants `bytes` more, or records the hit. A growth past the memory's or table's own
    /// maximum fails after the limiter allowed it and would leave `total` counting bytes never
    /// allocated; refusing it here keeps the count exact (the guest sees the same failure).
    fn grant(&mut self, bytes: usize, what: &str) -> wasmtime::Result<()> {
        let total = self.total.saturating_add(bytes);
        if total > self.limit {
            self.hit = true;
            return Err(wasmtime::format_err!(
                "memory limit of {} bytes reached: {what} wanted {bytes} bytes more with {} \
                 already in use",
                self.limit,
                self.total
            ));
        }
        self.total = total;
        Ok(())
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        let more = desired.saturating_sub(current);
        self.grant(more, "a linear memory")?;
        self.memory += more;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        let more = desired
            .saturating_sub(current)
            .saturating_mul(TABLE_ELEMENT_BYTES);
        self.grant(more, "a table")?;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// A call's store and what it captures of the guest's output.
pub struct Sandbox {
    pub store: Store<CallState>,
    output: MemoryOutputPipe,
    plugin: Arc<str>,
    limits: Limits,
}

impl Sandbox {
    pub fn new(
        engine: &Engine,
        plugin: Arc<str>,
        limits: Limits,
        service: Option<&wit::Service>,
        conditions: Arc<CallConditions>,
    ) -> Self {
        let output = MemoryOutputPipe::new(MAX_GUEST_OUTPUT);
        let mut store = Store::new(
            engine,
            CallState {
                wasi: WasiCtx::builder()
                    .stdout(output.clone())
                    .stderr(output.clone())
                    .build(),
                table: ResourceTable::new(),
                limiter: MemoryLimiter::new(limits.memory_bytes),
                plugin: plugin.clone(),
                service: service.map(|s| format!("{}/{}", s.namespace, s.name)),
                log_lines: 0,
                conditions,
            },
        );
        store.limiter(|state| &mut state.limiter);
        let ticks = limits
            .deadline
            .as_nanos()
            .div_ceil(EPOCH_TICK.as_nanos())
            .max(1);
        // The ticker may advance between two ticks of the deadline: allow one more.
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1));
        Sandbox {
            store,
            output,
            plugin,
            limits,
        }
    }

    /// The most linear memory the call's instance had (all its memories), in bytes.
    pub fn memory_peak(&self) -> usize {
        self.store.data().limiter.memory
    }

    /// Reports log lines over the limit, once per call.
    pub fn finish(&self) {
        let dropped = self
            .store
            .data()
            .log_lines
            .saturating_sub(MAX_LOG_LINES_PER_CALL);
        if dropped > 0 {
            tracing::warn!(
                plugin = &*self.plugin,
                dropped,
                "plugin log lines over the per-call limit were dropped"
            );
        }
    }

    /// What stopped the call: the memory limit, the deadline, instantiation, or a trap.
    pub fn failure(
        &self,
        function: &'static str,
        instantiating: bool,
        source: wasmtime::Error,
    ) -> CallError {
        let plugin = self.plugin.to_string();
        if self.store.data().limiter.hit {
            CallError::MemoryLimit {
                plugin,
                function,
                limit: self.limits.memory_bytes,
            }
        } else if source.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            CallError::Timeout {
                plugin,
                function,
                deadline: self.limits.deadline,
            }
        } else if instantiating {
            CallError::Instantiate { plugin, source }
        } else {
            let output = String::from_utf8_lossy(&self.output.contents()).into_owned();
            CallError::Trap {
                plugin,
                function,
                trap: Box::new(GuestTrap::new(trap_text(&source), &output, frames(&source))),
            }
        }
    }
}

/// wasmtime's description of a trap ("wasm `unreachable` instruction executed"), or of the
/// error that stopped the call.
fn trap_text(source: &wasmtime::Error) -> String {
    match source.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => source.root_cause().to_string(),
    }
}

/// The wasm frames of a trap, innermost first, e.g. `0x886e in policy::evaluate` (the name
/// when the component keeps its names section).
fn frames(source: &wasmtime::Error) -> Vec<String> {
    source
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(|backtrace| {
            backtrace
                .frames()
                .iter()
                .map(|frame| {
                    let name = frame.func_name().map_or_else(
                        || format!("wasm function {}", frame.func_index()),
                        str::to_owned,
                    );
                    match frame.module_offset() {
                        Some(offset) => format!("{offset:#x} in {name}"),
                        None => name,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Links `pod-conditions` and `network-devices` at this host's version: each function answers
/// from the call's [`CallConditions`] (lists of the call's length; empty outside `evaluate`).
pub fn link_conditions(
    linker: &mut Linker<CallState>,
    version: (u64, u64, u64),
) -> wasmtime::Result<()> {
    let (major, minor, patch) = version;
    let interface = conditions::IMPORT_INTERFACE;
    let mut instance = linker.instance(&format!("{interface}{major}.{minor}.{patch}"))?;
    instance.func_wrap("network-readiness", |store, (): ()| {
        let state: &CallState = store.data();
        Ok((state.conditions.network.clone(),))
    })?;
    instance.func_wrap("declared", |store, (): ()| {
        let state: &CallState = store.data();
        Ok((state.conditions.declared.clone(),))
    })?;
    let interface = conditions::DEVICES_INTERFACE;
    let mut instance = linker.instance(&format!("{interface}{major}.{minor}.{patch}"))?;
    instance.func_wrap("devices", |store, (): ()| {
        let state: &CallState = store.data();
        Ok((state.conditions.devices.clone(),))
    })?;
    Ok(())
}
