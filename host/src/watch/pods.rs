//! The pod watch: feeds the pod index and asks the Services on the networks a pod event
//! concerns to look again, naming the pod, so they need ask their policy about it alone;
//! Services that do not include the pod are screened first ([`super::screen`]).
//!
//! The index keeps only the pod labels and annotations the loaded plugins read. When a
//! newly loaded plugin reads a key the index does not keep, the watch starts over: the
//! relist makes every record again with the new keys and plans the Services in full.

use std::collections::{HashMap, hash_map::Entry};

use futures::{Stream, StreamExt};
use k8s_openapi::api::{core::v1::Pod, resource::v1::ResourceClaim};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
};

use super::{
    devices,
    health::backoff,
    list::{PAGE_SIZE, refuses_streaming, streamed},
    screen::Screen,
    shared::{Shared, read, seen, write},
};
use k8s_openapi::jiff::Timestamp;
use nad_core::index::{NetworkKey, PodChange};
use nad_model::keys::Keys;
use nad_model::service_ref::ServiceRef;

/// The pods, and the ResourceClaims of `claim_api` when the cluster serves DRA: a claim event
/// is a change of the pods that name the claim, routed as theirs.
pub fn watch(
    (api, claim_api): (Api<Pod>, Api<ResourceClaim>),
    client: Client,
    shared: Shared,
    screen: Screen,
    mut keys: watch::Receiver<Keys>,
    tasks: &mut JoinSet<()>,
) -> impl Stream<Item = ServiceRef> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    let screening = screening(shared.clone(), screen, tx.clone());
    tasks.spawn(async move {
        let mut health = shared.health("pods");
        let mut claim_health = shared.health("resourceclaims");
        let mut claims = if devices::served(&shared, &client).await {
            write(&shared.pods).expect_claims();
            streamed(claim_api, watcher::Config::default(), "resourceclaims")
                .backoff(backoff())
                .boxed()
        } else {
            futures::stream::pending().boxed()
        };
        let mut keys_open = true;
        // The initial list as a watch stream (Kubernetes' WatchList, on by default since 1.32)
        // rather than pages: 150 000 pods arrive in 11 s instead of 87. A server that refuses
        // it is listed page by page, as client-go's informers fall back.
        let mut streaming = true;
        loop {
            let kept = keys.borrow_and_update().clone();
            write(&shared.pods).set_keys(kept.clone());
            let config = watcher::Config::default().page_size(PAGE_SIZE);
            let config = if streaming {
                config.streaming_lists()
            } else {
                config
            };
            let mut events = watcher(api.clone(), config).backoff(backoff()).boxed();
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    changed = keys.changed(), if keys_open => {
                        if changed.is_err() {
                            keys_open = false;
                        } else if !kept.covers(&keys.borrow()) {
                            tracing::info!("a plugin reads pod labels or annotations not kept so far; listing the pods again");
                            break;
                        }
                    }
                    item = events.next() => {
                        let Some(item) = item else { return };
                        if streaming && refuses_streaming(&item) {
                            tracing::warn!("the API server does not stream lists (the WatchList feature is off); listing pods page by page");
                            streaming = false;
                            break;
                        }
                        let Some(event) = health.observe(item) else { continue };
                        let change = write(&shared.pods).on_event(seen(&event), Timestamp::now());
                        if !send(&shared, &change, &tx, &screening) {
                            return;
                        }
                    }
                    item = claims.next() => {
                        let Some(item) = item else { return };
                        let Some(event) = claim_health.observe(item) else { continue };
                        let change = write(&shared.pods).on_claim_event(seen(&event), Timestamp::now());
                        if !send(&shared, &change, &tx, &screening) {
                            return;
                        }
                    }
                }
            }
        }
    });
    receiver_stream(rx)
}

/// Routes a change ([`route`]): its Services to reconcile now, the rest to screen. `false`
/// once the controller no longer listens.
fn send(
    shared: &Shared,
    change: &PodChange,
    tx: &mpsc::UnboundedSender<ServiceRef>,
    screening: &std::sync::mpsc::Sender<Job>,
) -> bool {
    let (now, screened) = route(shared, change);
    if now.into_iter().any(|service| tx.send(service).is_err()) {
        return false;
    }
    screened.is_none_or(|job| screening.send(job).is_ok())
}

/// A pod change to screen: the pod, when it changed, and the networks whose Services it
/// concerns. The Services are named when it is screened, so a queued change holds a few
/// strings whatever the number of Services on its networks.
struct Job {
    namespace: String,
    pod: String,
    at: Timestamp,
    networks: Vec<NetworkKey>,
    /// The Services [`route`] asked to reconcile at once (usually none or one): the others
    /// on the networks are screened. Named here, not decided again when screening, since a
    /// Service whose reconcile is in flight remembers nothing meanwhile.
    sent: Vec<ServiceRef>,
}

impl Job {
    /// Another change of the same pod, queued before this one was screened: one screening
    /// covers both (it reads the index as it is then), from the earlier time.
    fn merge(&mut self, later: Job) {
        self.at = self.at.min(later.at);
        self.networks.extend(later.networks);
        self.networks.sort();
        self.networks.dedup();
        // A Service one of the changes did not reach at once is screened.
        self.sent.retain(|service| later.sent.contains(service));
    }
}

/// The thread that screens pod changes in order, off the async runtime (plugin calls block),
/// and asks the Services that must reconcile to do so. Changes that queued up while it was
/// busy are taken together, one screening per pod. It ends with the watch.
fn screening(
    shared: Shared,
    screen: Screen,
    tx: mpsc::UnboundedSender<ServiceRef>,
) -> std::sync::mpsc::Sender<Job> {
    let (jobs, rx) = std::sync::mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("pod-screen".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                for job in coalesce(first, rx.try_iter()) {
                    for service in screen_job(&shared, &screen, &job) {
                        if tx.send(service).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the pod screening thread; every pod change reconciles its Services");
    }
    jobs
}

/// The queued changes, one per pod, in the order their pods first appear.
fn coalesce(first: Job, more: impl Iterator<Item = Job>) -> Vec<Job> {
    let mut jobs: Vec<Job> = vec![first];
    let mut at: HashMap<(String, String), usize> = HashMap::new();
    at.insert((jobs[0].namespace.clone(), jobs[0].pod.clone()), 0);
    for job in more {
        match at.entry((job.namespace.clone(), job.pod.clone())) {
            Entry::Occupied(i) => jobs[*i.get()].merge(job),
            Entry::Vacant(slot) => {
                slot.insert(jobs.len());
                jobs.push(job);
            }
        }
    }
    jobs
}

/// The Services that must reconcile for one pod change: of those on its networks, the ones
/// [`route`] did not ask at once whose policy the pod moves (a Service that remembers no
/// decisions by then, its reconcile in flight, reconciles again).
fn screen_job(shared: &Shared, screen: &Screen, job: &Job) -> Vec<ServiceRef> {
    let candidates: Vec<_> = read(&shared.networks)
        .on(&job.networks)
        .into_iter()
        .filter(|service| !job.sent.contains(service))
        .collect();
    screen.screen(shared, &job.pod, job.at, candidates)
}

/// The Services a pod change concerns: those to reconcile now, with the change noted in their
/// pending scopes, and the change to screen for the others (see [`super::screen`]).
fn route(shared: &Shared, change: &PodChange) -> (Vec<ServiceRef>, Option<Job>) {
    if let Some(((namespace, pod), error)) = &change.unreadable {
        tracing::warn!(
            %namespace, %pod, error = %error,
            "pod left out of every Service: its network-status annotation cannot be read"
        );
    }
    if change.networks.is_empty() {
        return (Vec::new(), None);
    }
    let services = read(&shared.networks).on(&change.networks);
    let mut book = shared.book.lock();
    let Some((pod, at)) = &change.pod else {
        let now = Timestamp::now();
        for service in &services {
            book.input_changed(service, now);
        }
        return (services, None);
    };
    let total = services.len();
    let now: Vec<_> = services
        .into_iter()
        .filter(|service| book.reconciles_at_once(service, pod))
        .collect();
    for service in &now {
        book.pod_changed(service, pod, *at);
    }
    let job = (now.len() < total).then(|| Job {
        namespace: change.networks[0].0.clone(),
        pod: pod.clone(),
        at: *at,
        networks: change.networks.clone(),
        sent: now.clone(),
    });
    (now, job)
}

/// A stream of the values an unbounded channel receives.
fn receiver_stream<T: Send + 'static>(
    rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(pod: &str, second: i64, network: &str) -> Job {
        Job {
            namespace: "ns".into(),
            pod: pod.into(),
            at: Timestamp::from_second(second).unwrap(),
            networks: vec![("ns".into(), format!("ns/{network}"))],
            sent: vec![ServiceRef::new("ns", "web")],
        }
    }

    mod routing {
        use std::sync::{Arc, OnceLock};

        use kube::runtime::reflector;
        use nad_model::input::service_record::ServiceRecord;
        use serde_json::json;

        use super::*;
        use nad_core::{book::Entry, decide::Remembered};
        use nad_model::decision::Conditions;
        use nad_model::watch::Event;
        use nad_plugin_runtime::{Limits, Plugins, Runtime, SharedPlugins};

        fn built_in() -> Plugins {
            static PLUGINS: OnceLock<Plugins> = OnceLock::new();
            PLUGINS
                .get_or_init(|| {
                    let runtime = Runtime::new(Limits::default()).unwrap();
                    Plugins::built_in(&runtime).unwrap()
                })
                .clone()
        }

        fn service(name: &str) -> ServiceRecord {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "labels": {"app": name},
                             "annotations": {"isim.dev/network": "macvlan"}},
                "spec": {"clusterIP": "None"},
            }))
            .unwrap()
        }

        fn pod(name: &str, app: &str) -> Pod {
            let status = json!([{"name": "ns/macvlan", "ips": ["192.168.2.7"]}]);
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "labels": {"app": app},
                             "annotations": {"k8s.v1.cni.cncf.io/network-status": status.to_string()}},
                "spec": {"containers": []},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap()
        }

        fn key(name: &str) -> ServiceRef {
            ServiceRef::new("ns", name)
        }

        /// Services `web` and `api` on `ns/macvlan`, `web` remembering that it includes
        /// `web-a` and `api` that it includes nothing; the screen over them.
        fn setup() -> (Shared, Screen) {
            let shared = Shared::default();
            *write(&shared.pods) = nad_core::index::PodIndex::new(built_in().keys());
            let (services, mut writer) = reflector::store::<ServiceRecord>();
            for name in ["web", "api"] {
                let service = service(name);
                write(&shared.networks).apply(&service);
                writer.apply_watcher_event(&watcher::Event::Apply(service));
            }
            let ready = Conditions {
                ready: true,
                serving: true,
                terminating: false,
            };
            let mut book = shared.book.lock();
            let included = [("web-a".into(), ready)].into_iter().collect();
            for (service, remembered) in [
                ("web", Remembered { by: None, included }),
                ("api", Remembered::default()),
            ] {
                let entry = Entry {
                    remembered: Some(remembered),
                    ..Entry::default()
                };
                book.record(&key(service), &[], entry, Timestamp::now());
            }
            drop(book);
            let plugins = Arc::new(SharedPlugins::new(built_in()));
            (shared, Screen { services, plugins })
        }

        fn change(shared: &Shared, pod: Pod) -> PodChange {
            write(&shared.pods).on_event(Event::Apply(&pod), Timestamp::now())
        }

        #[test]
        fn a_change_reconciles_the_service_that_includes_the_pod_and_screens_the_others() {
            let (shared, screen) = setup();
            let change = change(&shared, pod("web-a", "web"));
            let (now, job) = route(&shared, &change);
            assert_eq!(now, [key("web")]);
            let job = job.expect("api is screened");
            assert_eq!(job.sent, [key("web")]);
            assert!(
                screen_job(&shared, &screen, &job).is_empty(),
                "api's policy leaves web-a out: nothing moves"
            );
            let calls = nad_test_kit::metrics::Scrape::new(shared.metrics.encode());
            assert_eq!(
                calls.get("nad_service_controller_plugin_evaluated_pods_total"),
                None,
                "without a call: api's policy selects app=api, and web-a has app=web"
            );
        }

        #[test]
        fn a_pod_the_screen_finds_included_reconciles_with_the_answer_kept() {
            let (shared, screen) = setup();
            let change = change(&shared, pod("api-b", "api"));
            let (now, job) = route(&shared, &change);
            assert!(now.is_empty(), "neither includes api-b yet");
            let moved = screen_job(&shared, &screen, &job.unwrap());
            assert_eq!(moved, [key("api")], "api's policy includes api-b");
            let calls = nad_test_kit::metrics::Scrape::new(shared.metrics.encode());
            assert_eq!(
                calls.value("nad_service_controller_plugin_evaluated_pods_total"),
                1.0,
                "the screen's call is counted; web's policy was not asked about api-b"
            );
            let begun = shared
                .book
                .lock()
                .begin(&key("api"), &[], Timestamp::now())
                .unwrap();
            assert_eq!(begun.answered.len(), 1, "the reconcile reuses the answer");
            assert_eq!(&*begun.answered[0].pod.name, "api-b");
            assert!(
                shared
                    .book
                    .lock()
                    .begin(&key("web"), &[], Timestamp::now())
                    .unwrap()
                    .answered
                    .is_empty()
            );
        }

        #[test]
        fn a_service_whose_reconcile_is_in_flight_reconciles_again_unscreened() {
            let (shared, _) = setup();
            let begun = shared.book.lock().begin(&key("api"), &[], Timestamp::now());
            assert!(begun.is_some());
            let change = change(&shared, pod("web-c", "web"));
            let (now, _) = route(&shared, &change);
            assert_eq!(
                now,
                [key("api")],
                "api may have read web-c before it changed"
            );
        }
    }

    #[test]
    fn queued_changes_of_a_pod_are_screened_once_from_the_earliest() {
        let jobs = coalesce(
            job("a", 3, "m"),
            [job("b", 4, "m"), job("a", 2, "n"), job("a", 5, "m")].into_iter(),
        );
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.pod.as_str(), j.at.as_second(), j.networks.len()))
            .collect();
        assert_eq!(got, [("a", 2, 2), ("b", 4, 1)]);

        let mut unsent = job("a", 6, "m");
        unsent.sent.clear();
        let jobs = coalesce(job("a", 5, "m"), [unsent].into_iter());
        assert!(
            jobs[0].sent.is_empty(),
            "a Service one change did not reach at once is screened"
        );
    }
}
