//! The seed's quick start on a real data plane: pods wired by Multus (macvlan + whereabouts),
//! CoreDNS reading the controller's EndpointSlices, kube-proxy for the ClusterIP Service, and
//! curl from inside the pods (`hack/pod-exec`). Needs the data plane of `hack/pod-agent.sh up`
//! (root), which `make test` starts.
//!
//! Each test applies `testdata/` to a namespace of its own, with a controller scoped to it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams},
};
use nad_service_controller::{
    plugin::{Limits, Plugins, Runtime, SharedPlugins},
    watch::plugin_dir::PluginSource,
};
use serde_json::Value;

mod support;
use support::{client, eventually};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a program; returns its exit code and standard output.
async fn run(program: &Path, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(program)
        .args(args)
        .env("KUBECONFIG", support::kubeconfig_path())
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `kubectl <args>`, which must succeed; returns its output.
async fn kubectl(args: &[&str]) -> String {
    let local = repo().join(".local/bin/kubectl");
    let program = if local.exists() {
        local
    } else {
        "kubectl".into()
    };
    let (code, out) = run(&program, args).await;
    assert_eq!(code, 0, "kubectl {}: {out}", args.join(" "));
    out
}

/// One test's namespace with `testdata/` applied and a controller for it.
struct Plane {
    client: Client,
    ns: String,
    controller: support::Controller,
}

impl Plane {
    async fn new(test: &str) -> Self {
        let client = client().await;
        let nodes = kubectl(&[
            "get",
            "nodes",
            "-l",
            "pod-agent.isim.dev/local=true",
            "-o",
            "name",
        ])
        .await;
        assert!(
            !nodes.trim().is_empty(),
            "no data plane: run `hack/pod-agent.sh up` (as root; `make test` does)"
        );
        let ns = support::agent_namespace(&client, test).await;
        let testdata = repo().join("testdata");
        kubectl(&["apply", "-n", &ns, "-f", testdata.to_str().unwrap()]).await;

        let runtime = Arc::new(Runtime::new(Limits::default()).unwrap());
        let plugins = Plugins::built_in(&runtime).unwrap();
        let source = PluginSource {
            runtime,
            plugins: Arc::new(SharedPlugins::new(plugins)),
            dir: None,
            poll: Duration::from_millis(200),
            configmap: None,
        };
        let controller = support::Controller::start(&client, &ns, source);
        let plane = Self {
            client,
            ns,
            controller,
        };
        for app in ["nginx-basic", "nginx-nad", "netutils-base", "netutils-nad"] {
            plane.rolled_out(app).await;
        }
        plane
    }

    /// `kubectl -n <its namespace> <args>`, which must succeed.
    async fn kubectl(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        kubectl(&all).await
    }

    async fn rolled_out(&self, app: &str) {
        let deployment = format!("deploy/{app}");
        self.kubectl(&["rollout", "status", &deployment, "--timeout=120s"])
            .await;
    }

    async fn pods(&self, app: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    async fn pod_named(&self, app: &str) -> String {
        self.pods(app).await[0].name_any()
    }

    /// The macvlan IPs of `app`'s Ready pods, as Multus wrote them in `network-status`.
    async fn ready_macvlan_ips(&self, app: &str) -> BTreeSet<String> {
        self.pods(app)
            .await
            .iter()
            .filter(|p| is_ready(p))
            .flat_map(macvlan_ips)
            .collect()
    }

    /// `hack/pod-exec <ns>/<pod> -- args`.
    async fn exec(&self, pod: &str, args: &[&str]) -> (i32, String) {
        let target = format!("{}/{pod}", self.ns);
        let mut all = vec![target.as_str(), "--"];
        all.extend_from_slice(args);
        run(&repo().join("hack/pod-exec"), &all).await
    }

    /// What `name` resolves to from inside `pod` (A records, through CoreDNS).
    async fn dns(&self, pod: &str, name: &str) -> BTreeSet<String> {
        let (_, out) = self.exec(pod, &["getent", "ahostsv4", name]).await;
        out.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }

    /// The seed's curl: the HTTP code, curl's exit code and the body.
    async fn curl(&self, pod: &str, url: &str) -> (String, i32) {
        let (code, out) = self
            .exec(
                pod,
                &[
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--connect-timeout",
                    "3",
                    url,
                ],
            )
            .await;
        (out, code)
    }

    async fn body(&self, pod: &str, url: &str) -> String {
        self.exec(pod, &["curl", "-s", "--max-time", "3", url])
            .await
            .1
    }

    /// Waits until `nginx-nad` resolves from `client` to exactly the Ready nginx-nad pods'
    /// macvlan IPs; returns them.
    async fn nginx_nad_follows(&self, client: &str, what: &str) -> BTreeSet<String> {
        eventually(what, || async {
            let want = self.ready_macvlan_ips("nginx-nad").await;
            let got = self.dns(client, "nginx-nad").await;
            (!want.is_empty() && got == want).then_some(got)
        })
        .await
    }

    /// Waits until `pod`'s Ready condition is `ready`, then until `name_of` nginx-nad's
    /// answers from `client` hold `ip` (or not) accordingly; prints both delays, the second
    /// being the controller's and CoreDNS' share.
    async fn follows_readiness(&self, client: &str, pod: &str, ip: &str, ready: bool, what: &str) {
        let started = Instant::now();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        eventually(&format!("{pod} Ready={ready}"), || async {
            (is_ready(&pods.get(pod).await.unwrap()) == ready).then_some(())
        })
        .await;
        let flipped = Instant::now();
        eventually(what, || async {
            (self.dns(client, "nginx-nad").await.contains(ip) == ready).then_some(())
        })
        .await;
        eprintln!(
            "{what}: probe -> Ready={ready} {:?}, Ready={ready} -> DNS {:?}",
            flipped - started,
            flipped.elapsed()
        );
    }

    /// The reasons of the Events about `pod` (what `kubectl describe pod` lists).
    async fn event_reasons(&self, pod: &str) -> BTreeSet<String> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().fields(&format!("regarding.name={pod}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }

    async fn finish(mut self) {
        self.controller.stop().await;
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn macvlan_ips(pod: &Pod) -> Vec<String> {
    let status: Vec<Value> = pod
        .annotations()
        .get("k8s.v1.cni.cncf.io/network-status")
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_default();
    status
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.ends_with("/macvlan")))
        .flat_map(|e| e["ips"].as_array().cloned().unwrap_or_default())
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_four_curls_answer_as_in_its_readme() {
    let plane = Plane::new("curls").await;
    let (nad, base) = (
        plane.pod_named("netutils-nad").await,
        plane.pod_named("netutils-base").await,
    );
    let ips = plane
        .nginx_nad_follows(&nad, "nginx-nad resolving to its pods' macvlan IPs")
        .await;
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("192.168.2.")), "{ips:?}");

    assert_eq!(plane.curl(&nad, "nginx-nad").await, ("200".into(), 0));
    assert_eq!(plane.curl(&nad, "nginx-basic").await, ("200".into(), 0));
    assert_eq!(plane.curl(&base, "nginx-basic").await, ("200".into(), 0));
    let started = Instant::now();
    assert_eq!(
        plane.curl(&base, "nginx-nad").await,
        ("000".into(), 28),
        "a pod without the secondary network times out"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "a timeout, not a refusal"
    );
    let nginx = plane.pod_named("nginx-nad").await;
    let reasons = plane.event_reasons(&nginx).await;
    assert!(
        reasons.contains("Scheduled") && reasons.contains("Started"),
        "{nginx}'s Events: {reasons:?}"
    );
    plane.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_and_readiness_move_dns() {
    let plane = Plane::new("scale").await;
    let nad = plane.pod_named("netutils-nad").await;
    let before = plane.nginx_nad_follows(&nad, "two pods in DNS").await;

    plane
        .kubectl(&["scale", "deploy/nginx-nad", "--replicas=3"])
        .await;
    plane.rolled_out("nginx-nad").await;
    let after = plane.nginx_nad_follows(&nad, "the third pod in DNS").await;
    assert_eq!(after.len(), 3);
    let new_ip = after.difference(&before).next().unwrap().clone();
    let new_pod = plane
        .pods("nginx-nad")
        .await
        .into_iter()
        .find(|p| macvlan_ips(p).contains(&new_ip))
        .unwrap()
        .name_any();
    // The new pod answers by name: its endpoint's name under the Service, which CoreDNS
    // serves from the controller's EndpointSlice (<address with dashes>.nginx-nad).
    let endpoint_name = format!("{}.nginx-nad", new_ip.replace('.', "-"));
    assert_eq!(
        plane.dns(&nad, &endpoint_name).await,
        BTreeSet::from([new_ip.clone()])
    );
    let body = plane.body(&nad, &format!("http://{endpoint_name}/")).await;
    assert!(
        body.contains(&new_pod),
        "{endpoint_name} answered {body:?}, not {new_pod}"
    );

    // Its readiness probe fails (no index.html, as with nginx): it leaves DNS, then returns.
    let (code, _) = plane
        .exec(&new_pod, &["rm", "usr/share/nginx/html/index.html"])
        .await;
    assert_eq!(code, 0);
    plane
        .follows_readiness(
            &nad,
            &new_pod,
            &new_ip,
            false,
            "the unready pod leaving DNS",
        )
        .await;
    eventually("an Unhealthy Event", || async {
        plane
            .event_reasons(&new_pod)
            .await
            .contains("Unhealthy")
            .then_some(())
    })
    .await;
    let (code, _) = plane
        .exec(
            &new_pod,
            &["sh", "-c", "echo back > usr/share/nginx/html/index.html"],
        )
        .await;
    assert_eq!(code, 0);
    plane
        .follows_readiness(
            &nad,
            &new_pod,
            &new_ip,
            true,
            "the recovered pod back in DNS",
        )
        .await;
    plane.finish().await;
}

/// The addresses whereabouts holds for pods of `ns`.
async fn whereabouts_allocations(ns: &str) -> Vec<String> {
    let out = kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json"]).await;
    let pools: Value = serde_json::from_str(&out).unwrap();
    pools["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            p["spec"]["allocations"]
                .as_object()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|(_, a)| a["podref"].as_str().map(str::to_owned))
        .filter(|r| r.starts_with(&format!("{ns}/")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_leaves_no_namespace_and_frees_its_address() {
    let plane = Plane::new("delete").await;
    let pod = plane.pods("nginx-nad").await.remove(0);
    let name = pod.name_any();
    let netns = format!(
        "nsc-p-{}",
        pod.uid()
            .unwrap()
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(12)
            .collect::<String>()
    );
    let namespaces = || async {
        let out = tokio::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(namespaces().await.contains(&netns));
    assert!(
        whereabouts_allocations(&plane.ns)
            .await
            .contains(&format!("{}/{name}", plane.ns))
    );
    Api::<Pod>::namespaced(plane.client.clone(), &plane.ns)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the pod gone", || async {
        Api::<Pod>::namespaced(plane.client.clone(), &plane.ns)
            .get_opt(&name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!namespaces().await.contains(&netns), "{netns} still exists");
    assert!(
        !Path::new("/etc/netns").join(&netns).exists(),
        "its resolv.conf stayed"
    );
    let held = whereabouts_allocations(&plane.ns).await;
    assert!(
        !held.contains(&format!("{}/{name}", plane.ns)),
        "whereabouts still holds its address: {held:?}"
    );
    plane.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_moves_dns_to_the_new_pods() {
    let plane = Plane::new("rollout").await;
    let nad = plane.pod_named("netutils-nad").await;
    let old = plane.nginx_nad_follows(&nad, "the first pods in DNS").await;
    let old_pods: BTreeSet<String> = plane
        .pods("nginx-nad")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    plane
        .kubectl(&["rollout", "restart", "deploy/nginx-nad"])
        .await;
    plane.rolled_out("nginx-nad").await;
    let new = eventually("DNS on the new pods only", || async {
        let pods = plane.pods("nginx-nad").await;
        let names: BTreeSet<String> = pods.iter().map(ResourceExt::name_any).collect();
        if pods.len() != 2 || !names.is_disjoint(&old_pods) {
            return None;
        }
        let want: BTreeSet<String> = pods
            .iter()
            .filter(|p| is_ready(p))
            .flat_map(macvlan_ips)
            .collect();
        let got = plane.dns(&nad, "nginx-nad").await;
        (want.len() == 2 && got == want).then_some(got)
    })
    .await;
    assert_eq!(new.len(), 2);
    assert_eq!(plane.curl(&nad, "nginx-nad").await, ("200".into(), 0));
    eprintln!("rollout: {old:?} -> {new:?}");
    plane.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_start_wait_and_say_why() {
    let plane = Plane::new("missing").await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "lost", "annotations": {"k8s.v1.cni.cncf.io/networks": "no-such-net"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(plane.client.clone(), &plane.ns);
    pods.create(&Default::default(), &pod).await.unwrap();
    let waiting = eventually("the pod waiting with the reason", || async {
        let pod = pods.get("lost").await.unwrap();
        let status = pod.status?.container_statuses?.into_iter().next()?;
        let waiting = status.state?.waiting?;
        (waiting.reason.as_deref() == Some("CreatePodSandboxError")).then_some(waiting)
    })
    .await;
    let message = waiting.message.unwrap_or_default();
    assert!(message.contains("no-such-net"), "{message}");
    eventually("a FailedCreatePodSandBox Event", || async {
        plane
            .event_reasons("lost")
            .await
            .contains("FailedCreatePodSandBox")
            .then_some(())
    })
    .await;
    // An image the agent has no stand-in for: the container waits, saying so.
    let unknown: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "unknown"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .unwrap();
    pods.create(&Default::default(), &unknown).await.unwrap();
    let waiting = eventually("the container waiting for a stand-in", || async {
        let pod = pods.get("unknown").await.unwrap();
        let status = pod.status?.container_statuses?.into_iter().next()?;
        let waiting = status.state?.waiting?;
        (waiting.reason.as_deref() == Some("ImageNotInTable")).then_some(waiting)
    })
    .await;
    assert!(
        waiting
            .message
            .unwrap_or_default()
            .contains("registry.example/app:1")
    );
    assert!(
        plane
            .event_reasons("unknown")
            .await
            .contains("ImageNotInTable")
    );

    // Their siblings are not held up.
    let nad = plane.pod_named("netutils-nad").await;
    assert_eq!(plane.curl(&nad, "nginx-nad").await, ("200".into(), 0));
    plane.finish().await;
}
