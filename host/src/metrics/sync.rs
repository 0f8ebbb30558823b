//! The EndpointSlice sync metrics of Kubernetes' own EndpointSlice controller
//! (`endpoint_slice_controller_*`), with the same suffixes, types, buckets and label values
//! under this controller's prefix, so that dashboards built for upstream carry over.
//!
//! Kubernetes 1.38 renamed `endpoint_slice_controller_changes` to `..._changes_total` (the
//! suffix a counter should have) and keeps the old name, deprecated, beside it: so do these,
//! `changes` typed `unknown` (an OpenMetrics counter's samples must end in `_total`).

use std::{collections::HashMap, sync::Mutex};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder},
    metrics::{
        MetricType, TypedMetric,
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// `create`, `update` or `delete`.
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `success`, `stale` (the cache was behind this controller's writes) or `error`.
    pub result: String,
}

/// How a sync of one Service ended, as upstream's `syncs` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    Success,
    /// The cache was behind this controller's own writes: nothing was planned.
    Stale,
    Error,
}

impl Synced {
    pub fn label(self) -> &'static str {
        match self {
            Synced::Success => "success",
            Synced::Stale => "stale",
            Synced::Error => "error",
        }
    }
}

/// What one Service contributes to the gauges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub endpoints: i64,
    pub desired_slices: i64,
    pub slices: i64,
}

/// The slices one sync changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Changed {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
}

/// A counter exposed under its bare name, without `_total`, as an `unknown` metric: the
/// deprecated name upstream still serves.
#[derive(Debug, Default, Clone)]
struct Unsuffixed(Counter);

impl TypedMetric for Unsuffixed {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Unsuffixed {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

pub struct SyncMetrics {
    endpoints_added_per_sync: Histogram,
    endpoints_removed_per_sync: Histogram,
    endpoints_desired: Gauge,
    num_endpoint_slices: Gauge,
    desired_endpoint_slices: Gauge,
    changes: Family<OperationLabels, Counter>,
    changes_deprecated: Family<OperationLabels, Unsuffixed>,
    syncs: Family<SyncLabels, Counter>,
    per_service: Mutex<HashMap<(String, String), Figures>>,
}

/// Upstream's buckets for the per-sync histograms: 2, 4, ... 32768.
fn per_sync() -> Histogram {
    Histogram::new(exponential_buckets(2.0, 2.0, 15))
}

impl SyncMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = SyncMetrics {
            endpoints_added_per_sync: per_sync(),
            endpoints_removed_per_sync: per_sync(),
            endpoints_desired: Gauge::default(),
            num_endpoint_slices: Gauge::default(),
            desired_endpoint_slices: Gauge::default(),
            changes: Family::default(),
            changes_deprecated: Family::default(),
            syncs: Family::default(),
            per_service: Mutex::default(),
        };
        registry.register(
            "endpoints_added_per_sync",
            "Number of endpoints added on each Service sync",
            metrics.endpoints_added_per_sync.clone(),
        );
        registry.register(
            "endpoints_removed_per_sync",
            "Number of endpoints removed on each Service sync",
            metrics.endpoints_removed_per_sync.clone(),
        );
        registry.register(
            "endpoints_desired",
            "Number of endpoints desired",
            metrics.endpoints_desired.clone(),
        );
        registry.register(
            "num_endpoint_slices",
            "Number of EndpointSlices",
            metrics.num_endpoint_slices.clone(),
        );
        registry.register(
            "desired_endpoint_slices",
            "Number of EndpointSlices that would exist with perfect endpoint allocation",
            metrics.desired_endpoint_slices.clone(),
        );
        registry.register(
            "changes",
            "Number of EndpointSlice changes, by operation (create, update or delete)",
            metrics.changes.clone(),
        );
        registry.register(
            "changes",
            "Number of EndpointSlice changes. Deprecated in favor of \
             nad_service_controller_changes_total (as upstream's endpoint_slice_controller_changes)",
            metrics.changes_deprecated.clone(),
        );
        registry.register(
            "syncs",
            "Number of EndpointSlice syncs, by result (success, stale or error)",
            metrics.syncs.clone(),
        );
        // Known label values start at 0 (see `Metrics::default`).
        for operation in ["create", "update", "delete"] {
            let labels = OperationLabels {
                operation: operation.to_owned(),
            };
            drop(metrics.changes.get_or_create(&labels));
            drop(metrics.changes_deprecated.get_or_create(&labels));
        }
        for result in ["success", "stale", "error"] {
            drop(metrics.syncs.get_or_create(&SyncLabels {
                result: result.to_owned(),
            }));
        }
        metrics
    }

    /// A sync of one Service ended with `result`.
    pub fn synced(&self, result: Synced) {
        self.syncs
            .get_or_create(&SyncLabels {
                result: result.label().to_owned(),
            })
            .inc();
    }

    /// The endpoints a sync's plan adds and removes.
    pub fn planned(&self, added: usize, removed: usize) {
        self.endpoints_added_per_sync.observe(added as f64);
        self.endpoints_removed_per_sync.observe(removed as f64);
    }

    /// The slice writes of a sync that succeeded.
    pub fn changed(&self, changed: Changed) {
        for (operation, n) in [
            ("create", changed.created),
            ("update", changed.updated),
            ("delete", changed.deleted),
        ] {
            if n > 0 {
                let labels = OperationLabels {
                    operation: operation.to_owned(),
                };
                self.changes.get_or_create(&labels).inc_by(n as u64);
                self.changes_deprecated
                    .get_or_create(&labels)
                    .0
                    .inc_by(n as u64);
            }
        }
    }

    /// Forgets every Service's figures (a term as leader ended; the next one computes them
    /// again).
    pub fn clear(&self) {
        let mut per_service = self
            .per_service
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        per_service.clear();
        self.endpoints_desired.set(0);
        self.desired_endpoint_slices.set(0);
        self.num_endpoint_slices.set(0);
    }

    /// The Service's figures after a sync (`None`: it is gone or no longer managed).
    pub fn service(&self, namespace: &str, name: &str, figures: Option<Figures>) {
        let mut per_service = self
            .per_service
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (namespace.to_owned(), name.to_owned());
        let before = match figures {
            Some(figures) => per_service.insert(key, figures),
            None => per_service.remove(&key),
        }
        .unwrap_or_default();
        let now = figures.unwrap_or_default();
        self.endpoints_desired
            .inc_by(now.endpoints - before.endpoints);
        self.desired_endpoint_slices
            .inc_by(now.desired_slices - before.desired_slices);
        self.num_endpoint_slices.inc_by(now.slices - before.slices);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Kubernetes 1.38: `changes_total` and, deprecated, `changes`, with the same values.
    #[test]
    fn changes_are_counted_under_both_names() {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let m = SyncMetrics::register(&mut registry);
        m.changed(Changed {
            created: 2,
            updated: 1,
            deleted: 0,
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# TYPE nad_service_controller_changes counter",
            "nad_service_controller_changes_total{operation=\"create\"} 2",
            "nad_service_controller_changes_total{operation=\"delete\"} 0",
            "# TYPE nad_service_controller_changes unknown",
            "nad_service_controller_changes{operation=\"create\"} 2",
            "nad_service_controller_changes{operation=\"update\"} 1",
            "nad_service_controller_changes{operation=\"delete\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
    }

    #[test]
    fn figures_are_summed_over_services_and_cleared_with_a_term() {
        let mut registry = Registry::default();
        let m = SyncMetrics::register(&mut registry);
        let figures = |endpoints| Figures {
            endpoints,
            desired_slices: 1,
            slices: 1,
        };
        m.service("shop", "web", Some(figures(3)));
        m.service("shop", "db", Some(figures(2)));
        m.service("shop", "web", Some(figures(1)));
        assert_eq!(m.endpoints_desired.get(), 3);
        m.service("shop", "db", None);
        assert_eq!(
            (m.endpoints_desired.get(), m.num_endpoint_slices.get()),
            (1, 1)
        );
        m.clear();
        assert_eq!(m.endpoints_desired.get(), 0);
        m.service("shop", "web", Some(figures(4)));
        assert_eq!(
            m.endpoints_desired.get(),
            4,
            "the next term counts from nothing"
        );
    }
}
