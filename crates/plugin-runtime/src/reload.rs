//! Where plugins come from, and how a new set of them is loaded: a [`Loader`] takes every
//! plugin a source holds (`<name>` with its component and configuration) and runs the new and
//! changed ones through the pipeline, keeping the last good version of each.
//!
//! The plugin directory ([`PluginDir`]): `<name>.wasm` files (or `<name>.oci` files holding an
//! `oci://` reference) with optional `<name>.json` configuration, in a cluster a mounted
//! ConfigMap. Scanned periodically, so that every way a file can change is seen: plain writes,
//! deletions, and kubelet's atomic `..data` symlink swap (the resolved path of every file
//! changes).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

/// A file whose self-test timed out is tried again after this long, even if unchanged.
const TIMEOUT_RETRY: Duration = Duration::from_secs(60);
/// An artifact that could not be fetched is tried again after this long, even if unchanged.
pub const FETCH_RETRY: Duration = Duration::from_secs(30);

use nad_model::fetch::{Fetch, FetchFailure, Fetched};

use nad_model::digest::sha256_hex;

use super::{PipelineError, Plugins, Runtime, name_mismatch, prepare};

/// Identity of a file as the filesystem reports it: resolved path, size and mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    resolved: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

fn file_id(path: &Path) -> std::io::Result<FileId> {
    let resolved = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&resolved)?;
    Ok(FileId {
        resolved,
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

#[derive(Debug, Clone)]
struct Seen {
    /// sha256 of the component and of its configuration.
    content: (String, String),
    /// When an unchanged plugin that failed transiently is tried again.
    retry_at: Option<Instant>,
    /// The fetcher's registry settings (their generation) a fetch failed with: it is tried
    /// again as soon as they change.
    fetch_failed_with: Option<u64>,
    /// The version serving came from a registry: its pinned reference, and the verification
    /// policy (its generation) it passed. Verified again whenever the policy changes.
    verified: Option<(String, u64)>,
}

/// What one scan changed.
#[derive(Debug, Default)]
pub struct Scan {
    /// New or replaced plugins, now serving.
    pub loaded: Vec<String>,
    /// Plugins whose new file failed (a previous version, if any, keeps serving).
    pub failed: Vec<PipelineError>,
    /// Plugins whose file is gone.
    pub removed: Vec<String>,
}

impl Scan {
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty() && self.failed.is_empty() && self.removed.is_empty()
    }

    /// Every plugin name this scan touched.
    pub fn changed(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .loaded
            .iter()
            .chain(&self.removed)
            .cloned()
            .chain(self.failed.iter().map(|e| e.plugin.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// What a source holds of one plugin: its component, or where to fetch it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Component {
    Wasm(Vec<u8>),
    /// The text of an `oci://` reference (a `<name>.oci` entry).
    Reference(String),
}

impl Component {
    /// What identifies this version: the component's hash, or the reference (a pinned
    /// digest, or a tag resolved once while it stays the same).
    fn identity(&self) -> String {
        match self {
            Component::Wasm(bytes) => sha256_hex(bytes),
            Component::Reference(text) => text.trim().to_owned(),
        }
    }
}

/// One plugin as a source holds it.
pub struct Entry {
    pub name: String,
    pub component: Component,
    /// Its configuration document ("" for none).
    pub config: String,
}

/// A fetch's failure as the pipeline reports it: a transient one says when it is tried again.
fn pipeline_error(name: &str, e: &FetchFailure) -> PipelineError {
    let message = if e.transient {
        format!("{} (tried again in {} s)", e.message, FETCH_RETRY.as_secs())
    } else {
        e.message.clone()
    };
    if e.unverified {
        PipelineError::signature(name, message)
    } else {
        PipelineError::fetch(name, message)
    }
}

/// Keeps the plugins of one source loaded: the last content seen of each, and when one that
/// failed transiently is tried again.
#[derive(Default)]
pub struct Loader {
    seen: BTreeMap<String, Seen>,
    /// Fetches the plugins a source names by `oci://` reference.
    fetcher: Option<Arc<dyn Fetch>>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("seen", &self.seen)
            .field("fetches", &self.fetcher.is_some())
            .finish()
    }
}

impl Loader {
    /// A loader that fetches `oci://` references with `fetcher`.
    pub fn new(fetcher: Option<Arc<dyn Fetch>>) -> Self {
        Self {
            seen: BTreeMap::new(),
            fetcher,
        }
    }

    /// Whether any plugin's failure is due for another try, or a plugin serving from a
    /// registry is due to be verified against a new policy.
    pub fn any_retry_due(&self) -> bool {
        self.seen
            .values()
            .any(|s| self.due(s) || self.reverify_due(s).is_some())
    }

    /// The reference of `seen`'s serving version, when the policy changed since it was verified.
    fn reverify_due<'a>(&self, seen: &'a Seen) -> Option<&'a str> {
        let policy = self.fetcher.as_ref()?.policy_generation();
        seen.verified
            .as_ref()
            .filter(|(_, verified)| *verified != policy)
            .map(|(reference, _)| reference.as_str())
    }

    /// Whether `seen`'s failure is due for another try: its time has come, or it was a fetch
    /// and the registry credentials changed since.
    fn due(&self, seen: &Seen) -> bool {
        let generation = self.fetcher.as_ref().map(|f| f.generation());
        seen.retry_at.is_some_and(|at| Instant::now() >= at)
            || seen
                .fetch_failed_with
                .is_some_and(|failed| generation != Some(failed))
    }

    /// The component of `component`: fetched when it is a reference (on this blocking thread,
    /// through the async runtime it was called from), with the reference pinned to the digest
    /// pulled.
    fn fetch(
        &self,
        name: &str,
        component: Component,
    ) -> Result<(Vec<u8>, Option<String>), (PipelineError, bool)> {
        let text = match component {
            Component::Wasm(bytes) => {
                if self.fetcher.as_ref().is_some_and(|f| f.verifies()) {
                    return Err((
                        PipelineError::signature(
                            name,
                            "a verification policy is in force, and a component given as it is \
                             carries no signature: publish it as an OCI artifact (plugin push), \
                             sign it, and name it by reference (<name>.oci)"
                                .to_owned(),
                        ),
                        false,
                    ));
                }
                return Ok((bytes, None));
            }
            Component::Reference(text) => text,
        };
        let text = text.trim();
        let refused = |message: String| (PipelineError::fetch(name, message), false);
        let Some(fetcher) = &self.fetcher else {
            return Err(refused(format!(
                "{text}: this source cannot fetch OCI artifacts"
            )));
        };
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| refused(format!("{text}: no async runtime to fetch it on: {e}")))?;
        handle
            .block_on(fetcher.fetch(text))
            .map(|Fetched { component, pinned }| (component, Some(pinned)))
            .map_err(|e| {
                let error = pipeline_error(name, &e);
                (error, e.transient)
            })
    }

    /// Whether `name`'s transient failure is due for another try.
    fn retry_due(&self, name: &str) -> bool {
        self.seen.get(name).is_some_and(|s| self.due(s))
    }

    /// Whether the source's plugin `name` is one this loader knows.
    pub fn knows(&self, name: &str) -> bool {
        self.seen.contains_key(name)
    }

    /// Loads `entries`, the source's plugins, into `plugins`: new and changed ones through the
    /// pipeline (one that fails leaves its previous version serving), and removes those the
    /// source no longer holds but for `keep` (seen unchanged by the caller, not re-read).
    pub fn load(
        &mut self,
        runtime: &Runtime,
        plugins: &mut Plugins,
        entries: Vec<Entry>,
        keep: &[String],
    ) -> Scan {
        let mut scan = Scan::default();
        let mut present: Vec<String> = keep.to_vec();
        for Entry {
            name,
            component,
            config,
        } in entries
        {
            present.push(name.clone());
            let retry_due = self.retry_due(&name);
            let content = (component.identity(), sha256_hex(config.as_bytes()));
            if !retry_due && self.seen.get(&name).is_some_and(|s| s.content == content) {
                continue;
            }
            // Read before the fetch: credentials or a policy that change during it make it due
            // again.
            let generation = self.fetcher.as_ref().map(|f| f.generation());
            let policy = self.fetcher.as_ref().map_or(0, |f| f.policy_generation());
            let fetched = self.fetch(&name, component);
            let seen = self.seen.entry(name.clone()).or_insert_with(|| Seen {
                content: content.clone(),
                retry_at: None,
                fetch_failed_with: None,
                verified: None,
            });
            seen.content = content;
            seen.retry_at = None;
            seen.fetch_failed_with = None;
            let (component, pinned) = match fetched {
                Ok(fetched) => fetched,
                Err((e, retry)) => {
                    tracing::error!(
                        plugin = %name,
                        step = e.step.as_str(),
                        error = %e,
                        "plugin not fetched; the previous version (if any) keeps serving"
                    );
                    if retry {
                        seen.retry_at = Some(Instant::now() + FETCH_RETRY);
                        seen.fetch_failed_with = generation;
                    }
                    plugins.record_failure(&name, e.to_string());
                    scan.failed.push(e);
                    continue;
                }
            };
            match prepare(runtime, &name, &component, &config) {
                Ok(configured) => {
                    tracing::info!(
                        plugin = %name,
                        version = %configured.plugin.info().version,
                        sha256 = %configured.hash,
                        "plugin loaded"
                    );
                    if let Some(warning) = name_mismatch(&name, configured.plugin.info()) {
                        tracing::warn!(plugin = %name, "{warning}");
                    }
                    plugins.insert(&name, configured);
                    seen.verified = pinned.map(|pinned| (pinned, policy));
                    scan.loaded.push(name);
                }
                Err(e) => {
                    tracing::error!(
                        plugin = %name,
                        step = e.step.as_str(),
                        error = %e,
                        "plugin refused; the previous version (if any) keeps serving"
                    );
                    if e.timed_out {
                        seen.retry_at = Some(Instant::now() + TIMEOUT_RETRY);
                    }
                    plugins.record_failure(&name, e.to_string());
                    scan.failed.push(e);
                }
            }
        }
        scan.removed = self.remove_absent(plugins, &present);
        self.reverify(plugins, &mut scan);
        scan
    }

    /// Verifies every plugin serving from a registry again when the verification policy changed
    /// (or became unavailable) since it passed: one that no longer passes stops serving, and the
    /// Services that use it get their failure policy, as for a plugin that never loaded. It is
    /// tried again as a failed fetch is (its full pull verifies it), so that it serves again
    /// once the policy or its signatures let it.
    fn reverify(&mut self, plugins: &mut Plugins, scan: &mut Scan) {
        let Some(fetcher) = self.fetcher.clone() else {
            return;
        };
        let due: Vec<(String, String)> = self
            .seen
            .iter()
            .filter_map(|(name, seen)| Some((name.clone(), self.reverify_due(seen)?.to_owned())))
            .collect();
        if due.is_empty() {
            return;
        }
        let handle = tokio::runtime::Handle::try_current();
        for (name, reference) in due {
            let generation = fetcher.generation();
            let policy = fetcher.policy_generation();
            let verified = match &handle {
                Ok(handle) => handle.block_on(fetcher.verify(&reference)),
                Err(e) => Err(FetchFailure {
                    message: format!("{reference}: no async runtime to verify it on: {e}"),
                    unverified: true,
                    transient: true,
                }),
            };
            let Some(seen) = self.seen.get_mut(&name) else {
                continue;
            };
            let Err(e) = verified else {
                tracing::info!(plugin = %name, reference = %reference, "plugin serving verified again against the new verification policy");
                seen.verified = Some((reference, policy));
                continue;
            };
            let error = PipelineError::signature(
                &name,
                format!(
                    "{}; the verification policy changed while it served, and it no longer \
                     passes, so it stopped serving: sign the artifact as the policy asks, or \
                     change the policy (tried again in {} s and at every change of the registry \
                     settings)",
                    e.message,
                    FETCH_RETRY.as_secs()
                ),
            );
            tracing::error!(
                plugin = %name,
                reference = %reference,
                step = error.step.as_str(),
                error = %error,
                "plugin serving no longer passes the verification policy; it stopped serving"
            );
            seen.verified = None;
            seen.retry_at = Some(Instant::now() + FETCH_RETRY);
            seen.fetch_failed_with = Some(generation);
            plugins.remove(&name);
            plugins.record_failure(&name, error.to_string());
            scan.failed.push(error);
        }
    }

    /// Removes the plugins the source no longer holds (not in `present`); returns their names.
    fn remove_absent(&mut self, plugins: &mut Plugins, present: &[String]) -> Vec<String> {
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|name| !present.contains(name))
            .cloned()
            .collect();
        for name in &gone {
            self.seen.remove(name);
            plugins.remove(name);
            tracing::info!(plugin = %name, "plugin removed");
        }
        gone
    }
}

/// Watches one directory of plugins.
#[derive(Debug)]
pub struct PluginDir {
    dir: PathBuf,
    /// The component's (or reference's) and the configuration's files, as last read.
    files: BTreeMap<String, (FileId, Option<FileId>)>,
    /// Plugins with both a `.wasm` and a `.oci` file, reported once.
    both: BTreeSet<String>,
    loader: Loader,
}

impl PluginDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_fetcher(dir, None)
    }

    /// A directory whose `<name>.oci` files are fetched with `fetcher`.
    pub fn with_fetcher(dir: impl Into<PathBuf>, fetcher: Option<Arc<dyn Fetch>>) -> Self {
        Self {
            dir: dir.into(),
            files: BTreeMap::new(),
            both: BTreeSet::new(),
            loader: Loader::new(fetcher),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `<name>.wasm` and `<name>.oci` files (a `.wasm` wins over a `.oci` of the same name);
    /// kubelet's hidden `..data` entries are skipped.
    fn plugin_files(&mut self) -> std::io::Result<BTreeMap<String, PathBuf>> {
        let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut both = BTreeSet::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some((name, wasm)) = file_name
                .strip_suffix(".wasm")
                .map(|n| (n, true))
                .or_else(|| file_name.strip_suffix(".oci").map(|n| (n, false)))
            else {
                continue;
            };
            if name.is_empty() || name.starts_with('.') || !path.is_file() {
                continue;
            }
            if files.contains_key(name) {
                both.insert(name.to_owned());
                if !wasm {
                    continue;
                }
            }
            files.insert(name.to_owned(), path);
        }
        for name in both.difference(&self.both) {
            tracing::warn!(dir = %self.dir.display(), plugin = %name, "both {name}.wasm and {name}.oci exist: {name}.wasm is loaded; remove one of them");
        }
        self.both = both;
        Ok(files)
    }

    /// Brings `plugins` up to date with the directory. Only new or changed files are read and
    /// go through the pipeline; a file that fails leaves the previous version serving.
    pub fn scan(&mut self, runtime: &Runtime, plugins: &mut Plugins) -> Scan {
        let files = match self.plugin_files() {
            Ok(files) => files,
            Err(e) => {
                // A missing or unreadable directory changes nothing: better stale than empty.
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the plugin directory");
                return Scan::default();
            }
        };
        let mut entries = Vec::new();
        let mut unchanged = Vec::new();
        for (name, path) in &files {
            let config_path = path.with_extension("json");
            let Ok(wasm_id) = file_id(path) else { continue };
            let ids = (wasm_id, file_id(&config_path).ok());
            if !self.loader.retry_due(name)
                && self.loader.knows(name)
                && self.files.get(name) == Some(&ids)
            {
                unchanged.push(name.clone());
                continue;
            }
            let component = if path.extension().is_some_and(|e| e == "oci") {
                std::fs::read_to_string(path).map(Component::Reference)
            } else {
                std::fs::read(path).map(Component::Wasm)
            };
            match (component, read_config(&config_path)) {
                (Ok(component), Ok(config)) => {
                    self.files.insert(name.clone(), ids);
                    entries.push(Entry {
                        name: name.clone(),
                        component,
                        config,
                    });
                }
                (Err(e), _) | (_, Err(e)) => {
                    // Mid-swap: the next scan sees the settled state, and this one changes
                    // nothing of the plugin.
                    tracing::debug!(plugin = %name, error = %e, "plugin file not readable yet");
                    unchanged.push(name.clone());
                }
            }
        }
        self.files.retain(|name, _| files.contains_key(name));
        self.loader.load(runtime, plugins, entries, &unchanged)
    }
}

fn read_config(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(config) => Ok(config),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}
