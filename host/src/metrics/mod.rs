//! Prometheus metrics, served on `/metrics`: reconciles, slice writes and plugins, leadership,
//! the flip latency, the EndpointSlice sync metrics of Kubernetes' own controller ([`sync`]),
//! the watches' progress ([`watch`]) and each Service's problems ([`services`]).

pub mod services;
pub mod sync;
pub mod watch;

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::error::Category;
use nad_plugin_policy::{CallOutcome, PluginCall};
use nad_plugin_runtime::Step as PipelineStep;

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

fn memory_histogram() -> Histogram {
    // 64 KiB (one Wasm page) .. 64 MiB (the default limit), doubling
    Histogram::new(exponential_buckets(65_536.0, 2.0, 11))
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
    plugin_memory: HistogramFamily<PluginNameLabels>,
    slices_refused: Family<RefusedLabels, Counter>,
    leader: Gauge,
    flip: Histogram,
    /// Upstream's `endpoint_slice_controller_*`.
    pub sync: sync::SyncMetrics,
    pub watch: watch::WatchMetrics,
    pub services: services::ServiceMetrics,
}

/// The buckets of the flip latency, in seconds: its start has a resolution of 1 s (a
/// condition's `lastTransitionTime`), so finer buckets below 1 s would say nothing.
const FLIP_BUCKETS: [f64; 16] = [
    0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0,
];

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
        let (reconciles, reconcile_duration, slice_writes) =
            register_reconcile_metrics(&mut registry);
        let plugins = register_plugin_metrics(&mut registry);
        let slices_refused = register_slices_refused(&mut registry);
        let leader = register_leader(&mut registry);
        let flip = register_flip(&mut registry);
        start_known_counters_at_zero(&reconciles, &slice_writes, &slices_refused);
        let sync = sync::SyncMetrics::register(&mut registry);
        let watch = watch::WatchMetrics::register(&mut registry);
        let services = services::ServiceMetrics::register(&mut registry);
        Self {
            leader,
            flip,
            watch,
            services,
            sync,
            plugin_pods: plugins.pods,
            plugin_memory: plugins.memory,
            registry,
            slices_refused,
            plugin_loads: plugins.loads,
            plugin_fallbacks: plugins.fallbacks,
            reconciles,
            reconcile_duration,
            slice_writes,
            plugin_calls: plugins.calls,
        }
    }
}

/// Registers what the reconciles do: their count and duration by result, and the
/// EndpointSlices they write by operation. Returns the three in that order.
fn register_reconcile_metrics(
    registry: &mut Registry,
) -> (
    Family<ResultLabels, Counter>,
    HistogramFamily<ResultLabels>,
    Family<WriteLabels, Counter>,
) {
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
    (reconciles, reconcile_duration, slice_writes)
}

/// What the plugins do, as registered together.
struct PluginFamilies {
    /// Evaluate call durations, by plugin and result.
    calls: HistogramFamily<PluginLabels>,
    /// Files run through the load pipeline, by plugin and result.
    loads: Family<PluginLabels, Counter>,
    /// Reconciles the built-in plugin decided instead, by plugin.
    fallbacks: Family<PluginNameLabels, Counter>,
    /// Pods a plugin was asked about, by plugin.
    pods: Family<PluginNameLabels, Counter>,
    /// The linear memory of each evaluate call's instance, by plugin.
    memory: HistogramFamily<PluginNameLabels>,
}

/// Registers and returns what the plugins do: their calls, loads and fallbacks, the pods
/// they were asked about and the memory their calls took.
fn register_plugin_metrics(registry: &mut Registry) -> PluginFamilies {
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
    let plugin_memory = HistogramFamily::<PluginNameLabels>::new_with_constructor(
        memory_histogram as fn() -> Histogram,
    );
    registry.register(
        "plugin_call_memory_bytes",
        "Linear memory of one plugin evaluate call's instance at its largest, by plugin: what \
         the plugin needs of --plugin-memory-limit-mib, and what each concurrent call adds to \
         the controller's memory",
        plugin_memory.clone(),
    );
    PluginFamilies {
        calls: plugin_calls,
        loads: plugin_loads,
        fallbacks: plugin_fallbacks,
        pods: plugin_pods,
        memory: plugin_memory,
    }
}

/// Registers and returns the count of EndpointSlice writes refused as invalid, by who
/// refused them.
fn register_slices_refused(registry: &mut Registry) -> Family<RefusedLabels, Counter> {
    let slices_refused = Family::<RefusedLabels, Counter>::default();
    registry.register(
        "endpointslice_refused",
        "EndpointSlice writes refused as invalid, by who refused them (precheck or api); \
         each is a bug in this controller, and the same content is not sent again",
        slices_refused.clone(),
    );
    slices_refused
}

/// Registers and returns the gauge of whether this replica reconciles now.
fn register_leader(registry: &mut Registry) -> Gauge {
    let leader = Gauge::default();
    registry.register(
        "leader",
        "1 while this replica reconciles (it holds the Lease, or leader election is off), \
         0 while it is a candidate",
        leader.clone(),
    );
    leader
}

/// Registers and returns the histogram of the flip latency, from a pod's change to the end
/// of the EndpointSlice write that reflects it.
fn register_flip(registry: &mut Registry) -> Histogram {
    let flip = Histogram::new(FLIP_BUCKETS);
    registry.register(
        "endpoint_flip_duration_seconds",
        "Time from the pod change an EndpointSlice write reflects to the end of that write: \
         the pod's Ready condition lastTransitionTime (1 s resolution, so up to 1 s more than \
         it took) when that changed, else when the controller saw the change (a pod \
         terminating, deleted, relabelled); the trigger time the write carries, so this is \
         this controller's part of kube-proxy's network programming latency",
        flip.clone(),
    );
    flip
}

/// Creates the series of the counters whose label values are known, at 0.
fn start_known_counters_at_zero(
    reconciles: &Family<ResultLabels, Counter>,
    slice_writes: &Family<WriteLabels, Counter>,
    slices_refused: &Family<RefusedLabels, Counter>,
) {
    // The counters whose label values are known start at 0, so that a rate sees their
    // first increment and a dashboard their name before anything happened.
    let results = std::iter::once(Reconciled::Ok).chain(Category::ALL.map(Reconciled::Failed));
    for result in results {
        drop(reconciles.get_or_create(&ResultLabels {
            result: result.label().to_owned(),
        }));
    }
    for operation in ["apply", "delete"] {
        drop(slice_writes.get_or_create(&WriteLabels {
            operation: operation.to_owned(),
        }));
    }
    for by in RefusedBy::ALL {
        let by = by.label().to_owned();
        drop(slices_refused.get_or_create(&RefusedLabels { by }));
    }
}

/// How a reconcile ended, for the `reconciles` and duration series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    Ok,
    Failed(Category),
}

impl Reconciled {
    pub fn label(self) -> &'static str {
        match self {
            Reconciled::Ok => "ok",
            Reconciled::Failed(category) => category.metric_label(),
        }
    }
}

/// Who refused an EndpointSlice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// This controller's own check of the API's rules held it back.
    Precheck,
    /// The API server answered `422`.
    Api,
}

impl RefusedBy {
    pub const ALL: [RefusedBy; 2] = [RefusedBy::Precheck, RefusedBy::Api];

    pub fn label(self) -> &'static str {
        match self {
            RefusedBy::Precheck => "precheck",
            RefusedBy::Api => "api",
        }
    }
}

/// How loading a version of a plugin ended: loaded, or failed at a step of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    Ok,
    Failed(PipelineStep),
}

impl Loaded {
    pub fn label(self) -> &'static str {
        match self {
            Loaded::Ok => "ok",
            Loaded::Failed(step) => step.as_str(),
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, result: Reconciled, elapsed: Duration) {
        let labels = ResultLabels {
            result: result.label().to_owned(),
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
            let plugin = PluginNameLabels {
                plugin: call.plugin.clone(),
            };
            self.plugin_pods
                .get_or_create(&plugin)
                .inc_by(call.pods as u64);
            self.plugin_memory
                .get_or_create(&plugin)
                .observe(call.memory as f64);
        }
    }

    pub fn plugin_called(&self, plugin: &str, result: CallOutcome, elapsed: Duration) {
        self.plugin_calls
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
                result: result.as_str().to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn plugin_loaded(&self, plugin: &str, result: Loaded) {
        self.plugin_loads
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
                result: result.label().to_owned(),
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

    pub fn slice_refused(&self, by: RefusedBy) {
        self.slices_refused
            .get_or_create(&RefusedLabels {
                by: by.label().to_owned(),
            })
            .inc();
    }

    /// Whether this replica reconciles now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// A write reflecting changes made at `changed_at` ended at `written` (both unix seconds);
    /// a clock behind the API server's counts as no delay.
    pub fn flipped(&self, changed_at: f64, written: f64) {
        self.flip.observe((written - changed_at).max(0.0));
    }

    /// A term as leader ended: the per-Service figures and problems go, so that a standby
    /// replica shows none (the alerts take the maximum over the replicas).
    pub fn end_term(&self) {
        self.set_leader(false);
        self.sync.clear();
        self.services.clear();
    }

    /// Forgets a Service that is gone or no longer managed: its figures and its problems.
    pub fn forget_service(&self, namespace: &str, name: &str) {
        self.sync.service(namespace, name, None);
        self.services.forget(namespace, name);
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
        m.reconciled(Reconciled::Ok, Duration::from_millis(3));
        m.slices_written(2, 1);
        m.plugin_called("default", CallOutcome::Ok, Duration::from_micros(40));
        m.slice_refused(RefusedBy::Api);
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

    #[test]
    fn leadership_shows_as_one_or_zero() {
        let m = Metrics::default();
        assert!(m.encode().contains("\nnad_service_controller_leader 0\n"));
        m.set_leader(true);
        assert!(m.encode().contains("\nnad_service_controller_leader 1\n"));
        m.set_leader(false);
        assert!(m.encode().contains("\nnad_service_controller_leader 0\n"));
    }

    #[test]
    fn an_ended_term_shows_no_leader_and_no_service() {
        let m = Metrics::default();
        m.set_leader(true);
        m.services.problems(
            "shop",
            "web",
            services::Update::Failed(services::Problem::new(nad_model::reason::Reason::NotReady)),
        );
        assert!(m.encode().contains("reason=\"NotReady\""));
        m.end_term();
        let text = m.encode();
        assert!(
            text.contains("\nnad_service_controller_leader 0\n"),
            "{text}"
        );
        assert!(!text.contains("service_problem"), "{text}");
    }

    #[test]
    fn flips_are_observed_in_seconds_and_never_negative() {
        let m = Metrics::default();
        m.flipped(100.0, 101.5);
        m.flipped(100.0, 99.0);
        let text = m.encode();
        let line = |l: &str| text.lines().any(|x| x == l);
        let name = "nad_service_controller_endpoint_flip_duration_seconds";
        assert!(line(&format!("{name}_count 2")), "{text}");
        assert!(line(&format!("{name}_sum 1.5")), "{text}");
        assert!(line(&format!("{name}_bucket{{le=\"0.25\"}} 1")), "{text}");
        assert!(line(&format!("{name}_bucket{{le=\"2.0\"}} 2")), "{text}");
    }

    #[test]
    fn counters_with_known_labels_start_at_zero() {
        let text = Metrics::default().encode();
        for series in [
            "reconciles_total{result=\"ok\"} 0",
            "reconciles_total{result=\"plugin_failed\"} 0",
            "reconciles_total{result=\"caches_not_ready\"} 0",
            "endpointslice_writes_total{operation=\"delete\"} 0",
            "endpointslice_refused_total{by=\"api\"} 0",
            "changes_total{operation=\"update\"} 0",
            "syncs_total{result=\"error\"} 0",
        ] {
            assert!(
                text.contains(&format!("\nnad_service_controller_{series}\n")),
                "{series} in\n{text}"
            );
        }
    }
}
