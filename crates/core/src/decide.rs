//! Asking a Service's [`Policy`] about its candidates: which pods, and what to remember.
//!
//! Pure over a policy: the Wasm plugins are one ([`super::policy::PluginPolicy`]), a table of
//! answers in the tests is another.
//!
//! Only the pods that need it are asked about, and only the candidates needed are observed.
//! After a change of some pods, the policy is asked about those pods first (an answer the pod
//! screen already got for the same pod record is reused). When none of them is published or
//! becomes included, nothing moves: the Service's other candidates are never even looked at.
//! Otherwise a policy that decides per pod (each decision depends on the Service, that pod and
//! the configuration alone) keeps its other pods' last decisions; a policy whose decisions
//! depend on the whole set is asked about every candidate.
//!
//! A policy that declares the labels every pod it includes has (its [`Selection`]) is asked
//! only about the candidates with them; the others are excluded without asking, and the pod
//! screen lets a change of one of them pass without a call.

use std::sync::Arc;

use super::{candidates::Observed, observe::Observation, scope::Scope};
use nad_model::{
    candidate::Candidate,
    decision::{Conditions, Decision},
};
use nad_model::{input::target::ServiceTarget, intern::Name, pod::PodRecord, selection::Selection};

/// Which plugin, with which configuration, made a set of decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyId {
    pub name: String,
    pub hash: String,
    pub config: u64,
}

/// Who decides a Service's pods.
pub trait Policy {
    /// Why the policy gave no answer.
    type Error;

    /// Who decides now; an error when no one can (the Service's plugin is not loaded and its
    /// failure policy keeps the slices).
    fn id(&self) -> Result<PolicyId, Self::Error>;
    /// Whether each decision depends on the Service, that pod and the configuration alone.
    fn per_pod(&self) -> bool;
    /// One decision per pod, in order.
    fn decide(
        &mut self,
        target: &ServiceTarget,
        pods: Pods<'_>,
    ) -> Result<Vec<Decision>, Self::Error>;
    /// The labels every pod the policy includes for the Service has: it is asked about the
    /// candidates with them only, and the others are excluded without asking. Every
    /// candidate unless the policy declares otherwise.
    fn selection(&mut self, _target: &ServiceTarget) -> Result<Arc<Selection>, Self::Error> {
        Ok(Arc::default())
    }
}

/// The pods a call asks about: some of the candidates, all of them (whose views the
/// Services of the network share), or those of them a selection chose (by index).
#[derive(Clone, Copy)]
pub enum Pods<'a> {
    Some(&'a [&'a Candidate]),
    All(&'a Observed),
    Selected(&'a Observed, &'a [usize]),
}

impl<'a> Pods<'a> {
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    pub fn len(self) -> usize {
        match self {
            Pods::Some(pods) => pods.len(),
            Pods::All(observed) => observed.candidates.len(),
            Pods::Selected(_, chosen) => chosen.len(),
        }
    }

    pub fn iter(self) -> impl Iterator<Item = &'a Candidate> + Clone {
        let (some, all, selected) = match self {
            Pods::Some(pods) => (Some(pods.iter().copied()), None, None),
            Pods::All(observed) => (None, Some(observed.candidates.iter()), None),
            Pods::Selected(observed, chosen) => {
                let candidates = &observed.candidates;
                (None, None, Some(chosen.iter().map(|&i| &candidates[i])))
            }
        };
        let some = some.into_iter().flatten();
        some.chain(all.into_iter().flatten())
            .chain(selected.into_iter().flatten())
    }
}

/// A Service's last decisions: the included pods, by name, with their conditions. Every other
/// candidate was excluded. Kept across reconciles only while every change of the Service's
/// pods reaches it (anything else plans in full and starts it again).
#[derive(Debug, Default, Clone)]
pub struct Remembered {
    pub by: Option<PolicyId>,
    pub included: Included,
}

/// The included pods of a [`Remembered`], as records: each pod's name (shared with its pod
/// record, not copied) and conditions, sorted by name, 24 bytes a pod. A Service keeps these
/// between reconciles, so at 10 000 Services of 15 pods each they are 150 000 entries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Included(Vec<(Name, Conditions)>);

impl Included {
    fn find(&self, pod: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(name, _)| (**name).cmp(pod))
    }

    pub fn contains(&self, pod: &str) -> bool {
        self.find(pod).is_ok()
    }

    /// Includes `pod` with `conditions` (again).
    pub fn insert(&mut self, pod: &Name, conditions: Conditions) {
        match self.find(pod) {
            Ok(i) => self.0[i].1 = conditions,
            Err(i) => self.0.insert(i, (pod.clone(), conditions)),
        }
    }

    pub fn remove(&mut self, pod: &str) {
        if let Ok(i) = self.find(pod) {
            self.0.remove(i);
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|(name, _)| keep(name));
    }

    /// The pods by name, in order, with their conditions.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Conditions)> {
        self.0.iter().map(|(name, c)| (&**name, *c))
    }
}

impl FromIterator<(Name, Conditions)> for Included {
    /// The last conditions given for a pod stand.
    fn from_iter<I: IntoIterator<Item = (Name, Conditions)>>(pods: I) -> Self {
        let mut pods: Vec<(Name, Conditions)> = pods.into_iter().collect();
        pods.reverse();
        pods.sort_by(|a, b| a.0.cmp(&b.0));
        pods.dedup_by(|later, first| later.0 == first.0);
        pods.shrink_to_fit();
        Included(pods)
    }
}

/// The policy's answer about one pod record, given before the reconcile (by the pod screen):
/// the reconcile reuses it while the record and the policy are the same.
#[derive(Debug, Clone)]
pub struct Answer {
    pub pod: Arc<PodRecord>,
    pub by: PolicyId,
    pub decision: Decision,
}

impl Answer {
    /// This answer, if it is about `candidate`'s very record and from `policy`.
    fn for_candidate(&self, candidate: &Candidate, policy: &PolicyId) -> Option<&Decision> {
        (Arc::ptr_eq(&self.pod, &candidate.pod) && self.by == *policy).then_some(&self.decision)
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
    /// The labels the candidates asked about had: the others were excluded without asking.
    pub selection: Arc<Selection>,
}

impl Verdicts {
    pub fn included(&self) -> Vec<(&Candidate, Conditions)> {
        self.included
            .iter()
            .map(|(i, c)| (&self.observation.candidates[*i], *c))
            .collect()
    }
}

/// What [`decide`] reads besides the policy.
pub struct Question<'a> {
    pub target: &'a ServiceTarget,
    pub scope: &'a Scope,
    pub remembered: Option<Remembered>,
    /// For a pod-scoped reconcile: the changed pods among the candidates, and those to report
    /// on (skipped, addresses left out).
    pub changed: &'a Observation,
    /// Answers about changed pods given before the reconcile.
    pub answered: &'a [Answer],
    /// One of the changed pods is published now.
    pub touches_published: bool,
}

/// What the policy decided.
#[derive(Debug, Default)]
pub struct Decided {
    /// The Service's candidates and their verdicts; `None` when the changed pods move no
    /// endpoint, so there is nothing to plan.
    pub verdicts: Option<Verdicts>,
    /// To keep for the next reconcile.
    pub remembered: Option<Remembered>,
}

/// Decides the Service's pods; `candidates` observes all of them, called only when needed.
pub fn decide<P: Policy + ?Sized>(
    policy: &mut P,
    question: Question<'_>,
    candidates: impl FnOnce() -> Arc<Observed>,
) -> Result<Decided, P::Error> {
    let id = policy.id()?;
    let Question {
        target,
        scope,
        remembered,
        changed,
        answered,
        touches_published,
    } = question;
    let unusual = !changed.skipped.is_empty() || !changed.ignored_ips.is_empty();
    let per_pod = policy.per_pod();
    let memory = remembered.filter(|r| per_pod && r.by.as_ref() == Some(&id));
    // A whole-set policy asked about changed pods that move an endpoint anyway would only be
    // asked again about every candidate.
    if matches!(scope, Scope::Pods(_)) && (memory.is_some() || !(touches_published || unusual)) {
        let only: Vec<&Candidate> = changed.candidates.iter().collect();
        let answers = ask_some(policy, target, &only, answered, &id)?;
        let moves = touches_published
            || unusual
            || answers.iter().any(|d| matches!(d, Decision::Include(_)));
        // Another policy answered (the Service's failed under `fallback`): it decides all.
        let fell_back = policy.id()? != id;
        match memory {
            _ if fell_back => {}
            Some(mut memory) => {
                for (candidate, decision) in only.iter().zip(answers) {
                    match decision {
                        Decision::Include(c) => memory.included.insert(&candidate.pod.name, c),
                        Decision::Exclude(_) => memory.included.remove(candidate.name()),
                    }
                }
                let verdicts = moves.then(|| from_memory(candidates(), &mut memory));
                return Ok(Decided {
                    verdicts,
                    remembered: Some(memory),
                });
            }
            // A whole-set policy keeps no memory of a partial answer.
            None if !moves => return Ok(Decided::default()),
            None => {}
        }
    }
    let observation = candidates();
    let (selection, decisions) = ask_selected(policy, target, &observation)?;
    let mut verdicts = Verdicts {
        selection,
        ..Verdicts::default()
    };
    for (index, decision) in decisions {
        match decision {
            Decision::Include(c) => verdicts.included.push((index, c)),
            Decision::Exclude(reason) => verdicts.excluded.push((index, reason)),
        }
    }
    verdicts.observation = observation;
    let remembered = Remembered {
        // After a fallback, the built-in plugin's decisions.
        by: Some(policy.id()?),
        included: verdicts
            .included()
            .iter()
            .map(|(c, conditions)| (c.pod.name.clone(), *conditions))
            .collect(),
    };
    Ok(Decided {
        verdicts: Some(verdicts),
        remembered: Some(remembered),
    })
}

/// Decisions about candidates, by their index among the candidates.
type Indexed = Vec<(usize, Decision)>;

/// The policy's decisions about the candidates its selection chose (by index), and the
/// selection. A policy that changed during the call (the Service's failed under `fallback`)
/// is asked again, about the candidates its own selection chooses.
fn ask_selected<P: Policy + ?Sized>(
    policy: &mut P,
    target: &ServiceTarget,
    observed: &Observed,
) -> Result<(Arc<Selection>, Indexed), P::Error> {
    let id = policy.id()?;
    let answer = ask_selected_once(policy, target, observed)?;
    if policy.id()? == id {
        return Ok(answer);
    }
    ask_selected_once(policy, target, observed)
}

fn ask_selected_once<P: Policy + ?Sized>(
    policy: &mut P,
    target: &ServiceTarget,
    observed: &Observed,
) -> Result<(Arc<Selection>, Indexed), P::Error> {
    let selection = policy.selection(target)?;
    if selection.is_everything() {
        let decisions = policy.decide(target, Pods::All(observed))?;
        return Ok((selection, decisions.into_iter().enumerate().collect()));
    }
    let chosen = observed.selected(&selection);
    if chosen.is_empty() {
        return Ok((selection, Vec::new()));
    }
    let decisions = policy.decide(target, Pods::Selected(observed, &chosen))?;
    Ok((selection, chosen.into_iter().zip(decisions).collect()))
}

/// Why a candidate without the selection's labels is excluded (without asking).
fn not_selected(selection: &Selection) -> Decision {
    Decision::Exclude(format!(
        "the policy includes only pods with labels {selection}"
    ))
}

/// The decisions about `only`: the answers given before for the same records, an exclusion
/// for those without the policy's selection, the policy's for the others (in one call).
fn ask_some<P: Policy + ?Sized>(
    policy: &mut P,
    target: &ServiceTarget,
    only: &[&Candidate],
    answered: &[Answer],
    id: &PolicyId,
) -> Result<Vec<Decision>, P::Error> {
    let selection = policy.selection(target)?;
    let known: Vec<Option<Decision>> = only
        .iter()
        .map(|c| {
            if !selection.admits(&c.pod) {
                return Some(not_selected(&selection));
            }
            answered
                .iter()
                .find_map(|a| a.for_candidate(c, id))
                .cloned()
        })
        .collect();
    let unknown: Vec<&Candidate> = only
        .iter()
        .zip(&known)
        .filter_map(|(c, known)| known.is_none().then_some(*c))
        .collect();
    let mut asked = if unknown.is_empty() {
        Vec::new()
    } else {
        policy.decide(target, Pods::Some(&unknown))?
    }
    .into_iter();
    // One decision per pod asked about (the policy's contract; the Wasm runtime checks it):
    // a pod without one is left out, as a policy that says nothing of it would have it.
    let unanswered = || Decision::Exclude("the policy gave no decision".to_owned());
    Ok(known
        .into_iter()
        .map(|known| known.or_else(|| asked.next()).unwrap_or_else(unanswered))
        .collect())
}

/// The verdicts of every candidate from the per-pod memory; pods that are no longer
/// candidates leave it. (Candidates are sorted by name.)
fn from_memory(observation: Arc<Observed>, memory: &mut Remembered) -> Verdicts {
    let candidates = &observation.candidates;
    let index_of = |pod: &str| candidates.binary_search_by(|c| c.name().cmp(pod)).ok();
    memory.included.retain(|pod| index_of(pod).is_some());
    // Both in name order: the indexes come out sorted.
    let included: Vec<(usize, Conditions)> = memory
        .included
        .iter()
        .filter_map(|(pod, c)| Some((index_of(pod)?, c)))
        .collect();
    Verdicts {
        observation,
        included,
        excluded: Vec::new(),
        selection: Arc::default(),
    }
}

/// What the pod screen concludes of a change of one pod that the Service does not include.
#[derive(Debug)]
pub enum Screened {
    /// The pod stays out: nothing moves.
    Still,
    /// The Service must reconcile; with the policy's answer when it gave one.
    Moves(Option<Answer>),
}

/// Whether a change of `candidate`, which the Service does not include now, moves one of its
/// endpoints: it does when the policy includes the pod now, or cannot answer (the reconcile
/// then reports why).
pub fn screen<P: Policy + ?Sized>(
    policy: &mut P,
    target: &ServiceTarget,
    candidate: &Candidate,
) -> Screened {
    if policy.id().is_err() {
        return Screened::Moves(None);
    }
    match policy.selection(target) {
        Ok(selection) if !selection.admits(&candidate.pod) => return Screened::Still,
        Ok(_) => {}
        Err(_) => return Screened::Moves(None),
    }
    match policy.decide(target, Pods::Some(&[candidate])) {
        Ok(decisions) => match decisions.into_iter().next() {
            Some(Decision::Exclude(_)) => Screened::Still,
            Some(decision) => Screened::Moves(policy.id().ok().map(|by| Answer {
                pod: candidate.pod.clone(),
                by,
                decision,
            })),
            None => Screened::Moves(None),
        },
        Err(_) => Screened::Moves(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: Conditions = Conditions {
        ready: true,
        serving: true,
        terminating: false,
    };
    const TERMINATING: Conditions = Conditions {
        ready: false,
        serving: true,
        terminating: true,
    };

    #[test]
    fn included_pods_stay_sorted_and_share_their_records_names() {
        let (a, b, c): (Name, Name, Name) = ("a".into(), "b".into(), "c".into());
        let mut included: Included = [(c.clone(), READY), (a.clone(), READY)]
            .into_iter()
            .collect();
        included.insert(&b, READY);
        included.insert(&a, TERMINATING);
        assert_eq!(
            included.iter().collect::<Vec<_>>(),
            [("a", TERMINATING), ("b", READY), ("c", READY)]
        );
        assert!(Arc::ptr_eq(&included.0[1].0, &b), "the name is not copied");
        included.remove("b");
        included.remove("nobody");
        assert!(included.contains("c") && !included.contains("b"));
        included.retain(|pod| pod != "a");
        assert_eq!(included.iter().collect::<Vec<_>>(), [("c", READY)]);
    }

    #[test]
    fn the_last_conditions_given_for_a_pod_stand() {
        let included: Included = [("a".into(), READY), ("a".into(), TERMINATING)]
            .into_iter()
            .collect();
        assert_eq!(included.iter().collect::<Vec<_>>(), [("a", TERMINATING)]);
    }
}
