//! Faults and bad input, as an operator's chaos test would try them: the controller binary on
//! a control plane of its own, whose API server and etcd these tests kill, pause and compact.
//! Each test asserts the Service's final slices exactly, and reports what it measured.
//!
//! Run with `make test-faults` (one test at a time: they share the control plane).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the control plane reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::api::events::v1::Event;
use kube::{ResourceExt, api::ListParams};
use nad_fault_tests::{Controller, Expected, Scene, endpoint, eventually, lines_with, report};
use serde_json::json;

/// How soon after the API server is back every Service must be in step again: the target is
/// 5 s; this bound leaves room for a loaded CI machine, and still fails the code before these
/// tests (which took 30 s to 300 s).
const RECOVERY_BOUND: Duration = Duration::from_secs(15);

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// `n` Ready pods `web-00`.., and the endpoints they should give.
async fn ready_pods(scene: &Scene, n: usize) -> (Vec<k8s_openapi::api::core::v1::Pod>, Expected) {
    let mut pods = Vec::new();
    for i in 0..n {
        pods.push(scene.pod(&format!("web-{i:02}"), true).await);
    }
    let expected = pods.iter().map(|p| endpoint(p, true)).collect();
    (pods, expected)
}

/// Changes made as soon as the API server answers again: a pod turns not Ready, one is added,
/// one is removed.
async fn changes_after_outage(
    scene: &Scene,
    pods: &[k8s_openapi::api::core::v1::Pod],
    expected: &mut Expected,
) {
    scene.set_ready("web-00", false).await;
    expected.remove(&endpoint(&pods[0], true));
    expected.insert(endpoint(&pods[0], false));
    let added = scene.pod("web-new", true).await;
    expected.insert(endpoint(&added, true));
    let last = pods.last().unwrap();
    scene.remove(&last.name_any()).await;
    expected.remove(&endpoint(last, true));
}

/// What the changes after an outage took.
struct AfterOutage {
    /// From the first change to slices in step.
    in_step: Duration,
    /// Slice writes for the three changes.
    writes: u64,
}

/// Makes [`changes_after_outage`] and waits until the slices follow them, within
/// [`RECOVERY_BOUND`]; the controller must still run and must not write in a loop.
async fn changes_are_followed(
    scene: &Scene,
    controller: &mut Controller,
    pods: &[k8s_openapi::api::core::v1::Pod],
    expected: &mut Expected,
) -> AfterOutage {
    // The simulated nodes' heartbeats stopped too; renew them before the node controller
    // notices, or it would mark the pods not Ready under the test's feet.
    scene.sim.ensure_nodes().await.unwrap();
    let writes_before = controller.writes();
    let changing = Instant::now();
    changes_after_outage(scene, pods, expected).await;
    scene
        .converge("changes after the outage", expected, RECOVERY_BOUND)
        .await;
    let in_step = changing.elapsed();
    // Echoes of the writes must not cause more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = controller.writes() - writes_before;
    assert!(
        controller.running(),
        "the controller exited:\n{}",
        controller.log()
    );
    assert!(
        writes <= 6,
        "{writes} slice writes for 3 changes: a write loop?\n{}",
        controller.log()
    );
    AfterOutage { in_step, writes }
}

/// What no log of this controller may hold: client structs and stack traces.
fn assert_clean_log(log: &str) {
    for bad in ["Status {", "stack backtrace", "Stack backtrace"] {
        let lines = lines_with(log, bad);
        assert!(
            lines.is_empty(),
            "the log has {bad:?}:\n{}",
            lines.join("\n")
        );
    }
}

/// The figures of `/metrics` the outage tests follow.
const LEADER: &str = "nad_service_controller_leader";
const RECONCILES: &str = "nad_service_controller_reconciles_total";
const WRITES: &str = "nad_service_controller_endpointslice_writes_total";
/// Reconciles whose slice write failed (other than a `422`): an apply, a delete.
const FAILED_APPLIES: &str = "nad_service_controller_reconciles_total{result=\"apply\"}";
const FAILED_DELETES: &str = "nad_service_controller_reconciles_total{result=\"delete\"}";

/// What the controller logs when a term as leader ends, and when one begins.
const TERM_ENDED: &str = "no longer the leader; reconciling stopped";
const LEASE_LOST: &str = "could not renew the lease in time";
const BECAME_LEADER: &str = "became the leader";
/// What it logs when the API server is ready again after an outage (with `retrying=<n>`).
const RETRIED: &str = "reconciling the Services that failed meanwhile";
/// What it logs when a Service whose last reconcile failed is reconciled.
const SUCCEEDED_AGAIN: &str = "reconcile succeeded again";

/// The Services a recovery line says it retries (its `retrying=<n>`).
fn retrying(line: &str) -> usize {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("retrying="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no retrying=<n> in {line:?}"))
}

/// The lines only a running term logs: those of its watches, its controller and its
/// reconciles (by their targets), those in the runner's span of one reconcile
/// (`reconciling object{..}`, which holds the error policy's `reconcile failed` too) or in the
/// reconcile's own (`reconcile{service=..}`), and a slice written or removed. At
/// `--log-filter=info` a failed slice write shows only as a Service's first `reconcile failed`
/// of a term (the write failure itself and the repeats are logged at debug), so a write
/// attempt shows for sure in the metrics only.
fn term_lines<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    const MARKERS: [&str; 8] = [
        "nad_service_controller::watch",
        "nad_service_controller::controller",
        "nad_service_controller::reconcile",
        "nad_service_controller::apply",
        "reconciling object{",
        "reconcile{",
        "reconcile failed",
        "EndpointSlice",
    ];
    lines
        .iter()
        .filter(|l| MARKERS.iter().any(|marker| l.contains(marker)))
        .copied()
        .collect()
}

/// When a line was logged: seconds into its day (the log's lines start with an RFC 3339 time).
fn logged_at(line: &str) -> f64 {
    let time = line
        .get(11..26)
        .unwrap_or_else(|| panic!("no time in {line:?}"));
    let parts: Vec<f64> = time
        .split(':')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("no time in {line:?}")))
        .collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// The index of the first of `lines` from `from` on that holds `needle`.
fn line_after(lines: &[&str], from: usize, needle: &str) -> Option<usize> {
    lines
        .iter()
        .skip(from)
        .position(|l| l.contains(needle))
        .map(|i| from + i)
}

/// The slice writes that failed so far (reconciles that ended in a failed apply or delete).
fn failed_writes(figures: &BTreeMap<String, f64>) -> f64 {
    figures[FAILED_APPLIES] + figures[FAILED_DELETES]
}

/// The API server is killed for `outage` while a change waits to be written; the leader either
/// keeps its term (`keeps_its_term`: the outage is shorter than its Lease) or stops reconciling
/// once it could not renew its Lease, stands by without a single reconcile, and leads again.
async fn api_server_restart(name: &str, outage: Duration, keeps_its_term: bool) {
    let scene = Scene::new(name).await;
    let (pods, mut expected) = ready_pods(&scene, 6).await;
    let mut controller = Controller::start(&scene.plane, scene.options("a", true));
    scene
        .converge("before the outage", &expected, Duration::from_secs(60))
        .await;
    let failed_before =
        controller.metric(FAILED_APPLIES).unwrap() + controller.metric(FAILED_DELETES).unwrap();

    // A change the controller only gets to act on once the API server is gone: its writes
    // fail for the whole outage, and nothing about the Service happens afterwards.
    controller.freeze(true);
    scene.set_ready("web-01", false).await;
    expected.remove(&endpoint(&pods[1], true));
    expected.insert(endpoint(&pods[1], false));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let argv = scene.plane.kill_apiserver();
    let down = Instant::now();
    controller.freeze(false);
    // Its metrics answer all along (they need no API server): whether it leads, and every
    // reconcile it ran and slice it wrote, every 100 ms.
    let sampler = controller.sample(
        &[LEADER, RECONCILES, WRITES, FAILED_APPLIES, FAILED_DELETES],
        Duration::from_millis(100),
    );
    tokio::time::sleep(outage).await;
    let log_while_down = controller.log();
    let restarted = Instant::now();
    scene.plane.start_apiserver(&argv);
    scene.plane.wait_ready(&scene.client).await;
    let downtime = down.elapsed();
    let quiet = scene
        .converge(
            "the change from before the outage, with no event since",
            &expected,
            RECOVERY_BOUND,
        )
        .await;
    let log_in_step = controller.log();
    // Where the leader keeps its term: the first recovery after the outage and the first
    // success of the Service whose write failed, once both are logged.
    let recovered = if keeps_its_term {
        let recovery_lines = lines_with(&log_while_down, RETRIED).len();
        let successes = lines_with(&log_while_down, SUCCEEDED_AGAIN).len();
        Some(
            eventually(
                "the recovery after the outage, and the Service reconciled again",
                Duration::from_secs(15),
                || async {
                    let log = controller.log();
                    let recovery = lines_with(&log, RETRIED).get(recovery_lines)?.to_string();
                    let success = lines_with(&log, SUCCEEDED_AGAIN)
                        .get(successes)
                        .filter(|l| l.contains("service=web"))?
                        .to_string();
                    Some((recovery, success))
                },
            )
            .await,
        )
    } else {
        None
    };
    let after = changes_are_followed(&scene, &mut controller, &pods, &mut expected).await;
    let samples: Vec<(Instant, BTreeMap<String, f64>)> = sampler
        .finish()
        .into_iter()
        .filter_map(|s| Some((s.at, s.figures?)))
        .collect();
    let log = controller.log();
    let lines: Vec<&str> = log_in_step.lines().collect();
    let during = samples.iter().rev().find(|(at, _)| *at < restarted);
    let failed_while_down = during.map_or(0.0, |(_, f)| failed_writes(f)) - failed_before;
    // The change's write was tried, and failed, while the API server was down.
    assert!(
        failed_while_down >= 1.0,
        "no slice write failed while the API server was down: the change was not tried?\n{log}"
    );

    let mut figures = vec![
        ("api_down", ms(downtime)),
        ("earlier_change_in_step_after_api_ready", ms(quiet)),
        ("changes_in_step_after_first_change", ms(after.in_step)),
        ("writes_for_the_changes", after.writes.to_string()),
        ("failed_writes_while_down", failed_while_down.to_string()),
    ];
    if keeps_its_term {
        // The leader kept its term: one term, led all along.
        assert_eq!(
            lines_with(&log, BECAME_LEADER).len(),
            1,
            "the leader did not keep its term through a {outage:?} outage (the API server \
             answered again after {downtime:?}; a leader gives up 13 s after its last renewal):\n{log}"
        );
        assert!(!log.contains(TERM_ENDED), "the term ended:\n{log}");
        let not_leading = samples.iter().filter(|(_, f)| f[LEADER] != 1.0).count();
        assert_eq!(not_leading, 0, "scrapes showing no leader:\n{log}");
        // Its write failed meanwhile, with no event about the Service since: once the API
        // server is ready the Service is retried at once, not when its backoff ends. By the
        // recovery (`retrying=1`: the Service still failed when the API server was ready), or
        // already by a relist: the restarted API server's watch cache is new, so every watch
        // gets 410 Expired and lists again, which reconciles every Service; then the Service
        // succeeded again no later than the recovery looked (which retries nothing).
        let (recovery, success) = recovered.unwrap();
        let retried = retrying(&recovery);
        let by_relist = logged_at(&success) <= logged_at(&recovery) + 0.1;
        assert!(
            retried >= 1 || by_relist,
            "the Service whose write failed was not retried once the API server was ready \
             (the recovery retried none, and the Service succeeded only after it):\n{}",
            controller.log()
        );
        figures.extend([
            ("failed_services_retried_on_readyz", retried.to_string()),
            (
                "retried_by",
                if retried >= 1 { "recovery" } else { "relist" }.to_owned(),
            ),
        ]);
    } else {
        // The term ended, for want of renewing the Lease, before the API server was back.
        assert!(
            log_while_down.contains(LEASE_LOST) && log_while_down.contains(TERM_ENDED),
            "the leader did not end its term during a {outage:?} outage:\n{log_while_down}"
        );
        let ended = samples
            .iter()
            .position(|(_, f)| f[LEADER] == 0.0)
            .unwrap_or_else(|| panic!("no scrape showed the term ended:\n{log}"));
        assert!(
            samples[ended].0 < restarted,
            "the leader stopped leading only {:?} after the API server was started again",
            samples[ended].0 - restarted
        );
        let resumed = samples[ended..]
            .iter()
            .position(|(_, f)| f[LEADER] == 1.0)
            .map(|i| ended + i)
            .unwrap_or_else(|| panic!("it did not lead again:\n{log}"));
        // Standing by, it reconciled nothing and wrote nothing, also once the API server was
        // back and until it led again.
        let (ended_at, at_end) = &samples[ended];
        for (at, f) in &samples[ended..resumed] {
            for figure in [RECONCILES, WRITES] {
                assert_eq!(
                    f[figure],
                    at_end[figure],
                    "{figure} went from {} to {} {:?} after the term ended, while standing by:\n{log}",
                    at_end[figure],
                    f[figure],
                    *at - *ended_at
                );
            }
        }
        // Its log says the same: between the end of the term and the next, no reconcile, no
        // watch: nothing of the ended term.
        let term_ended = line_after(&lines, 0, TERM_ENDED).unwrap();
        let next_term = line_after(&lines, term_ended, BECAME_LEADER)
            .unwrap_or_else(|| panic!("no new term in the log:\n{log_in_step}"));
        let busy = term_lines(&lines[term_ended..next_term]);
        assert!(
            busy.is_empty(),
            "the ended term still ran while standing by:\n{}",
            busy.join("\n")
        );
        // The new term starts from scratch: fresh caches, every Service reconciled, the
        // change from before the outage written by that term.
        let synced = line_after(&lines, next_term, "caches synced")
            .unwrap_or_else(|| panic!("the new term has no caches synced:\n{log_in_step}"));
        assert!(
            lines[synced..]
                .iter()
                .any(|l| l.contains("service=web") && l.contains("EndpointSlices updated")),
            "the new term did not write the change from before the outage:\n{log_in_step}"
        );
        // No Service is retried for a failure of the ended term: its failures went with it.
        assert!(
            lines[..synced]
                .iter()
                .filter(|l| l.contains(RETRIED))
                .all(|l| retrying(l) == 0),
            "failures of the ended term retried:\n{log_in_step}"
        );
        assert_eq!(
            lines_with(&log, BECAME_LEADER).len(),
            2,
            "two terms:\n{log}"
        );
        figures.extend([
            ("term_ended_after_api_down", ms(*ended_at - down)),
            ("standing_by", ms(samples[resumed].0 - *ended_at)),
            ("scrapes_standing_by", (resumed - ended).to_string()),
            (
                "leading_again_after_api_restart",
                ms(samples[resumed].0 - restarted),
            ),
        ]);
    }
    report(name, &figures);
    assert_clean_log(&controller.stop());
    scene.finish().await;
}

/// Down for less than a Lease: the leader keeps leading, its watches come back by themselves,
/// and the Service whose write failed meanwhile is retried once the API server is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_killed_and_restarted_briefly() {
    api_server_restart("api-restart-8s", Duration::from_secs(8), true).await;
}

/// Down for longer than a Lease (23 s, as in the chaos test): the leader cannot renew its
/// Lease and stops reconciling before the API server is back, stands by without a write, wins
/// the Lease again and starts a new term with fresh caches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_killed_and_restarted_for_longer_than_a_lease() {
    api_server_restart("api-restart-23s", Duration::from_secs(23), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_and_resumed() {
    let scene = Scene::new("etcd-pause").await;
    let (pods, mut expected) = ready_pods(&scene, 6).await;
    let mut controller = Controller::start(&scene.plane, scene.options("a", true));
    scene
        .converge("before the pause", &expected, Duration::from_secs(60))
        .await;

    let paused = scene.plane.pause_etcd();
    tokio::time::sleep(Duration::from_secs(20)).await;
    paused.resume();
    let resumed = Instant::now();
    scene.plane.wait_ready(&scene.client).await;
    let ready_after = resumed.elapsed();
    let after = changes_are_followed(&scene, &mut controller, &pods, &mut expected).await;
    report(
        "etcd-pause-20s",
        &[
            ("api_ready_after_resume", ms(ready_after)),
            ("changes_in_step_after_first_change", ms(after.in_step)),
            ("writes_for_the_changes", after.writes.to_string()),
        ],
    );
    assert_clean_log(&controller.stop());
    scene.finish().await;
}

/// How many failed writes in a row to wait for while the writes are refused: after the eighth
/// the Service's own backoff is 30 s (`retry_delay`), so only the recovery can bring it in step
/// within [`ONLY_RECOVERY_BOUND`] of the writes being taken again.
const FAILURES_BEFORE_RESTORE: f64 = 8.0;
const ONLY_RECOVERY_BOUND: Duration = Duration::from_secs(3);

/// The retry after an outage where nothing else can retry it. The API server stays up (no watch
/// breaks, nothing relists; no leader election adds a term's full reconcile) but cannot take
/// slice writes: a validating webhook it must call for them (failure policy `Fail`) does not
/// answer, so it answers each write `500` at once, and nothing it was sent lands later (as a
/// write timed out on a paused etcd may, when etcd resumes). Once the Service has failed eight
/// times in a row, its backoff is 30 s; the webhook goes, and the Service must be in step within
/// 3 s, which only the recovery (`/readyz` answering, the failing Services retried) can do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_meanwhile_is_retried_by_the_recovery_alone() {
    let scene = Scene::new("writes-refused").await;
    let (pods, mut expected) = ready_pods(&scene, 3).await;
    let controller = Controller::start(&scene.plane, scene.options("a", false));
    scene
        .converge("before the outage", &expected, Duration::from_secs(60))
        .await;
    let listed = |controller: &Controller| -> Vec<f64> {
        ["pods", "services", "endpointslices"]
            .iter()
            .map(|r| {
                let name = format!(
                    "nad_service_controller_watch_last_list_timestamp_seconds{{resource=\"{r}\"}}"
                );
                controller.metric(&name).unwrap()
            })
            .collect()
    };
    let listed_before = listed(&controller);
    let failed_before = controller.metric(FAILED_APPLIES).unwrap();
    let recoveries_before = lines_with(&controller.log(), RETRIED).len();

    let webhook = scene.refuse_slice_writes().await;
    scene.set_ready("web-01", false).await;
    expected.remove(&endpoint(&pods[1], true));
    expected.insert(endpoint(&pods[1], false));
    let refusing = Instant::now();
    eventually(
        "the Service's write to fail eight times in a row",
        Duration::from_secs(90),
        || async {
            let failed = controller.metric(FAILED_APPLIES)? - failed_before;
            (failed >= FAILURES_BEFORE_RESTORE).then_some(())
        },
    )
    .await;
    let refused_for = refusing.elapsed();
    scene.take_slice_writes(&webhook).await;
    let in_step = scene
        .converge(
            "the change made while the writes were refused, retried by the recovery",
            &expected,
            ONLY_RECOVERY_BOUND,
        )
        .await;
    let log = controller.log();
    let success = lines_with(&log, SUCCEEDED_AGAIN)
        .into_iter()
        .find(|l| l.contains("service=web"))
        .unwrap_or_else(|| panic!("the Service never succeeded again:\n{log}"));
    // The recovery that retried it: the last before its success, within a second of it.
    let recovery = lines_with(&log, RETRIED)
        .into_iter()
        .skip(recoveries_before)
        .rfind(|l| retrying(l) >= 1 && logged_at(l) <= logged_at(success))
        .unwrap_or_else(|| panic!("no recovery retried the Service before it succeeded:\n{log}"));
    assert!(
        logged_at(success) - logged_at(recovery) < 1.0,
        "the Service succeeded {:.1} s after the last recovery that retried it:\n{log}",
        logged_at(success) - logged_at(recovery)
    );
    assert_eq!(
        listed(&controller),
        listed_before,
        "a watch listed again: the retry was not the recovery's alone\n{log}"
    );
    report(
        "writes-refused-retry",
        &[
            ("writes_refused_for", ms(refused_for)),
            ("in_step_after_writes_taken", ms(in_step)),
            (
                "failed_writes",
                (controller.metric(FAILED_APPLIES).unwrap() - failed_before).to_string(),
            ),
            ("retried_by", "recovery".to_owned()),
        ],
    );
    assert_clean_log(&controller.stop());
    scene.finish().await;
}

/// SIGKILLed in the middle of a burst of changes: the next process writes exactly the slices
/// that are behind, and recreates none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_killed_during_changes() {
    let scene = Scene::new("sigkill").await;
    let (pods, mut expected) = ready_pods(&scene, 40).await;
    let mut options = scene.options("a", false);
    options.max_endpoints_per_slice = 10;
    let mut first = Controller::start(&scene.plane, options.clone());
    scene
        .converge("before the kill", &expected, Duration::from_secs(60))
        .await;
    let uids: BTreeMap<String, Option<String>> = scene
        .slices()
        .await
        .iter()
        .map(|s| (s.name_any(), s.uid()))
        .collect();
    assert_eq!(uids.len(), 4, "40 endpoints, 10 per slice");

    // Pods of the first slice flip while the controller runs and dies; pods of the third
    // after it died.
    for pod in &pods[0..5] {
        scene.set_ready(&pod.name_any(), false).await;
        if pod.name_any() == "web-02" {
            first.kill();
        }
    }
    first.kill();
    for pod in &pods[20..25] {
        scene.set_ready(&pod.name_any(), false).await;
    }
    for pod in pods[0..5].iter().chain(&pods[20..25]) {
        expected.remove(&endpoint(pod, true));
        expected.insert(endpoint(pod, false));
    }
    // What the next process has to write: the slices whose stored endpoints are behind.
    let stale = scene
        .slices()
        .await
        .iter()
        .filter(|s| {
            Scene::endpoints(std::slice::from_ref(*s))
                .iter()
                .any(|e| !expected.contains(e))
        })
        .count() as u64;
    assert!(stale >= 1, "the third slice is behind");

    let second = Controller::start(&scene.plane, options);
    let took = scene
        .converge("after the restart", &expected, RECOVERY_BOUND)
        .await;
    // Echoes of its own writes must not cause more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = second.writes();
    let after: BTreeMap<String, Option<String>> = scene
        .slices()
        .await
        .iter()
        .map(|s| (s.name_any(), s.uid()))
        .collect();
    report(
        "controller-sigkill",
        &[
            ("in_step_after_restart", ms(took)),
            ("slices_behind", stale.to_string()),
            ("writes", writes.to_string()),
        ],
    );
    assert_eq!(after, uids, "no slice recreated");
    assert_eq!(
        writes, stale,
        "exactly the slices that were behind are written"
    );
    assert_clean_log(&second.stop());
    scene.finish().await;
}

/// Two replicas; the leader is SIGKILLed. The follower never writes while it stands by, and
/// takes over once the dead leader's Lease has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_and_the_follower_takes_over() {
    let scene = Scene::new("failover").await;
    let (pods, mut expected) = ready_pods(&scene, 6).await;
    let mut leader = Controller::start(&scene.plane, scene.options("a", true));
    eventually("a leader", Duration::from_secs(60), || async {
        leader
            .is(scene.lease_holder().await.as_deref())
            .then_some(())
    })
    .await;
    scene
        .converge("with the first leader", &expected, Duration::from_secs(60))
        .await;
    let follower = Controller::start(&scene.plane, scene.options("b", true));
    eventually(
        "the follower standing by",
        Duration::from_secs(60),
        || async {
            follower
                .log()
                .contains("another replica leads")
                .then_some(())
        },
    )
    .await;
    scene.set_ready("web-01", false).await;
    expected.remove(&endpoint(&pods[1], true));
    expected.insert(endpoint(&pods[1], false));
    scene
        .converge(
            "a change while the first leads",
            &expected,
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(follower.writes(), 0, "the follower wrote while standing by");

    leader.kill();
    let killed = Instant::now();
    scene.set_ready("web-02", false).await;
    expected.remove(&endpoint(&pods[2], true));
    expected.insert(endpoint(&pods[2], false));
    let takeover = eventually("the follower leading", Duration::from_secs(40), || async {
        follower
            .is(scene.lease_holder().await.as_deref())
            .then(|| killed.elapsed())
    })
    .await;
    scene
        .converge("after the takeover", &expected, Duration::from_secs(40))
        .await;
    let in_step = killed.elapsed();
    report(
        "leader-sigkill",
        &[
            ("takeover", ms(takeover)),
            ("in_step_after_kill", ms(in_step)),
            ("new_leader_writes", follower.writes().to_string()),
        ],
    );
    assert!(
        takeover <= Duration::from_secs(25),
        "takeover took {takeover:?}; the Lease lasts 15 s and is retried every 2 s"
    );
    assert_clean_log(&follower.stop());
    scene.finish().await;
}

/// The health endpoints of the binary (`--health-address`). `/healthz` answers 200 all along;
/// `/readyz` 503 while the caches cannot sync (etcd paused under the API server, which still
/// answers `/version`, so the controller starts), 200 once they did; a leader answers 200, and
/// so does a standby replica, which is doing its job by waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_follow_the_caches_and_the_lease() {
    let scene = Scene::new("health").await;
    let (_, expected) = ready_pods(&scene, 3).await;

    // Started with etcd paused: it connects, but lists nothing.
    let paused = scene.plane.pause_etcd();
    let solo = Controller::start(&scene.plane, scene.options("solo", false));
    eventually(
        "the health endpoints answering",
        Duration::from_secs(30),
        || async { solo.health_status("/healthz").map(|_| ()) },
    )
    .await;
    let unsynced = Instant::now();
    let mut asked = 0;
    while unsynced.elapsed() < Duration::from_secs(6) {
        assert_eq!(
            solo.health_status("/healthz"),
            Some(200),
            "/healthz while the caches cannot sync:\n{}",
            solo.log()
        );
        assert_eq!(
            solo.health_status("/readyz"),
            Some(503),
            "/readyz while the caches cannot sync:\n{}",
            solo.log()
        );
        asked += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let not_ready_for = unsynced.elapsed();
    assert!(
        !solo.log().contains("caches synced"),
        "caches synced with etcd paused:\n{}",
        solo.log()
    );
    paused.resume();
    let resumed = Instant::now();
    scene.plane.wait_ready(&scene.client).await;
    scene.sim.ensure_nodes().await.unwrap();
    let ready_after = eventually(
        "/readyz answering 200 once etcd is back",
        Duration::from_secs(60),
        || async { (solo.health_status("/readyz") == Some(200)).then(|| resumed.elapsed()) },
    )
    .await;
    assert!(
        solo.log().contains("caches synced"),
        "ready before its caches synced:\n{}",
        solo.log()
    );
    assert_eq!(solo.health_status("/healthz"), Some(200));
    scene
        .converge("once the caches synced", &expected, Duration::from_secs(30))
        .await;
    assert_clean_log(&solo.stop());

    // A leader, ready once its caches synced; a standby replica, ready while it waits.
    let leader = Controller::start(&scene.plane, scene.options("a", true));
    eventually("a leader", Duration::from_secs(60), || async {
        leader
            .is(scene.lease_holder().await.as_deref())
            .then_some(())
    })
    .await;
    eventually("the leader ready", Duration::from_secs(60), || async {
        (leader.health_status("/readyz") == Some(200)).then_some(())
    })
    .await;
    let standby = Controller::start(&scene.plane, scene.options("b", true));
    eventually(
        "the standby standing by",
        Duration::from_secs(60),
        || async {
            standby
                .log()
                .contains("another replica leads")
                .then_some(())
        },
    )
    .await;
    for _ in 0..8 {
        for (who, controller) in [("the leader", &leader), ("the standby", &standby)] {
            for path in ["/healthz", "/readyz"] {
                assert_eq!(
                    controller.health_status(path),
                    Some(200),
                    "{path} of {who}:\n{}",
                    controller.log()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        leader.is(scene.lease_holder().await.as_deref()),
        "the first replica no longer leads"
    );
    assert_eq!(leader.metric(LEADER), Some(1.0), "the leader's gauge");
    assert_eq!(standby.metric(LEADER), Some(0.0), "the standby's gauge");
    assert_eq!(standby.writes(), 0, "the standby wrote");
    report(
        "health-endpoints",
        &[
            ("readyz_503_with_etcd_paused_for", ms(not_ready_for)),
            ("asked_while_unsynced", asked.to_string()),
            ("readyz_200_after_etcd_resumed", ms(ready_after)),
        ],
    );
    assert_clean_log(&standby.stop());
    assert_clean_log(&leader.stop());
    scene.finish().await;
}

/// The controller's watches are frozen behind the changes; etcd's history is compacted past
/// them and the API server restarted: every watch gets `410 Expired` and lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_expires_the_watches() {
    let scene = Scene::new("compaction").await;
    let (pods, mut expected) = ready_pods(&scene, 6).await;
    let controller = Controller::start(&scene.plane, scene.options("a", false));
    scene
        .converge("before the compaction", &expected, Duration::from_secs(60))
        .await;
    controller.freeze(true);
    changes_after_outage(&scene, &pods, &mut expected).await;
    let revision = scene.plane.compact_etcd();
    let argv = scene.plane.kill_apiserver();
    scene.plane.start_apiserver(&argv);
    scene.plane.wait_ready(&scene.client).await;
    scene.sim.ensure_nodes().await.unwrap();
    controller.freeze(false);
    let took = scene
        .converge("after the watches expired", &expected, RECOVERY_BOUND)
        .await;
    let log = controller.log();
    assert!(
        log.contains("watch expired; listing again"),
        "no watch saw 410 Expired:\n{log}"
    );
    report(
        "etcd-compaction-410",
        &[
            ("compacted_at_revision", revision.to_string()),
            ("in_step_after_thaw", ms(took)),
            (
                "expired_watches",
                lines_with(&log, "watch expired").len().to_string(),
            ),
        ],
    );
    assert_clean_log(&controller.stop());
    scene.finish().await;
}

/// One pod per kind of bad `network-status`, beside good pods: the good pods stay published
/// and live, each bad one is reported once, no write is ever refused, and removing or fixing
/// a bad pod repairs the slices at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_network_status_never_blocks_the_good_pods() {
    let scene = Scene::new("bad-input").await;
    let net = format!("{}/macvlan", scene.ns);
    let on = |ips: serde_json::Value| {
        json!([
            {"name": "sim-default", "interface": "eth0", "ips": ["10.244.250.1"], "default": true},
            {"name": net, "interface": "net1", "ips": ips, "mac": "02:00:00:00:00:01"},
        ])
        .to_string()
    };
    let many: Vec<String> = (0..1000)
        .map(|i| format!("10.77.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let huge = json!([
        {"name": net, "interface": "net1", "ips": ["192.168.9.50"],
         "dns": {"search": ["x".repeat(200_000)]}},
    ])
    .to_string();
    assert!(huge.len() > 200_000);
    let other_broken = json!([
        {"ips": ["1.2.3.4"]},
        {"name": 5, "ips": ["1.2.3.5"]},
        {"name": "other", "ips": null},
        {"name": "other2", "ips": "10.0.0.1", "default": "true"},
        {"name": net, "interface": "net1", "ips": ["192.168.9.60"]},
    ])
    .to_string();
    // (pod, annotation, addresses published, log lines expected about it)
    let cases: Vec<(&str, String, Vec<String>, usize)> = vec![
        ("bad-loopback", on(json!(["127.0.0.1"])), vec![], 1),
        ("bad-loopback6", on(json!(["::1"])), vec![], 1),
        ("bad-linklocal", on(json!(["169.254.1.29"])), vec![], 1),
        ("bad-linklocal6", on(json!(["fe80::45"])), vec![], 1),
        ("bad-unspecified", on(json!(["0.0.0.0"])), vec![], 1),
        ("bad-multicast", on(json!(["224.0.0.31"])), vec![], 1),
        ("bad-mapped", on(json!(["::ffff:10.60.3.46"])), vec![], 1),
        ("bad-cidr", on(json!(["192.168.9.10/24"])), vec![], 1),
        ("bad-zone", on(json!(["fe80::1%net1"])), vec![], 1),
        (
            "mixed",
            on(json!(["192.168.9.20", "127.0.0.1", "fd00:9::20"])),
            vec!["192.168.9.20".into(), "fd00:9::20".into()],
            1,
        ),
        ("many", on(json!(many)), many.clone(), 0),
        ("huge", huge, vec!["192.168.9.50".into()], 0),
        ("ips-a-string", on(json!("192.168.9.40")), vec![], 1),
        ("ips-numbers", on(json!([42])), vec![], 1),
        ("ips-null", on(json!(null)), vec![], 1),
        ("not-json", "{oops".into(), vec![], 1),
        (
            "an-object",
            json!({"name": net, "ips": ["192.168.9.41"]}).to_string(),
            vec![],
            1,
        ),
        (
            "other-entries-broken",
            other_broken,
            vec!["192.168.9.60".into()],
            0,
        ),
        (
            "default-a-string",
            json!([{"name": net, "ips": ["192.168.9.42"], "default": "true"}]).to_string(),
            vec![],
            1,
        ),
    ];
    let controller = Controller::start(&scene.plane, scene.options("a", false));
    let mut good = Vec::new();
    for i in 0..3 {
        good.push(scene.pod(&format!("good-{i}"), true).await);
    }
    let mut expected: Expected = good.iter().map(|p| endpoint(p, true)).collect();
    for (pod, status, published, _) in &cases {
        scene.pod_with_status(pod, status).await;
        for address in published {
            expected.insert((address.clone(), (*pod).to_owned(), true, true, false));
        }
    }
    // The same address on two pods: the older one publishes it.
    let dup = on(json!(["192.168.9.30"]));
    scene.pod_with_status("dup-old", &dup).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creation times have seconds
    scene.pod_with_status("dup-new", &dup).await;
    expected.insert(("192.168.9.30".into(), "dup-old".into(), true, true, false));
    let first = scene
        .converge("with every bad input", &expected, Duration::from_secs(60))
        .await;

    // The good pods stay live.
    let flips = Instant::now();
    for ready in [false, true, false] {
        scene.set_ready("good-0", ready).await;
        expected.remove(&endpoint(&good[0], !ready));
        expected.insert(endpoint(&good[0], ready));
        scene
            .converge("a good pod flipping", &expected, Duration::from_secs(10))
            .await;
    }
    let flipped = flips.elapsed();

    let log = controller.log();
    for (pod, _, _, lines) in &cases {
        let about: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("pod={pod} ")) || l.ends_with(&format!("pod={pod}")))
            .collect();
        assert_eq!(
            about.len(),
            *lines,
            "log lines about pod {pod} over four reconciles:\n{}",
            about.join("\n")
        );
    }
    let duplicate = lines_with(&log, "two pods list the same address");
    assert_eq!(duplicate.len(), 1, "{}", duplicate.join("\n"));
    assert!(duplicate[0].contains("dup-old") && duplicate[0].contains("dup-new"));
    let events = scene
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let warned = events.items.iter().any(|e| {
        e.reason.as_deref() == Some("DuplicateAddress")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains("dup-old") && n.contains("dup-new"))
    });
    assert!(warned, "no DuplicateAddress Event naming both pods");
    assert_eq!(
        controller.metric("nad_service_controller_endpointslice_refused_total"),
        Some(0.0),
        "the API refused a write:\n{log}"
    );

    // Removing or fixing a bad pod repairs the slices at once.
    let repairs = Instant::now();
    scene.remove("mixed").await;
    expected.retain(|e| e.1 != "mixed");
    scene
        .converge("the mixed pod removed", &expected, Duration::from_secs(10))
        .await;
    scene.remove("dup-old").await;
    expected.retain(|e| e.1 != "dup-old");
    expected.insert(("192.168.9.30".into(), "dup-new".into(), true, true, false));
    scene
        .converge(
            "the older duplicate removed",
            &expected,
            Duration::from_secs(10),
        )
        .await;
    scene
        .set_network_status("bad-loopback", &on(json!(["192.168.9.70"])))
        .await;
    expected.insert((
        "192.168.9.70".into(),
        "bad-loopback".into(),
        true,
        true,
        false,
    ));
    scene
        .converge("the loopback pod fixed", &expected, Duration::from_secs(10))
        .await;
    let repaired = repairs.elapsed();
    let log = controller.stop();
    assert_clean_log(&log);
    report(
        "bad-network-status",
        &[
            ("cases", (cases.len() + 2).to_string()),
            ("endpoints", expected.len().to_string()),
            ("all_published_within", ms(first)),
            ("three_flips", ms(flipped)),
            ("three_repairs", ms(repaired)),
            ("warn_lines", lines_with(&log, " WARN ").len().to_string()),
        ],
    );
    scene.finish().await;
}
