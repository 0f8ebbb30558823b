//! The kubelet part: binds pending pods to the local nodes (there is no scheduler), and for
//! each pod on them runs a worker that sets up its sandbox (network namespace, CNI through
//! Multus, `resolv.conf`), runs its containers as processes, probes their readiness, reports
//! the status, and on deletion stops the processes, runs CNI DEL, removes the namespace and
//! lets the pod go.
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
use k8s_openapi::api::core::v1::{Namespace, Pod};
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
use crate::layout::{Layout, NodeLayout, pod_netns, resolv_conf};
use crate::netns::{self, NetnsRuntime};
use crate::probe::{self, Check, Readiness, Tally};
use crate::status::{self, ContainerState, Run};
use node_sim::SIMULATED_NAMESPACE_LABEL;

pub struct Kubelet {
    client: Client,
    layout: Layout,
    parts: Parts,
    nodes: HashMap<String, NetnsRuntime>,
    /// This program (`serve-http` is one of its commands).
    agent: PathBuf,
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
        let mut pods = watcher(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed();
        while let Some(event) = pods.try_next().await? {
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    self.observe(&namespaces, Arc::new(pod));
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

    fn observe(self: &Arc<Self>, namespaces: &Store<Namespace>, pod: Arc<Pod>) {
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
                if !simulated && default_scheduler && pod.metadata.deletion_timestamp.is_none() {
                    let this = self.clone();
                    self.spawn(async move { this.bind(&pod).await });
                }
            }
            Some(node) if self.layout.node(&node).is_some() => {
                let mut workers = self.workers();
                if let Some(sender) = workers.get(&uid) {
                    sender.send_replace(Some(pod));
                } else {
                    let (sender, receiver) = watch::channel(Some(pod));
                    workers.insert(uid.clone(), sender);
                    let this = self.clone();
                    self.spawn(async move {
                        this.work(receiver).await;
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

    /// Plays scheduler: the local nodes in turn.
    async fn bind(&self, pod: &Pod) {
        let index = self.next_node.fetch_add(1, Ordering::Relaxed) % self.layout.nodes.len().max(1);
        let Some(node) = self.layout.nodes.get(index) else {
            return;
        };
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
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
    async fn work(self: &Arc<Self>, mut updates: watch::Receiver<Option<Arc<Pod>>>) {
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
        if pod.metadata.deletion_timestamp.is_none() && !finished {
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
    async fn start(&self, pod: &Pod, node: &NodeLayout) -> anyhow::Result<RunningPod> {
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

    async fn set_up(&self, pod: &Pod, running: &mut RunningPod) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let sandbox = running.sandbox.clone();
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
        for (index, container) in pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .enumerate()
        {
            let readiness = Readiness::of(container);
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
            let argv = match (program_for(container, &self.agent), &readiness) {
                (Ok(argv), Ok(_)) => Some(argv),
                (Err(why), _) => {
                    state.state = Run::Waiting {
                        reason: "ImageNotInTable".into(),
                        message: why,
                    };
                    None
                }
                (_, Err(why)) => {
                    state.state = Run::Waiting {
                        reason: "InvalidReadinessProbe".into(),
                        message: why.clone(),
                    };
                    None
                }
            };
            let readiness = readiness.ok().flatten();
            if let Run::Waiting { reason, message } = &state.state
                && argv.is_none()
            {
                let note = format!("container {}: {message}", container.name);
                self.event(pod, EventType::Warning, reason, "Start", note)
                    .await;
            }
            running.containers.push(Container {
                state,
                argv,
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

    /// Starts container `index`'s process and its readiness probe.
    fn launch(&self, running: &mut RunningPod, index: usize) -> anyhow::Result<()> {
        let logs = self.parts.logs().join("pods");
        std::fs::create_dir_all(&logs)?;
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
        let mut child = netns::command_in(&running.sandbox.netns, &argv[0])
            .args(&argv[1..])
            .current_dir(&running.dir)
            .env("POD_DIR", &running.dir)
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
            let (probes, ip, node, netns) = (
                running.exits.0.clone(),
                running.ips.first().copied(),
                self.nodes.get(&running.node.name).cloned(),
                running.sandbox.netns.clone(),
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
                            exec_probe(&netns, command, readiness.timeout).await
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
    /// a second, as `restartPolicy: Always` would), status reports.
    async fn supervise(
        &self,
        running: &mut RunningPod,
        updates: &mut watch::Receiver<Option<Arc<Pod>>>,
    ) {
        loop {
            let event = tokio::select! {
                changed = updates.changed() => {
                    let wanted = updates.borrow().as_ref().is_some_and(|p| p.metadata.deletion_timestamp.is_none());
                    if changed.is_err() || !wanted {
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

    async fn report(&self, pod: &Pod, running: &RunningPod) -> anyhow::Result<()> {
        let states: Vec<ContainerState> =
            running.containers.iter().map(|c| c.state.clone()).collect();
        let body = status::running(
            IpAddr::V4(running.node.ip),
            &running.ips,
            &running.started_at,
            &states,
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
        self.patch_status(pod, &status::pending(IpAddr::V4(node.ip), &states))
            .await
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

    async fn patch_status(&self, pod: &Pod, body: &serde_json::Value) -> anyhow::Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
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

/// A readiness probe that runs a command in the pod's namespace.
async fn exec_probe(netns: &str, command: &[String], timeout: Duration) -> bool {
    let Some((program, args)) = command.split_first() else {
        return false;
    };
    let run = netns::command_in(netns, program)
        .args(args)
        .kill_on_drop(true)
        .status();
    matches!(tokio::time::timeout(timeout, run).await, Ok(Ok(s)) if s.success())
}

struct Container {
    state: ContainerState,
    argv: Option<Vec<String>>,
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
    ips: Vec<IpAddr>,
    started_at: String,
    containers: Vec<Container>,
    exits: (mpsc::UnboundedSender<Exit>, mpsc::UnboundedReceiver<Exit>),
    probes: tokio::task::JoinSet<()>,
    cni_added: bool,
    /// From TERM to KILL: the pod's `terminationGracePeriodSeconds`.
    grace: Duration,
}
