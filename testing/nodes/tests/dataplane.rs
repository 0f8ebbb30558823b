//! The data plane on real nodes (`hack/nodes.sh`: kubelet, containerd and kube-scheduler, with
//! Multus, macvlan and whereabouts, CoreDNS and kube-proxy): `testdata/` applied to a namespace
//! of each test's, the controller binary of this build run on the host for that namespace (the
//! README's quick inner loop, `--watch-namespace`), and the network prober as shipped
//! (`deploy/prober`), a DaemonSet of each test's. The clients are the pods themselves (`kubectl
//! exec` of getent and curl); a secondary link is taken down from outside, in the pod's network
//! namespace, as a cable is pulled. `make test` starts the nodes and runs these tests.
//!
//! The stock install (the controller in-cluster, `deploy/overlays/with-prober`) is `stock.rs`'s;
//! here a controller per test lets the tests run side by side, each in its own namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the control plane reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams},
};
use nad_node_tests::{
    HostController, NODE_LABEL, client, condition, eventually, image, kubectl_apart, kubectl_with,
    namespace, pods_of, repo, resolve, testdata,
};
use serde_json::Value;

/// Runs a program; returns its exit code and standard output.
async fn run(program: &Path, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `kubectl <args>`, which must succeed; returns its standard output.
async fn kubectl(args: &[&str]) -> String {
    let (code, out, err) = kubectl_apart(args).await;
    assert_eq!(code, 0, "kubectl {}: {out}{err}", args.join(" "));
    out
}

/// The names of the nodes of `hack/nodes.sh`, which must be there.
async fn node_names(client: &Client) -> Vec<String> {
    nad_node_tests::nodes(client)
        .await
        .into_iter()
        .map(|n| n.name_any())
        .collect()
}

/// One test's namespace with `testdata/` applied and a controller for it.
struct Plane {
    client: Client,
    ns: String,
    controller: HostController,
}

impl Plane {
    async fn new(test: &str) -> Self {
        let client = client().await;
        node_names(&client).await;
        let ns = namespace(&client, test).await;
        kubectl_with(&["apply", "-n", &ns, "-f", "-"], &testdata()).await;
        let controller = HostController::start(&ns);
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
        pods_of(
            &Api::namespaced(self.client.clone(), &self.ns),
            &format!("app={app}"),
        )
        .await
    }

    async fn pod_named(&self, app: &str) -> String {
        self.pods(app).await[0].name_any()
    }

    /// The macvlan IPs of `family` of `app`'s Ready pods, as Multus wrote them in
    /// `network-status`.
    async fn ready_macvlan_ips(&self, app: &str, family: Family) -> BTreeSet<String> {
        self.pods(app)
            .await
            .iter()
            .filter(|p| is_ready(p))
            .flat_map(macvlan_ips)
            .filter(|ip| Family::of(ip) == family)
            .collect()
    }

    /// `kubectl exec` in `pod`: the exit code and the standard output.
    async fn exec(&self, pod: &str, args: &[&str]) -> (i32, String) {
        let mut all = vec!["exec", "-n", self.ns.as_str(), pod, "--"];
        all.extend_from_slice(args);
        let (code, out, _) = kubectl_apart(&all).await;
        (code, out)
    }

    /// A process of `pod`'s containers, as the host sees it: one in the pod's cgroup (kubelet
    /// names it `pod<uid>`), other than the sandbox's pause.
    async fn pid(&self, pod: &str) -> u32 {
        let uid = self.pod(pod).await.uid().unwrap();
        let wanted = format!("/pod{uid}/");
        eventually(&format!("a process of {pod}"), || async {
            std::fs::read_dir("/proc")
                .ok()?
                .flatten()
                .find_map(|entry| {
                    let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                    let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
                    let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).ok()?;
                    (cgroup.contains(&wanted) && comm.trim() != "pause").then_some(pid)
                })
        })
        .await
    }

    /// `ip link set net1 <state>` in `pod`'s network namespace, from the host: the cable, not
    /// the pod, pulled or put back.
    async fn link(&self, pod: &str, state: &str) {
        let pid = self.pid(pod).await.to_string();
        let (code, out) = run(
            Path::new("nsenter"),
            &["-t", &pid, "-n", "ip", "link", "set", "net1", state],
        )
        .await;
        assert_eq!(code, 0, "net1 {state} in {pod}: {out}");
    }

    /// The page nginx serves in `pod` (Debian's nginx: its index under /var/www/html), as the
    /// host sees the container's files.
    async fn page(&self, pod: &str) -> PathBuf {
        let pid = self.pid(pod).await;
        PathBuf::from(format!(
            "/proc/{pid}/root/var/www/html/index.nginx-debian.html"
        ))
    }

    /// What `name` resolves to from inside `pod` (A records, through CoreDNS).
    async fn dns(&self, pod: &str, name: &str) -> BTreeSet<String> {
        self.resolve(pod, name, Family::V4).await
    }

    /// The addresses of `family` that `name` resolves to from inside `pod`: its A or its AAAA
    /// records, through CoreDNS (glibc's `getent ahostsv4`, `ahostsv6`).
    async fn resolve(&self, pod: &str, name: &str, family: Family) -> BTreeSet<String> {
        resolve(&self.ns, pod, family.getent(), name).await
    }

    /// The seed's curl: the HTTP code, curl's exit code and the body.
    async fn curl(&self, pod: &str, url: &str) -> (String, i32) {
        self.curl_over(pod, url, None).await
    }

    /// The seed's curl over one family (`curl -4`, `curl -6`).
    async fn curl6(&self, pod: &str, url: &str) -> (String, i32) {
        self.curl_over(pod, url, Some(Family::V6)).await
    }

    async fn curl_over(&self, pod: &str, url: &str, family: Option<Family>) -> (String, i32) {
        let flags: Vec<&str> = family.map(Family::curl_flag).into_iter().collect();
        nad_node_tests::curl(&self.ns, pod, &flags, url).await
    }

    async fn body(&self, pod: &str, url: &str) -> String {
        self.exec(pod, &["curl", "-s", "--max-time", "3", url])
            .await
            .1
    }

    /// Waits until `nginx-nad` resolves from `client` to exactly the Ready nginx-nad pods'
    /// macvlan IPs, A records to the IPv4 ones and AAAA records to the IPv6 ones; returns the
    /// IPv4 ones.
    async fn nginx_nad_follows(&self, client: &str, what: &str) -> BTreeSet<String> {
        self.follows(
            client,
            "nginx-nad",
            "nginx-nad",
            &[Family::V4, Family::V6],
            what,
        )
        .await
        .remove(&Family::V4)
        .unwrap_or_default()
    }

    /// Waits until `service` resolves from `client` to exactly the macvlan IPs of `app`'s
    /// Ready pods of each of `families`, and to nothing of the other family; returns them.
    async fn follows(
        &self,
        client: &str,
        service: &str,
        app: &str,
        families: &[Family],
        what: &str,
    ) -> BTreeMap<Family, BTreeSet<String>> {
        eventually(what, || async {
            let mut answers = BTreeMap::new();
            for family in [Family::V4, Family::V6] {
                let want = if families.contains(&family) {
                    self.ready_macvlan_ips(app, family).await
                } else {
                    BTreeSet::new()
                };
                let got = self.resolve(client, service, family).await;
                if got != want || (families.contains(&family) && want.is_empty()) {
                    return None;
                }
                answers.insert(family, got);
            }
            Some(answers)
        })
        .await
    }

    /// The address types of `service`'s EndpointSlices.
    async fn slice_families(&self, service: &str) -> BTreeSet<String> {
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            self.client.clone(),
            &self.ns,
        )
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.address_type)
        .collect()
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

    async fn finish(self) {
        self.controller.stop().await;
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

/// An address family, as DNS and curl take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn of(address: &str) -> Self {
        if address.contains(':') {
            Self::V6
        } else {
            Self::V4
        }
    }

    fn getent(self) -> &'static str {
        match self {
            Self::V4 => "ahostsv4",
            Self::V6 => "ahostsv6",
        }
    }

    fn curl_flag(self) -> &'static str {
        match self {
            Self::V4 => "-4",
            Self::V6 => "-6",
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

fn macvlan_ips(pod: &Pod) -> Vec<String> {
    network_ips(pod, "macvlan")
}

/// `pod`'s IPs on the network attachment `name` (of any namespace), as Multus wrote them in
/// `network-status`, in its order.
fn network_ips(pod: &Pod, name: &str) -> Vec<String> {
    let status: Vec<Value> = pod
        .annotations()
        .get("k8s.v1.cni.cncf.io/network-status")
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_default();
    let suffix = format!("/{name}");
    status
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.ends_with(&suffix)))
        .flat_map(|e| e["ips"].as_array().cloned().unwrap_or_default())
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect()
}

/// Dual-stack: `testdata/`'s nginx-nad (`PreferDualStack`) gets a slice of each family, and
/// CoreDNS answers A and AAAA records with exactly the Ready pods' macvlan addresses of each.
/// Over IPv6 the seed's curls answer as over IPv4: 200 from netutils-nad, to the name and to an
/// endpoint's name; a timeout from netutils-base, which has IPv6 on the cluster network only.
/// nginx-basic answers over IPv6 through kube-proxy's IPv6 rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_dns_answers_a_and_aaaa_and_curl_6_reaches_only_the_network() {
    let plane = Plane::new("dual").await;
    let (nad, base) = (
        plane.pod_named("netutils-nad").await,
        plane.pod_named("netutils-base").await,
    );
    let answers = plane
        .follows(
            &nad,
            "nginx-nad",
            "nginx-nad",
            &[Family::V4, Family::V6],
            "nginx-nad: A and AAAA records of the Ready pods' macvlan addresses",
        )
        .await;
    eprintln!(
        "nginx-nad: A {:?}, AAAA {:?}",
        answers[&Family::V4],
        answers[&Family::V6]
    );
    let aaaa = &answers[&Family::V6];
    assert_eq!(aaaa.len(), 2, "{aaaa:?}");
    assert!(
        aaaa.iter().all(|ip| ip.starts_with("fd00:192:168:2::")),
        "{aaaa:?}"
    );
    assert_eq!(
        plane.slice_families("nginx-nad").await,
        BTreeSet::from(["IPv4".to_owned(), "IPv6".to_owned()])
    );

    assert_eq!(plane.curl6(&nad, "nginx-nad").await, ("200".into(), 0));
    let started = Instant::now();
    assert_eq!(
        plane.curl6(&base, "nginx-nad").await,
        ("000".into(), 28),
        "a pod without the secondary network times out over IPv6 too"
    );
    assert!(started.elapsed() >= Duration::from_secs(3), "a timeout");

    // Each endpoint's name, its address with dashes under the Service, resolves to that address
    // only (an A record for an IPv4 one, AAAA for an IPv6 one); over IPv6 it serves its pod.
    for (family, addresses) in &answers {
        for address in addresses {
            let endpoint = format!("{}.nginx-nad", address.replace(['.', ':'], "-"));
            assert_eq!(
                plane.resolve(&nad, &endpoint, *family).await,
                BTreeSet::from([address.clone()]),
                "{endpoint}"
            );
            eprintln!("{endpoint}: {address}");
        }
    }
    let address = aaaa.first().unwrap();
    let pod = plane
        .pods("nginx-nad")
        .await
        .into_iter()
        .find(|p| macvlan_ips(p).contains(address))
        .unwrap()
        .name_any();
    std::fs::write(plane.page(&pod).await, format!("{pod}\n")).unwrap();
    let url = format!("http://{}.nginx-nad/", address.replace(':', "-"));
    assert_eq!(plane.curl6(&nad, &url).await, ("200".into(), 0));
    let body = plane
        .exec(&nad, &["curl", "-6", "-s", "--max-time", "3", &url])
        .await
        .1;
    assert!(body.contains(&pod), "{url} answered {body:?}, not {pod}");
    assert_eq!(plane.curl6(&base, &url).await, ("000".into(), 28));

    // The cluster network is dual-stack: nginx-basic's IPv6 cluster IP, through kube-proxy.
    assert_eq!(plane.curl6(&base, "nginx-basic").await, ("200".into(), 0));
    assert_eq!(plane.curl6(&nad, "nginx-basic").await, ("200".into(), 0));
    plane.finish().await;
}

/// A Service of one family gets that family's slice only, and DNS answers only it: `SingleStack`
/// `[IPv4]` beside testdata's dual-stack nginx-nad (same pods) has no AAAA record; `[IPv6]` has
/// no A record, and serves over IPv6 (curl -4 cannot resolve it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_of_one_family_publishes_and_serves_only_it() {
    let plane = Plane::new("families").await;
    let (nad, base) = (
        plane.pod_named("netutils-nad").await,
        plane.pod_named("netutils-base").await,
    );
    let services: Api<Service> = Api::namespaced(plane.client.clone(), &plane.ns);
    for (name, family) in [("nginx-nad-v4", "IPv4"), ("nginx-nad-v6", "IPv6")] {
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {"app": "nginx-nad"},
                                 "annotations": {"isim.dev/network": "macvlan"}},
                    "spec": {"clusterIP": "None", "ipFamilyPolicy": "SingleStack",
                             "ipFamilies": [family],
                             "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let v4 = plane
        .follows(
            &nad,
            "nginx-nad-v4",
            "nginx-nad",
            &[Family::V4],
            "nginx-nad-v4: A records only",
        )
        .await;
    let v6 = plane
        .follows(
            &nad,
            "nginx-nad-v6",
            "nginx-nad",
            &[Family::V6],
            "nginx-nad-v6: AAAA records only",
        )
        .await;
    eprintln!("nginx-nad-v4: {v4:?}; nginx-nad-v6: {v6:?}");
    assert_eq!(
        plane.slice_families("nginx-nad-v4").await,
        BTreeSet::from(["IPv4".to_owned()])
    );
    assert_eq!(
        plane.slice_families("nginx-nad-v6").await,
        BTreeSet::from(["IPv6".to_owned()])
    );

    assert_eq!(plane.curl6(&nad, "nginx-nad-v6").await, ("200".into(), 0));
    assert_eq!(plane.curl(&nad, "nginx-nad-v6").await, ("200".into(), 0));
    assert_eq!(
        plane
            .curl_over(&nad, "nginx-nad-v6", Some(Family::V4))
            .await,
        ("000".into(), 6),
        "no A record: curl -4 cannot resolve it"
    );
    assert_eq!(plane.curl6(&base, "nginx-nad-v6").await, ("000".into(), 28));
    assert_eq!(
        plane
            .curl_over(&nad, "nginx-nad-v4", Some(Family::V4))
            .await,
        ("200".into(), 0)
    );
    // No AAAA record (above): curl -6 has no IPv6 address to connect to.
    let (http, code) = plane.curl6(&nad, "nginx-nad-v4").await;
    assert_eq!(http, "000");
    assert_ne!(code, 0);
    plane.finish().await;
}

/// A pod whose address of one family on the network is link-local (fe80::, which an
/// EndpointSlice may not hold) is published with its other address: over IPv4 only, with the
/// controller's log line naming the pod, the network, the address and the rule; DNS has no
/// AAAA record for it, and it answers over IPv4. (whereabouts hands out `fe80::100` from this
/// test's NetworkAttachmentDefinition, on the same IPv4 range as testdata's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_link_local_ipv6_address_is_published_over_ipv4_only() {
    let plane = Plane::new("linklocal").await;
    let nad = plane.pod_named("netutils-nad").await;
    let config = serde_json::json!({
        "cniVersion": "0.3.1", "name": "linklocal", "type": "macvlan", "master": "eth0",
        "mode": "bridge",
        "ipam": {"type": "whereabouts", "ipRanges": [
            {"range": "192.168.2.0/24", "range_start": "192.168.2.2", "range_end": "192.168.2.254"},
            {"range": "fe80::/64", "range_start": "fe80::100"}]}});
    let file = std::env::temp_dir().join(format!("{}-linklocal.json", plane.ns));
    std::fs::write(
        &file,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
             "metadata": {"name": "linklocal"}, "spec": {"config": config.to_string()}},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "ll", "annotations": {"isim.dev/network": "linklocal"},
                          "labels": {"app": "ll"}},
             "spec": {"clusterIP": "None", "ipFamilyPolicy": "PreferDualStack",
                      "ports": [{"port": 80}]}},
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "ll", "labels": {"app": "ll"},
                          "annotations": {"k8s.v1.cni.cncf.io/networks": "linklocal"}},
             "spec": {"containers": [{"name": "web", "image": image("nginx"),
                 "ports": [{"containerPort": 80}],
                 "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1}}]}}]})
        .to_string(),
    )
    .unwrap();
    plane
        .kubectl(&["apply", "-f", file.to_str().unwrap()])
        .await;
    let _ = std::fs::remove_file(&file);

    let pod = eventually("ll Ready", || async {
        let pod = plane.pod("ll").await;
        is_ready(&pod).then_some(pod)
    })
    .await;
    let network = format!("{}/linklocal", plane.ns);
    let ips = network_ips(&pod, "linklocal");
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert_eq!(ips[1], "fe80::100", "{ips:?}");
    let ipv4 = ips[0].clone();

    eventually("ll: its IPv4 address in DNS", || async {
        (plane.dns(&nad, "ll").await == BTreeSet::from([ipv4.clone()])).then_some(())
    })
    .await;
    assert_eq!(
        plane.slice_families("ll").await,
        BTreeSet::from(["IPv4".to_owned()])
    );
    assert!(
        plane.resolve(&nad, "ll", Family::V6).await.is_empty(),
        "no AAAA record"
    );
    assert_eq!(plane.curl(&nad, "ll").await, ("200".into(), 0));
    let line = plane
        .controller
        .log()
        .lines()
        .find(|l| l.contains("address left out") && l.contains(&format!("network=\"{network}\"")))
        .map(str::to_owned)
        .unwrap_or_default();
    for part in [
        "pod=ll",
        "address=fe80::100",
        "rule=\"link-local\"",
        "link-local range",
    ] {
        assert!(
            line.contains(part),
            "{part} missing from the log line {line:?}"
        );
    }
    eprintln!("the log line: {line}");
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
    let page = plane.page(&new_pod).await;
    std::fs::write(&page, format!("{new_pod}\n")).unwrap();
    let body = plane.body(&nad, &format!("http://{endpoint_name}/")).await;
    assert!(
        body.contains(&new_pod),
        "{endpoint_name} answered {body:?}, not {new_pod}"
    );

    // Its readiness probe fails (no index page: nginx answers 403): it leaves DNS, then returns.
    std::fs::remove_file(&page).unwrap();
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
    std::fs::write(&page, "back\n").unwrap();
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
    // Its network namespace, as the kernel names it ("net:[<inode>]"): in use while a process
    // is in it or a mount pins it (the runtime's, under the node's /run/netns).
    let pid = plane.pid(&name).await;
    let netns = std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let in_use = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let path = entry.path();
            std::fs::read_link(path.join("ns/net")).is_ok_and(|l| l.to_string_lossy() == netns)
                || std::fs::read_to_string(path.join("mountinfo")).is_ok_and(|m| m.contains(&netns))
        })
    };
    assert!(in_use(), "{netns} of {name}");
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
    eventually(&format!("{netns} of {name} gone"), || async {
        (!in_use()).then_some(())
    })
    .await;
    let podref = format!("{}/{name}", plane.ns);
    eventually("whereabouts freeing its address", || async {
        (!whereabouts_allocations(&plane.ns).await.contains(&podref)).then_some(())
    })
    .await;
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
            .filter(|ip| Family::of(ip) == Family::V4)
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

/// The namespace of the shipped prober (deploy/prober).
const PROBER_NS: &str = "nad-service-controller";

/// The shipped prober's admission policy (deploy/prober/admission-policy.yaml).
const PROBER_POLICY: &str = "nad-network-prober-own-node";

/// The condition a pod's readiness on `<ns>/macvlan` is written as.
fn network_ready_type(ns: &str) -> String {
    nad_model::input::network_ready::condition_type(&format!("{ns}/macvlan"))
}

/// `pod`'s readiness on the network, as the prober wrote it.
fn network_ready(pod: &Pod, ns: &str) -> Option<k8s_openapi::api::core::v1::PodCondition> {
    condition(pod, &network_ready_type(ns))
}

impl Plane {
    /// The network prober as shipped (`deploy/prober`: its ServiceAccount, RBAC and admission
    /// policy applied as they are), as a DaemonSet of this test's that probes this namespace's
    /// network on every node of the data plane; waits until a prober is Ready on each.
    async fn probers(&self) -> Probers {
        let rendered = kubectl(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-k",
            repo().join("deploy/prober").to_str().unwrap(),
        ])
        .await;
        // One JSON object per document.
        let items: Vec<Value> = serde_json::Deserializer::from_str(&rendered)
            .into_iter::<Value>()
            .map(Result::unwrap)
            .collect();
        let shared: Vec<&Value> = items.iter().filter(|o| o["kind"] != "DaemonSet").collect();
        let namespace = repo().join("deploy/base/namespace.yaml");
        kubectl(&["apply", "--server-side", "-f", namespace.to_str().unwrap()]).await;
        let file = std::env::temp_dir().join(format!("{}-prober.json", self.ns));
        std::fs::write(
            &file,
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": shared}).to_string(),
        )
        .unwrap();
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            file.to_str().unwrap(),
        ])
        .await;
        let _ = std::fs::remove_file(&file);
        // This test's prober: a ServiceAccount of its own, granted the shipped ClusterRole by a
        // ClusterRoleBinding of its own that names this network (isim.dev/probe-networks), as
        // the admission policy reads it. Its own, because the policy weighs every grant of an
        // account: the shipped one names no network. And a binding of the shipped policy of its
        // own, the one its guard reads, so that a test can take it away from this prober alone
        // (the shipped binding still confines every prober meanwhile); its role a copy of the
        // shipped one that reads that binding, as an operator's would after a rename.
        let name = format!("prober-{}", self.ns);
        let network = format!("{}/macvlan", self.ns);
        // deploy/prober's object of `kind`, renamed this test's.
        let shipped = |kind: &str| {
            let mut object = items.iter().find(|o| o["kind"] == kind).unwrap().clone();
            object["metadata"]["name"] = name.clone().into();
            object
        };
        let account = shipped("ServiceAccount");
        let mut grant = shipped("ClusterRoleBinding");
        grant["metadata"]["annotations"]["isim.dev/probe-networks"] = network.clone().into();
        grant["subjects"][0]["name"] = name.clone().into();
        let binding = shipped("ValidatingAdmissionPolicyBinding");
        let mut role = shipped("ClusterRole");
        let rules = role["rules"].as_array_mut().unwrap();
        rules.retain(|r| r["apiGroups"][0] != "admissionregistration.k8s.io");
        for (resource, object) in [
            ("validatingadmissionpolicies", PROBER_POLICY),
            ("validatingadmissionpolicybindings", name.as_str()),
        ] {
            rules.push(
                serde_json::json!({"apiGroups": ["admissionregistration.k8s.io"],
                "resources": [resource], "resourceNames": [object], "verbs": ["get"]}),
            );
        }
        grant["roleRef"]["name"] = name.clone().into();
        let file = std::env::temp_dir().join(format!("{}-prober-grant.json", self.ns));
        std::fs::write(
            &file,
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [account, role, grant, binding]})
                .to_string(),
        )
        .unwrap();
        kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]).await;
        let _ = std::fs::remove_file(&file);
        // The shipped DaemonSet, this test's: its own name, account and selector, this network.
        let mut ds = shipped("DaemonSet");
        ds["spec"]["selector"]["matchLabels"]["nsc-test-prober"] = self.ns.clone().into();
        let template = &mut ds["spec"]["template"];
        template["metadata"]["labels"]["nsc-test-prober"] = self.ns.clone().into();
        template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = network.clone().into();
        template["spec"]["nodeSelector"] = serde_json::json!({NODE_LABEL: "true"});
        template["spec"]["serviceAccountName"] = name.clone().into();
        let container = &mut template["spec"]["containers"][0];
        container["image"] = image("nad-network-prober").into();
        // Its binding read every 2 s rather than 30: a test waits for it to notice.
        container["args"]
            .as_array_mut()
            .unwrap()
            .push("--admission-policy-check-seconds=2".into());
        for env in container["env"].as_array_mut().unwrap() {
            if env["name"] == "NSC_PROBE_NETWORKS" {
                env["value"] = network.clone().into();
            }
            if env["name"] == "NSC_PROBE_ADMISSION_POLICY_BINDING" {
                env["value"] = name.clone().into();
            }
        }
        let api: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(self.client.clone(), PROBER_NS);
        api.create(&PostParams::default(), &serde_json::from_value(ds).unwrap())
            .await
            .unwrap();
        let probers = Probers {
            client: self.client.clone(),
            name,
            selector: format!("nsc-test-prober={}", self.ns),
        };
        let nodes = node_names(&nad_node_tests::client().await).await.len();
        eventually("a Ready prober on every node of the data plane", || async {
            let ready = probers.pods().await.iter().filter(|p| is_ready(p)).count();
            (ready == nodes).then_some(())
        })
        .await;
        probers
    }

    async fn pod(&self, name: &str) -> Pod {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .get(name)
            .await
            .unwrap()
    }

    /// Waits until `pod`'s readiness on the network is `status`; returns the pod.
    async fn network_ready_is(&self, pod: &str, status: &str) -> Pod {
        eventually(&format!("{pod}: network readiness {status}"), || async {
            let found = self.pod(pod).await;
            (network_ready(&found, &self.ns).is_some_and(|c| c.status == status)).then_some(found)
        })
        .await
    }

    /// The serving condition of `pod`'s endpoint in the slices of `service`.
    async fn serving(&self, service: &str, pod: &str) -> Option<bool> {
        let slices = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            self.client.clone(),
            &self.ns,
        )
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .unwrap()
        .items;
        slices
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .find(|e| e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
            .and_then(|e| e.conditions.as_ref()?.serving)
    }
}

/// A test's prober DaemonSet.
struct Probers {
    client: Client,
    name: String,
    selector: String,
}

impl Probers {
    async fn pods(&self) -> Vec<Pod> {
        pods_of(
            &Api::namespaced(self.client.clone(), PROBER_NS),
            &self.selector,
        )
        .await
    }

    /// `nad_prober_probes_total` of every prober, read from inside `client` (a pod of the
    /// cluster network) on each prober's /metrics.
    async fn probes(&self, plane: &Plane, client: &str) -> u64 {
        self.metric(plane, client, "nad_prober_probes_total").await as u64
    }

    /// The sum of the series of `metric` of every prober, read from inside `client` (a pod of
    /// the cluster network) on each prober's /metrics.
    async fn metric(&self, plane: &Plane, client: &str, metric: &str) -> f64 {
        let mut total = 0.0;
        for pod in self.pods().await {
            let ip = pod.status.and_then(|s| s.pod_ip).unwrap_or_default();
            let (_, text) = plane
                .exec(
                    client,
                    &[
                        "curl",
                        "-s",
                        "--max-time",
                        "2",
                        &format!("http://{ip}:9090/metrics"),
                    ],
                )
                .await;
            total += text
                .lines()
                .filter(|l| {
                    l.strip_prefix(metric)
                        .is_some_and(|rest| rest.starts_with(['{', ' ']))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        total
    }

    /// This test's binding of the prober's admission policy (the one its probers' guard reads).
    fn binding(&self) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        ));
        Api::all_with(self.client.clone(), &resource)
    }

    async fn delete(self) {
        let api: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(self.client.clone(), PROBER_NS);
        let _ = api.delete(&self.name, &DeleteParams::foreground()).await;
        let grants: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
            Api::all(self.client.clone());
        let _ = grants.delete(&self.name, &DeleteParams::default()).await;
        let _ = self
            .binding()
            .delete(&self.name, &DeleteParams::default())
            .await;
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(self.client.clone());
        let _ = roles.delete(&self.name, &DeleteParams::default()).await;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), PROBER_NS);
        let _ = accounts.delete(&self.name, &DeleteParams::default()).await;
    }
}

/// The issue's scenario on the real data plane: one nginx-nad pod's `net1` taken down inside
/// its namespace while its primary network and its Ready stay up. Within the prober's
/// detection window its endpoint is not serving and CoreDNS no longer answers its addresses,
/// neither the A nor the AAAA record; 25 curls over each family all answer; nginx-basic is
/// unaffected. The link up again, it is back. A restart of the probers writes nothing (no
/// flap). Its admission policy's binding taken away, a prober writes no flip, however real, and
/// tells on its pod; the binding back, it writes the flip it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_secondary_link_dies_leaves_dns_within_the_detection_window() {
    let plane = Plane::new("netready").await;
    let probers = plane.probers().await;
    let ns = plane.ns.clone();
    let nginx: Vec<String> = plane
        .pods("nginx-nad")
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    for pod in &nginx {
        plane.network_ready_is(pod, "True").await;
    }
    let client = plane.pod_named("netutils-nad").await;
    let both = plane
        .nginx_nad_follows(&client, "nginx-nad: both pods")
        .await;
    assert_eq!(both.len(), 2);
    let victim = nginx[0].clone();
    let (dead_ip, dead_ip6) = {
        let ips = macvlan_ips(&plane.pod(&victim).await);
        let of = |family| {
            ips.iter()
                .find(|ip| Family::of(ip) == family)
                .unwrap()
                .clone()
        };
        (of(Family::V4), of(Family::V6))
    };

    plane.link(&victim, "down").await;
    let down = Instant::now();
    // Both families: its A and its AAAA record leave.
    eventually("the dead addresses out of DNS", || async {
        let a = plane.dns(&client, "nginx-nad").await;
        let aaaa = plane.resolve(&client, "nginx-nad", Family::V6).await;
        (!a.is_empty() && !a.contains(&dead_ip) && !aaaa.is_empty() && !aaaa.contains(&dead_ip6))
            .then_some(())
    })
    .await;
    let detection = down.elapsed();
    eprintln!("link down -> out of DNS: {detection:?}");
    assert!(detection < Duration::from_secs(10), "{detection:?}");
    let pod = plane.pod(&victim).await;
    assert!(
        is_ready(&pod),
        "Ready is the primary network's, and stays True"
    );
    let c = network_ready(&pod, &ns).unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("ProbeFailed"));
    assert!(
        c.message
            .as_deref()
            .unwrap_or_default()
            .starts_with(&format!("{dead_ip}:")),
        "{c:?}"
    );
    eventually("the victim published, not serving", || async {
        (plane.serving("nginx-nad", &victim).await == Some(false)).then_some(())
    })
    .await;
    for _ in 0..25 {
        assert_eq!(plane.curl(&client, "nginx-nad").await, ("200".into(), 0));
        assert_eq!(plane.curl6(&client, "nginx-nad").await, ("200".into(), 0));
    }
    let base = plane.pod_named("netutils-base").await;
    for _ in 0..10 {
        assert_eq!(plane.curl(&base, "nginx-basic").await, ("200".into(), 0));
    }
    assert!(
        plane
            .event_reasons(&victim)
            .await
            .contains("NetworkUnready")
    );

    plane.link(&victim, "up").await;
    let up = Instant::now();
    eventually("the addresses back in DNS", || async {
        let a = plane.dns(&client, "nginx-nad").await;
        let aaaa = plane.resolve(&client, "nginx-nad", Family::V6).await;
        (a.contains(&dead_ip) && aaaa.contains(&dead_ip6)).then_some(())
    })
    .await;
    eprintln!("link up -> back in DNS: {:?}", up.elapsed());
    assert!(plane.event_reasons(&victim).await.contains("NetworkReady"));

    // A restart of every prober re-probes before it writes: no condition changes.
    let before: Vec<_> = {
        let mut v = Vec::new();
        for pod in &nginx {
            v.push(network_ready(&plane.pod(pod).await, &ns).unwrap());
        }
        v
    };
    let old: BTreeSet<String> = probers.pods().await.iter().map(|p| p.name_any()).collect();
    Api::<Pod>::namespaced(plane.client.clone(), PROBER_NS)
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&probers.selector),
        )
        .await
        .unwrap();
    let nodes = node_names(&nad_node_tests::client().await).await.len();
    eventually("new probers Ready", || async {
        let pods = probers.pods().await;
        let fresh = pods
            .iter()
            .filter(|p| !old.contains(&p.name_any()) && is_ready(p))
            .count();
        (fresh == nodes).then_some(())
    })
    .await;
    let at_start = probers.probes(&plane, &base).await;
    // Three rounds of each pod at the default period.
    eventually("three probe rounds of the new probers", || async {
        (probers.probes(&plane, &base).await >= at_start + 3 * nginx.len() as u64).then_some(())
    })
    .await;
    for (pod, was) in nginx.iter().zip(&before) {
        let now = network_ready(&plane.pod(pod).await, &ns).unwrap();
        assert_eq!(now.status, "True");
        assert_eq!(
            now.last_transition_time, was.last_transition_time,
            "{pod}: no flap"
        );
    }

    // Its admission policy's binding taken away, a prober writes nothing, even when the link
    // really dies, and says so on its pod and in its metrics; the binding back, it writes the
    // flip it held back.
    let kept = probers.binding().get(&probers.name).await.unwrap();
    probers
        .binding()
        .delete(&probers.name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "every prober: its admission policy not in force",
        || async {
            let in_force = probers
                .metric(&plane, &base, "nad_prober_admission_policy_in_force")
                .await;
            (in_force == 0.0).then_some(())
        },
    )
    .await;
    plane.link(&victim, "down").await;
    let at_down = probers.probes(&plane, &base).await;
    // Five rounds of each pod: two more than the failures a flip takes.
    eventually("five probe rounds with the link down", || async {
        (probers.probes(&plane, &base).await >= at_down + 5 * nginx.len() as u64).then_some(())
    })
    .await;
    let held = network_ready(&plane.pod(&victim).await, &ns).unwrap();
    assert_eq!(held.status, "True", "written without its policy: {held:?}");
    for prober in probers.pods().await {
        let missing =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(plane.client.clone(), PROBER_NS)
                .list(
                    &ListParams::default().fields(&format!("regarding.name={}", prober.name_any())),
                )
                .await
                .unwrap()
                .items
                .into_iter()
                .any(|e| e.reason.as_deref() == Some("AdmissionPolicyMissing"));
        assert!(
            missing,
            "no AdmissionPolicyMissing Event on {}",
            prober.name_any()
        );
    }
    let mut restored = kept;
    restored.metadata.resource_version = None;
    restored.metadata.uid = None;
    restored.metadata.creation_timestamp = None;
    restored.metadata.managed_fields = None;
    probers
        .binding()
        .create(&PostParams::default(), &restored)
        .await
        .unwrap();
    let unready = plane.network_ready_is(&victim, "False").await;
    assert_eq!(
        network_ready(&unready, &ns).unwrap().reason.as_deref(),
        Some("ProbeFailed")
    );
    plane.link(&victim, "up").await;
    plane.network_ready_is(&victim, "True").await;
    probers.delete().await;
    plane.finish().await;
}

/// An application that listens on the primary address only is Ready (kubelet's probe reaches
/// it there) but not serving on the network; a pod that gates its own Ready on the condition
/// (`readinessGates`) follows it, probed over HTTP as its Service asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_condition_reaches_apps_bound_to_the_primary_and_readiness_gates() {
    let plane = Plane::new("netapps").await;
    let probers = plane.probers().await;
    let ns = plane.ns.clone();
    let gate = network_ready_type(&ns);
    let pods: Api<Pod> = Api::namespaced(plane.client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(plane.client.clone(), &ns);
    // gated's Service asks for an HTTP probe (isim.dev/probe), primary-only's for the default.
    for (name, port, probe) in [
        ("primary-only", 8080, None),
        (
            "gated",
            80,
            Some(r#"{"httpGet": {"port": 80, "path": "/"}, "periodSeconds": 1}"#),
        ),
    ] {
        let mut annotations = serde_json::json!({"isim.dev/network": "macvlan"});
        if let Some(probe) = probe {
            annotations["isim.dev/probe"] = probe.into();
        }
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {"app": name},
                                 "annotations": annotations},
                    "spec": {"clusterIP": "None", "ports": [{"port": port}]}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "primary-only", "labels": {"app": "primary-only"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
            "spec": {"containers": [{"name": "web", "image": image("netutils"),
                "command": ["python3", "-m", "http.server", "8080", "--bind", "$(POD_IP)"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gated", "labels": {"app": "gated"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
            "spec": {"readinessGates": [{"conditionType": gate}],
                "containers": [{"name": "web", "image": image("nginx"),
                "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1}}]}}))
        .unwrap(),
    )
    .await
    .unwrap();

    let pod = plane.network_ready_is("primary-only", "False").await;
    assert!(
        is_ready(&pod),
        "kubelet's probe answers on the primary address"
    );
    let c = network_ready(&pod, &ns).unwrap();
    assert!(
        c.message.as_deref().unwrap_or_default().contains(":8080: "),
        "{c:?}"
    );
    eventually("primary-only published, not serving", || async {
        (plane.serving("primary-only", "primary-only").await == Some(false)).then_some(())
    })
    .await;

    let pod = plane.network_ready_is("gated", "True").await;
    assert!(
        network_ready(&pod, &ns)
            .and_then(|c| c.message)
            .unwrap_or_default()
            .contains("(http 80 /)"),
        "probed over HTTP"
    );
    eventually("gated Ready once its gate is True", || async {
        is_ready(&plane.pod("gated").await).then_some(())
    })
    .await;
    plane.link("gated", "down").await;
    plane.network_ready_is("gated", "False").await;
    let pod = eventually("gated not Ready: its gate is False", || async {
        let pod = plane.pod("gated").await;
        (!is_ready(&pod)).then_some(pod)
    })
    .await;
    assert_eq!(
        condition(&pod, "Ready").and_then(|c| c.reason).as_deref(),
        Some("ReadinessGatesNotReady")
    );
    // The slice follows the pod's Ready at the controller's next reconcile, not at once.
    eventually("gated published, not serving", || async {
        (plane.serving("gated", "gated").await == Some(false)).then_some(())
    })
    .await;
    probers.delete().await;
    plane.finish().await;
}

/// A tenant's pod that answers a probe without end costs the prober a bounded read: one that
/// sends its status line forever (no line end, as fast as the link goes) is `False` with
/// "the status line is longer than 1024 bytes", one whose headers never end is `True` (only the
/// status line is read), and the probers' peak resident memory (VmHWM) stays far under their
/// 64 MiB limit while both are probed every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_answers_without_end_costs_the_prober_a_bounded_read() {
    let plane = Plane::new("hostile").await;
    let probers = plane.probers().await;
    let ns = plane.ns.clone();
    let pods: Api<Pod> = Api::namespaced(plane.client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(plane.client.clone(), &ns);
    let script = r#"
import socket, sys, threading
mode = sys.argv[1]
def answer(conn):
    try:
        conn.recv(65536)
        if mode == "endless-line":
            chunk = b"A" * 65536
            while True:
                conn.sendall(chunk)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            conn.sendall(b"X-More: " + b"y" * 1000 + b"\r\n")
    except OSError:
        pass
    finally:
        conn.close()
server = socket.create_server(("::", 8080), family=socket.AF_INET6, dualstack_ipv6=True)
while True:
    conn, _ = server.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"#;
    for name in ["endless-line", "endless-headers"] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"app": name},
                             "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
                "spec": {"containers": [{"name": "tenant", "image": image("netutils"),
                    "command": ["python3", "-c", script, name],
                    "ports": [{"containerPort": 8080}]}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    }
    // The Services only once python listens: the prober writes a condition when its status
    // changes, so a first probe refused would leave "Connection refused" as the message (CI of
    // 8a24c48 read that; CI of 85aa400 then waited for the status line's message in vain).
    for name in ["endless-line", "endless-headers"] {
        eventually(&format!("{name} listening"), || async {
            let connect = "import socket; socket.create_connection(('127.0.0.1', 8080), 1).close()";
            (plane.exec(name, &["python3", "-c", connect]).await.0 == 0).then_some(())
        })
        .await;
    }
    for name in ["endless-line", "endless-headers"] {
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "annotations": {"isim.dev/network": "macvlan",
                        "isim.dev/probe": r#"{"httpGet": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 1}"#}},
                    "spec": {"clusterIP": "None", "ports": [{"port": 8080}]}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let pod = plane.network_ready_is("endless-line", "False").await;
    let message = network_ready(&pod, &ns)
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.contains("GET /: the status line is longer than 1024 bytes (\"AAAA")
            && message.len() < 400,
        "{message}"
    );
    plane.network_ready_is("endless-headers", "True").await;
    // Ten more rounds of both, then the probers' memory, read from /proc by their network.
    let at_start = probers.probes(&plane, "endless-headers").await;
    eventually("ten more probe rounds", || async {
        (probers.probes(&plane, "endless-headers").await >= at_start + 20).then_some(())
    })
    .await;
    let wanted = format!("NSC_PROBE_NETWORKS={ns}/macvlan");
    let mut peaks = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let kib = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        peaks.push((kib("VmRSS:"), kib("VmHWM:")));
    }
    assert_eq!(
        peaks.len(),
        node_names(&nad_node_tests::client().await).await.len(),
        "one prober per node: {peaks:?}"
    );
    eprintln!("the probers' resident memory (KiB, now and peak): {peaks:?}");
    for (_, peak) in &peaks {
        assert!(
            *peak < 48 * 1024,
            "a prober peaked at {peak} KiB: {peaks:?}"
        );
    }
    probers.delete().await;
    plane.finish().await;
}

/// What a dual-stack test adds to a node's namespace, removed however the test ends.
struct InNode {
    node: String,
    link: String,
    children: Vec<std::process::Child>,
}

impl Drop for InNode {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::process::Command::new("ip")
            .args(["-n", &self.node, "link", "del", &self.link])
            .status();
    }
}

impl InNode {
    /// Starts `program` in the node's namespace (`ip netns exec`).
    fn spawn(&mut self, program: &str, args: &[&str], env: &[(&str, &Path)]) {
        let mut command = std::process::Command::new("ip");
        command
            .args(["netns", "exec", &self.node, program])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        self.children.push(command.spawn().unwrap());
    }
}

/// A pod published with an IPv4 and an IPv6 address answers on the network only if both do
/// (DNS hands out each): the prober binary, in a node's network namespace (where hack/nodes.sh
/// relays the API server), probes a pod whose slices publish 192.0.2.7 and 2001:db8::7, on a
/// bridge this test adds there. (The pod is bound to a node that does not exist, whose pods
/// the prober is told to probe: nothing runs it.) With a server on the IPv4 address only, the condition is
/// `False` and names the IPv6 address; with one on the IPv6 address too, `True`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_pod_is_network_ready_only_if_both_families_answer() {
    let client = client().await;
    let node = node_names(&nad_node_tests::client().await).await[0].clone();
    let ns = namespace(&client, "dualstack").await;
    let mut in_node = InNode {
        node: node.clone(),
        link: format!("nscd{}", std::process::id() % 100_000),
        children: Vec::new(),
    };
    for args in [
        vec!["link", "add", &in_node.link, "type", "bridge"],
        vec!["addr", "add", "192.0.2.7/32", "dev", &in_node.link],
        vec![
            "-6",
            "addr",
            "add",
            "2001:db8::7/128",
            "dev",
            &in_node.link,
            "nodad",
        ],
        vec!["link", "set", &in_node.link, "up"],
    ] {
        let mut all = vec!["-n", node.as_str()];
        all.extend(args);
        let (code, out) = run(Path::new("ip"), &all).await;
        assert_eq!(code, 0, "ip {}: {out}", all.join(" "));
    }
    in_node.spawn(
        "python3",
        &["-m", "http.server", "8080", "--bind", "192.0.2.7"],
        &[],
    );

    // The pod, on a Node object no kubelet runs (without one the pod garbage collector deletes
    // the pod), its Service, and its slices as the controller writes them: one per family.
    let pods_node = "nsc-dual-stack-node";
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    // One an earlier run left (it is deleted at the end of a run that gets there).
    let _ = nodes.delete(pods_node, &DeleteParams::default()).await;
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": pods_node}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "dual"},
            "spec": {"nodeName": pods_node, "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
                     "containers": [{"name": "web", "image": image("nginx")}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "dual",
                    "annotations": {"isim.dev/network": "macvlan",
                                    "isim.dev/probe": r#"{"periodSeconds": 1}"#}},
                "spec": {"clusterIP": "None", "ports": [{"port": 8080}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), &ns);
    for (family, address) in [("IPv4", "192.0.2.7"), ("IPv6", "2001:db8::7")] {
        slices
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("dual-{}-0", family.to_lowercase()), "labels": {
                        "kubernetes.io/service-name": "dual",
                        "endpointslice.kubernetes.io/managed-by": "nad-service-controller.isim.dev"}},
                    "addressType": family, "ports": [{"port": 8080, "protocol": "TCP"}],
                    "endpoints": [{"addresses": [address], "conditions": {"ready": true},
                        "nodeName": pods_node, "targetRef": {"kind": "Pod", "name": "dual", "namespace": ns}}]}))
                .unwrap(),
            )
            .await
            .unwrap();
    }

    let kubeconfig = nad_node_tests::kubeconfig();
    let network = format!("{ns}/macvlan");
    let prober = nad_node_tests::built("nad-network-prober");
    in_node.spawn(
        prober.to_str().unwrap(),
        &[
            "--node-name",
            pods_node,
            "--network",
            &network,
            "--address",
            "127.0.0.1:19191",
        ],
        &[("KUBECONFIG", &kubeconfig)],
    );
    let condition_type = network_ready_type(&ns);
    let status = |status: &'static str| {
        let (pods, condition_type) = (pods.clone(), condition_type.clone());
        async move {
            eventually(&format!("dual: network readiness {status}"), || async {
                let pod = pods.get("dual").await.unwrap();
                condition(&pod, &condition_type).filter(|c| c.status == status)
            })
            .await
        }
    };
    let down = status("False").await;
    assert!(
        down.message
            .as_deref()
            .unwrap_or_default()
            .starts_with("[2001:db8::7]:8080: "),
        "{down:?}"
    );
    in_node.spawn(
        "python3",
        &["-m", "http.server", "8080", "--bind", "2001:db8::7"],
        &[],
    );
    let up = status("True").await;
    assert!(
        up.message
            .as_deref()
            .unwrap_or_default()
            .starts_with("192.0.2.7, 2001:db8::7 answered"),
        "{up:?}"
    );
    drop(in_node);
    let _ = nodes.delete(pods_node, &DeleteParams::default()).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
}
