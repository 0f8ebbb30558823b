//! `exec-container`: starts a container's program with its ServiceAccount directory at the
//! standard path, `/var/run/secrets/kubernetes.io/serviceaccount`, as a container sees its
//! projected token.
//!
//! The agent runs it as `ip netns exec <pod netns> pod-agent exec-container --service-account
//! <dir> -- <argv>`: `ip netns exec` has already given the process a mount namespace of its own
//! whose mounts do not propagate back (it makes `/` a recursive slave). In that namespace only,
//! a tmpfs goes over `/run` (`/var/run` links to it on Debian; a container's `/run` is its
//! image's, empty, anyway), the directories are made in it, `<dir>` is bind-mounted read-only
//! at the standard path, and the program replaces this process. The machine's own mount table
//! and `/run` never change, and the mounts end with the container's last process. Without
//! `--service-account` it only execs the program.
//!
//! It refuses to mount anything when its mount namespace is its parent's (run by hand, outside
//! `ip netns exec`): the mounts would then be the machine's.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::serviceaccount::MOUNT_PATH;

/// Mounts `service_account` (if any) and execs `argv`; returns only on failure.
pub fn exec_container(service_account: Option<&Path>, argv: &[String]) -> anyhow::Error {
    let Some((program, args)) = argv.split_first() else {
        return anyhow::anyhow!("exec-container: no program given (after --)");
    };
    if let Some(dir) = service_account
        && let Err(e) = mount_service_account(dir)
    {
        return e.context(format!(
            "exec-container: mounting {} at {MOUNT_PATH}",
            dir.display()
        ));
    }
    let error = std::process::Command::new(program).args(args).exec();
    anyhow::Error::new(error).context(format!("exec-container: running {program}"))
}

fn mount_namespace(pid: &str) -> anyhow::Result<PathBuf> {
    let link = format!("/proc/{pid}/ns/mnt");
    std::fs::read_link(&link).with_context(|| format!("reading {link}"))
}

fn mount_service_account(dir: &Path) -> anyhow::Result<()> {
    let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get());
    let (own, parents) = (
        mount_namespace("self")?,
        mount_namespace(&parent.to_string())?,
    );
    if own == parents {
        bail!(
            "this process shares its parent's mount namespace ({}), so its mounts would be the machine's; \
             run it as `ip netns exec <netns> pod-agent exec-container …`, which gives it one of its own",
            own.display()
        );
    }
    // As `ip netns exec` left it, made sure of: nothing mounted here propagates out.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
    )
    .context("making / a recursive slave")?;
    // Opened before /run is covered, wherever the directory is.
    let source = rustix::fs::open(
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .with_context(|| format!("opening {}", dir.display()))?;
    let run = std::fs::canonicalize("/var/run").context("resolving /var/run")?;
    rustix::mount::mount(
        "tmpfs",
        &run,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        c"mode=755",
    )
    .with_context(|| format!("mounting a tmpfs over {}", run.display()))?;
    let target = run.join(
        Path::new(MOUNT_PATH)
            .strip_prefix("/var/run")
            .context("the mount path is under /var/run")?,
    );
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let from = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&source));
    rustix::mount::mount_bind(&from, &target)
        .with_context(|| format!("bind-mounting {} at {}", dir.display(), target.display()))?;
    rustix::mount::mount_remount(
        &target,
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .with_context(|| format!("making {} read-only", target.display()))?;
    Ok(())
}
