//! The plugins a controller can use, by name, and how a Service picks one.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use super::{Plugin, PluginError, Runtime};

/// The Service annotation naming the plugin that decides its pods.
pub const POLICY_ANNOTATION: &str = "isim.dev/endpoint-policy";
/// The name of the built-in plugin.
pub const BUILT_IN: &str = "default";
/// Plugin files larger than this are refused.
pub const MAX_PLUGIN_BYTES: u64 = 16 << 20;

/// A plugin with the configuration it was validated with.
#[derive(Debug, Clone)]
pub struct Configured {
    pub plugin: Plugin,
    pub config: String,
}

/// Why a plugin file in the plugin directory was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin file {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("plugin file {path}: {size} bytes is over the limit of {MAX_PLUGIN_BYTES} bytes")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("plugin file {path}: {source}")]
    Plugin {
        path: PathBuf,
        #[source]
        source: PluginError,
    },
}

/// The built-in plugin and those loaded from the plugin directory.
#[derive(Debug, Clone)]
pub struct Plugins {
    default_name: String,
    by_name: BTreeMap<String, Configured>,
}

/// A Service named a plugin that is not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation {POLICY_ANNOTATION}={name:?} names no loaded plugin (loaded: {loaded}); \
     fix the name or add {name}.wasm to the plugin directory"
)]
pub struct UnknownPlugin {
    pub name: String,
    pub loaded: String,
}

impl Plugins {
    /// Only the built-in default plugin.
    pub fn built_in(runtime: &Runtime) -> Result<Self, PluginError> {
        let plugin = runtime.load_default()?;
        plugin.validate_config("")?;
        Ok(Self {
            default_name: BUILT_IN.to_owned(),
            by_name: BTreeMap::from([(
                BUILT_IN.to_owned(),
                Configured {
                    plugin,
                    config: String::new(),
                },
            )]),
        })
    }

    /// Adds a plugin (replacing one of the same name).
    pub fn insert(&mut self, name: &str, configured: Configured) {
        self.by_name.insert(name.to_owned(), configured);
    }

    /// Loads every `<name>.wasm` in `dir` (with `<name>.json` as its configuration when
    /// present). A file that fails is reported and left out; the others load.
    pub fn load_dir(&mut self, runtime: &Runtime, dir: &Path) -> Vec<LoadError> {
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(source) => {
                errors.push(LoadError::Read {
                    path: dir.to_owned(),
                    source,
                });
                return errors;
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        paths.sort();
        for path in paths {
            match load_file(runtime, &path) {
                Ok((name, configured)) => {
                    tracing::info!(
                        plugin = %name,
                        version = %configured.plugin.info().version,
                        path = %path.display(),
                        "plugin loaded"
                    );
                    self.insert(&name, configured);
                }
                Err(e) => {
                    tracing::error!(error = %e, "plugin not loaded");
                    errors.push(e);
                }
            }
        }
        errors
    }

    /// Makes another loaded plugin the default for Services without the annotation.
    pub fn set_default(&mut self, name: &str) -> Result<(), UnknownPlugin> {
        self.get(name)?;
        name.clone_into(&mut self.default_name);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Result<&Configured, UnknownPlugin> {
        self.by_name.get(name).ok_or_else(|| UnknownPlugin {
            name: name.to_owned(),
            loaded: self.by_name.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The plugin a Service uses: the one its annotation names, else the default.
    pub fn select(&self, annotation: Option<&str>) -> Result<&Configured, UnknownPlugin> {
        match annotation.map(str::trim).filter(|a| !a.is_empty()) {
            Some(name) => self.get(name),
            None => self.get(&self.default_name),
        }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}

fn load_file(runtime: &Runtime, path: &Path) -> Result<(String, Configured), LoadError> {
    let read_err = |source| LoadError::Read {
        path: path.to_owned(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read_err)?.len();
    if size > MAX_PLUGIN_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_owned(),
            size,
        });
    }
    let bytes = std::fs::read(path).map_err(read_err)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let config_path = path.with_extension("json");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(config) => config,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(LoadError::Read {
                path: config_path,
                source,
            });
        }
    };
    let plugin_err = |source| LoadError::Plugin {
        path: path.to_owned(),
        source,
    };
    let plugin = runtime.load(&name, &bytes).map_err(plugin_err)?;
    plugin.validate_config(&config).map_err(plugin_err)?;
    Ok((name, Configured { plugin, config }))
}
