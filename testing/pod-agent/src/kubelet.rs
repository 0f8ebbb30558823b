//! The kubelet part: binds pending pods to the local nodes that fit them (there is no
//! scheduler; see `scheduling`), and for each pod on them runs a worker that projects its
//! ServiceAccount token, sets up its sandbox (network namespace, CNI through Multus,
//! `resolv.conf`), runs its containers as processes with kubelet's environment, probes their
//! readiness, reports the status (its own conditions only, Ready following the readiness gates
//! as other writers turn them), and on deletion stops the processes, runs CNI DEL, removes the
//! namespace and lets the pod go.
//!
//! Pods in namespaces labelled [`SIMULATED_NAMESPACE_LABEL`] are the node simulator's (the
//! cluster tests'), and pods bound to other nodes are not ours: both are left alone.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Container as ContainerSpec, Namespace, Node, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource as _, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::cni::{self, Sandbox};
use crate::components::Parts;
use crate::containers::{ProjectBinaries, program_for};
use crate::env::{self, Addresses};
use crate::layout::{Layout, NodeLayout, pod_netns, resolv_conf};
use crate::netns::{self, NetnsRuntime};
use crate::nodes::{self, LOCAL_LABEL};
use crate::probe::{self, Check, Readiness, Tally};
use crate::scheduling;
use crate::serviceaccount;
use crate::status::{self, ContainerState, Run};
use node_sim::SIMULATED_NAMESPACE_LABEL;

/// What a pod's worker hears of the pod: its latest version, `None` once it is gone.
type Updates = watch::Receiver<Option<Arc<Pod>>>;

/// How long a container that exited waits before it is started again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

pub struct Kubelet {
    client: Client,
    layout: Layout,
    parts: Parts,
    nodes: HashMap<String, NetnsRuntime>,
    /// This program (`serve-http` and `exec-container` are commands of it).
    agent: PathBuf,
    /// The project's binaries, which its images run (`run --controller`, `--prober`).
    binaries: ProjectBinaries,
    /// The API server's CA (PEM), each pod's `ca.crt`.
    ca_pem: String,
    workers: Mutex<HashMap<String, watch::Sender<Option<Arc<Pod>>>>>,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    next_node: AtomicUsize,
    recorder: Recorder,
}

impl Kubelet {
    pub fn new(
        client: Client,
        layout: Layout,
        parts: Parts,
        nodes: HashMap<String, NetnsRuntime>,
        binaries: ProjectBinaries,
        ca_pem: String,
    ) -> anyhow::Result<Arc<Self>> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "pod-agent".into(),
                instance: None,
            },
        );
        Ok(Arc::new(Self {
            recorder,
            client,
            layout,
            parts,
            nodes,
            agent: std::env::current_exe().context("finding the agent's own program")?,
            binaries,
            ca_pem,
            workers: Mutex::default(),
            tasks: Mutex::default(),
            next_node: AtomicUsize::new(0),
        }))
    }

    /// Watches pods until the stream ends.
    pub async fn run(self: &Arc<Self>) -> anyhow::Result<()> {
        let (namespaces, writer) = reflector::store::<Namespace>();
        let ns_stream = reflector::reflector(
            writer,
            watcher(Api::all(self.client.clone()), watcher::Config::default()),
        )
        .default_backoff()
        .for_each(|_| async {});
        tokio::spawn(ns_stream);
        namespaces
            .wait_until_ready()
            .await
            .context("listing namespaces")?;
        // The nodes' labels as they are (someone may have added some), for nodeSelector.
        let (nodes, writer) = reflector::store::<Node>();
        let node_stream = reflector::reflector(
            writer,
            watcher(
                Api::all(self.client.clone()),
                watcher::Config::default().labels(&format!("{LOCAL_LABEL}=true")),
            ),
        )
        .default_backoff()
        .for_each(|_| async {});
        tokio::spawn(node_stream);
        nodes.wait_until_ready().await.context("listing nodes")?;
        let mut pods = watcher(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed();
        while let Some(event) = pods.try_next().await? {
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    self.observe(&namespaces, &nodes, Arc::new(pod));
                }
                watcher::Event::Delete(pod) => self.gone(&pod),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
        Ok(())
    }

    fn workers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Option<Arc<Pod>>>>> {
        self.workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .spawn(task);
    }

    fn observe(
        self: &Arc<Self>,
        namespaces: &Store<Namespace>,
        nodes: &Store<Node>,
        pod: Arc<Pod>,
    ) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let uid = pod.uid().unwrap_or_default();
        match node {
            None => {
                let simulated = namespaces
                    .get(&ObjectRef::new(&pod.namespace().unwrap_or_default()))
                    .is_some_and(|ns| ns.labels().contains_key(SIMULATED_NAMESPACE_LABEL));
                let default_scheduler = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduler_name.as_deref())
                    .is_none_or(|s| s == "default-scheduler");
                if !simulated
                    && default_scheduler
                    && !scheduling::gated(&pod)
                    && pod.metadata.deletion_timestamp.is_none()
                {
                    let (this, nodes) = (self.clone(), nodes.clone());
                    self.spawn(async move { this.bind(&pod, &nodes).await });
                }
            }
            Some(node) if self.layout.node(&node).is_some() => {
                let mut workers = self.workers();
                if let Some(sender) = workers.get(&uid) {
                    sender.send_replace(Some(pod));
                } else {
                    let (sender, receiver) = watch::channel(Some(pod));
                    workers.insert(uid.clone(), sender);
                    let (this, nodes) = (self.clone(), nodes.clone());
                    self.spawn(async move {
                        this.work(receiver, &nodes).await;
                        this.workers().remove(&uid);
                    });
                }
            }
            Some(_) => {}
        }
    }

    fn gone(&self, pod: &Pod) {
        if let Some(sender) = self.workers().get(&pod.uid().unwrap_or_default()) {
            sender.send_replace(None);
        }
    }

    /// Plays scheduler: the local nodes that fit the pod (`scheduling`), in turn. A pod that
    /// fits none stays pending.
    async fn bind(&self, pod: &Pod, nodes: &Store<Node>) {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let candidates: Vec<&NodeLayout> = self
            .layout
            .nodes
            .iter()
            .filter(|n| {
                let labels = nodes
                    .get(&ObjectRef::new(&n.name))
                    .map_or_else(|| nodes::labels(n), |node| node.labels().clone());
                scheduling::fits(pod, &n.name, &labels)
            })
            .collect();
        if candidates.is_empty() {
            tracing::debug!(pod = %name, %namespace, "no local node fits the pod; leaving it pending");
            return;
        }
        let index = self.next_node.fetch_add(1, Ordering::Relaxed) % candidates.len();
        let node = candidates[index];
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": pod.uid()},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": node.name}});
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %name, %namespace, node = %node.name, "bound");
                let note = format!("Successfully assigned {namespace}/{name} to {}", node.name);
                self.event(pod, EventType::Normal, "Scheduled", "Binding", note)
                    .await;
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => tracing::warn!(pod = %name, %namespace, error = %e, "binding failed"),
        }
    }

    /// One pod's life on its node.
    async fn work(self: &Arc<Self>, mut updates: Updates, nodes: &Store<Node>) {
        let Some(pod) = latest(&updates) else {
            return;
        };
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| self.layout.node(n))
            .cloned()
        else {
            return;
        };
        // Kubelet's admission: a pod bound (or created bound) to a node its node selector or
        // affinity does not allow is rejected, and stays Failed until deleted.
        let labels = nodes
            .get(&ObjectRef::new(&node.name))
            .map_or_else(|| nodes::labels(&node), |n| n.labels().clone());
        match plan(&pod, scheduling::fits(&pod, &node.name, &labels)) {
            Plan::Reject => {
                self.reject(&pod, "NodeAffinity", scheduling::NODE_AFFINITY_FAILED)
                    .await;
                wait_until_unwanted(&mut updates).await;
            }
            Plan::Run => self.run_pod(&pod, &node, &mut updates).await,
            Plan::LetGo => {}
        }
        // Gone or terminating: let it go, as kubelet does once its containers stopped.
        if let Some(pod) = latest(&updates) {
            self.remove(&pod).await;
        }
    }

    /// Starts the pod, again after a growing pause while that fails, and runs it until it is
    /// deleted or terminating.
    async fn run_pod(&self, pod: &Arc<Pod>, node: &NodeLayout, updates: &mut Updates) {
        let mut attempt = 0_u32;
        loop {
            match self.start(pod, node).await {
                Ok(running) => {
                    self.run_started(pod, running, updates).await;
                    return;
                }
                Err(e) => {
                    attempt += 1;
                    self.start_failed(pod, node, &e).await;
                    tokio::select! {
                        () = tokio::time::sleep(retry_pause(attempt)) => {}
                        changed = updates.changed() => if changed.is_err() { return },
                    }
                    if !wanted(updates.borrow().as_deref()) {
                        return;
                    }
                }
            }
        }
    }

    /// Follows the started pod until it is deleted, then stops it; an Event at either end.
    async fn run_started(&self, pod: &Pod, mut running: RunningPod, updates: &mut Updates) {
        let note = format!(
            "Started the containers in network namespace {} (IPs {:?}) after CNI ADD through Multus",
            running.sandbox.netns, running.ips
        );
        self.event(pod, EventType::Normal, "Started", "Start", note)
            .await;
        self.supervise(&mut running, updates).await;
        let note = format!("Stopping the containers of {}", pod.name_any());
        self.event(pod, EventType::Normal, "Killing", "Stop", note)
            .await;
        self.stop(running).await;
    }

    /// Tells that the pod could not be started: a log line, the pod Pending with each
    /// container waiting (`CreatePodSandboxError`), and a Warning Event.
    async fn start_failed(&self, pod: &Pod, node: &NodeLayout, error: &anyhow::Error) {
        let why = format!("{error:#}");
        tracing::warn!(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default(), node = %node.name,
            error = why.as_str(), "could not start the pod; trying again");
        let _ = self
            .report_waiting(pod, node, "CreatePodSandboxError", &why)
            .await;
        self.event(
            pod,
            EventType::Warning,
            "FailedCreatePodSandBox",
            "Start",
            why,
        )
        .await;
    }

    /// Deletes `pod` (its containers stopped) at once; that it is already gone, or another pod
    /// by now, is no failure.
    async fn remove(&self, pod: &Pod) {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        match api.delete(&name, &removal(pod)).await {
            Ok(_) => tracing::info!(pod = %name, %namespace, "pod removed"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %name, %namespace, error = %e, "could not remove the pod")
            }
        }
    }

    /// Sets up the sandbox and starts the containers.
    async fn start(&self, pod: &Arc<Pod>, node: &NodeLayout) -> anyhow::Result<RunningPod> {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let uid = pod.uid().unwrap_or_default();
        let sandbox = Sandbox {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            netns: pod_netns(&uid),
        };
        let dir = self.parts.state.join("pods").join(&namespace).join(&name);
        let mut running = RunningPod {
            sandbox,
            node: node.clone(),
            dir,
            service_account: None,
            hostname: hostname(pod),
            ips: Vec::new(),
            started_at: k8s_openapi::jiff::Timestamp::now().to_string(),
            containers: Vec::new(),
            exits: mpsc::unbounded_channel(),
            probes: tokio::task::JoinSet::new(),
            cni_added: false,
            grace: grace_period(pod),
        };
        if let Err(e) = self.set_up(pod, &mut running).await {
            self.stop(running).await;
            return Err(e);
        }
        Ok(running)
    }

    async fn set_up(&self, pod: &Arc<Pod>, running: &mut RunningPod) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let sandbox = running.sandbox.clone();
        // The token first, as kubelet mounts a pod's volumes before it creates the sandbox.
        if let Some(projection) =
            serviceaccount::project(&self.client, pod, &running.dir, &self.ca_pem).await?
        {
            running.service_account = Some(projection.dir.clone());
            running.probes.spawn(serviceaccount::keep_fresh(
                self.client.clone(),
                pod.clone(),
                projection,
            ));
        }
        netns::create(&sandbox.netns).await?;
        self.write_resolv_conf(&sandbox).await?;
        running.cni_added = true;
        running.ips = cni::add(&self.parts, &running.node.name, &sandbox).await?;
        tracing::info!(pod = %sandbox.name, namespace = %sandbox.namespace, node = %running.node.name,
            ips = ?running.ips, elapsed_ms = started.elapsed().as_millis(), "sandbox ready (CNI ADD through Multus)");

        write_index_page(&running.dir, &sandbox).await?;
        let services = self.service_variables().await?;
        for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            self.add_container(pod, container, running, &services)
                .await?;
        }
        self.report(pod, running).await
    }

    /// Writes the pod's `resolv.conf` into `/etc/netns/<its namespace>/` (which its processes
    /// see as `/etc`), when the cluster has a DNS server.
    async fn write_resolv_conf(&self, sandbox: &Sandbox) -> anyhow::Result<()> {
        let Some(server) = self.layout.dns_server() else {
            return Ok(());
        };
        let etc = PathBuf::from("/etc/netns").join(&sandbox.netns);
        tokio::fs::create_dir_all(&etc).await?;
        crate::record::note("file", &etc.display().to_string());
        tokio::fs::write(
            etc.join("resolv.conf"),
            resolv_conf(server, &sandbox.namespace),
        )
        .await?;
        Ok(())
    }

    /// Adds `container` to the running pod and starts it; one that cannot be prepared waits
    /// for kubelet's reason, told in a Warning Event.
    async fn add_container(
        &self,
        pod: &Pod,
        container: &ContainerSpec,
        running: &mut RunningPod,
        services: &[(String, String)],
    ) -> anyhow::Result<()> {
        let prepared = self.prepare(pod, container, running, services);
        if let Err((reason, message)) = &prepared {
            let note = format!("container {}: {message}", container.name);
            self.event(pod, EventType::Warning, reason, "Start", note)
                .await;
        }
        let index = running.containers.len();
        running.containers.push(new_container(container, prepared));
        if running.containers[index].argv.is_some() {
            self.launch(running, index)?;
        }
        Ok(())
    }

    /// What kubelet derives for `container` before it runs it: its environment, its program
    /// (command and args expanded against it) and its readiness probe; or why it cannot run
    /// (kubelet's reason and a message).
    fn prepare(
        &self,
        pod: &Pod,
        container: &ContainerSpec,
        running: &RunningPod,
        services: &[(String, String)],
    ) -> Result<Prepared, (&'static str, String)> {
        let addresses = Addresses {
            pod_ips: &running.ips,
            host_ip: IpAddr::V4(running.node.ip),
        };
        let env = env::container_env(pod, container, &addresses, services)
            .map_err(|why| ("CreateContainerConfigError", why))?;
        let expanded = env::expand_command(container, &env);
        let argv = program_for(&expanded, &self.agent, &self.binaries)
            .map_err(|why| ("ImageNotInTable", why))?;
        let readiness = Readiness::of(container).map_err(|why| ("InvalidReadinessProbe", why))?;
        Ok(Prepared {
            argv,
            env,
            readiness,
        })
    }

    /// The `kubernetes` Service's variables (none if it is missing), as kubelet sets them in
    /// every container.
    async fn service_variables(&self) -> anyhow::Result<Vec<(String, String)>> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), "default");
        let service = services
            .get_opt("kubernetes")
            .await
            .context("reading Service default/kubernetes for the containers' environment")?;
        Ok(service
            .as_ref()
            .map(env::service_variables)
            .unwrap_or_default())
    }

    /// Starts container `index`'s process and its readiness probe.
    fn launch(&self, running: &mut RunningPod, index: usize) -> anyhow::Result<()> {
        let logs = self.parts.logs().join("pods");
        std::fs::create_dir_all(&logs)?;
        let process = self.process_for(running, index);
        let container = &mut running.containers[index];
        let Some(argv) = container.argv.clone() else {
            return Ok(());
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(log_name(&running.sandbox, &container.state.name)))?;
        let child = process
            .command(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "starting container {} ({})",
                    container.state.name,
                    argv.join(" ")
                )
            })?;
        container.pid = child.id();
        mark_running(container, k8s_openapi::jiff::Timestamp::now().to_string());
        let (restarts, readiness) = (container.state.restart_count, container.readiness.clone());
        running.watch_exit(index, restarts, child);
        if let Some(readiness) = readiness {
            self.probe_readiness(running, index, restarts, readiness, process);
        }
        Ok(())
    }

    /// How container `index`'s process (and its exec probe) starts: the base environment, then
    /// the container's own.
    fn process_for(&self, running: &RunningPod, index: usize) -> Process {
        Process {
            netns: running.sandbox.netns.clone(),
            agent: self.agent.clone(),
            service_account: running.service_account.clone(),
            dir: running.dir.clone(),
            env: base_env(&running.dir, &running.hostname)
                .into_iter()
                .chain(running.containers[index].env.iter().cloned())
                .collect(),
        }
    }

    /// Probes container `index` (its run `restarts`) after the initial delay and then every
    /// period, sending each result to the worker until the worker stops listening.
    fn probe_readiness(
        &self,
        running: &mut RunningPod,
        index: usize,
        restarts: u32,
        readiness: Readiness,
        process: Process,
    ) {
        let (probes, ip, node) = (
            running.exits.0.clone(),
            running.ips.first().copied(),
            self.nodes.get(&running.node.name).cloned(),
        );
        running.probes.spawn(async move {
            tokio::time::sleep(readiness.initial_delay).await;
            loop {
                let ok = probe_once(&readiness, ip, node.as_ref(), &process).await;
                if probes
                    .send(Exit::Probe {
                        index,
                        restarts,
                        ok,
                    })
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(readiness.period).await;
            }
        });
    }

    /// Follows the pod until it is deleted: probe results, container exits (restarted after
    /// a second, as `restartPolicy: Always` would), status reports, and the pod's own changes
    /// (another writer turning a readiness gate's condition: Ready is written again at once).
    async fn supervise(&self, running: &mut RunningPod, updates: &mut Updates) {
        loop {
            let event = tokio::select! {
                changed = updates.changed() => {
                    if changed.is_err() || !self.follow(running, updates).await {
                        return;
                    }
                    continue;
                }
                event = running.exits.1.recv() => event,
            };
            let Some(event) = event else { return };
            let changed = match event {
                Exit::Probe {
                    index,
                    restarts,
                    ok,
                } => self.on_probe(running, updates, index, restarts, ok).await,
                Exit::Container {
                    index,
                    restarts,
                    status,
                } => {
                    self.on_exit(running, updates, index, restarts, status)
                        .await
                }
            };
            if changed && let Some(pod) = latest(updates) {
                let _ = self.report(&pod, running).await;
            }
        }
    }

    /// Takes in a change of the pod: false once it is gone or terminating; else its status is
    /// written again when the change left it outdated (a readiness gate turned).
    async fn follow(&self, running: &RunningPod, updates: &Updates) -> bool {
        let Some(pod) = latest(updates).filter(|p| p.metadata.deletion_timestamp.is_none()) else {
            return false;
        };
        if status::outdated(&pod, &status::conditions(&pod, true, &running.states())) {
            let _ = self.report(&pod, running).await;
        }
        true
    }

    /// Takes in a readiness probe's result; true when the container's readiness changed (a
    /// Warning Event tells when it became unready).
    async fn on_probe(
        &self,
        running: &mut RunningPod,
        updates: &Updates,
        index: usize,
        restarts: u32,
        ok: bool,
    ) -> bool {
        let container = &mut running.containers[index];
        if !record_probe(container, restarts, ok) {
            return false;
        }
        tracing::info!(pod = %running.sandbox.name, namespace = %running.sandbox.namespace,
                container = %container.state.name, ready = container.state.ready, "readiness changed");
        if let Some(note) = unhealthy_note(container) {
            self.event_latest(updates, EventType::Warning, "Unhealthy", "Probe", note)
                .await;
        }
        true
    }

    /// Restarts container `index` after its run `restarts` exited, with a Warning Event; true
    /// when it did (an earlier run's exit is ignored: that run was already replaced).
    async fn on_exit(
        &self,
        running: &mut RunningPod,
        updates: &Updates,
        index: usize,
        restarts: u32,
        status: Option<std::process::ExitStatus>,
    ) -> bool {
        let Some(delay) = restart_after(&running.containers[index], restarts) else {
            return false;
        };
        let name = &running.containers[index].state.name;
        tracing::warn!(pod = %running.sandbox.name, namespace = %running.sandbox.namespace,
            container = %name, ?status, "container exited; restarting it");
        let note = exit_note(name, status);
        self.event_latest(updates, EventType::Warning, "BackOff", "Restart", note)
            .await;
        tokio::time::sleep(delay).await;
        running.containers[index].state.restart_count += 1;
        if let Err(e) = self.launch(running, index) {
            tracing::warn!(error = format!("{e:#}"), "restart failed");
        }
        true
    }

    /// Stops the containers (TERM, then KILL after the pod's grace period), runs CNI DEL and
    /// removes the namespace and the pod's files.
    async fn stop(&self, mut running: RunningPod) {
        let sandbox = running.sandbox.clone();
        for container in &running.containers {
            if let Some(pid) = container
                .pid
                .and_then(|p| rustix::process::Pid::from_raw(p.cast_signed()))
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let _ = tokio::time::timeout(running.grace, async {
            let live = running
                .containers
                .iter()
                .filter(|c| c.pid.is_some())
                .count();
            let mut exited = 0;
            while exited < live {
                match running.exits.1.recv().await {
                    Some(Exit::Container { .. }) => exited += 1,
                    Some(Exit::Probe { .. }) => {}
                    None => break,
                }
            }
        })
        .await;
        running.probes.abort_all();
        netns::kill_all_in(&sandbox.netns).await;
        if running.cni_added
            && let Err(e) = cni::del(&self.parts, &running.node.name, &sandbox).await
        {
            tracing::warn!(pod = %sandbox.name, namespace = %sandbox.namespace, error = format!("{e:#}"), "CNI DEL failed");
        }
        if let Err(e) = netns::remove(&sandbox.netns).await {
            tracing::warn!(netns = %sandbox.netns, error = format!("{e:#}"), "could not remove the namespace");
        }
        let _ = tokio::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&sandbox.netns)).await;
        let _ = tokio::fs::remove_dir_all(&running.dir).await;
        tracing::info!(pod = %sandbox.name, namespace = %sandbox.namespace, "pod stopped, its address released");
    }

    /// Writes the status of running `pod` (the latest seen: its readiness gates' conditions
    /// decide Ready).
    async fn report(&self, pod: &Pod, running: &RunningPod) -> anyhow::Result<()> {
        let body = status::running(
            pod,
            IpAddr::V4(running.node.ip),
            &running.ips,
            &running.started_at,
            &running.states(),
            &k8s_openapi::jiff::Timestamp::now().to_string(),
        );
        self.patch_status(pod, &body).await
    }

    /// Reports the pod Pending, each container waiting for `reason`.
    async fn report_waiting(
        &self,
        pod: &Pod,
        node: &NodeLayout,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<()> {
        let states: Vec<ContainerState> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| waiting_state(c, reason, message))
            .collect();
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.patch_status(
            pod,
            &status::pending(pod, IpAddr::V4(node.ip), &states, &now),
        )
        .await
    }

    /// Fails `pod` without running it, as kubelet's admission does: a Warning Event and phase
    /// `Failed` with `reason` and "Pod was rejected: <message>".
    async fn reject(&self, pod: &Pod, reason: &str, message: &str) {
        tracing::warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), reason, message, "pod rejected");
        self.event(pod, EventType::Warning, reason, "Admit", message.to_owned())
            .await;
        let body = json!({"status": {"phase": "Failed", "reason": reason,
                                     "message": format!("Pod was rejected: {message}")}});
        if let Err(e) = self.patch_status(pod, &body).await {
            tracing::warn!(pod = %pod.name_any(), error = format!("{e:#}"), "could not report the rejection");
        }
    }

    /// Publishes an Event about `pod` (what `kubectl describe pod` lists); a failure is logged.
    async fn event(&self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.chars().take(1024).collect()),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &pod.object_ref(&())).await {
            tracing::debug!(pod = %pod.name_any(), reason, error = %e, "could not publish an Event");
        }
    }

    /// Publishes an Event about the latest pod seen, if there still is one.
    async fn event_latest(
        &self,
        updates: &Updates,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if let Some(pod) = latest(updates) {
            self.event(&pod, type_, reason, action, note).await;
        }
    }

    /// A strategic merge patch of `pods/status`: conditions merge by type, so other writers'
    /// conditions stay as they are.
    async fn patch_status(&self, pod: &Pod, body: &serde_json::Value) -> anyhow::Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(body),
        )
        .await
        .with_context(|| format!("reporting the status of pod {}", pod.name_any()))?;
        Ok(())
    }

    /// Stops every pod (as on shutdown: their addresses are released).
    pub async fn shut_down(&self) {
        for sender in self.workers().values() {
            sender.send_replace(None);
        }
        let mut tasks = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let _ = tokio::time::timeout(Duration::from_secs(30), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
    }
}

/// The latest pod the worker has seen (`None` once it is gone).
fn latest(updates: &Updates) -> Option<Arc<Pod>> {
    updates.borrow().clone()
}

/// Whether `pod` is still to run: seen, and not terminating.
fn wanted(pod: Option<&Pod>) -> bool {
    pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none())
}

/// Waits until the pod is gone or terminating (or nobody tells about it any more).
async fn wait_until_unwanted(updates: &mut Updates) {
    while wanted(updates.borrow().as_deref()) {
        if updates.changed().await.is_err() {
            break;
        }
    }
}

/// What the worker does with a pod on its node.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Fails it without running it: it does not fit the node.
    Reject,
    /// Runs its containers until it is deleted.
    Run,
    /// Only lets it go: it is terminating, or finished.
    LetGo,
}

/// What to do with `pod` on a node it `fits` or not: a terminating or finished pod is let go,
/// one that does not fit is rejected, and any other runs.
fn plan(pod: &Pod, fits: bool) -> Plan {
    if pod.metadata.deletion_timestamp.is_some() || finished(pod) {
        Plan::LetGo
    } else if fits {
        Plan::Run
    } else {
        Plan::Reject
    }
}

/// Whether `pod` has finished (phase `Succeeded` or `Failed`): it does not run again.
fn finished(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// How long to wait before starting a pod again after its `attempt`th failure: two seconds
/// more each time, up to ten.
fn retry_pause(attempt: u32) -> Duration {
    Duration::from_secs(u64::from(attempt.min(5)) * 2)
}

/// How a stopped pod is deleted: at once, and only if it is still the same pod (its uid).
fn removal(pod: &Pod) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// The pod's `HOSTNAME`: `spec.hostname`, else its name.
fn hostname(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any())
}

/// From TERM to KILL when the pod stops: its `terminationGracePeriodSeconds`, else thirty
/// seconds.
fn grace_period(pod: &Pod) -> Duration {
    Duration::from_secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(30),
    )
}

/// Writes the page nginx's image serves into the pod's directory: the pod's name.
async fn write_index_page(dir: &std::path::Path, sandbox: &Sandbox) -> anyhow::Result<()> {
    tokio::fs::create_dir_all(dir.join("usr/share/nginx/html")).await?;
    tokio::fs::write(
        dir.join("usr/share/nginx/html/index.html"),
        format!("<h1>{}/{}</h1>\n", sandbox.namespace, sandbox.name),
    )
    .await?;
    Ok(())
}

/// `container` not running (yet), waiting for `reason`.
fn waiting_state(container: &ContainerSpec, reason: &str, message: &str) -> ContainerState {
    ContainerState {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        ready: false,
        restart_count: 0,
        state: Run::Waiting {
            reason: reason.to_owned(),
            message: message.to_owned(),
        },
    }
}

/// A container as the worker first holds it: being created, with its program, when it could
/// be `prepared`; else waiting for kubelet's reason, with nothing to run.
fn new_container(
    spec: &ContainerSpec,
    prepared: Result<Prepared, (&'static str, String)>,
) -> Container {
    let (state, argv, env, readiness) = match prepared {
        Ok(Prepared {
            argv,
            env,
            readiness,
        }) => (
            waiting_state(spec, "ContainerCreating", ""),
            Some(argv),
            env,
            readiness,
        ),
        Err((reason, message)) => (
            waiting_state(spec, reason, &message),
            None,
            Vec::new(),
            None,
        ),
    };
    Container {
        state,
        argv,
        env,
        readiness,
        pid: None,
        tally: Tally::default(),
    }
}

/// The file container `name` of the pod logs to: `<namespace>_<pod>_<container>.log`.
fn log_name(sandbox: &Sandbox, name: &str) -> String {
    format!("{}_{}_{name}.log", sandbox.namespace, sandbox.name)
}

/// Marks `container` running since `started_at`: ready at once without a readiness probe,
/// else not until its probe says so (counting from nothing again).
fn mark_running(container: &mut Container, started_at: String) {
    container.state.state = Run::Running { started_at };
    container.state.ready = container.readiness.is_none();
    container.tally = Tally::default();
}

/// Counts probe result `ok` of run `restarts` towards `container`'s readiness (a result of an
/// earlier run counts for nothing); true when its readiness changed.
fn record_probe(container: &mut Container, restarts: u32, ok: bool) -> bool {
    if container.state.restart_count != restarts {
        return false;
    }
    let Some(readiness) = &container.readiness else {
        return false;
    };
    let changed = container.tally.record(ok, readiness);
    container.state.ready = container.tally.ready;
    changed
}

/// The Event note for `container` whose probe made it unready; `None` while it is ready.
fn unhealthy_note(container: &Container) -> Option<String> {
    let readiness = container.readiness.as_ref()?;
    (!container.state.ready).then(|| {
        format!(
            "Readiness probe of container {} failed {} times in a row",
            container.state.name, readiness.failure_threshold
        )
    })
}

/// How long after its run `restarts` exited `container` starts again: [`RESTART_DELAY`];
/// `None` for an earlier run's exit (that run was already replaced).
fn restart_after(container: &Container, restarts: u32) -> Option<Duration> {
    (container.state.restart_count == restarts).then_some(RESTART_DELAY)
}

/// The Event note for container `name` that exited with `status`.
fn exit_note(name: &str, status: Option<std::process::ExitStatus>) -> String {
    let status = status.map_or_else(|| "unknown status".to_owned(), |s| s.to_string());
    format!("Container {name} exited ({status}); restarting it")
}

/// One readiness probe: HTTP and TCP from the node against the pod's IP, exec as in the
/// container. Without the pod's IP or the node's thread, an HTTP or TCP probe fails.
async fn probe_once(
    readiness: &Readiness,
    ip: Option<IpAddr>,
    node: Option<&NetnsRuntime>,
    process: &Process,
) -> bool {
    match (&readiness.check, ip, node) {
        (Check::Http { port, path }, Some(ip), Some(node)) => {
            let (port, path, timeout) = (*port, path.clone(), readiness.timeout);
            node.run(probe::http(ip, port, path, timeout))
                .await
                .unwrap_or(false)
        }
        (Check::Tcp { port }, Some(ip), Some(node)) => node
            .run(probe::tcp(ip, *port, readiness.timeout))
            .await
            .unwrap_or(false),
        (Check::Exec { command }, _, _) => exec_probe(process, command, readiness.timeout).await,
        _ => false,
    }
}

/// A readiness probe that runs a command as in the container (its namespace, token,
/// directory and environment).
async fn exec_probe(process: &Process, command: &[String], timeout: Duration) -> bool {
    if command.is_empty() {
        return false;
    }
    let run = process
        .command(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    matches!(tokio::time::timeout(timeout, run).await, Ok(Ok(s)) if s.success())
}

/// What every container's environment starts with, as a container runtime gives it (the
/// agent's own variables are not passed on): `PATH` (the machine's programs are the images'),
/// `HOME`, `HOSTNAME`, and `POD_DIR` (the pod's directory, its stand-in filesystem).
fn base_env(dir: &std::path::Path, hostname: &str) -> Vec<(String, String)> {
    let path = std::env::var("PATH")
        .unwrap_or_else(|_| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), "/root".into()),
        ("HOSTNAME".into(), hostname.to_owned()),
        ("POD_DIR".into(), dir.display().to_string()),
    ]
}

/// How a container's processes (and its exec probes) start: in the pod's network namespace,
/// through `pod-agent exec-container` when the pod has a token (mounted at the standard
/// path), in the pod's directory, with exactly the container's environment.
#[derive(Clone)]
struct Process {
    netns: String,
    agent: PathBuf,
    service_account: Option<PathBuf>,
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Process {
    fn command(&self, argv: &[String]) -> tokio::process::Command {
        let mut command = match &self.service_account {
            Some(dir) => {
                let mut command = netns::command_in(&self.netns, &self.agent.display().to_string());
                command
                    .arg("exec-container")
                    .arg("--service-account")
                    .arg(dir)
                    .arg("--")
                    .args(argv);
                command
            }
            None => {
                let mut command =
                    netns::command_in(&self.netns, argv.first().map_or("", String::as_str));
                command.args(argv.iter().skip(1));
                command
            }
        };
        command
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir);
        command
    }
}

/// A container ready to run: its program, environment (`env`) and readiness probe.
struct Prepared {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    readiness: Option<Readiness>,
}

struct Container {
    state: ContainerState,
    argv: Option<Vec<String>>,
    /// Its environment (`env`), without the base one.
    env: Vec<(String, String)>,
    readiness: Option<Readiness>,
    pid: Option<u32>,
    tally: Tally,
}

/// What the worker hears from a pod's processes and probes; `restarts` tells which run of the
/// container it is about.
enum Exit {
    Container {
        index: usize,
        restarts: u32,
        status: Option<std::process::ExitStatus>,
    },
    Probe {
        index: usize,
        restarts: u32,
        ok: bool,
    },
}

struct RunningPod {
    sandbox: Sandbox,
    node: NodeLayout,
    /// The pod's files (the stand-in for its containers' filesystem).
    dir: PathBuf,
    /// Its ServiceAccount token's directory, when it has one.
    service_account: Option<PathBuf>,
    /// `spec.hostname`, else the pod's name (`HOSTNAME`).
    hostname: String,
    ips: Vec<IpAddr>,
    started_at: String,
    containers: Vec<Container>,
    exits: (mpsc::UnboundedSender<Exit>, mpsc::UnboundedReceiver<Exit>),
    probes: tokio::task::JoinSet<()>,
    cni_added: bool,
    /// From TERM to KILL: the pod's `terminationGracePeriodSeconds`.
    grace: Duration,
}

impl RunningPod {
    fn states(&self) -> Vec<ContainerState> {
        self.containers.iter().map(|c| c.state.clone()).collect()
    }

    /// Tells the worker when container `index`'s run `restarts` ends: its `child` exits.
    fn watch_exit(&mut self, index: usize, restarts: u32, mut child: tokio::process::Child) {
        let exits = self.exits.0.clone();
        self.probes.spawn(async move {
            let status = child.wait().await;
            let _ = exits.send(Exit::Container {
                index,
                restarts,
                status: status.ok(),
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn web() -> ContainerSpec {
        serde_json::from_value(json!({"name": "web", "image": "nginx:1.27"})).unwrap()
    }

    fn readiness(failure_threshold: u32) -> Readiness {
        Readiness {
            check: Check::Tcp { port: 80 },
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold,
        }
    }

    /// Container `web`, prepared with `readiness` and started.
    fn running(readiness: Option<Readiness>) -> Container {
        let prepared = Prepared {
            argv: vec!["nginx".into()],
            env: Vec::new(),
            readiness,
        };
        let mut container = new_container(&web(), Ok(prepared));
        mark_running(&mut container, "2025-01-01T00:00:00Z".into());
        container
    }

    #[test]
    fn a_pod_runs_on_a_node_it_fits_and_is_rejected_on_one_it_does_not() {
        let pending = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}));
        assert_eq!(plan(&pending, true), Plan::Run);
        assert_eq!(plan(&pending, false), Plan::Reject);
    }

    #[test]
    fn a_terminating_or_finished_pod_is_only_let_go() {
        let terminating = pod(json!({"metadata": {"name": "p",
            "deletionTimestamp": "2025-01-01T00:00:00Z"}}));
        assert_eq!(plan(&terminating, true), Plan::LetGo);
        assert_eq!(plan(&terminating, false), Plan::LetGo);
        for phase in ["Succeeded", "Failed"] {
            let done = pod(json!({"metadata": {"name": "p"}, "status": {"phase": phase}}));
            assert_eq!(plan(&done, false), Plan::LetGo, "{phase}");
        }
        let running = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}}));
        assert_eq!(plan(&running, true), Plan::Run);
    }

    #[test]
    fn a_pod_that_failed_to_start_is_tried_again_two_seconds_later_per_attempt_up_to_ten() {
        let pauses: Vec<u64> = [1, 2, 3, 5, 6, 40]
            .map(|attempt| retry_pause(attempt).as_secs())
            .to_vec();
        assert_eq!(pauses, [2, 4, 6, 10, 10, 10]);
    }

    #[test]
    fn a_stopped_pod_is_deleted_at_once_and_only_if_it_is_still_the_same_pod() {
        let params = removal(&pod(json!({"metadata": {"name": "p", "uid": "uid-1"}})));
        assert_eq!(params.grace_period_seconds, Some(0));
        let preconditions = params.preconditions.unwrap();
        assert_eq!(preconditions.uid.as_deref(), Some("uid-1"));
        assert_eq!(preconditions.resource_version, None);
    }

    #[test]
    fn the_grace_period_and_hostname_come_from_the_spec_with_kubelets_defaults() {
        let plain = pod(json!({"metadata": {"name": "web-0"}, "spec": {"containers": []}}));
        assert_eq!(grace_period(&plain), Duration::from_secs(30));
        assert_eq!(hostname(&plain), "web-0");
        let own = pod(
            json!({"metadata": {"name": "web-0"}, "spec": {"containers": [],
            "terminationGracePeriodSeconds": 5, "hostname": "front"}}),
        );
        assert_eq!(grace_period(&own), Duration::from_secs(5));
        assert_eq!(hostname(&own), "front");
        let negative = pod(
            json!({"metadata": {"name": "web-0"}, "spec": {"containers": [],
            "terminationGracePeriodSeconds": -1}}),
        );
        assert_eq!(grace_period(&negative), Duration::from_secs(30));
    }

    #[test]
    fn a_container_is_created_with_its_program_or_waits_for_why_it_cannot_run() {
        let prepared = Prepared {
            argv: vec!["nginx".into(), "-g".into()],
            env: vec![("A".into(), "1".into())],
            readiness: Some(readiness(3)),
        };
        let creating = new_container(&web(), Ok(prepared));
        assert_eq!(
            creating.state,
            waiting_state(&web(), "ContainerCreating", "")
        );
        assert_eq!(creating.state.image, "nginx:1.27");
        assert_eq!(creating.argv, Some(vec!["nginx".into(), "-g".into()]));
        assert_eq!(creating.env, [("A".to_owned(), "1".to_owned())]);
        assert_eq!(creating.readiness, Some(readiness(3)));

        let unknown = new_container(&web(), Err(("ImageNotInTable", "no such image".into())));
        assert_eq!(
            unknown.state.state,
            Run::Waiting {
                reason: "ImageNotInTable".into(),
                message: "no such image".into()
            }
        );
        assert!(!unknown.state.ready);
        assert_eq!((unknown.argv, unknown.readiness), (None, None));
    }

    #[test]
    fn a_running_container_is_ready_at_once_only_without_a_readiness_probe() {
        let plain = running(None);
        assert!(plain.state.ready);
        assert_eq!(
            plain.state.state,
            Run::Running {
                started_at: "2025-01-01T00:00:00Z".into()
            }
        );
        let mut probed = running(Some(readiness(3)));
        assert!(!probed.state.ready);
        assert!(record_probe(&mut probed, 0, true));
        assert!(probed.tally.ready);
        mark_running(&mut probed, "2025-01-01T00:01:00Z".into());
        assert!(!probed.state.ready, "a restarted container is probed again");
        assert!(!probed.tally.ready);
    }

    #[test]
    fn readiness_turns_at_the_probes_thresholds_and_unreadiness_is_told() {
        let mut container = running(Some(readiness(2)));
        assert_eq!(
            unhealthy_note(&container),
            Some("Readiness probe of container web failed 2 times in a row".to_owned())
        );
        assert!(record_probe(&mut container, 0, true));
        assert!(container.state.ready);
        assert_eq!(unhealthy_note(&container), None);
        assert!(
            !record_probe(&mut container, 0, false),
            "one failure is not enough"
        );
        assert!(container.state.ready);
        assert!(record_probe(&mut container, 0, false));
        assert!(!container.state.ready);
        assert_eq!(
            unhealthy_note(&container),
            Some("Readiness probe of container web failed 2 times in a row".to_owned())
        );
    }

    #[test]
    fn a_container_without_a_readiness_probe_ignores_probe_results_and_is_never_unhealthy() {
        let mut container = running(None);
        assert!(!record_probe(&mut container, 0, false));
        assert!(container.state.ready);
        assert_eq!(unhealthy_note(&container), None);
    }

    #[test]
    fn a_container_that_exits_is_restarted_after_its_backoff() {
        let container = running(None);
        assert_eq!(restart_after(&container, 0), Some(Duration::from_secs(1)));
        assert_eq!(
            exit_note("web", Some(std::process::ExitStatus::from_raw(1 << 8))),
            "Container web exited (exit status: 1); restarting it"
        );
        assert_eq!(
            exit_note("web", None),
            "Container web exited (unknown status); restarting it"
        );
    }

    #[test]
    fn what_an_earlier_run_of_a_container_reports_is_ignored() {
        let mut container = running(Some(readiness(1)));
        container.state.restart_count = 2;
        assert_eq!(restart_after(&container, 1), None);
        assert!(!record_probe(&mut container, 1, true));
        assert!(!container.state.ready);
        assert!(record_probe(&mut container, 2, true));
        assert!(container.state.ready);
    }

    #[test]
    fn each_container_logs_to_a_file_named_after_its_namespace_pod_and_itself() {
        let sandbox = Sandbox {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: "uid-1".into(),
            netns: "pod-uid-1".into(),
        };
        assert_eq!(log_name(&sandbox, "nginx"), "shop_web-0_nginx.log");
    }
}
