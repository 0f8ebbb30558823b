//! How the controller's watches progress, per watched resource.
//!
//! kube's watcher consumes bookmarks itself and restarts an ended or failed watch without
//! telling its consumer (a restart from a known resource version delivers nothing until an
//! object changes), so a quiet healthy watch and a dead one both deliver no events: "time since
//! the last event" cannot tell them apart. What can: a failing watch retries at least every
//! 2 s ([`crate::watch::health`]) and every attempt that fails is an error, so errors that keep
//! coming mean the watch is not progressing, and a healthy watch, quiet or busy, adds none.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `pods`, `services`, `endpointslices`, `nodes`, `networkattachmentdefinitions`,
    /// `resourceclaims`, `deviceclasses` (where the cluster serves DRA) or `configmaps` (the
    /// plugin ConfigMap).
    pub resource: String,
}

type UnixTime = Gauge<f64, AtomicU64>;

/// The watch metrics' families.
pub struct WatchMetrics {
    events: Family<ResourceLabels, Counter>,
    errors: Family<ResourceLabels, Counter>,
    listed: Family<ResourceLabels, UnixTime>,
    /// Per resource, the newest resourceVersion its watch delivered (see [`Self::seen`]).
    seen: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

/// One watch's handles: looked up once, so counting an event is an atomic increment.
#[derive(Clone, Debug)]
pub struct WatchProgress {
    events: Counter,
    errors: Counter,
    listed: UnixTime,
    seen: Arc<AtomicU64>,
}

impl WatchMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = WatchMetrics {
            events: Family::default(),
            errors: Family::default(),
            listed: Family::default(),
            seen: Mutex::default(),
        };
        registry.register(
            "watch_events",
            "Events a watch delivered (list items included), by resource. A quiet cluster \
             delivers none: kube's watcher consumes bookmarks, and a restarted watch delivers \
             nothing until an object changes, so no events is not a stalled watch",
            metrics.events.clone(),
        );
        registry.register(
            "watch_errors",
            "Failed list or watch attempts, by resource (410 Expired, which lists again at \
             once, is not counted). A failing watch retries at least every 2 s, so errors that \
             keep coming mean the watch is not progressing; a healthy watch adds none",
            metrics.errors.clone(),
        );
        registry.register(
            "watch_last_list_timestamp_seconds",
            "Unix time the watch last completed a (re)list, by resource: at start-up, after \
             410 Expired, after a failure that the watcher could not resume from",
            metrics.listed.clone(),
        );
        metrics
    }

    /// The handles of the watch of `resource`.
    pub fn progress(&self, resource: &str) -> WatchProgress {
        let labels = ResourceLabels {
            resource: resource.to_owned(),
        };
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(labels.resource.clone())
            .or_default()
            .clone();
        WatchProgress {
            events: self.events.get_or_create(&labels).clone(),
            errors: self.errors.get_or_create(&labels).clone(),
            listed: self.listed.get_or_create(&labels).clone(),
            seen,
        }
    }

    /// The newest resourceVersion of an object the watch of `resource` delivered, read as the
    /// number kube-apiserver's etcd store makes it (0 before any, or for one that is not a
    /// number). Not a metric, resource versions being opaque to clients; what a test reads to
    /// know that the controller saw its change.
    pub fn seen(&self, resource: &str) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(resource)
            .map_or(0, |version| version.load(Ordering::Relaxed))
    }
}

impl WatchProgress {
    /// The watch delivered an event.
    pub fn event(&self) {
        self.events.inc();
    }

    /// The watch delivered an object at `resource_version`.
    pub fn saw(&self, resource_version: Option<&str>) {
        if let Some(version) = resource_version.and_then(|v| v.parse().ok()) {
            self.seen.fetch_max(version, Ordering::Relaxed);
        }
    }

    /// The watch completed a (re)list at unix time `at` (seconds).
    pub fn listed(&self, at: f64) {
        self.listed.set(at);
    }

    /// A list or watch attempt failed.
    pub fn error(&self) {
        self.errors.inc();
    }
}

/// Now as unix time in seconds (0 if the clock is before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_resource_counts_on_its_own_and_shows_before_any_event() {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let metrics = WatchMetrics::register(&mut registry);
        let pods = metrics.progress("pods");
        let nodes = metrics.progress("nodes");
        pods.event();
        pods.event();
        pods.error();
        pods.listed(1_700_000_000.5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "nad_service_controller_watch_events_total{resource=\"pods\"} 2",
            "nad_service_controller_watch_errors_total{resource=\"pods\"} 1",
            "nad_service_controller_watch_last_list_timestamp_seconds{resource=\"pods\"} 1700000000.5",
            "nad_service_controller_watch_errors_total{resource=\"nodes\"} 0",
            "nad_service_controller_watch_last_list_timestamp_seconds{resource=\"nodes\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        drop(nodes);
        assert!(
            metrics.progress("pods").events.get() == 2,
            "the same resource shares its series"
        );
    }
}
