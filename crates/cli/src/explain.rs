//! `explain <namespace>/<service>`: what the controller makes of a Service on the live cluster,
//! read-only through the current kubeconfig. For every pod of the namespace: whether it is a
//! candidate (and why not), the plugin's decision and reason, the conditions, and which
//! EndpointSlice publishes it; plus the Service's validation and the plugin in use. The same
//! observation, `decide`, plan and placement as the controller and `plugin eval`.

use std::{collections::BTreeMap, io::Write, sync::Arc};

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Node, Pod, Service},
    discovery::v1::EndpointSlice,
    resource::v1::{DeviceClass, ResourceClaim},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::{Value, json};

use super::plugin::{
    PluginArg,
    case::Case,
    eval::{self, Evaluation, Row, Verdict},
    sandbox::SandboxArgs,
    source::{self, Loaded},
};
use nad_core::{index::ZONE_LABEL, slices::DEFAULT_MAX_ENDPOINTS_PER_SLICE};
use nad_model::input::{
    device_network::{self, CLASS_ANNOTATION, ClaimRecord, DeviceAttachment, DeviceNetwork},
    network_ready,
    target::{self, NETWORK_ANNOTATION, POLICY_ANNOTATION, ServiceTarget, Target},
};
use nad_model::{condition::KeptCondition, keys::Keys, labels::SERVICE_NAME_LABEL, pod::PodRecord};
use nad_plugin_runtime::{BUILT_IN, Component, DEFAULT_PLUGIN_WASM, annotated, configmap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainOutput {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The Service: `<namespace>/<name>`, or `<name>` in the kubeconfig's namespace.
    pub service: String,
    /// `text` (a table) or `json` (for scripts).
    #[arg(short, long, value_enum, default_value_t = ExplainOutput::Text)]
    pub output: ExplainOutput,
    /// Decide with this plugin (a `.wasm` file, an `oci://` reference, or `default`) instead
    /// of the one the Service names.
    #[arg(long, value_parser = PluginArg::parse)]
    pub plugin: Option<PluginArg>,
    /// The controller's plugin ConfigMap, where the plugin a Service names is read from.
    #[arg(long, default_value = "nad-service-controller-plugins")]
    pub plugin_configmap: String,
    /// The namespace of --plugin-configmap (the controller's).
    #[arg(long, default_value = "nad-service-controller")]
    pub plugin_configmap_namespace: String,
    /// As the controller's flag of the same name.
    #[arg(long, default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE)]
    pub max_endpoints_per_slice: usize,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// What was read from the cluster.
struct Live {
    service: Service,
    pods: Vec<Pod>,
    /// `None`: the nodes could not be listed (zones unknown).
    nodes: Option<Vec<Node>>,
    slices: Vec<EndpointSlice>,
    plugin_configmap: Option<ConfigMap>,
    /// Whether the network's NetworkAttachmentDefinition, or DeviceClass, exists (`None`:
    /// unknown).
    network_defined: Option<bool>,
    /// The namespace's ResourceClaims, for a Service on a DRA network (`None`: not read, or
    /// not readable).
    claims: Option<Vec<ResourceClaim>>,
}

/// Explains the Service; fails when it is not one the controller serves.
pub fn explain(args: &ExplainArgs, out: &mut impl Write) -> anyhow::Result<()> {
    // The reads run on an async runtime; the plugin runs after it, on this thread (its WASI
    // calls block).
    let live = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(read(args))?;
    let key = service_key(&live.service);
    let target = managed_target(&live.service, &key)?;
    let runtime = args.sandbox.runtime()?;
    let (loaded, origin) = plugin(
        args,
        &runtime,
        &live,
        target.annotations.get(POLICY_ANNOTATION),
    )?;
    let pods = pod_records(&live.pods, live.claims.as_deref());
    let network_ready = network_readiness(&pods, &target.network);
    let devices = devices(&pods, &target.network);
    let case = Case {
        target: target.clone(),
        pods,
        zones: zones(live.nodes.as_deref()),
    };
    let evaluation = eval::evaluate(&loaded, &case, args.max_endpoints_per_slice)?;
    let published = published(&live.slices);
    let mut notes = evaluation.notes.clone();
    notes.extend(cluster_notes(&live, &target.network));
    let report = Report {
        key: &key,
        network: &target.network,
        plugin: (&loaded, &origin),
        evaluation: &evaluation,
        published: &published,
        network_ready: &network_ready,
        devices: &devices,
        slices: live.slices.len(),
        notes: &notes,
    };
    match args.output {
        ExplainOutput::Text => write!(out, "{}", report.text())?,
        ExplainOutput::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report.json())?)?,
    }
    Ok(())
}

/// `<namespace>/<name>` of the Service.
fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.namespace().unwrap_or_default(),
        service.name_any()
    )
}

/// The Service as the controller serves it; fails when the controller leaves it alone or
/// finds it invalid.
fn managed_target(service: &Service, key: &str) -> anyhow::Result<Arc<ServiceTarget>> {
    match target::classify(service) {
        Target::Managed(target) => Ok(target),
        Target::Unmanaged => bail!(
            "Service {key} has neither an {NETWORK_ANNOTATION} nor an {CLASS_ANNOTATION} \
             annotation: the controller does not manage it"
        ),
        Target::Invalid(problems) => bail!(
            "Service {key} is invalid, so the controller publishes no slices for it (and removes \
             its old ones): {}",
            problems.join("; ")
        ),
    }
}

/// The pods as the controller indexes them, with every key kept, and their DRA attachments
/// made from `claims`.
fn pod_records(pods: &[Pod], claims: Option<&[ResourceClaim]>) -> Vec<Arc<PodRecord>> {
    let keys = Keys::all();
    let claims: Vec<ClaimRecord> = claims
        .into_iter()
        .flatten()
        .map(ClaimRecord::read)
        .collect();
    let claims: Vec<&ClaimRecord> = claims.iter().collect();
    pods.iter()
        .map(|p| {
            let record = PodRecord::from_pod(p, &keys);
            Arc::new(record.with_devices(&claims).unwrap_or(record))
        })
        .collect()
}

/// Each pod's attachment to the DRA network `network`, for the pods that have one.
fn devices(pods: &[Arc<PodRecord>], network: &str) -> BTreeMap<String, DeviceAttachment> {
    pods.iter()
        .filter_map(|p| Some((p.name.to_string(), p.device_attachment(network)?.clone())))
        .collect()
}

/// Each pod's readiness condition on `network`, for the pods that have one.
fn network_readiness(pods: &[Arc<PodRecord>], network: &str) -> BTreeMap<String, KeptCondition> {
    pods.iter()
        .filter_map(|p| Some((p.name.to_string(), p.network_readiness(network)?.clone())))
        .collect()
}

/// Each node's zone, or `None` when the nodes could not be listed.
fn zones(nodes: Option<&[Node]>) -> Option<Vec<(String, Option<String>)>> {
    nodes.map(|nodes| {
        nodes
            .iter()
            .map(|n| (n.name_any(), n.labels().get(ZONE_LABEL).cloned()))
            .collect()
    })
}

/// What the cluster reads leave uncertain or wrong: a missing NetworkAttachmentDefinition or
/// DeviceClass, ResourceClaims or nodes that could not be listed.
fn cluster_notes(live: &Live, network: &str) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(device) = DeviceNetwork::from_key(network) {
        match live.network_defined {
            Some(false) => notes.push(format!(
                "DeviceClass {} does not exist: the controller warns (NetworkNotFound) and keeps \
                 the Service's slices",
                device.class
            )),
            None => notes.push(format!(
                "DeviceClass {} was not checked (no DRA API, or not readable)",
                device.class
            )),
            Some(true) => {}
        }
        if live.claims.is_none() {
            notes.push(
                "the ResourceClaims could not be listed: no pod is on the DRA network here"
                    .to_owned(),
            );
        }
        if live.nodes.is_none() {
            notes.push("the nodes could not be listed: zones are left out".to_owned());
        }
        return notes;
    }
    match live.network_defined {
        Some(false) => notes.push(format!(
            "network {network} names no NetworkAttachmentDefinition: the controller warns \
             (NetworkNotFound) and keeps the Service's slices"
        )),
        None => notes.push(
            "the NetworkAttachmentDefinition of the network was not checked (no CRD, or not \
             readable)"
                .to_owned(),
        ),
        Some(true) => {}
    }
    if live.nodes.is_none() {
        notes.push("the nodes could not be listed: zones are left out".to_owned());
    }
    notes
}

async fn read(args: &ExplainArgs) -> anyhow::Result<Live> {
    let client = Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig")?;
    let (namespace, name) = match args.service.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (client.default_namespace().to_owned(), args.service.clone()),
    };
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let service = services
        .get_opt(&name)
        .await
        .with_context(|| format!("reading Service {namespace}/{name}"))?
        .with_context(|| format!("there is no Service {namespace}/{name}"))?;
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the pods of {namespace}"))?
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()
        .map(|l| l.items);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={name}")))
        .await
        .with_context(|| format!("listing the EndpointSlices of {namespace}/{name}"))?
        .items;
    let plugin_configmap =
        Api::<ConfigMap>::namespaced(client.clone(), &args.plugin_configmap_namespace)
            .get_opt(&args.plugin_configmap)
            .await
            .ok()
            .flatten();
    let network = target::managed_network(&service);
    let network_defined = match &network {
        Some(network) => match DeviceNetwork::from_key(network) {
            Some(device) => Api::<DeviceClass>::all(client.clone())
                .get_opt(&device.class)
                .await
                .ok()
                .map(|found| found.is_some()),
            None => network_defined(&client, network).await,
        },
        None => None,
    };
    let claims = match network.as_deref().map(device_network::is_device_network) {
        Some(true) => Api::<ResourceClaim>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default())
            .await
            .ok()
            .map(|l| l.items),
        _ => None,
    };
    Ok(Live {
        service,
        pods,
        nodes,
        slices,
        plugin_configmap,
        network_defined,
        claims,
    })
}

/// Whether `<namespace>/<name>` names an existing NetworkAttachmentDefinition.
async fn network_defined(client: &Client, network: &str) -> Option<bool> {
    let (namespace, name) = network.split_once('/')?;
    let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.get_opt(name).await.ok().map(|found| found.is_some())
}

/// The plugin that decides, and where it came from.
fn plugin(
    args: &ExplainArgs,
    runtime: &nad_plugin_runtime::Runtime,
    live: &Live,
    annotation: Option<&str>,
) -> anyhow::Result<(Loaded, String)> {
    if let Some(plugin) = &args.plugin {
        let loaded = source::load(runtime, &args.sandbox.registry, plugin, "")?;
        return Ok((loaded, format!("{plugin} (--plugin)")));
    }
    let name = annotated(annotation).unwrap_or(BUILT_IN);
    let configmap = format!(
        "{}/{}",
        args.plugin_configmap_namespace, args.plugin_configmap
    );
    let entry = live
        .plugin_configmap
        .as_ref()
        .map(configmap::entries)
        .and_then(|(entries, _)| entries.into_iter().find(|e| e.name == name));
    let Some(entry) = entry else {
        if name == BUILT_IN {
            let loaded = source::load_bytes(
                runtime,
                BUILT_IN,
                DEFAULT_PLUGIN_WASM,
                "",
                "the built-in plugin",
            )?;
            return Ok((loaded, "built in".to_owned()));
        }
        bail!(
            "Service names plugin {name:?} ({POLICY_ANNOTATION}), which ConfigMap {configmap} does \
             not hold (or cannot be read): give the controller's plugin source with \
             --plugin-configmap, or the plugin with --plugin"
        );
    };
    let (bytes, origin) = match entry.component {
        Component::Wasm(bytes) => (bytes, format!("ConfigMap {configmap}, {name}.wasm")),
        Component::Reference(text) => {
            let plugin = PluginArg::parse(text.trim()).map_err(anyhow::Error::msg)?;
            (
                plugin.bytes(&args.sandbox.registry)?,
                format!("ConfigMap {configmap}, {name}.oci: {}", text.trim()),
            )
        }
    };
    let loaded = source::load_bytes(runtime, name, &bytes, &entry.config, &origin)?;
    Ok((loaded, origin))
}

/// Which slice publishes each pod (by its targetRef), as the cluster has them now.
fn published(slices: &[EndpointSlice]) -> BTreeMap<String, Vec<String>> {
    let mut by_pod: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for slice in slices {
        for endpoint in slice.endpoints.iter().flatten() {
            if let Some(pod) = endpoint.target_ref.as_ref().and_then(|r| r.name.clone()) {
                let names = by_pod.entry(pod).or_default();
                if !names.contains(&slice.name_any()) {
                    names.push(slice.name_any());
                }
            }
        }
    }
    by_pod
}

struct Report<'a> {
    key: &'a str,
    network: &'a str,
    plugin: (&'a Loaded, &'a str),
    evaluation: &'a Evaluation,
    published: &'a BTreeMap<String, Vec<String>>,
    /// Each pod's readiness on the network, as the network prober wrote it (on a DRA network:
    /// as its devices' drivers report it).
    network_ready: &'a BTreeMap<String, KeptCondition>,
    /// Each pod's attachment to the DRA network, with its devices (empty on a Multus network).
    devices: &'a BTreeMap<String, DeviceAttachment>,
    slices: usize,
    notes: &'a [String],
}

impl Report<'_> {
    /// `True`, `False (ConnectFailed: 192.168.2.4:80 ...)`, or `-` without a prober.
    fn network_of(&self, pod: &str) -> String {
        match self.network_ready.get(pod) {
            None => "-".to_owned(),
            Some(c) if c.reason.is_empty() => c.status.as_str().to_owned(),
            Some(c) if c.message.is_empty() => format!("{} ({})", c.status.as_str(), c.reason),
            Some(c) => format!("{} ({}: {})", c.status.as_str(), c.reason, c.message),
        }
    }

    fn slices_of(&self, pod: &str) -> String {
        self.published
            .get(pod)
            .map_or_else(|| "-".to_owned(), |names| names.join(","))
    }

    fn text(&self) -> String {
        let mut text = self.summary();
        let rows: Vec<[String; 7]> = self.evaluation.rows.iter().map(|r| self.cells(r)).collect();
        text.push_str(&table(&rows));
        text.push('\n');
        text.push_str(&self.evaluation.candidate_summary());
        text.push_str(&format!("; {} included\n", self.evaluation.included()));
        text.push_str(&self.unreconciled());
        text.push_str(&self.devices_text());
        for note in self.notes.iter().chain(&self.evaluation.warnings) {
            text.push_str(&format!("note: {note}\n"));
        }
        text
    }

    /// The first lines: the Service, its network, the plugin, the slices and the readiness
    /// condition, then a blank line.
    fn summary(&self) -> String {
        let (loaded, origin) = self.plugin;
        let info = loaded.configured.plugin.info();
        format!(
            "Service {}: valid; network {}; plugin {} {} ({origin}); {} EndpointSlice{}\n\
             Readiness on the network: {}\n\n",
            self.key,
            self.network_name(),
            loaded.name,
            info.version,
            self.slices,
            if self.slices == 1 { "" } else { "s" },
            self.readiness_source(),
        )
    }

    /// The network as a user names it: `<namespace>/<name>`, or `DeviceClass <class>
    /// (request <request>)`.
    fn network_name(&self) -> String {
        DeviceNetwork::from_key(self.network)
            .map_or_else(|| self.network.to_owned(), |device| device.to_string())
    }

    /// Where the NETWORK-READY column comes from.
    fn readiness_source(&self) -> String {
        if device_network::is_device_network(self.network) {
            format!(
                "the devices' {} conditions (their ResourceClaims' status.devices[])",
                device_network::READINESS_CONDITIONS.join(" and ")
            )
        } else {
            format!(
                "pod condition {}",
                network_ready::condition_type(self.network)
            )
        }
    }

    /// Each pod's devices on a DRA network: claim, device, interface, addresses, conditions.
    fn devices_text(&self) -> String {
        let mut text = String::new();
        for (pod, attachment) in self.devices {
            for attached in &attachment.devices {
                let device = &attached.device;
                let status = device.status.as_ref();
                let interface = status
                    .and_then(|s| s.interface_name.as_deref())
                    .unwrap_or("-");
                let hardware = status
                    .and_then(|s| s.hardware_address.as_deref())
                    .map(|a| format!(" ({a})"))
                    .unwrap_or_default();
                let addresses: Vec<String> = status
                    .map(|s| s.ips.iter().map(ToString::to_string).collect())
                    .unwrap_or_default();
                let conditions: Vec<String> = status
                    .map(|s| {
                        s.conditions
                            .iter()
                            .map(|c| format!("{}={}", c.type_, c.status.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                text.push_str(&format!(
                    "device: pod {pod}: claim {}, request {}, device {}, interface {interface}{hardware}, \
                     addresses {}, conditions {}\n",
                    attached.claim,
                    device.request,
                    device.id(),
                    or_none(&addresses),
                    or_none(&conditions),
                ));
            }
        }
        text
    }

    /// A pod's cells in the table, in the order of [`TABLE_HEADER`].
    fn cells(&self, row: &Row) -> [String; 7] {
        let (candidate, decision, conditions, reason) = match &row.verdict {
            Verdict::Include(c) => (
                "yes",
                "include",
                format!(
                    "ready={} serving={} terminating={}",
                    c.ready, c.serving, c.terminating
                ),
                String::new(),
            ),
            Verdict::Exclude(reason) => ("yes", "exclude", "-".to_owned(), reason.clone()),
            Verdict::Skipped(_, reason) => ("no", "-", "-".to_owned(), reason.clone()),
        };
        [
            row.name.clone(),
            candidate.to_owned(),
            self.network_of(&row.name),
            decision.to_owned(),
            conditions,
            self.slices_of(&row.name),
            reason,
        ]
    }

    /// A note for each pod the plan and the cluster's slices disagree on.
    fn unreconciled(&self) -> String {
        let mut text = String::new();
        for row in &self.evaluation.rows {
            let included = matches!(row.verdict, Verdict::Include(_));
            if included != self.published.contains_key(&row.name) {
                text.push_str(&format!(
                    "note: pod {} is {} by the plan but {} by a slice: the controller has not \
                     reconciled this yet (or is not running)\n",
                    row.name,
                    if included { "included" } else { "not included" },
                    if included {
                        "not published"
                    } else {
                        "published"
                    },
                ));
            }
        }
        text
    }

    fn json(&self) -> Value {
        let (loaded, origin) = self.plugin;
        let info = loaded.configured.plugin.info();
        let pods: Vec<Value> = self
            .evaluation
            .rows
            .iter()
            .map(|row| {
                let slices = self.published.get(&row.name).cloned().unwrap_or_default();
                let mut pod = match &row.verdict {
                    Verdict::Include(c) => json!({
                        "name": row.name, "candidate": true, "decision": "include",
                        "conditions": {"ready": c.ready, "serving": c.serving, "terminating": c.terminating},
                        "slices": slices,
                    }),
                    Verdict::Exclude(reason) => json!({
                        "name": row.name, "candidate": true, "decision": "exclude",
                        "reason": reason, "slices": slices,
                    }),
                    Verdict::Skipped(_, reason) => json!({
                        "name": row.name, "candidate": false, "reason": reason, "slices": slices,
                    }),
                };
                pod["networkReady"] = self.network_ready.get(&row.name).map_or(Value::Null, |c| {
                    json!({"status": c.status.as_str(), "reason": &*c.reason, "message": &*c.message})
                });
                if let Some(attachment) = self.devices.get(&row.name) {
                    pod["devices"] = attachment.devices.iter().map(device_json).collect();
                }
                pod
            })
            .collect();
        json!({
            "service": self.key,
            "valid": true,
            "network": self.network,
            "networkReadyCondition": (!device_network::is_device_network(self.network))
                .then(|| network_ready::condition_type(self.network)),
            "plugin": {"name": loaded.name, "version": info.version, "source": origin},
            "endpointSlices": self.slices,
            "candidates": self.evaluation.candidates,
            "included": self.evaluation.included(),
            "pods": pods,
            "notes": self.notes.iter().chain(&self.evaluation.warnings).collect::<Vec<_>>(),
        })
    }
}

/// `a b`, or `none`.
fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(" ")
    }
}

/// One device behind a pod's addresses on a DRA network, for `--output json`.
fn device_json(attached: &device_network::AttachedDevice) -> Value {
    let device = &attached.device;
    let status = device.status.as_ref();
    json!({
        "claim": &*attached.claim,
        "request": &*device.request,
        "driver": &*device.driver,
        "pool": &*device.pool,
        "device": &*device.device,
        "shareID": device.share_id.as_deref(),
        "interfaceName": status.and_then(|s| s.interface_name.as_deref()),
        "hardwareAddress": status.and_then(|s| s.hardware_address.as_deref()),
        "ips": status.map(|s| s.ips.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap_or_default(),
        "unusable": status.map(|s| s.unusable.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap_or_default(),
        "conditions": status.map(|s| s.conditions.iter().map(|c| json!({
            "type": &*c.type_, "status": c.status.as_str(), "reason": &*c.reason, "message": &*c.message,
        })).collect::<Vec<_>>()).unwrap_or_default(),
    })
}

/// The columns of the text table.
const TABLE_HEADER: [&str; 7] = [
    "POD",
    "CANDIDATE",
    "NETWORK-READY",
    "DECISION",
    "CONDITIONS",
    "SLICE",
    "REASON",
];

/// The header and the rows, each column as wide as its widest cell, two spaces apart.
fn table(rows: &[[String; 7]]) -> String {
    let header = TABLE_HEADER.map(str::to_owned);
    let widths: Vec<usize> = (0..7)
        .map(|i| {
            std::iter::once(&header)
                .chain(rows)
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}
