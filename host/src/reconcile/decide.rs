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
    /// so there is nothing to plan.
    pub decisions: Option<Vec<Decision>>,
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

pub fn decide(inputs: Inputs) -> Result<Decided, Error> {
    let Inputs {
        plugins,
        target,
        candidates,
        scope,
        remembered,
        published,
        reported,
    } = inputs;
    let annotation = target
        .annotations
        .get(POLICY_ANNOTATION)
        .map(String::as_str);
    let name = plugins.name_for(annotation).to_owned();
    let mut decided = Decided {
        decisions: None,
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
        Err(unknown) => return Err(unknown.into()),
    };
    let mut ask = Asker {
        plugins: &plugins,
        target: &target,
        chosen,
        decided: &mut decided,
    };

    let changed = match &scope {
        Scope::Pods(changed) => Some(changed),
        Scope::Full => None,
    };
    if let Some(changed) = changed {
        let only: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| changed.contains(c.name()))
            .collect();
        let unusual = changed.iter().any(|p| reported.contains(p));
        let touches_published = changed.iter().any(|p| published.contains(p));
        let memory = remembered.filter(|r| {
            ask.chosen.configured.plugin.per_pod() && r.by.as_ref() == Some(&ask.chosen.id)
        });
        if let Some(mut memory) = memory {
            let answers = ask.evaluate(&only)?;
            if memory.by.as_ref() != Some(&ask.chosen.id) {
                // It fell back: the built-in plugin decides every candidate.
                return decide_all(ask, &candidates).map(|()| decided);
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
            if !included && !touches_published && !unusual {
                decided.remembered = Some(memory);
                return Ok(decided);
            }
            let decisions = candidates
                .iter()
                .map(|c| memory.per_pod.get(c.name()).cloned())
                .collect::<Option<Vec<_>>>();
            if let Some(decisions) = decisions {
                decided.decisions = Some(decisions);
                decided.remembered = Some(memory);
                return Ok(decided);
            }
            // A candidate without a remembered decision: decide all of them below.
        } else if !touches_published && !unusual {
            let answers = ask.evaluate(&only)?;
            if answers.iter().all(|d| matches!(d, Decision::Exclude(_))) {
                return Ok(decided);
            }
        }
    }
    decide_all(ask, &candidates)?;
    Ok(decided)
}

fn decide_all(mut ask: Asker<'_>, candidates: &[Candidate]) -> Result<(), Error> {
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
    ask.decided.decisions = Some(decisions);
    Ok(())
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
