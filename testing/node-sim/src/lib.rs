//! A node simulator: on a control plane without kubelets, it does what the scheduler, kubelet
//! and Multus would do for a pod, so that pods really become Running and Ready with IPs on
//! their secondary networks.
//!
//! - [`Simulator::ensure_nodes`] registers Node objects (with zone labels, Ready).
//! - [`Simulator::start_pod`] binds a pod to a node, writes the Multus
//!   `k8s.v1.cni.cncf.io/network-status` annotation for the networks the pod requests in
//!   `k8s.v1.cni.cncf.io/networks` (addresses from a per-network range), and sets the pod's
//!   status: Running, Ready, pod IPs.
//! - [`Simulator::set_ready`] flips the Ready condition; [`Simulator::finalize`] removes a
//!   terminating pod, as kubelet does once its containers stopped.
//! - [`Simulator::run`] does all of it continuously for every pod it sees (for the demo).

use std::{
    collections::{BTreeMap, HashSet},
    net::{IpAddr, Ipv4Addr},
    sync::Mutex,
};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use nad_test_kit::wait::eventually;
use serde_json::{Value, json};

/// Makes ring the process's TLS provider, before any client is made (see the function).
pub use nad_test_kit::install_crypto_provider;

pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// An IPv4 range `a.b.c.d/len` that addresses are handed out from, skipping the network
/// address and the first host (the gateway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    base: Ipv4Addr,
    prefix: u8,
}

impl std::str::FromStr for Range {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (ip, prefix) = s.split_once('/').context("a range is <ipv4>/<prefix>")?;
        let base: Ipv4Addr = ip
            .parse()
            .with_context(|| format!("{ip:?} is not an IPv4 address"))?;
        let prefix: u8 = prefix.parse().context("the prefix length is a number")?;
        if !(8..=30).contains(&prefix) {
            bail!("prefix length {prefix} is outside 8..=30");
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Self {
            base: Ipv4Addr::from(u32::from(base) & mask),
            prefix,
        })
    }
}

impl Range {
    fn hosts(self) -> impl Iterator<Item = Ipv4Addr> {
        let start = u32::from(self.base);
        let size = 1_u32 << (32 - self.prefix);
        (2..size - 1).map(move |i| Ipv4Addr::from(start + i))
    }
}

/// A simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimNode {
    pub name: String,
    pub zone: Option<String>,
}

/// What the simulator needs to know.
#[derive(Debug, Clone)]
pub struct Config {
    pub nodes: Vec<SimNode>,
    /// Addresses of the cluster's primary network.
    pub pod_range: Range,
    /// Secondary-network ranges by network name (`<name>` or `<namespace>/<name>`).
    pub network_ranges: BTreeMap<String, Range>,
    /// The range of networks without their own.
    pub default_network_range: Range,
    /// Remove terminating pods at once, as a kubelet would after their containers stopped.
    pub finalize_terminating: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nodes: vec![
                SimNode {
                    name: "sim-node-0".into(),
                    zone: Some("zone-a".into()),
                },
                SimNode {
                    name: "sim-node-1".into(),
                    zone: Some("zone-b".into()),
                },
            ],
            pod_range: Range {
                base: Ipv4Addr::new(10, 244, 0, 0),
                prefix: 16,
            },
            network_ranges: BTreeMap::new(),
            default_network_range: Range {
                base: Ipv4Addr::new(192, 168, 2, 0),
                prefix: 24,
            },
            finalize_terminating: true,
        }
    }
}

/// One network a pod asks for in `k8s.v1.cni.cncf.io/networks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRequest {
    /// `<namespace>/<name>`.
    pub network: String,
    pub interface: Option<String>,
    /// Static addresses requested by the pod; allocated from the range when empty.
    pub ips: Vec<IpAddr>,
}

/// Parses the Multus network selection annotation: `a, ns/b@net2` or a JSON list of
/// `{"name", "namespace", "interface", "ips"}` objects.
pub fn parse_network_requests(
    value: &str,
    pod_namespace: &str,
) -> anyhow::Result<Vec<NetworkRequest>> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(Vec::new());
    }
    if value.starts_with('[') {
        let items: Vec<Value> =
            serde_json::from_str(value).context("the networks annotation is not a JSON list")?;
        return items
            .iter()
            .map(|item| {
                let name = item["name"]
                    .as_str()
                    .context("a network selection element needs a name")?;
                let namespace = item["namespace"].as_str().unwrap_or(pod_namespace);
                let ips = item["ips"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|ip| ip.split('/').next().unwrap_or(ip).parse::<IpAddr>())
                    .collect::<Result<Vec<_>, _>>()
                    .context("a requested IP does not parse")?;
                Ok(NetworkRequest {
                    network: format!("{namespace}/{name}"),
                    interface: item["interface"].as_str().map(str::to_owned),
                    ips,
                })
            })
            .collect();
    }
    Ok(value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (name, interface) = match item.split_once('@') {
                Some((n, i)) => (n, Some(i.to_owned())),
                None => (item, None),
            };
            let network = if name.contains('/') {
                name.to_owned()
            } else {
                format!("{pod_namespace}/{name}")
            };
            NetworkRequest {
                network,
                interface,
                ips: Vec::new(),
            }
        })
        .collect())
}

/// Allocated addresses, so that no two pods share one.
#[derive(Debug, Default)]
struct Ipam {
    used: HashSet<IpAddr>,
}

impl Ipam {
    fn allocate(&mut self, range: Range) -> anyhow::Result<IpAddr> {
        let ip = range
            .hosts()
            .map(IpAddr::V4)
            .find(|ip| !self.used.contains(ip))
            .with_context(|| format!("range {}/{} is exhausted", range.base, range.prefix))?;
        self.used.insert(ip);
        Ok(ip)
    }
}

pub struct Simulator {
    client: Client,
    config: Config,
    ipam: Mutex<Ipam>,
    next_node: Mutex<usize>,
}

/// A running pod's conditions, Ready (and ContainersReady) as given, all stamped now.
pub fn conditions(ready: bool) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = |b: bool| if b { "True" } else { "False" };
    json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status(ready), "lastTransitionTime": now},
        {"type": "Ready", "status": status(ready), "lastTransitionTime": now},
    ])
}

impl Simulator {
    pub fn new(client: Client, config: Config) -> Self {
        Self {
            client,
            config,
            ipam: Mutex::default(),
            next_node: Mutex::new(0),
        }
    }

    fn ipam(&self) -> std::sync::MutexGuard<'_, Ipam> {
        self.ipam
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers the simulated nodes (idempotent) and marks them Ready.
    pub async fn ensure_nodes(&self) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        for node in &self.config.nodes {
            let mut labels =
                json!({"kubernetes.io/hostname": node.name, "node-sim.isim.dev/simulated": "true"});
            if let Some(zone) = &node.zone {
                labels[ZONE_LABEL] = json!(zone);
            }
            let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": labels}});
            api.patch(
                &node.name,
                &PatchParams::apply("node-sim").force(),
                &Patch::Apply(&body),
            )
            .await
            .with_context(|| format!("registering node {}", node.name))?;
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Simulated",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "addresses": [{"type": "Hostname", "address": node.name}],
            }});
            api.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .with_context(|| format!("marking node {} Ready", node.name))?;
        }
        Ok(())
    }

    /// Remembers addresses already handed out (for a simulator that restarts).
    pub fn reserve_existing(&self, pods: &[Pod]) {
        let mut ipam = self.ipam();
        for pod in pods {
            if let Some(status) = pod.annotations().get(NETWORK_STATUS_ANNOTATION)
                && let Ok(entries) = serde_json::from_str::<Vec<Value>>(status)
            {
                for ip in entries
                    .iter()
                    .flat_map(|e| e["ips"].as_array().cloned().unwrap_or_default())
                {
                    if let Some(ip) = ip.as_str().and_then(|s| s.parse().ok()) {
                        ipam.used.insert(ip);
                    }
                }
            }
        }
    }

    fn range_for(&self, network: &str) -> Range {
        let bare = network.split_once('/').map_or(network, |(_, n)| n);
        self.config
            .network_ranges
            .get(network)
            .or_else(|| self.config.network_ranges.get(bare))
            .copied()
            .unwrap_or(self.config.default_network_range)
    }

    fn pick_node(&self) -> anyhow::Result<String> {
        let mut next = self
            .next_node
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let node = self
            .config
            .nodes
            .get(*next % self.config.nodes.len().max(1))
            .context("the simulator has no nodes")?;
        *next += 1;
        Ok(node.name.clone())
    }

    /// Binds (if needed), attaches and starts a pod: it ends up Running with the given
    /// readiness and a network-status annotation. Returns the pod as stored.
    pub async fn start_pod(&self, namespace: &str, name: &str, ready: bool) -> anyhow::Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = api
            .get(name)
            .await
            .with_context(|| format!("reading pod {namespace}/{name}"))?;
        let node = match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            Some(node) => node,
            None => {
                let node = self.pick_node()?;
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                     "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                let _: Value = api
                    .create_subresource("binding", name, &PostParams::default(), &binding)
                    .await
                    .with_context(|| format!("binding pod {namespace}/{name} to {node}"))?;
                node
            }
        };

        let (primary, status_json) = {
            let mut ipam = self.ipam();
            let primary = ipam.allocate(self.config.pod_range)?;
            let mut entries = vec![
                json!({"name": "sim-default", "interface": "eth0", "ips": [primary.to_string()],
                                          "mac": mac(primary), "default": true, "dns": {}}),
            ];
            let requested = pod
                .annotations()
                .get(NETWORKS_ANNOTATION)
                .map(|v| parse_network_requests(v, namespace))
                .transpose()
                .with_context(|| {
                    format!("pod {namespace}/{name}: annotation {NETWORKS_ANNOTATION}")
                })?
                .unwrap_or_default();
            for (i, request) in requested.iter().enumerate() {
                let ips = if request.ips.is_empty() {
                    vec![ipam.allocate(self.range_for(&request.network))?]
                } else {
                    ipam.used.extend(request.ips.iter().copied());
                    request.ips.clone()
                };
                let interface = request
                    .interface
                    .clone()
                    .unwrap_or_else(|| format!("net{}", i + 1));
                entries.push(json!({"name": request.network, "interface": interface,
                    "ips": ips.iter().map(ToString::to_string).collect::<Vec<_>>(), "mac": mac(ips[0]), "dns": {}}));
            }
            (primary, serde_json::to_string(&entries)?)
        };
        if !pod.annotations().contains_key(NETWORK_STATUS_ANNOTATION) {
            let patch =
                json!({"metadata": {"annotations": {NETWORK_STATUS_ANNOTATION: status_json}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("annotating pod {namespace}/{name}"))?;
        }
        let status = json!({"status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": primary.to_string(),
            "podIPs": [{"ip": primary.to_string()}],
            "startTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "conditions": conditions(ready),
        }});
        let pod = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
            .await
            .with_context(|| format!("setting the status of pod {namespace}/{name}"))?;
        tracing::info!(pod = %name, namespace, node, "pod started");
        Ok(pod)
    }

    /// Creates the pod `pod` (its JSON) in `namespace`, then starts it as [`Self::start_pod`].
    pub async fn create_and_start(
        &self,
        namespace: &str,
        pod: Value,
        ready: bool,
    ) -> anyhow::Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod: Pod = serde_json::from_value(pod).context("the pod's JSON")?;
        let name = pod.name_any();
        api.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {namespace}/{name}"))?;
        self.start_pod(namespace, &name, ready).await
    }

    /// Sets the pod's Ready (and ContainersReady) condition.
    pub async fn set_ready(&self, namespace: &str, name: &str, ready: bool) -> anyhow::Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"status": {"conditions": conditions(ready)}});
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .with_context(|| format!("setting Ready={ready} on pod {namespace}/{name}"))
    }

    /// Sets the pod's phase (e.g. `Succeeded`), Ready false.
    pub async fn set_phase(&self, namespace: &str, name: &str, phase: &str) -> anyhow::Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"status": {"phase": phase, "conditions": conditions(false)}});
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .with_context(|| format!("setting phase {phase} on pod {namespace}/{name}"))
    }

    /// Removes a terminating pod for good, as kubelet does once its containers stopped.
    pub async fn finalize(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("finalizing pod {namespace}/{name}")),
        }
    }

    /// Keeps the nodes Ready: without heartbeats the node lifecycle controller would mark
    /// them unreachable and evict their pods.
    pub async fn heartbeat(&self) -> anyhow::Result<()> {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            if let Err(e) = self.ensure_nodes().await {
                tracing::warn!(error = format!("{e:#}"), "node heartbeat failed");
            }
        }
    }

    /// A simulator for tests: its nodes registered and kept Ready by a heartbeat task (the
    /// handle: abort it when done), terminating pods left for the test to [`Self::finalize`].
    /// Without heartbeats the node lifecycle controller would mark the nodes, and so the
    /// pods, not ready after about 40 s, changing endpoints under a test's feet.
    pub async fn for_tests(
        client: Client,
    ) -> anyhow::Result<(std::sync::Arc<Self>, tokio::task::JoinHandle<()>)> {
        let sim = std::sync::Arc::new(Self::new(
            client,
            Config {
                finalize_terminating: false,
                ..Config::default()
            },
        ));
        sim.ensure_nodes().await?;
        let heartbeat = tokio::spawn({
            let sim = sim.clone();
            async move {
                let _ = sim.heartbeat().await;
            }
        });
        Ok((sim, heartbeat))
    }

    /// Starts every pod that appears (in `namespace`, or all), finalizes terminating pods when
    /// configured to, and keeps the nodes Ready. Runs until the watch ends.
    pub async fn run(&self, namespace: Option<&str>) -> anyhow::Result<()> {
        tokio::select! {
            result = self.simulate_pods(namespace) => result,
            result = self.heartbeat() => result,
        }
    }

    async fn simulate_pods(&self, namespace: Option<&str>) -> anyhow::Result<()> {
        let api: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        self.reserve_existing(&api.list(&Default::default()).await?.items);
        let mut pods = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(pod) = pods.try_next().await? {
            let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
            let result = if pod.metadata.deletion_timestamp.is_some() {
                if self.config.finalize_terminating {
                    self.finalize(&ns, &name).await
                } else {
                    Ok(())
                }
            } else if pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_none_or(|p| p == "Pending")
            {
                self.start_pod(&ns, &name, true).await.map(|_| ())
            } else {
                Ok(())
            };
            if let Err(e) = result {
                tracing::warn!(pod = %name, namespace = %ns, error = format!("{e:#}"), "could not simulate pod");
            }
        }
        Ok(())
    }
}

/// A locally administered MAC derived from an address, for realistic-looking annotations.
fn mac(ip: IpAddr) -> String {
    let bytes = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets()[12..].to_vec(),
    };
    let b: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("02:42:{}", b.join(":"))
}

/// Label of the namespaces whose pods the simulator plays: the pods of other namespaces are left
/// to whatever else runs pods on the same control plane (the kubelets of hack/nodes.sh).
pub const SIMULATED_NAMESPACE_LABEL: &str = "node-sim.isim.dev/simulated";

/// Creates a test's namespace `name` for the simulator's pods (labelled `nsc-test=true` and
/// [`SIMULATED_NAMESPACE_LABEL`]) and waits for its `default` ServiceAccount, without which pods
/// cannot be created.
pub async fn create_test_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    create_namespace(client, name).await?;
    define_networks(client, name, TEST_NETWORKS).await
}

/// The networks a test namespace has (as its cluster admin would have defined them for
/// Multus): the tests' pods attach to these.
pub const TEST_NETWORKS: &[&str] = &["macvlan", "sriov"];

/// Creates a NetworkAttachmentDefinition for each of `networks` in `namespace` (a macvlan
/// configuration; the simulator never runs it), as Multus needs before it attaches a pod. A
/// control plane without the CRD gets none (the controller then checks no network).
pub async fn define_networks(
    client: &Client,
    namespace: &str,
    networks: &[&str],
) -> anyhow::Result<()> {
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"),
        "network-attachment-definitions",
    );
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource);
    for network in networks {
        let config = json!({"cniVersion": "0.3.1", "name": network, "type": "macvlan",
                            "ipam": {"type": "whereabouts", "range": "192.168.2.0/24"}});
        let nad: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": network},
            "spec": {"config": config.to_string()},
        }))?;
        match api.create(&PostParams::default(), &nad).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("creating the NetworkAttachmentDefinition {namespace}/{network}")
                });
            }
        }
    }
    Ok(())
}

/// Creates namespace `name`, labelled for the simulator, and waits for its `default`
/// ServiceAccount.
///
/// The controller manager creates the ServiceAccount; right after an API server restart (the
/// fault tests make several) its informers may take over a minute to list again, hence the
/// two minutes.
async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let labels = json!({"nsc-test": "true", SIMULATED_NAMESPACE_LABEL: "true"});
    let body = json!({"metadata": {"name": name, "labels": labels}});
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(body)?)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    eventually(
        "the default ServiceAccount",
        std::time::Duration::from_secs(120),
        || async { accounts.get_opt("default").await.ok().flatten().map(|_| ()) },
    )
    .await;
    Ok(())
}

/// Deletes a test's namespace, its pods at once: without a kubelet, terminating pods would hold
/// the namespace forever. Best effort: a test's cleanup must not fail it.
pub async fn delete_test_namespace(client: &Client, name: &str) {
    let _ = Api::<Pod>::namespaced(client.clone(), name)
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_short_form() {
        let got = parse_network_requests("macvlan, infra/sriov@net5 ,", "team-a").unwrap();
        assert_eq!(
            got,
            vec![
                NetworkRequest {
                    network: "team-a/macvlan".into(),
                    interface: None,
                    ips: vec![]
                },
                NetworkRequest {
                    network: "infra/sriov".into(),
                    interface: Some("net5".into()),
                    ips: vec![]
                },
            ]
        );
    }

    #[test]
    fn parses_the_json_form_with_static_ips() {
        let got = parse_network_requests(
            r#"[{"name":"macvlan","ips":["192.168.2.50/24","fd00:2::50"]},{"name":"m2","namespace":"x","interface":"n9"}]"#,
            "team-a",
        )
        .unwrap();
        assert_eq!(got[0].network, "team-a/macvlan");
        assert_eq!(
            got[0].ips,
            vec![
                "192.168.2.50".parse::<IpAddr>().unwrap(),
                "fd00:2::50".parse().unwrap()
            ]
        );
        assert_eq!(got[1].network, "x/m2");
        assert_eq!(got[1].interface.as_deref(), Some("n9"));
        assert!(parse_network_requests("[{}]", "a").is_err());
    }

    #[test]
    fn ranges_hand_out_distinct_hosts() {
        let range: Range = "192.168.2.77/24".parse().unwrap();
        let mut ipam = Ipam::default();
        let a = ipam.allocate(range).unwrap();
        let b = ipam.allocate(range).unwrap();
        assert_eq!(
            (a.to_string(), b.to_string()),
            ("192.168.2.2".into(), "192.168.2.3".into())
        );
        let tiny: Range = "10.0.0.0/30".parse().unwrap();
        ipam.allocate(tiny).unwrap();
        assert!(ipam.allocate(tiny).is_err());
        assert!("10.0.0.0/31".parse::<Range>().is_err());
        assert!("nope/24".parse::<Range>().is_err());
    }
}
