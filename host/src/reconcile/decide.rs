//! Asking the Service's policy about its candidates: which plugin, which pods, and what its
//! failure policy does when the plugin is missing or fails.
//!
//! `decide` returns a value; the caller publishes Events and metrics from it, once per
//! reconcile. It calls the plugin synchronously (the caller picks the thread).
//!
//! Only the pods that need it are asked about, and only the candidates needed are observed.
//! After a change of some pods, the plugin is asked about those pods first. When none of them
//! is published or becomes included, nothing moves: the Service's other candidates are never
//! even looked at. Otherwise a plugin that declares its decisions per-pod (each depends on the
//! Service, that pod and the configuration alone) keeps its other pods' last decisions; a
//! plugin whose decisions depend on the whole set is asked about every candidate.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::Instant,
};

use super::{
    candidates::{Observed, Views},
    observe::{Candidate, Observation},
    plan::{Conditions, Decision},
    scope::Scope,
};
use crate::{
    error::Error,
    input::target::ServiceTarget,
    metrics::PluginCall,
    plugin::{self, Configured, FailurePolicy, POLICY_ANNOTATION, Plugins},
};

/// Which plugin, with which configuration, made a set of decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyId {
    pub name: String,
    pub hash: String,
    pub config: u64,
}

impl PolicyId {
    fn of(name: &str, configured: &Configured) -> Self {
        let mut hasher = DefaultHasher::new();
        configured.config.hash(&mut hasher);
        PolicyId {
            name: name.to_owned(),
            hash: configured.hash.clone(),
            config: hasher.finish(),
        }
    }
}

/// A Service's last decisions: the included pods, by name, with their conditions. Every other
/// candidate was excluded. Kept across reconciles only while every change of the Service's
/// pods reaches it (anything else plans in full and starts it again).
#[derive(Debug, Default, Clone)]
pub struct Remembered {
    pub by: Option<PolicyId>,
    pub included: HashMap<String, Conditions>,
}

impl Remembered {
    /// Whose decisions these are, without them: for asking about a pod that is not included.
    pub fn without_pods(&self) -> Remembered {
        Remembered {
            by: self.by.clone(),
            included: HashMap::new(),
        }
    }
}

/// Every candidate of the Service and what the policy says of them.
#[derive(Debug, Default)]
pub struct Verdicts {
    pub observation: Arc<Observed>,
    /// Indexes into `observation.candidates`, in order.
    pub included: Vec<(usize, Conditions)>,
    /// The excluded candidates this reconcile asked about, with the policy's reason.
    pub excluded: Vec<(usize, String)>,
}

impl Verdicts {
    pub fn included(&self) -> Vec<(&Candidate, Conditions)> {
        self.included
            .iter()
            .map(|(i, c)| (&self.observation.candidates[*i], *c))
            .collect()
    }
}

/// What the policy decided, and what the caller reports.
#[derive(Debug)]
pub struct Decided {
    /// The Service's candidates and their verdicts; `None` when the changed pods move no
    /// endpoint, so there is nothing to plan; an error when the Service's plugin gave no
    /// answer and its failure policy keeps the slices.
    pub outcome: Result<Option<Verdicts>, Error>,
    /// The Service's plugin failed or is missing, and the built-in one decided instead: why.
    pub fell_back: Option<String>,
    /// The latest version of the Service's plugin failed to load: why, and what serves.
    pub load_warning: Option<String>,
    pub calls: Vec<PluginCall>,
    /// To keep for the next reconcile.
    pub remembered: Option<Remembered>,
}

impl Decided {
    /// Pods the plugin was asked about.
    pub fn evaluated(&self) -> usize {
        self.calls.iter().map(|c| c.pods).sum()
    }
}

/// Observes every candidate of the Service, when `decide` needs them.
pub type ObserveAll = Box<dyn FnOnce() -> Arc<Observed> + Send>;

/// What `decide` needs, owned, so that it can run on any thread.
pub struct Inputs {
    pub plugins: Arc<Plugins>,
    pub target: Arc<ServiceTarget>,
    pub scope: Scope,
    pub remembered: Option<Remembered>,
    /// For a pod-scoped reconcile: the changed pods among the candidates, and those to report
    /// on (skipped, addresses left out).
    pub changed: Observation,
    /// One of the changed pods is published now.
    pub touches_published: bool,
    pub observe_all: ObserveAll,
}

/// The plugin a Service uses, or the built-in one under the `fallback` failure policy.
struct Chosen {
    configured: Configured,
    id: PolicyId,
    policy: FailurePolicy,
}

/// Decides the Service's pods. Whatever the outcome, the returned value says what to report.
pub fn decide(inputs: Inputs) -> Decided {
    let plugins = inputs.plugins.clone();
    let annotation = inputs.target.annotations.get(POLICY_ANNOTATION);
    let name = plugins.name_for(annotation.map(String::as_str)).to_owned();
    let mut decided = Decided {
        outcome: Ok(None),
        fell_back: None,
        load_warning: plugins.failure(&name).map(|failure| {
            let serving = if plugins.get(&name).is_ok() {
                "the previous version keeps serving"
            } else {
                "no version of it is loaded"
            };
            format!("{failure}; {serving}")
        }),
        calls: Vec::new(),
        remembered: None,
    };
    let policy = plugins.failure_policy(&name);
    let chosen = match plugins.get(&name) {
        Ok(configured) => Chosen {
            id: PolicyId::of(&name, configured),
            configured: configured.clone(),
            policy,
        },
        Err(unknown) if policy == FailurePolicy::Fallback => {
            decided.fell_back = Some(unknown.to_string());
            fallback(&plugins)
        }
        Err(unknown) => {
            decided.outcome = Err(unknown.into());
            return decided;
        }
    };
    let target = inputs.target.clone();
    let mut ask = Asker {
        plugins: &plugins,
        target: &target,
        chosen,
        decided: &mut decided,
    };
    let outcome = decide_with(&mut ask, inputs);
    decided.outcome = outcome;
    decided
}

fn decide_with(ask: &mut Asker<'_>, inputs: Inputs) -> Result<Option<Verdicts>, Error> {
    let Inputs {
        scope,
        remembered,
        changed,
        touches_published,
        observe_all,
        ..
    } = inputs;
    let unusual = !changed.skipped.is_empty() || !changed.ignored_ips.is_empty();
    let per_pod_memory = |ask: &Asker<'_>, r: &Remembered| {
        ask.chosen.configured.plugin.per_pod() && r.by.as_ref() == Some(&ask.chosen.id)
    };
    let usable = remembered.as_ref().is_some_and(|r| per_pod_memory(ask, r));
    // A whole-set plugin asked about changed pods that move an endpoint anyway would only be
    // asked again about every candidate.
    if matches!(scope, Scope::Pods(_)) && (usable || !(touches_published || unusual)) {
        let only: Vec<&Candidate> = changed.candidates.iter().collect();
        let answers = ask.evaluate(Pods::Some(&only))?;
        let included = answers.iter().any(|d| matches!(d, Decision::Include(_)));
        let memory = remembered.filter(|r| per_pod_memory(ask, r));
        let moves = included || touches_published || unusual;
        match memory {
            Some(mut memory) => {
                for (candidate, decision) in only.iter().zip(answers) {
                    match decision {
                        Decision::Include(c) => {
                            memory.included.insert(candidate.name().to_owned(), c)
                        }
                        Decision::Exclude(_) => memory.included.remove(candidate.name()),
                    };
                }
                if !moves {
                    ask.decided.remembered = Some(memory);
                    return Ok(None);
                }
                let observation = observe_all();
                let verdicts = from_memory(observation, &mut memory);
                ask.decided.remembered = Some(memory);
                return Ok(Some(verdicts));
            }
            None if !moves => {
                ask.decided.remembered = remembered_of(ask, &changed.candidates, None);
                return Ok(None);
            }
            None => {}
        }
    }
    let observation = observe_all();
    let decisions = ask.evaluate(Pods::All(&observation))?;
    let mut verdicts = Verdicts::default();
    for (index, decision) in decisions.into_iter().enumerate() {
        match decision {
            Decision::Include(c) => verdicts.included.push((index, c)),
            Decision::Exclude(reason) => verdicts.excluded.push((index, reason)),
        }
    }
    verdicts.observation = observation;
    ask.decided.remembered = remembered_of(ask, &verdicts.observation.candidates, Some(&verdicts));
    Ok(Some(verdicts))
}

/// The memory a reconcile leaves: what it decided in full, or nothing (a whole-set plugin
/// that was asked about changed pods only).
fn remembered_of(
    ask: &Asker<'_>,
    candidates: &[Candidate],
    verdicts: Option<&Verdicts>,
) -> Option<Remembered> {
    let verdicts = verdicts?;
    Some(Remembered {
        by: Some(ask.chosen.id.clone()),
        included: verdicts
            .included
            .iter()
            .map(|(i, c)| (candidates[*i].name().to_owned(), *c))
            .collect(),
    })
}

/// The verdicts of every candidate from the per-pod memory; pods that are no longer
/// candidates leave it. (Candidates are sorted by name.)
fn from_memory(observation: Arc<Observed>, memory: &mut Remembered) -> Verdicts {
    let candidates = &observation.candidates;
    let index_of = |pod: &str| candidates.binary_search_by(|c| c.name().cmp(pod)).ok();
    memory.included.retain(|pod, _| index_of(pod).is_some());
    let mut included: Vec<(usize, Conditions)> = memory
        .included
        .iter()
        .filter_map(|(pod, c)| Some((index_of(pod)?, *c)))
        .collect();
    included.sort_by_key(|(i, _)| *i);
    Verdicts {
        observation,
        included,
        excluded: Vec::new(),
    }
}

fn fallback(plugins: &Plugins) -> Chosen {
    let configured = plugins.fallback().clone();
    Chosen {
        id: PolicyId::of(plugin::BUILT_IN, &configured),
        configured,
        policy: FailurePolicy::Keep,
    }
}

/// Calls the chosen plugin, switching to the built-in one once when the chosen one fails
/// under the `fallback` failure policy.
struct Asker<'a> {
    plugins: &'a Plugins,
    target: &'a ServiceTarget,
    chosen: Chosen,
    decided: &'a mut Decided,
}

/// The pods a call asks about: some of the candidates, or all of them (whose views the
/// Services of the network share).
#[derive(Clone, Copy)]
enum Pods<'a> {
    Some(&'a [&'a Candidate]),
    All(&'a Observed),
}

impl Pods<'_> {
    fn is_empty(self) -> bool {
        self.len() == 0
    }

    fn len(self) -> usize {
        match self {
            Pods::Some(pods) => pods.len(),
            Pods::All(observed) => observed.candidates.len(),
        }
    }
}

impl Asker<'_> {
    fn evaluate(&mut self, pods: Pods<'_>) -> Result<Vec<Decision>, Error> {
        match self.call(pods) {
            Err(e @ (Error::PluginCall(_) | Error::PluginRejected(_)))
                if self.chosen.policy == FailurePolicy::Fallback =>
            {
                self.decided.fell_back = Some(e.to_string());
                self.chosen = fallback(self.plugins);
                self.call(pods)
            }
            result => result,
        }
    }

    fn call(&mut self, pods: Pods<'_>) -> Result<Vec<Decision>, Error> {
        if pods.is_empty() {
            return Ok(Vec::new());
        }
        let configured = &self.chosen.configured;
        let plugin = &configured.plugin;
        let service = plugin::service_view(self.target);
        let network = &self.target.network;
        let views = match pods {
            Pods::Some(some) => Arc::new(Views::of(some.iter().copied(), configured, network)),
            Pods::All(observed) => observed.views(configured, network),
        };
        let started = Instant::now();
        let result = plugin.evaluate(
            &service,
            &views.pods,
            views.conditions.clone(),
            &self.chosen.configured.config,
        );
        self.decided.calls.push(PluginCall {
            plugin: plugin.name().to_owned(),
            outcome: match &result {
                Ok(Ok(_)) => "ok",
                Ok(Err(_)) => "rejected",
                Err(e) => e.cause(),
            },
            elapsed: started.elapsed(),
            pods: pods.len(),
        });
        Ok(result??)
    }
}
