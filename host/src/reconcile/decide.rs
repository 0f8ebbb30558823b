//! Asking the Service's policy about its candidates: which plugin, which pods, and what its
//! failure policy does when the plugin is missing or fails.
//!
//! `decide` returns a value; the caller publishes Events and metrics from it, once per
//! reconcile. It calls the plugin synchronously (the caller picks the thread).
//!
//! Only the pods that need it are asked about. A plugin that declares its decisions per-pod
//! (each depends on the Service, that pod and the configuration alone) is asked, after a
//! change of some pods, about those pods only; the others keep their last decision. A plugin
//! whose decisions depend on the whole set is asked about the changed pods first, and about
//! every candidate only when one of the changed pods is published or becomes included.

use std::{
    collections::{BTreeSet, HashMap},
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::{Duration, Instant},
};

use super::{observe::Candidate, plan::Decision, scope::Scope};
use crate::{
    error::Error,
    input::target::ServiceTarget,
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

/// A Service's last decisions, by pod name.
#[derive(Debug, Default, Clone)]
pub struct Remembered {
    pub by: Option<PolicyId>,
    pub per_pod: HashMap<String, Decision>,
}

/// One plugin call, for the metrics.
#[derive(Debug, Clone)]
pub struct Call {
    pub plugin: String,
    pub outcome: &'static str,
    pub elapsed: Duration,
    pub pods: usize,
}

/// What the policy decided, and what the caller reports.
#[derive(Debug)]
pub struct Decided {
    /// One decision per candidate, in order; `None` when the changed pods move no endpoint,
    /// so there is nothing to plan; an error when the Service's plugin gave no answer and its
    /// failure policy keeps the slices.
    pub outcome: Result<Option<Vec<Decision>>, Error>,
    /// The Service's plugin failed or is missing, and the built-in one decided instead: why.
    pub fell_back: Option<String>,
    /// The latest version of the Service's plugin failed to load: why, and what serves.
    pub load_warning: Option<String>,
    pub calls: Vec<Call>,
    /// To keep for the next reconcile (empty when nothing was decided in full).
    pub remembered: Option<Remembered>,
}

impl Decided {
    /// Pods the plugin was asked about.
    pub fn evaluated(&self) -> usize {
        self.calls.iter().map(|c| c.pods).sum()
    }
}

/// What `decide` needs, owned, so that it can run on any thread.
pub struct Inputs {
    pub plugins: Arc<Plugins>,
    pub target: ServiceTarget,
    pub candidates: Vec<Candidate>,
    pub scope: Scope,
    pub remembered: Option<Remembered>,
    /// Names of the pods the Service's slices publish now.
    pub published: BTreeSet<String>,
    /// Changed pods the Service must report on (skipped, addresses left out): they need
    /// the full path.
    pub reported: BTreeSet<String>,
}

/// The plugin a Service uses, or the built-in one under the `fallback` failure policy.
struct Chosen {
    configured: Configured,
    id: PolicyId,
    policy: FailurePolicy,
}

/// Decides the Service's pods. Whatever the outcome, the returned value says what to report.
pub fn decide(inputs: Inputs) -> Decided {
    let name = inputs
        .plugins
        .name_for(
            inputs
                .target
                .annotations
                .get(POLICY_ANNOTATION)
                .map(String::as_str),
        )
        .to_owned();
    let plugins = inputs.plugins.clone();
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
    let mut ask = Asker {
        plugins: &plugins,
        target: &inputs.target,
        chosen,
        decided: &mut decided,
    };
    let outcome = match &inputs.scope {
        Scope::Pods(changed) => match changed_pods(&mut ask, &inputs, changed) {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => decide_all(&mut ask, &inputs.candidates).map(Some),
            Err(e) => Err(e),
        },
        Scope::Full => decide_all(&mut ask, &inputs.candidates).map(Some),
    };
    decided.outcome = outcome;
    decided
}

/// After a change of some pods only: `Some(None)` when they move no endpoint, `Some(all)`
/// with every candidate's decision when the per-pod memory gives them, `None` when every
/// candidate must be asked about.
fn changed_pods(
    ask: &mut Asker<'_>,
    inputs: &Inputs,
    changed: &BTreeSet<String>,
) -> Result<Option<Option<Vec<Decision>>>, Error> {
    let candidates = &inputs.candidates;
    let only: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| changed.contains(c.name()))
        .collect();
    let unusual = changed.iter().any(|p| inputs.reported.contains(p));
    let touches_published = changed.iter().any(|p| inputs.published.contains(p));
    let memory = inputs.remembered.as_ref().filter(|r| {
        ask.chosen.configured.plugin.per_pod() && r.by.as_ref() == Some(&ask.chosen.id)
    });
    let Some(memory) = memory else {
        if touches_published || unusual {
            return Ok(None);
        }
        let answers = ask.evaluate(&only)?;
        let none_included = answers.iter().all(|d| matches!(d, Decision::Exclude(_)));
        return Ok(none_included.then_some(None));
    };
    let mut memory = memory.clone();
    let answers = ask.evaluate(&only)?;
    if memory.by.as_ref() != Some(&ask.chosen.id) {
        // It fell back: the built-in plugin decides every candidate.
        return Ok(None);
    }
    let mut included = false;
    for (candidate, decision) in only.iter().zip(answers) {
        included |= matches!(decision, Decision::Include(_));
        memory.per_pod.insert(candidate.name().to_owned(), decision);
    }
    let current: BTreeSet<&str> = candidates.iter().map(Candidate::name).collect();
    memory
        .per_pod
        .retain(|pod, _| current.contains(pod.as_str()));
    let moves = included || touches_published || unusual;
    let decisions = candidates
        .iter()
        .map(|c| memory.per_pod.get(c.name()).cloned())
        .collect::<Option<Vec<_>>>();
    ask.decided.remembered = Some(memory);
    match decisions {
        _ if !moves => Ok(Some(None)),
        Some(decisions) => Ok(Some(Some(decisions))),
        // A candidate without a remembered decision: ask about all of them.
        None => Ok(None),
    }
}

fn decide_all(ask: &mut Asker<'_>, candidates: &[Candidate]) -> Result<Vec<Decision>, Error> {
    let all: Vec<&Candidate> = candidates.iter().collect();
    let decisions = ask.evaluate(&all)?;
    ask.decided.remembered = Some(Remembered {
        by: Some(ask.chosen.id.clone()),
        per_pod: candidates
            .iter()
            .zip(&decisions)
            .map(|(c, d)| (c.name().to_owned(), d.clone()))
            .collect(),
    });
    Ok(decisions)
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

impl Asker<'_> {
    fn evaluate(&mut self, pods: &[&Candidate]) -> Result<Vec<Decision>, Error> {
        match self.call(pods) {
            Err(Error::Plugin(e)) if self.chosen.policy == FailurePolicy::Fallback => {
                self.decided.fell_back = Some(e.to_string());
                self.chosen = fallback(self.plugins);
                self.call(pods)
            }
            result => result,
        }
    }

    fn call(&mut self, pods: &[&Candidate]) -> Result<Vec<Decision>, Error> {
        if pods.is_empty() {
            return Ok(Vec::new());
        }
        let plugin = &self.chosen.configured.plugin;
        let service = plugin::service_view(self.target);
        let views: Vec<_> = pods.iter().map(|c| plugin::pod_view(c, plugin)).collect();
        let started = Instant::now();
        let result = plugin.evaluate(&service, &views, &self.chosen.configured.config);
        self.decided.calls.push(Call {
            plugin: plugin.name().to_owned(),
            outcome: result.as_ref().map_or_else(|e| e.cause(), |_| "ok"),
            elapsed: started.elapsed(),
            pods: pods.len(),
        });
        Ok(result?)
    }
}
