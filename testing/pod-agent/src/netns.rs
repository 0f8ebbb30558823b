//! Network namespaces: `ip` for creating and wiring them, and [`NetnsRuntime`] for opening
//! sockets inside one (a thread that entered the namespace runs a small tokio runtime; a
//! socket belongs to the namespace it was created in, wherever it is used afterwards).

use std::future::Future;

use anyhow::{Context as _, bail};
use tokio::process::Command;

/// Runs `ip <args>`; the error names the command and what `ip` said.
pub async fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .await
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Like [`ip`], inside network namespace `netns`.
pub async fn ip_in(netns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["-n", netns];
    all.extend_from_slice(args);
    ip(&all).await
}

/// The network namespaces (`ip netns list`) whose names start with `prefix`.
pub async fn list(prefix: &str) -> anyhow::Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .await
        .context("running ip netns list")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect())
}

/// Creates network namespace `name` with its loopback up; an existing one is replaced.
pub async fn create(name: &str) -> anyhow::Result<()> {
    if list(name).await?.iter().any(|n| n == name) {
        remove(name).await?;
    }
    ip(&["netns", "add", name]).await?;
    crate::record::note("netns", name);
    ip_in(name, &["link", "set", "lo", "up"]).await
}

/// Kills every process in namespace `name`, then removes it. Missing is fine.
pub async fn remove(name: &str) -> anyhow::Result<()> {
    if !list(name).await?.iter().any(|n| n == name) {
        return Ok(());
    }
    kill_all_in(name).await;
    ip(&["netns", "delete", name]).await
}

/// SIGKILLs the processes whose network namespace is `name` (`ip netns pids`).
pub async fn kill_all_in(name: &str) {
    let Ok(out) = Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .await
    else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Sets a sysctl inside namespace `netns` (`/proc/sys` there is the namespace's own).
pub async fn sysctl(netns: &str, key: &str, value: &str) -> anyhow::Result<()> {
    let setting = format!("{key}={value}");
    ip(&["netns", "exec", netns, "sysctl", "-qw", &setting]).await
}

/// A command run inside network namespace `netns` (through `ip netns exec`, which also puts
/// the files of `/etc/netns/<netns>/` over `/etc`: a pod's `resolv.conf`).
pub fn command_in(netns: &str, program: &str) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", netns, program]);
    command
}

/// A thread inside a network namespace, running futures there.
#[derive(Clone)]
pub struct NetnsRuntime {
    handle: tokio::runtime::Handle,
    name: String,
}

impl NetnsRuntime {
    /// Starts the thread for namespace `name` (which must exist). It lives as long as the
    /// process.
    pub fn start(name: &str) -> anyhow::Result<Self> {
        let path = format!("/run/netns/{name}");
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                use std::os::fd::AsFd as _;
                let runtime = rustix::thread::move_into_link_name_space(
                    file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(anyhow::Error::from)
                .and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(anyhow::Error::from)
                });
                match runtime {
                    Ok(runtime) => {
                        let _ = tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(std::future::pending::<()>());
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .context("starting a thread")?;
        let handle = rx
            .recv()
            .context("the namespace thread ended")?
            .with_context(|| format!("entering network namespace {name}"))?;
        Ok(Self {
            handle,
            name: name.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `future` inside the namespace: sockets it opens are the namespace's.
    pub async fn run<F>(&self, future: F) -> anyhow::Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(future)
            .await
            .with_context(|| format!("a task in network namespace {}", self.name))
    }
}
