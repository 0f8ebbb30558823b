//! What the metrics keep per Service: the problems that keep its slices from following its
//! pods (one series per Service and problem, present only while the problem lasts), and the
//! endpoints its slices publish (summed over the Services).

use nad_model::reason::Reason;
use std::{
    collections::{BTreeSet, HashMap},
    sync::{Mutex, PoisonError},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

/// Labels of a Service's problem. Not `namespace`/`service`: Prometheus (and
/// prometheus-operator's ServiceMonitor) set those as target labels of the controller's own
/// pod, and a scraped label of the same name would be renamed `exported_*`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ProblemLabels {
    pub service_namespace: String,
    pub service_name: String,
    /// The Event reason that told the Service about it (`PluginFailed`, `NetworkNotFound`, ...).
    pub reason: String,
    /// The plugin concerned, for the plugin problems; empty (no label) for the others.
    pub plugin: String,
}

/// One problem of a Service: its Event reason, and the plugin concerned (empty if none).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    pub reason: Reason,
    pub plugin: String,
}

impl Problem {
    pub fn new(reason: Reason) -> Self {
        Self {
            reason,
            plugin: String::new(),
        }
    }

    pub fn of_plugin(reason: Reason, plugin: &str) -> Self {
        Self {
            reason,
            plugin: plugin.to_owned(),
        }
    }
}

/// What a reconcile found out about a Service's problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// It evaluated the Service's inputs and wrote (or held back) its slices: these are its
    /// problems now, and the last reconcile did not fail.
    Evaluated(BTreeSet<Problem>),
    /// It ended without looking at the inputs (nothing to plan): the last failure is over, the
    /// problems found before stand.
    Succeeded,
    /// It failed: the slices stay as last applied; the problems found before stand.
    Failed(Problem),
    /// The Service is gone or no longer managed.
    Forget,
}

/// One Service's problems: those its last evaluation found, and its last reconcile's failure.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Known {
    evaluated: BTreeSet<Problem>,
    failure: Option<Problem>,
}

impl Known {
    fn apply(self, update: Update) -> Self {
        match update {
            Update::Evaluated(evaluated) => Known {
                evaluated,
                failure: None,
            },
            Update::Succeeded => Known {
                failure: None,
                ..self
            },
            Update::Failed(failure) => Known {
                failure: Some(failure),
                ..self
            },
            Update::Forget => Known::default(),
        }
    }

    fn shown(&self) -> BTreeSet<Problem> {
        self.evaluated
            .iter()
            .chain(&self.failure)
            .cloned()
            .collect()
    }
}

/// The series to add and to remove when a Service's problems go from `before` to `after`.
fn diff(before: &BTreeSet<Problem>, after: &BTreeSet<Problem>) -> (Vec<Problem>, Vec<Problem>) {
    (
        after.difference(before).cloned().collect(),
        before.difference(after).cloned().collect(),
    )
}

type Key = (String, String);

pub struct ServiceMetrics {
    problems: Family<ProblemLabels, Gauge>,
    known: Mutex<HashMap<Key, Known>>,
    published: Gauge,
    published_per_service: Mutex<HashMap<Key, i64>>,
}

impl ServiceMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ServiceMetrics {
            problems: Family::default(),
            known: Mutex::default(),
            published: Gauge::default(),
            published_per_service: Mutex::default(),
        };
        registry.register(
            "service_problem",
            "1 while a Service's EndpointSlices cannot follow its pods, by Service, reason (the \
             Event reason: PluginFailed, UnknownPlugin, PluginLoadFailed, PluginFallback, \
             NetworkNotFound, InvalidService, DuplicateAddress, EndpointLeftOut, \
             EndpointSliceRefused, \
             EndpointSliceWriteFailed, NotReady, InvalidProbe) and plugin (for the plugin reasons); the \
             series goes away when the problem does, so only Services with a problem have one",
            metrics.problems.clone(),
        );
        registry.register(
            "endpoints_published",
            "Endpoints in this controller's EndpointSlices, as its cache showed them at each \
             Service's last reconcile (a write shows at the reconcile its own watch event \
             triggers); compare with endpoints_desired",
            metrics.published.clone(),
        );
        metrics
    }

    /// Updates the Service's problem series after a reconcile.
    pub fn problems(&self, namespace: &str, name: &str, update: Update) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let before = known.remove(&key).unwrap_or_default();
        let shown_before = before.shown();
        let after = before.apply(update);
        let (added, removed) = diff(&shown_before, &after.shown());
        let labels = |p: Problem| ProblemLabels {
            service_namespace: namespace.to_owned(),
            service_name: name.to_owned(),
            reason: p.reason.as_str().to_owned(),
            plugin: p.plugin,
        };
        for problem in removed {
            self.problems.remove(&labels(problem));
        }
        for problem in added {
            self.problems.get_or_create(&labels(problem)).set(1);
        }
        if after != Known::default() {
            known.insert(key, after);
        }
    }

    /// The endpoints the Service's slices publish (`None`: it is gone or no longer managed).
    pub fn published(&self, namespace: &str, name: &str, endpoints: Option<i64>) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut per_service = self
            .published_per_service
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = match endpoints {
            Some(n) => per_service.insert(key, n),
            None => per_service.remove(&key),
        }
        .unwrap_or_default();
        self.published
            .inc_by(endpoints.unwrap_or_default() - before);
    }

    /// Forgets every Service (a term as leader ended): a replica that no longer reconciles
    /// shows no problem and publishes nothing.
    pub fn clear(&self) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.clear();
        self.problems.clear();
        let mut published = self
            .published_per_service
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        published.clear();
        self.published.set(0);
    }

    /// Forgets a Service that is gone or no longer managed.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.problems(namespace, name, Update::Forget);
        self.published(namespace, name, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(problems: &[Problem]) -> BTreeSet<Problem> {
        problems.iter().cloned().collect()
    }

    fn exposition(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn a_failure_adds_to_the_evaluated_problems_until_the_next_reconcile_ends_well() {
        let network = Problem::new(Reason::NetworkNotFound);
        let plugin = Problem::of_plugin(Reason::PluginFailed, "opt-out");
        let k = Known::default().apply(Update::Evaluated(set(std::slice::from_ref(&network))));
        let k = k.apply(Update::Failed(plugin.clone()));
        assert_eq!(k.shown(), set(&[network.clone(), plugin.clone()]));
        let k = k.apply(Update::Failed(Problem::new(
            Reason::EndpointSliceWriteFailed,
        )));
        assert_eq!(
            k.shown(),
            set(&[
                network.clone(),
                Problem::new(Reason::EndpointSliceWriteFailed)
            ]),
            "only the last failure"
        );
        let k = k.apply(Update::Succeeded);
        assert_eq!(k.shown(), set(&[network]), "nothing planned: inputs stand");
        let k = k.apply(Update::Evaluated(BTreeSet::new()));
        assert_eq!(k, Known::default());
    }

    #[test]
    fn the_diff_adds_new_and_removes_gone_problems_only() {
        let (a, b, c) = (
            Problem::new(Reason::PluginFailed),
            Problem::new(Reason::NotReady),
            Problem::new(Reason::EndpointLeftOut),
        );
        let (added, removed) = diff(&set(&[a.clone(), b.clone()]), &set(&[b, c.clone()]));
        assert_eq!((added, removed), (vec![c], vec![a]));
    }

    #[test]
    fn series_exist_only_while_a_problem_lasts() {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let m = ServiceMetrics::register(&mut registry);
        m.problems(
            "shop",
            "web",
            Update::Failed(Problem::of_plugin(Reason::PluginFailed, "opt-out")),
        );
        m.problems(
            "shop",
            "db",
            Update::Evaluated(set(&[Problem::new(Reason::NetworkNotFound)])),
        );
        let text = exposition(&registry);
        assert!(text.contains(
            "nad_service_controller_service_problem{service_namespace=\"shop\",service_name=\"web\",reason=\"PluginFailed\",plugin=\"opt-out\"} 1"
        ), "{text}");
        assert!(
            text.contains("service_name=\"db\",reason=\"NetworkNotFound\",plugin=\"\"} 1"),
            "{text}"
        );
        m.problems("shop", "web", Update::Evaluated(BTreeSet::new()));
        m.forget("shop", "db");
        let text = exposition(&registry);
        assert!(!text.contains("service_problem"), "{text}");
        assert!(
            m.known.lock().unwrap().is_empty(),
            "nothing kept for healthy Services"
        );
    }

    #[test]
    fn published_endpoints_are_summed_over_services_and_forgotten_with_them() {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let m = ServiceMetrics::register(&mut registry);
        m.published("shop", "web", Some(3));
        m.published("shop", "db", Some(2));
        m.published("shop", "web", Some(1));
        assert_eq!(m.published.get(), 3);
        m.forget("shop", "web");
        assert_eq!(m.published.get(), 2);
    }

    #[test]
    fn a_term_that_ends_leaves_no_service_behind() {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let m = ServiceMetrics::register(&mut registry);
        m.published("shop", "web", Some(3));
        m.problems(
            "shop",
            "web",
            Update::Evaluated(set(&[Problem::new(Reason::NetworkNotFound)])),
        );
        m.clear();
        assert_eq!(m.published.get(), 0);
        assert!(!exposition(&registry).contains("service_problem"));
        m.published("shop", "web", Some(1));
        assert_eq!(m.published.get(), 1, "the next term counts from nothing");
    }
}
