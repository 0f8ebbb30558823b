//! Prometheus metrics, served on `/metrics`: reconciles, slice writes and plugins, and the
//! EndpointSlice sync metrics of Kubernetes' own controller ([`sync`]).

pub mod sync;

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// One plugin call: which plugin, how it ended (`ok`, `rejected` or the failure's cause), how
/// long it took, and how many pods it asked about.
#[derive(Debug, Clone)]
pub struct PluginCall {
    pub plugin: String,
    pub outcome: &'static str,
    pub elapsed: Duration,
    pub pods: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
    pub result: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// Everything the controller counts.
pub struct Metrics {
    pub registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_duration: HistogramFamily<ResultLabels>,
    slice_writes: Family<WriteLabels, Counter>,
    plugin_calls: HistogramFamily<PluginLabels>,
    plugin_loads: Family<PluginLabels, Counter>,
    plugin_fallbacks: Family<PluginNameLabels, Counter>,
    plugin_pods: Family<PluginNameLabels, Counter>,
    slices_refused: Family<RefusedLabels, Counter>,
    /// Upstream's `endpoint_slice_controller_*`.
    pub sync: sync::SyncMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `precheck` (held back by this controller's own validation) or `api` (a 422).
    pub by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginNameLabels {
    pub plugin: String,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("nad_service_controller");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Service reconciles, by result (ok or an error category)",
            reconciles.clone(),
        );
        let reconcile_duration = HistogramFamily::<ResultLabels>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time to reconcile one Service, by result",
            reconcile_duration.clone(),
        );
        let slice_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "endpointslice_writes",
            "EndpointSlices written, by operation (apply or delete)",
            slice_writes.clone(),
        );
        let plugin_calls = HistogramFamily::<PluginLabels>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Time of one plugin evaluate call (one per reconcile), by plugin and result",
            plugin_calls.clone(),
        );
        let plugin_loads = Family::<PluginLabels, Counter>::default();
        registry.register(
            "plugin_loads",
            "Plugin files run through the load pipeline, by plugin and result (ok or the failed step)",
            plugin_loads.clone(),
        );
        let plugin_fallbacks = Family::<PluginNameLabels, Counter>::default();
        registry.register(
            "plugin_fallbacks",
            "Reconciles decided by the built-in plugin because the Service's plugin was missing or failed",
            plugin_fallbacks.clone(),
        );
        let plugin_pods = Family::<PluginNameLabels, Counter>::default();
        registry.register(
            "plugin_evaluated_pods",
            "Pods a plugin was asked about, by plugin: after a pod change a per-pod plugin is \
             asked about the changed pods only",
            plugin_pods.clone(),
        );
        let slices_refused = Family::<RefusedLabels, Counter>::default();
        registry.register(
            "endpointslice_refused",
            "EndpointSlice writes refused as invalid, by who refused them (precheck or api); \
             each is a bug in this controller, and the same content is not sent again",
            slices_refused.clone(),
        );
        let sync = sync::SyncMetrics::register(&mut registry);
        Self {
            sync,
            plugin_pods,
            registry,
            slices_refused,
            plugin_loads,
            plugin_fallbacks,
            reconciles,
            reconcile_duration,
            slice_writes,
            plugin_calls,
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, result: &str, elapsed: Duration) {
        let labels = ResultLabels {
            result: result.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn slices_written(&self, applied: usize, deleted: usize) {
        for (operation, n) in [("apply", applied), ("delete", deleted)] {
            if n > 0 {
                self.slice_writes
                    .get_or_create(&WriteLabels {
                        operation: operation.to_owned(),
                    })
                    .inc_by(n as u64);
            }
        }
    }

    /// The calls one decision made: their durations and the pods they asked about.
    pub fn plugin_calls(&self, calls: &[PluginCall]) {
        for call in calls {
            self.plugin_called(&call.plugin, call.outcome, call.elapsed);
            self.plugin_evaluated(&call.plugin, call.pods);
        }
    }

    pub fn plugin_called(&self, plugin: &str, result: &str, elapsed: Duration) {
        self.plugin_calls
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
                result: result.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A plugin was asked about `pods` pods.
    pub fn plugin_evaluated(&self, plugin: &str, pods: usize) {
        self.plugin_pods
            .get_or_create(&PluginNameLabels {
                plugin: plugin.to_owned(),
            })
            .inc_by(pods as u64);
    }

    pub fn plugin_loaded(&self, plugin: &str, result: &str) {
        self.plugin_loads
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    pub fn plugin_fell_back(&self, plugin: &str) {
        self.plugin_fallbacks
            .get_or_create(&PluginNameLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    pub fn slice_refused(&self, by: &str) {
        self.slices_refused
            .get_or_create(&RefusedLabels { by: by.to_owned() })
            .inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_the_exposition() {
        let m = Metrics::default();
        m.reconciled("ok", Duration::from_millis(3));
        m.slices_written(2, 1);
        m.plugin_called("default", "ok", Duration::from_micros(40));
        m.slice_refused("api");
        let text = m.encode();
        assert!(
            text.contains("nad_service_controller_endpointslice_refused_total{by=\"api\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nad_service_controller_reconciles_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "nad_service_controller_endpointslice_writes_total{operation=\"apply\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "nad_service_controller_endpointslice_writes_total{operation=\"delete\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("nad_service_controller_plugin_call_duration_seconds_count{plugin=\"default\",result=\"ok\"} 1"), "{text}");
    }
}
