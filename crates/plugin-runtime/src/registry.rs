//! The plugins a controller can use, by name, how a Service picks one, and what happens when
//! the one it picks is missing or fails.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
};

use super::{
    pipeline::{Configured, PipelineError, prepare},
    runtime::{DEFAULT_PLUGIN_WASM, Runtime},
};
use nad_model::{
    input::target::POLICY_ANNOTATION,
    keys::{KeySet, Keys},
};

/// The name of the built-in plugin.
pub const BUILT_IN: &str = "default";
/// What a Service gets when its plugin is missing or its call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Keep the slices as last applied (and report).
    #[default]
    Keep,
    /// Decide with the built-in default plugin instead (and report).
    Fallback,
}

impl std::str::FromStr for FailurePolicy {
    type Err = String;

    /// `keep` or `fallback`, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "keep" => Ok(FailurePolicy::Keep),
            "fallback" => Ok(FailurePolicy::Fallback),
            _ => Err(format!("{s:?} is not keep or fallback")),
        }
    }
}

/// A Service named a plugin that is not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPlugin {
    pub name: String,
    pub loaded: String,
    /// Why its only version did not load, if it was tried.
    pub failed: Option<String>,
}

impl std::error::Error for UnknownPlugin {}

impl std::fmt::Display for UnknownPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.name;
        match &self.failed {
            Some(failure) => write!(
                f,
                "annotation {POLICY_ANNOTATION}={name:?} names a plugin that did not load, and \
                 no earlier version of it serves: {failure}"
            ),
            None => write!(
                f,
                "annotation {POLICY_ANNOTATION}={name:?} names no loaded plugin (loaded: {}); \
                 fix the name or add {name}.wasm to the plugin directory",
                self.loaded
            ),
        }
    }
}

/// The plugin an `isim.dev/endpoint-policy` annotation names; `None` for no (or an empty)
/// annotation, which means the default plugin.
pub fn annotated(annotation: Option<&str>) -> Option<&str> {
    annotation.map(str::trim).filter(|a| !a.is_empty())
}

/// An immutable set of plugins; the controller swaps whole sets when the directory changes.
#[derive(Debug, Clone)]
pub struct Plugins {
    built_in: Configured,
    default_name: String,
    by_name: BTreeMap<String, Configured>,
    /// The last load failure of each name (its previous version, if any, keeps serving).
    failures: BTreeMap<String, String>,
    default_policy: FailurePolicy,
    policies: BTreeMap<String, FailurePolicy>,
}

impl Plugins {
    /// Only the built-in default plugin, checked by the same pipeline as any other.
    pub fn built_in(runtime: &Runtime) -> Result<Self, PipelineError> {
        Ok(Self {
            built_in: prepare(runtime, BUILT_IN, DEFAULT_PLUGIN_WASM, "")?,
            default_name: BUILT_IN.to_owned(),
            by_name: BTreeMap::new(),
            failures: BTreeMap::new(),
            default_policy: FailurePolicy::Keep,
            policies: BTreeMap::new(),
        })
    }

    /// Just one plugin, the default for every Service (for `plugin eval`, which runs one file
    /// through the controller's pipeline).
    pub fn only(name: &str, configured: Configured) -> Self {
        Self {
            built_in: configured.clone(),
            default_name: name.to_owned(),
            by_name: BTreeMap::from([(name.to_owned(), configured)]),
            failures: BTreeMap::new(),
            default_policy: FailurePolicy::Keep,
            policies: BTreeMap::new(),
        }
    }

    /// Adds or replaces a plugin; a plugin named `default` shadows the built-in one.
    pub fn insert(&mut self, name: &str, configured: Configured) {
        self.by_name.insert(name.to_owned(), configured);
        self.failures.remove(name);
    }

    pub fn remove(&mut self, name: &str) -> Option<Configured> {
        self.failures.remove(name);
        self.by_name.remove(name)
    }

    /// Records that a new version of `name` failed to load; the previous one keeps serving.
    pub fn record_failure(&mut self, name: &str, message: String) {
        self.failures.insert(name.to_owned(), message);
    }

    /// Why the latest version of `name` is not serving, if it failed.
    pub fn failure(&self, name: &str) -> Option<&str> {
        self.failures.get(name).map(String::as_str)
    }

    /// Makes another plugin the default for Services without the annotation. It need not be
    /// loaded yet (it may arrive in the plugin directory later).
    pub fn set_default(&mut self, name: &str) {
        name.clone_into(&mut self.default_name);
    }

    pub fn default_name(&self) -> &str {
        &self.default_name
    }

    pub fn set_failure_policies(
        &mut self,
        default: FailurePolicy,
        per_plugin: BTreeMap<String, FailurePolicy>,
    ) {
        self.default_policy = default;
        self.policies = per_plugin;
    }

    pub fn failure_policy(&self, name: &str) -> FailurePolicy {
        self.policies
            .get(name)
            .copied()
            .unwrap_or(self.default_policy)
    }

    /// The built-in default plugin (what a failing plugin falls back to).
    pub fn fallback(&self) -> &Configured {
        &self.built_in
    }

    pub fn get(&self, name: &str) -> Result<&Configured, UnknownPlugin> {
        match self.by_name.get(name) {
            Some(configured) => Ok(configured),
            None if name == BUILT_IN => Ok(&self.built_in),
            None => Err(UnknownPlugin {
                name: name.to_owned(),
                loaded: self.names().collect::<Vec<_>>().join(", "),
                failed: self.failure(name).map(str::to_owned),
            }),
        }
    }

    /// The name of the plugin a Service uses: its annotation's, else the default.
    pub fn name_for<'a>(&'a self, annotation: Option<&'a str>) -> &'a str {
        annotated(annotation).unwrap_or(&self.default_name)
    }

    /// The plugin a Service uses.
    pub fn select(&self, annotation: Option<&str>) -> Result<&Configured, UnknownPlugin> {
        self.get(self.name_for(annotation))
    }

    /// The pod label and annotation keys and condition types any loaded plugin reads: what
    /// the pod index keeps.
    pub fn keys(&self) -> Keys {
        let mut keys = Keys::default();
        for configured in std::iter::once(&self.built_in).chain(self.by_name.values()) {
            let info = configured.plugin.info();
            keys.union(&Keys {
                labels: KeySet::declared(&info.label_keys),
                annotations: KeySet::declared(&info.annotation_keys),
                conditions: KeySet::declared(configured.plugin.condition_types()),
            });
        }
        keys
    }

    /// Loaded plugin names, the built-in one included.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let shadowed = self.by_name.contains_key(BUILT_IN);
        (!shadowed)
            .then_some(BUILT_IN)
            .into_iter()
            .chain(self.by_name.keys().map(String::as_str))
    }
}

/// The current set of plugins, replaced as a whole when the plugin directory changes.
#[derive(Debug)]
pub struct SharedPlugins(RwLock<Arc<Plugins>>);

impl SharedPlugins {
    pub fn new(plugins: Plugins) -> Self {
        Self(RwLock::new(Arc::new(plugins)))
    }

    /// The set a reconcile uses from start to end.
    pub fn snapshot(&self) -> Arc<Plugins> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn replace(&self, plugins: Plugins) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(plugins);
    }
}
