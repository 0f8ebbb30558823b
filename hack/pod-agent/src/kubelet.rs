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
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource as _, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::cni::{self, Sandbox};
use crate::components::Parts;
use crate::containers::program_for;
use crate::env::{self, Addresses};
use crate::layout::{Layout, NodeLayout, pod_netns, resolv_conf};
use crate::netns::{self, NetnsRuntime};
use crate::nodes::{self, LOCAL_LABEL};
use crate::probe::{self, Check, Readiness, Tally};
use crate::scheduling;
use crate::serviceaccount;
use crate::status::{self, ContainerState, Run};
use node_sim::SIMULATED_NAMESPACE_LABEL;

pub struct Kubelet {
    client: Client,
    layout: Layout,
    parts: Parts,
    nodes: HashMap<String, NetnsRuntime>,
    /// This program (`serve-http` and `exec-container` are commands of it).
    agent: PathBuf,
    /// The controller binary, which the project's image runs (`run --controller`).
    controller: Option<PathBuf>,
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
        controller: Option<PathBuf>,
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
            controller,
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
    async fn work(
        self: &Arc<Self>,
        mut updates: watch::Receiver<Option<Arc<Pod>>>,
        nodes: &Store<Node>,
    ) {
        let Some(pod) = updates.borrow().clone() else {
            return;
        };
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| self.layout.node(n))
            .cloned()
        else {
            return;
        };
        let wanted = |p: &Option<Arc<Pod>>| {
            p.as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        };
        let finished = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        // Kubelet's admission: a pod bound (or created bound) to a node its node selector or
        // affinity does not allow is rejected, and stays Failed until deleted.
        let labels = nodes
            .get(&ObjectRef::new(&node.name))
            .map_or_else(|| nodes::labels(&node), |n| n.labels().clone());
        if pod.metadata.deletion_timestamp.is_none()
            && !finished
            && !scheduling::fits(&pod, &node.name, &labels)
        {
            self.reject(&pod, "NodeAffinity", scheduling::NODE_AFFINITY_FAILED)
                .await;
            while wanted(&updates.borrow()) {
                if updates.changed().await.is_err() {
                    break;
                }
            }
        } else if pod.metadata.deletion_timestamp.is_none() && !finished {
            let mut attempt = 0_u32;
            loop {
                match self.start(&pod, &node).await {
                    Ok(mut running) => {
                        let note = format!(
                            "Started the containers in network namespace {} (IPs {:?}) after CNI ADD through Multus",
                            running.sandbox.netns, running.ips
                        );
                        self.event(&pod, EventType::Normal, "Started", "Start", note)
                            .await;
                        self.supervise(&mut running, &mut updates).await;
                        let note = format!("Stopping the containers of {name}");
                        self.event(&pod, EventType::Normal, "Killing", "Stop", note)
                            .await;
                        self.stop(running).await;
                        break;
                    }
                    Err(e) => {
                        attempt += 1;
                        tracing::warn!(pod = %name, %namespace, node = %node.name, error = format!("{e:#}"), "could not start the pod; trying again");
                        let why = format!("{e:#}");
                        let _ = self
                            .report_waiting(&pod, &node, "CreatePodSandboxError", &why)
                            .await;
                        self.event(
                            &pod,
                            EventType::Warning,
                            "FailedCreatePodSandBox",
                            "Start",
                            why,
                        )
                        .await;
                        let pause = Duration::from_secs(u64::from(attempt.min(5)) * 2);
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            changed = updates.changed() => if changed.is_err() { break },
                        }
                        if !wanted(&updates.borrow()) {
                            break;
                        }
                    }
                }
            }
        }
        // Gone or terminating: let it go, as kubelet does once its containers stopped.
        let last = updates.borrow().clone();
        if let Some(pod) = last {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api.delete(&name, &params).await {
                Ok(_) => tracing::info!(pod = %name, %namespace, "pod removed"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => {
                    tracing::warn!(pod = %name, %namespace, error = %e, "could not remove the pod")
                }
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
            hostname: pod
                .spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .unwrap_or_else(|| name.clone()),
            ips: Vec::new(),
            started_at: k8s_openapi::jiff::Timestamp::now().to_string(),
            containers: Vec::new(),
            exits: mpsc::unbounded_channel(),
            probes: tokio::task::JoinSet::new(),
            cni_added: false,
            grace: Duration::from_secs(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(30),
            ),
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
        if let Some(server) = self.layout.dns_server() {
            let etc = PathBuf::from("/etc/netns").join(&sandbox.netns);
            tokio::fs::create_dir_all(&etc).await?;
            crate::record::note("file", &etc.display().to_string());
            tokio::fs::write(
                etc.join("resolv.conf"),
                resolv_conf(server, &sandbox.namespace),
            )
            .await?;
        }
        running.cni_added = true;
        running.ips = cni::add(&self.parts, &running.node.name, &sandbox).await?;
        tracing::info!(pod = %sandbox.name, namespace = %sandbox.namespace, node = %running.node.name,
            ips = ?running.ips, elapsed_ms = started.elapsed().as_millis(), "sandbox ready (CNI ADD through Multus)");

        tokio::fs::create_dir_all(running.dir.join("usr/share/nginx/html")).await?;
        tokio::fs::write(
            running.dir.join("usr/share/nginx/html/index.html"),
            format!("<h1>{}/{}</h1>\n", sandbox.namespace, sandbox.name),
        )
        .await?;
        let services = self.service_variables().await?;
        for (index, container) in pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .enumerate()
        {
            let mut state = ContainerState {
                name: container.name.clone(),
                image: container.image.clone().unwrap_or_default(),
                ready: false,
                restart_count: 0,
                state: Run::Waiting {
                    reason: "ContainerCreating".into(),
                    message: String::new(),
                },
            };
            let (argv, env, readiness) = match self.prepare(pod, container, running, &services) {
                Ok(Prepared {
                    argv,
                    env,
                    readiness,
                }) => (Some(argv), env, readiness),
                Err((reason, message)) => {
                    let note = format!("container {}: {message}", container.name);
                    self.event(pod, EventType::Warning, reason, "Start", note)
                        .await;
                    state.state = Run::Waiting {
                        reason: reason.into(),
                        message,
                    };
                    (None, Vec::new(), None)
                }
            };
            running.containers.push(Container {
                state,
                argv,
                env,
                readiness,
                pid: None,
                tally: Tally::default(),
            });
            if running.containers[index].argv.is_some() {
                self.launch(running, index)?;
            }
        }
        self.report(pod, running).await
    }

    /// What kubelet derives for `container` before it runs it: its environment, its program
    /// (command and args expanded against it) and its readiness probe; or why it cannot run
    /// (kubelet's reason and a message).
    fn prepare(
        &self,
        pod: &Pod,
        container: &k8s_openapi::api::core::v1::Container,
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
        let argv = program_for(&expanded, &self.agent, self.controller.as_deref())
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
        let process = Process {
            netns: running.sandbox.netns.clone(),
            agent: self.agent.clone(),
            service_account: running.service_account.clone(),
            dir: running.dir.clone(),
            env: base_env(&running.dir, &running.hostname)
                .into_iter()
                .chain(running.containers[index].env.iter().cloned())
                .collect(),
        };
        let container = &mut running.containers[index];
        let Some(argv) = container.argv.clone() else {
            return Ok(());
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!(
                "{}_{}_{}.log",
                running.sandbox.namespace, running.sandbox.name, container.state.name
            )))?;
        let mut child = process
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
        container.state.state = Run::Running {
            started_at: k8s_openapi::jiff::Timestamp::now().to_string(),
        };
        container.state.ready = container.readiness.is_none();
        container.tally = Tally::default();
        let exits = running.exits.0.clone();
        let restarts = container.state.restart_count;
        running.probes.spawn(async move {
            let status = child.wait().await;
            let _ = exits.send(Exit::Container {
                index,
                restarts,
                status: status.ok(),
            });
        });
        if let Some(readiness) = container.readiness.clone() {
            let (probes, ip, node) = (
                running.exits.0.clone(),
                running.ips.first().copied(),
                self.nodes.get(&running.node.name).cloned(),
            );
            running.probes.spawn(async move {
                tokio::time::sleep(readiness.initial_delay).await;
                loop {
                    let ok = match (&readiness.check, ip, &node) {
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
                        (Check::Exec { command }, _, _) => {
                            exec_probe(&process, command, readiness.timeout).await
                        }
                        _ => false,
                    };
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
        Ok(())
    }

    /// Follows the pod until it is deleted: probe results, container exits (restarted after
    /// a second, as `restartPolicy: Always` would), status reports, and the pod's own changes
    /// (another writer turning a readiness gate's condition: Ready is written again at once).
    async fn supervise(
        &self,
        running: &mut RunningPod,
        updates: &mut watch::Receiver<Option<Arc<Pod>>>,
    ) {
        loop {
            let event = tokio::select! {
                changed = updates.changed() => {
                    let pod = updates.borrow().clone();
                    let Some(pod) = pod.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
                        return;
                    };
                    if changed.is_err() {
                        return;
                    }
                    if status::outdated(&pod, &status::conditions(&pod, true, &running.states())) {
                        let _ = self.report(&pod, running).await;
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
                } => {
                    let container = &mut running.containers[index];
                    if container.state.restart_count != restarts {
                        false
                    } else if let Some(readiness) = &container.readiness {
                        let changed = container.tally.record(ok, readiness);
                        container.state.ready = container.tally.ready;
                        if changed {
                            tracing::info!(pod = %running.sandbox.name, namespace = %running.sandbox.namespace,
                                container = %container.state.name, ready = container.state.ready, "readiness changed");
                        }
                        if changed && !container.state.ready {
                            let note = format!(
                                "Readiness probe of container {} failed {} times in a row",
                                container.state.name, readiness.failure_threshold
                            );
                            let pod = updates.borrow().clone();
                            if let Some(pod) = pod {
                                self.event(&pod, EventType::Warning, "Unhealthy", "Probe", note)
                                    .await;
                            }
                        }
                        changed
                    } else {
                        false
                    }
                }
                Exit::Container {
                    index,
                    restarts,
                    status,
                } => {
                    if running.containers[index].state.restart_count != restarts {
                        continue;
                    }
                    tracing::warn!(pod = %running.sandbox.name, namespace = %running.sandbox.namespace,
                        container = %running.containers[index].state.name, ?status, "container exited; restarting it");
                    let note = format!(
                        "Container {} exited ({}); restarting it",
                        running.containers[index].state.name,
                        status.map_or_else(|| "unknown status".to_owned(), |s| s.to_string())
                    );
                    let pod = updates.borrow().clone();
                    if let Some(pod) = pod {
                        self.event(&pod, EventType::Warning, "BackOff", "Restart", note)
                            .await;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    running.containers[index].state.restart_count += 1;
                    if let Err(e) = self.launch(running, index) {
                        tracing::warn!(error = format!("{e:#}"), "restart failed");
                    }
                    true
                }
            };
            let pod = updates.borrow().clone();
            if changed && let Some(pod) = pod {
                let _ = self.report(&pod, running).await;
            }
        }
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
            .map(|c| ContainerState {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                ready: false,
                restart_count: 0,
                state: Run::Waiting {
                    reason: reason.to_owned(),
                    message: message.to_owned(),
                },
            })
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
}
