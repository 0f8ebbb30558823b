//! What a prober counts, served on its `/metrics`: probes by result, their latency, the
//! condition writes, the pods it probes, and when it last finished a probe (for staleness).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub network: String,
    /// `success` or `failure`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NetworkLabels {
    pub network: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub network: String,
    /// The status written: `True` or `False`; `error` for a write the API refused.
    pub status: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn probe_histogram() -> Histogram {
    // 100 µs .. ~13 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// The prober's metrics.
pub struct ProbeMetrics {
    registry: Registry,
    probes: Family<ResultLabels, Counter>,
    duration: HistogramFamily<NetworkLabels>,
    writes: Family<WriteLabels, Counter>,
    targets: Family<NetworkLabels, Gauge>,
    last_probe: Gauge<f64, std::sync::atomic::AtomicU64>,
    guarded: Gauge,
}

impl Default for ProbeMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("nad_prober");
        let probes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "probes",
            "Probes of a pod on a network (every address and port), by result",
            probes.clone(),
        );
        let duration = HistogramFamily::<NetworkLabels>::new_with_constructor(
            probe_histogram as fn() -> Histogram,
        );
        registry.register(
            "probe_duration_seconds",
            "Time of one probe of a pod (every address and port at once)",
            duration.clone(),
        );
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "condition_writes",
            "Writes of a pod's network readiness condition (one per flip), by status written",
            writes.clone(),
        );
        let targets = Family::<NetworkLabels, Gauge>::default();
        registry.register(
            "targets",
            "Pods this prober probes, by network",
            targets.clone(),
        );
        let last_probe = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "last_probe_timestamp_seconds",
            "When this prober last finished a probe (Unix time); stale while it probes nothing or hangs",
            last_probe.clone(),
        );
        let guarded = Gauge::default();
        registry.register(
            "admission_policy_in_force",
            "1 while the admission policy that confines this prober's writes and its binding are in force; 0 while not, and then it writes no condition",
            guarded.clone(),
        );
        ProbeMetrics {
            registry,
            guarded,
            probes,
            duration,
            writes,
            targets,
            last_probe,
        }
    }
}

impl ProbeMetrics {
    pub fn probed(&self, network: &str, answered: bool, elapsed: Duration) {
        self.probes
            .get_or_create(&ResultLabels {
                network: network.to_owned(),
                result: if answered { "success" } else { "failure" }.to_owned(),
            })
            .inc();
        self.duration
            .get_or_create(&NetworkLabels {
                network: network.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_probe.set(now);
    }

    /// A write of a pod's condition on `network`: the status written (`True`, `False`), or
    /// `None` when the write failed (`error`).
    pub fn wrote(&self, network: &str, status: Option<bool>) {
        let status = match status {
            Some(true) => "True",
            Some(false) => "False",
            None => "error",
        };
        self.writes
            .get_or_create(&WriteLabels {
                network: network.to_owned(),
                status: status.to_owned(),
            })
            .inc();
    }

    pub fn set_targets(&self, network: &str, count: usize) {
        self.targets
            .get_or_create(&NetworkLabels {
                network: network.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether the admission policy is in force (see [`super::guard`]).
    pub fn set_guarded(&self, in_force: bool) {
        self.guarded.set(i64::from(in_force));
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}
