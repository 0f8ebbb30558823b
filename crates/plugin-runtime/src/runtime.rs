//! The process-wide Wasm engine, and loaded plugins: compiled once, pre-instantiated, called
//! in a fresh [`Sandbox`] each time, on an instance from the engine's [`Pool`].

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Store,
    component::{Component, HasSelf, Linker},
};

use super::{
    CallError, InvalidConfig, LoadError, Rejected,
    bindings::{self, EndpointPolicyPre, HOST_WIT_VERSION},
    conditions::{self, CallConditions},
    diagnose,
    pool::{Pool, Slot},
    sandbox::{
        CallState, EPOCH_TICK, Limits, MAX_MEMORIES, MAX_TABLES, Sandbox, link_conditions,
        link_minimal_wasi,
    },
    selections,
    service::{self, service_view},
    wit,
};
use nad_model::decision::{Conditions, Decision};
use nad_model::{input::target::ServiceTarget, selection::Selection};

/// The default plugin, built from `plugins/default` by the build script.
pub const DEFAULT_PLUGIN_WASM: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));

/// The process-wide Wasm engine and the host functions plugins may import.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    limits: Limits,
    /// The slots the calls' instances come from.
    pool: Arc<Pool>,
    ticker_stop: Arc<AtomicBool>,
    /// The built-in plugin, compiled when a component fails to link: its types are the
    /// host's, to compare the component's with.
    reference: OnceLock<Option<Component>>,
}

impl Runtime {
    pub fn new(limits: Limits) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let pool = Pool::new(limits);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool.config()));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        link_minimal_wasi(&mut linker)?;
        bindings::EndpointPolicy::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        link_conditions(&mut linker, HOST_WIT_VERSION)?;
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
            pool,
            ticker_stop,
            reference: OnceLock::new(),
        })
    }

    /// Compiles and links a component and asks it for its `info`.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<Plugin, LoadError> {
        let component = self.compile(name, bytes)?;
        self.link(name, &component)
    }

    /// Compiles a component (no code of it runs).
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Component, LoadError> {
        Component::new(&self.engine, bytes).map_err(|source| LoadError::Compile {
            plugin: name.to_owned(),
            source,
        })
    }

    /// Links a compiled component against the host's imports and asks it for its `info`.
    pub fn link(&self, name: &str, component: &Component) -> Result<Plugin, LoadError> {
        check_resources(name, component)?;
        let pre = self
            .linker
            .instantiate_pre(component)
            .and_then(EndpointPolicyPre::new)
            .map_err(|source| LoadError::Link {
                plugin: name.to_owned(),
                source,
            })?;
        let mut plugin = Plugin {
            name: Arc::from(name),
            pre,
            engine: self.engine.clone(),
            limits: self.limits,
            pool: self.pool.clone(),
            info: wit::PluginInfo {
                name: String::new(),
                version: String::new(),
                label_keys: Vec::new(),
                annotation_keys: Vec::new(),
            },
            scope: DecisionScope::WholeSet,
            reads_conditions: imports_interface(component, conditions::IMPORT_INTERFACE),
            reads_devices: imports_interface(component, conditions::DEVICES_INTERFACE),
            condition_types: Vec::new(),
            selected_by: export_function(component, selections::INTERFACE, "selected-by"),
            selections: Arc::default(),
        };
        plugin.info = plugin.call("info", None, |exports, store| {
            exports.policy.call_info(store)
        })?;
        if let Some(types) =
            export_function(component, conditions::KEYS_INTERFACE, "condition-types")
        {
            plugin.condition_types =
                plugin.call("condition-keys.condition-types", None, |exports, store| {
                    let types = exports
                        .raw
                        .get_typed_func::<(), (Vec<String>,)>(&mut *store, &types)?;
                    Ok(types.call(&mut *store, ())?.0)
                })?;
        }
        if let Some(scope) = export_function(component, DECISIONS_INTERFACE, "scope") {
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

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Where the component's `policy` interface differs from the host's, when it does.
    pub fn explain_link(&self, component: &Component) -> Option<String> {
        let reference = self
            .reference
            .get_or_init(|| Component::new(&self.engine, DEFAULT_PLUGIN_WASM).ok())
            .as_ref()?;
        diagnose::policy_mismatch(&self.engine, reference, component, POLICY_INTERFACE).map(
            |diff| format!("its {POLICY_INTERFACE} interface differs from this host's: {diff}"),
        )
    }

    /// Names (with versions) of the component's imports, e.g. `isim:nad-endpoints/log@1.1.0`.
    pub fn imports(&self, component: &Component) -> Vec<String> {
        component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect()
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
    pool: Arc<Pool>,
    info: wit::PluginInfo,
    /// What each pod's decision depends on, as the plugin declares it.
    scope: DecisionScope,
    /// The plugin imports `pod-conditions` (since 1.2): its calls carry their pods' conditions.
    reads_conditions: bool,
    /// The plugin imports `network-devices` (since 1.3): its calls carry their pods' devices.
    reads_devices: bool,
    /// The condition types it declares in `condition-keys` (since 1.2).
    condition_types: Vec<String>,
    /// `candidate-labels.selected-by`, when it declares the labels its Services select on
    /// (since 1.4).
    selected_by: Option<wasmtime::component::ComponentExportIndex>,
    /// Its answers to `selected-by`, by Service version and configuration.
    selections: Arc<selections::Kept>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The exports of one instance: the typed `policy`, and the raw instance for the optional
/// interfaces of newer minor versions.
struct Exports<'a> {
    policy: &'a bindings::exports::isim::nad_endpoints::policy::Guest,
    raw: &'a wasmtime::component::Instance,
}

/// The interface every plugin exports.
const POLICY_INTERFACE: &str = "isim:nad-endpoints/policy";
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

/// Function `function` of the optional interface `interface` (a name up to its `@`), when
/// the component exports it (at any 1.x).
fn export_function(
    component: &Component,
    interface: &str,
    function: &str,
) -> Option<wasmtime::component::ComponentExportIndex> {
    let engine = component.engine();
    let name = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .find(|name| name.starts_with(interface))?;
    let (_, instance) = component.get_export(None, &name)?;
    let (_, function) = component.get_export(Some(&instance), function)?;
    Some(function)
}

/// Refuses a component whose core modules define more memories or tables than a call's Store
/// may create: wasmtime would stop its instantiation with a bare count error, which says nothing
/// of the limit. A component that imports core modules (its needs are unknown until then) cannot
/// link against this host, which provides none.
fn check_resources(name: &str, component: &Component) -> Result<(), LoadError> {
    let Some(needs) = component.resources_required() else {
        return Ok(());
    };
    for (resource, count, limit) in [
        ("linear memories", needs.num_memories, MAX_MEMORIES),
        ("tables", needs.num_tables, MAX_TABLES),
    ] {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if count > limit {
            return Err(LoadError::Resources {
                plugin: name.to_owned(),
                resource,
                count,
                limit,
            });
        }
    }
    Ok(())
}

/// Whether the component imports `interface` (a name up to its `@`), at any version.
fn imports_interface(component: &Component, interface: &str) -> bool {
    component
        .component_type()
        .imports(component.engine())
        .any(|(name, _)| name.starts_with(interface))
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bytes of its compiled code, which the controller keeps once for all its calls.
    pub fn code_bytes(&self) -> usize {
        let image = self.pre.instance_pre().component().image_range();
        (image.end as usize).saturating_sub(image.start as usize)
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

    /// Whether the plugin reads its pods' conditions (it imports `pod-conditions`).
    pub fn reads_conditions(&self) -> bool {
        self.reads_conditions
    }

    /// Whether the plugin reads its pods' DRA devices (it imports `network-devices`).
    pub fn reads_devices(&self) -> bool {
        self.reads_devices
    }

    /// Whether the plugin declares the labels its Services select on.
    pub fn selects(&self) -> bool {
        self.selected_by.is_some()
    }

    /// The labels every pod the plugin includes for `target` has, under `config`: only those
    /// whose keys it reads (the pod records hold no other label); every pod for a plugin that
    /// declares nothing. Kept until the Service or the configuration changes.
    pub fn selection(
        &self,
        target: &ServiceTarget,
        config: &str,
    ) -> Result<Arc<Selection>, CallError> {
        let Some(function) = self.selected_by else {
            return Ok(Arc::default());
        };
        let key = service::key(target, config);
        if let Some(kept) = self.selections.get(key) {
            return Ok(kept);
        }
        let service = service_view(target);
        let labels = self.call(
            "candidate-labels.selected-by",
            Some(&service),
            |exports, store| {
                let selected_by = exports
                    .raw
                    .get_typed_func::<(&wit::Service, &str), (Vec<wit::KeyValue>,)>(
                        &mut *store,
                        &function,
                    )?;
                Ok(selected_by.call(&mut *store, (&service, config))?.0)
            },
        )?;
        let selection = Selection::new(labels.into_iter().map(|kv| (kv.key, kv.value)))
            .retain_keys(|key| self.reads_label(key));
        let selection = Arc::new(selection);
        self.selections.keep(key, selection.clone());
        Ok(selection)
    }

    /// The condition types the plugin declares (`*` means all).
    pub fn condition_types(&self) -> &[String] {
        &self.condition_types
    }

    /// Whether the plugin reads pod condition `condition_type` through `declared`.
    pub fn reads_condition(&self, condition_type: &str) -> bool {
        self.reads_conditions
            && self
                .condition_types
                .iter()
                .any(|t| t == "*" || t == condition_type)
    }

    /// Whether the plugin accepts `config`; its refusal is its own verdict.
    pub fn validate_config(&self, config: &str) -> Result<Result<(), InvalidConfig>, CallError> {
        let answer = self.call("validate-config", None, |exports, store| {
            exports.policy.call_validate_config(store, config)
        })?;
        Ok(answer.map_err(|message| InvalidConfig {
            plugin: self.name.to_string(),
            message,
        }))
    }

    /// One decision per pod, in order, or the plugin's own refusal to decide. `conditions`
    /// are the pods' (in order), for a plugin that reads them; `None` gives it none.
    pub fn evaluate(
        &self,
        service: &wit::Service,
        pods: &[wit::Pod],
        conditions: Option<Arc<CallConditions>>,
        config: &str,
    ) -> Result<Result<Vec<Decision>, Rejected>, CallError> {
        self.evaluate_measured(service, pods, conditions, config).0
    }

    /// [`Self::evaluate`], with what the call cost (the controller's per-plugin figures).
    pub fn evaluate_measured(
        &self,
        service: &wit::Service,
        pods: &[wit::Pod],
        conditions: Option<Arc<CallConditions>>,
        config: &str,
    ) -> (
        Result<Result<Vec<Decision>, Rejected>, CallError>,
        CallStats,
    ) {
        let (answer, stats) = self.evaluate_with_stats(service, pods, conditions, config);
        let checked = answer.and_then(|answer| {
            let answer = match answer {
                Ok(answer) => answer,
                Err(message) => {
                    return Ok(Err(Rejected {
                        plugin: self.name.to_string(),
                        message,
                    }));
                }
            };
            if answer.len() != pods.len() {
                return Err(CallError::WrongAnswer {
                    plugin: self.name.to_string(),
                    expected: pods.len(),
                    got: answer.len(),
                });
            }
            Ok(Ok(answer.into_iter().map(decision).collect()))
        });
        (checked, stats)
    }

    /// `evaluate`, with what the call cost (for `plugin bench`): the guest's answer as it
    /// gave it.
    pub fn evaluate_with_stats(
        &self,
        service: &wit::Service,
        pods: &[wit::Pod],
        conditions: Option<Arc<CallConditions>>,
        config: &str,
    ) -> (
        Result<Result<Vec<wit::Decision>, String>, CallError>,
        CallStats,
    ) {
        let conditions = self.call_conditions(pods.len(), conditions);
        self.call_with_stats("evaluate", Some(service), conditions, |exports, store| {
            exports.policy.call_evaluate(store, service, pods, config)
        })
    }

    /// What an `evaluate` of `pods` pods carries for the `pod-conditions` import.
    fn call_conditions(
        &self,
        pods: usize,
        conditions: Option<Arc<CallConditions>>,
    ) -> Arc<CallConditions> {
        let reads = self.reads_conditions || self.reads_devices;
        match conditions {
            Some(conditions) if reads => conditions,
            None if reads => Arc::new(CallConditions::none(pods)),
            _ => Arc::default(),
        }
    }

    /// Runs `f` on a fresh instance in a fresh Store under the deadline and memory limit.
    fn call<R>(
        &self,
        function: &'static str,
        service: Option<&wit::Service>,
        f: impl FnOnce(Exports<'_>, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.call_in(function, service, Arc::default(), f)
    }

    fn call_in<R>(
        &self,
        function: &'static str,
        service: Option<&wit::Service>,
        conditions: Arc<CallConditions>,
        f: impl FnOnce(Exports<'_>, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.call_with_stats(function, service, conditions, f).0
    }

    fn call_with_stats<R>(
        &self,
        function: &'static str,
        service: Option<&wit::Service>,
        conditions: Arc<CallConditions>,
        f: impl FnOnce(Exports<'_>, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> (Result<R, CallError>, CallStats) {
        // Taken before the Store, so that a wait for it does not count against the deadline,
        // and given back after it (dropped in reverse order).
        let _slot: Slot = self.pool.take();
        let mut sandbox = Sandbox::new(
            &self.engine,
            self.name.clone(),
            self.limits,
            service,
            conditions,
        );
        let started = Instant::now();
        let mut instantiated = started;
        let store = &mut sandbox.store;
        let result = self
            .pre
            .instance_pre()
            .instantiate(&mut *store)
            .and_then(|raw| Ok((bindings::EndpointPolicy::new(&mut *store, &raw)?, raw)))
            .map_err(|e| (true, e))
            .and_then(|(typed, raw)| {
                instantiated = Instant::now();
                let exports = Exports {
                    policy: typed.isim_nad_endpoints_policy(),
                    raw: &raw,
                };
                f(exports, store).map_err(|e| (false, e))
            });
        let stats = CallStats {
            instantiate: instantiated - started,
            run: instantiated.elapsed(),
            memory_peak: sandbox.memory_peak(),
        };
        sandbox.finish();
        tracing::trace!(plugin = &*self.name, function, elapsed = ?started.elapsed(), "plugin call");
        let result = result
            .map_err(|(instantiating, source)| sandbox.failure(function, instantiating, source));
        (result, stats)
    }
}

/// What one call cost.
#[derive(Debug, Clone, Copy)]
pub struct CallStats {
    /// Making the instance (a fresh store, the component's start, its memory).
    pub instantiate: std::time::Duration,
    /// The call itself, arguments and results included.
    pub run: std::time::Duration,
    /// The most linear memory the instance had, in bytes.
    pub memory_peak: usize,
}

/// A plugin's answer for one pod as the host's [`Decision`].
pub fn decision(d: wit::Decision) -> Decision {
    match d {
        wit::Decision::Include(c) => Decision::Include(Conditions {
            ready: c.ready,
            serving: c.serving,
            terminating: c.terminating,
        }),
        wit::Decision::Exclude(reason) => Decision::Exclude(reason),
    }
}
