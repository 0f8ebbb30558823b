//! The Wasm plugins as the core's [`Policy`]: the plugin a Service names, its failure policy
//! (the built-in plugin decides instead under `fallback`), and a record of what happened for
//! the caller to publish (the calls, a fallback, a load failure). Below both programs that ask
//! plugins: the controller's reconcile and the author CLI's `plugin eval`.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::Instant,
};

use nad_core::decide::{Pods, Policy, PolicyId};
use nad_model::candidate::Candidate;
use nad_model::selection::Selection;
use nad_model::{
    decision::Decision,
    input::target::{POLICY_ANNOTATION, ServiceTarget},
};
use nad_plugin_runtime::{
    self as plugin, CallError, Configured, FailurePolicy, Plugins, Rejected, UnknownPlugin,
    conditions::CallConditions, wit,
};

/// Why the Service's policy gave no decisions; the Service's slices stay as last applied.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The plugin gave no usable answer.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The plugin refused to decide for the Service (its own `err`).
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// The Service names a plugin that is not loaded.
    #[error(transparent)]
    Unknown(#[from] UnknownPlugin),
}

/// Pods as one plugin sees them, in order: the records, and their conditions when the plugin
/// reads them.
#[derive(Debug, Default)]
pub struct Views {
    pub pods: Vec<wit::Pod>,
    pub conditions: Option<Arc<CallConditions>>,
}

impl Views {
    /// `candidates` as `configured`'s plugin sees them, on `network`.
    pub fn of<'a>(
        candidates: impl IntoIterator<Item = &'a Candidate> + Clone,
        configured: &Configured,
        network: &str,
    ) -> Self {
        let plugin = &configured.plugin;
        Views {
            pods: candidates
                .clone()
                .into_iter()
                .map(|c| plugin::pod_view(c, plugin))
                .collect(),
            conditions: plugin::conditions_view(candidates, plugin, network).map(Arc::new),
        }
    }
}

/// One plugin call: which plugin, how it ended, how long it took, how many pods it asked
/// about and how much memory its instance took.
#[derive(Debug, Clone)]
pub struct PluginCall {
    pub plugin: String,
    pub outcome: CallOutcome,
    pub elapsed: std::time::Duration,
    pub pods: usize,
    /// The most linear memory the call's instance had, in bytes.
    pub memory: usize,
}

/// How a plugin call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Ok,
    /// The plugin refused to decide (its own `err`).
    Rejected,
    /// The call failed; the cause, as [`plugin::CallError::cause`] names it.
    Failed(&'static str),
}

impl CallOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Rejected => "rejected",
            CallOutcome::Failed(cause) => cause,
        }
    }
}

/// What happened while the policy decided, for the caller to publish.
#[derive(Debug, Default)]
pub struct Record {
    /// The plugin the Service names.
    pub plugin: String,
    pub calls: Vec<PluginCall>,
    /// The Service's plugin failed or is missing, and the built-in one decided instead: why.
    pub fell_back: Option<String>,
    /// The latest version of the Service's plugin failed to load: why, and what serves.
    pub load_warning: Option<String>,
}

impl Record {
    /// Pods the plugins were asked about.
    pub fn evaluated(&self) -> usize {
        self.calls.iter().map(|c| c.pods).sum()
    }
}

/// The plugin a Service uses, or the built-in one under the `fallback` failure policy.
struct Chosen {
    configured: Configured,
    id: PolicyId,
    policy: FailurePolicy,
}

/// The Service's plugin, asked through the Wasm runtime.
pub struct PluginPolicy {
    plugins: Arc<Plugins>,
    /// `Err`: the Service's plugin is not loaded, and its failure policy keeps the slices.
    chosen: Result<Chosen, UnknownPlugin>,
    record: Record,
    /// Whether the plugin's `candidate-labels` choose the candidates it is asked about.
    selecting: bool,
}

impl PluginPolicy {
    /// The policy of `target`: the plugin its annotation names (or the default one).
    pub fn new(plugins: Arc<Plugins>, target: &ServiceTarget) -> Self {
        let annotation = target.annotations.get(POLICY_ANNOTATION);
        let name = plugins.name_for(annotation).to_owned();
        let load_warning = plugins.failure(&name).map(|failure| {
            let serving = if plugins.get(&name).is_ok() {
                "the previous version keeps serving"
            } else {
                "no version of it is loaded"
            };
            format!("{failure}; {serving}")
        });
        let mut fell_back = None;
        let policy = plugins.failure_policy(&name);
        let chosen = match plugins.get(&name) {
            Ok(configured) => Ok(Chosen {
                id: id_of(&name, configured),
                configured: configured.clone(),
                policy,
            }),
            Err(unknown) if policy == FailurePolicy::Fallback => {
                fell_back = Some(unknown.to_string());
                Ok(fallback(&plugins))
            }
            Err(unknown) => Err(unknown),
        };
        PluginPolicy {
            plugins,
            chosen,
            record: Record {
                plugin: name,
                calls: Vec::new(),
                fell_back,
                load_warning,
            },
            selecting: true,
        }
    }

    /// Only `configured` decides, named `name`, whatever the Service names (`plugin eval`).
    pub fn only(name: &str, configured: Configured) -> Self {
        PluginPolicy {
            plugins: Arc::new(Plugins::only(name, configured.clone())),
            chosen: Ok(Chosen {
                id: id_of(name, &configured),
                configured,
                policy: FailurePolicy::Keep,
            }),
            record: Record {
                plugin: name.to_owned(),
                ..Record::default()
            },
            selecting: true,
        }
    }

    /// Asks the plugin about every candidate, whatever labels it declares its Services select
    /// on (`plugin eval`: each pod gets the plugin's own reason).
    pub fn asking_every_candidate(mut self) -> Self {
        self.selecting = false;
        self
    }

    pub fn record(&self) -> &Record {
        &self.record
    }

    pub fn into_record(self) -> Record {
        self.record
    }

    fn call(
        &mut self,
        target: &ServiceTarget,
        pods: Pods<'_>,
    ) -> Result<Vec<Decision>, PolicyError> {
        let chosen = self
            .chosen
            .as_ref()
            .map_err(|e| PolicyError::from(e.clone()))?;
        if pods.is_empty() {
            return Ok(Vec::new());
        }
        let configured = &chosen.configured;
        let plugin = &configured.plugin;
        let network = &target.network;
        let views = match pods {
            // Built once per plugin for all the Services of the network.
            Pods::All(observed) => observed.view(&configured.hash, |all| {
                Views::of(all.candidates.iter(), configured, network)
            }),
            // A Service's own few.
            Pods::Some(_) | Pods::Selected(..) => {
                Arc::new(Views::of(pods.iter(), configured, network))
            }
        };
        let started = Instant::now();
        let (result, stats) = plugin.evaluate_measured(
            &plugin::service_view(target),
            &views.pods,
            views.conditions.clone(),
            &configured.config,
        );
        self.record.calls.push(PluginCall {
            plugin: plugin.name().to_owned(),
            outcome: match &result {
                Ok(Ok(_)) => CallOutcome::Ok,
                Ok(Err(_)) => CallOutcome::Rejected,
                Err(e) => CallOutcome::Failed(e.cause()),
            },
            elapsed: started.elapsed(),
            pods: pods.len(),
            memory: stats.memory_peak,
        });
        Ok(result??)
    }

    /// The labels the chosen plugin declares every pod it includes for `target` has.
    fn select(&self, target: &ServiceTarget) -> Result<Arc<Selection>, PolicyError> {
        if !self.selecting {
            return Ok(Arc::default());
        }
        let chosen = self
            .chosen
            .as_ref()
            .map_err(|e| PolicyError::from(e.clone()))?;
        let configured = &chosen.configured;
        Ok(configured.plugin.selection(target, &configured.config)?)
    }

    /// Switches to the built-in plugin after `failure` of the chosen one, when its failure
    /// policy is `fallback` (once).
    fn fall_back(&mut self, failure: &PolicyError) -> bool {
        let falls_back = matches!(failure, PolicyError::Call(_) | PolicyError::Rejected(_))
            && self
                .chosen
                .as_ref()
                .is_ok_and(|c| c.policy == FailurePolicy::Fallback);
        if falls_back {
            self.record.fell_back = Some(failure.to_string());
            self.chosen = Ok(fallback(&self.plugins));
        }
        falls_back
    }
}

impl Policy for PluginPolicy {
    type Error = PolicyError;

    fn id(&self) -> Result<PolicyId, PolicyError> {
        match &self.chosen {
            Ok(chosen) => Ok(chosen.id.clone()),
            Err(unknown) => Err(unknown.clone().into()),
        }
    }

    fn per_pod(&self) -> bool {
        self.chosen
            .as_ref()
            .is_ok_and(|c| c.configured.plugin.per_pod())
    }

    /// Calls the chosen plugin, switching to the built-in one once when the chosen one fails
    /// under the `fallback` failure policy.
    fn decide(
        &mut self,
        target: &ServiceTarget,
        pods: Pods<'_>,
    ) -> Result<Vec<Decision>, PolicyError> {
        match self.call(target, pods) {
            Err(e) if self.fall_back(&e) => self.call(target, pods),
            result => result,
        }
    }

    /// Asks the chosen plugin (its `candidate-labels`, kept per Service version), switching
    /// to the built-in one when it fails under the `fallback` failure policy.
    fn selection(&mut self, target: &ServiceTarget) -> Result<Arc<Selection>, PolicyError> {
        match self.select(target) {
            Err(e) if self.fall_back(&e) => self.select(target),
            result => result,
        }
    }
}

fn id_of(name: &str, configured: &Configured) -> PolicyId {
    let mut hasher = DefaultHasher::new();
    configured.config.hash(&mut hasher);
    PolicyId {
        name: name.to_owned(),
        hash: configured.hash.clone(),
        config: hasher.finish(),
    }
}

fn fallback(plugins: &Plugins) -> Chosen {
    let configured = plugins.fallback().clone();
    Chosen {
        id: id_of(plugin::BUILT_IN, &configured),
        configured,
        policy: FailurePolicy::Keep,
    }
}
