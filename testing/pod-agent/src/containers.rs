//! Containers as local programs: there is no image to pull, so an image stands for a program
//! of this machine, by a short table (`program_for`):
//!
//! | image                      | runs                                                          |
//! |----------------------------|---------------------------------------------------------------|
//! | `…/nad-service-controller` (last path segment exactly that; any registry, tag or digest) | the controller binary given to `run --controller`, as the image's `ENTRYPOINT`: `args` follow it (without `command` and `args`, the image's `CMD`, `run`); a `command` replaces it, a first element naming `nad-service-controller` (with or without a path) being the binary |
//! | `…/nad-network-prober` (alike) | the prober binary given to `run --prober`, as that image's `ENTRYPOINT` (it has no `CMD`), with `command` and `args` as above |
//! | `…nginx…` (any registry, tag) | `pod-agent serve-http`: HTTP 200 on every TCP container port, serving `<pod dir>/usr/share/nginx/html` as nginx would |
//! | any other, with `command`  | that command and its `args`, as a program of this machine (`sleep infinity` for netutils) |
//!
//! Anything else cannot run: its container waits with reason `ImageNotInTable`. Each runs in
//! the pod's network namespace, with the pod's directory as working directory and `POD_DIR`
//! set to it (the stand-in for the container's own filesystem), its ServiceAccount token at
//! the standard path and the environment kubelet gives it (see `env`, `serviceaccount`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

/// The project's images, each standing for one of its binaries.
#[derive(Debug, Clone, Default)]
pub struct ProjectBinaries {
    /// The controller binary (`run --controller`), which `…/nad-service-controller` runs.
    pub controller: Option<PathBuf>,
    /// The network prober binary (`run --prober`), which `…/nad-network-prober` runs.
    pub prober: Option<PathBuf>,
}

/// One of the project's images: its repository's last path segment, its binary's flag, and
/// its `CMD` (the Dockerfile's).
struct ProjectImage {
    repository: &'static str,
    flag: &'static str,
    cmd: &'static [&'static str],
}

const PROJECT_IMAGES: [ProjectImage; 2] = [
    ProjectImage {
        repository: "nad-service-controller",
        flag: "--controller",
        cmd: &["run"],
    },
    ProjectImage {
        repository: "nad-network-prober",
        flag: "--prober",
        cmd: &[],
    },
];

/// What to run for `container` (its `command` and `args` already expanded), or why it cannot
/// run. `agent` is this program, `binaries` the project's (`run --controller`, `--prober`).
pub fn program_for(
    container: &Container,
    agent: &Path,
    binaries: &ProjectBinaries,
) -> Result<Vec<String>, String> {
    let image = container.image.as_deref().unwrap_or_default();
    let repository = image
        .split('@')
        .next()
        .unwrap_or_default()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default();
    let command = container.command.as_deref().unwrap_or_default();
    let args = container.args.as_deref().unwrap_or_default();
    if let Some((project, binary)) = PROJECT_IMAGES
        .iter()
        .zip([&binaries.controller, &binaries.prober])
        .find(|(project, _)| project.repository == repository)
    {
        let Some(binary) = binary else {
            return Err(format!(
                "image {image:?} runs the project's {} binary, but the pod agent was started without {} \
                 (hack/pod-agent.sh passes the release build's binaries)",
                project.repository, project.flag
            ));
        };
        let binary = binary.display().to_string();
        let names_binary = |program: &str| program.rsplit('/').next() == Some(project.repository);
        let mut argv: Vec<String> = match command.split_first() {
            None => vec![binary],
            Some((first, rest)) if names_binary(first) => std::iter::once(binary)
                .chain(rest.iter().cloned())
                .collect(),
            Some(_) => command.to_vec(),
        };
        if command.is_empty() && args.is_empty() {
            argv.extend(project.cmd.iter().map(|s| (*s).to_owned()));
        }
        argv.extend(args.iter().cloned());
        return Ok(argv);
    }
    if repository.contains("nginx") {
        let mut argv = vec![agent.display().to_string(), "serve-http".into()];
        let ports: Vec<i32> = container
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
            .map(|p| p.container_port)
            .collect();
        for port in if ports.is_empty() { vec![80] } else { ports } {
            argv.extend(["--port".into(), port.to_string()]);
        }
        return Ok(argv);
    }
    if command.is_empty() {
        return Err(format!(
            "image {image:?} has no local stand-in and the container sets no command; the pod agent runs nginx images \
             (an HTTP server) and containers with a command (see hack/README.md)"
        ));
    }
    Ok(command.iter().chain(args).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn nginx_images_serve_http_on_their_tcp_ports() {
        let c = container(
            json!({"name": "nginx", "image": "docker.io/library/nginx:1.27",
            "ports": [{"containerPort": 80}, {"containerPort": 443, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}]}),
        );
        assert_eq!(
            program_for(&c, Path::new("/bin/pod-agent"), &ProjectBinaries::default()).unwrap(),
            [
                "/bin/pod-agent",
                "serve-http",
                "--port",
                "80",
                "--port",
                "443"
            ]
        );
        let bare = container(json!({"name": "nginx", "image": "nginx"}));
        assert_eq!(
            program_for(&bare, Path::new("a"), &ProjectBinaries::default()).unwrap(),
            ["a", "serve-http", "--port", "80"]
        );
    }

    #[test]
    fn other_images_run_their_command() {
        let c = container(
            json!({"name": "netutils", "image": "nicolaka/netshoot:v0.13",
            "command": ["sleep"], "args": ["infinity"]}),
        );
        assert_eq!(
            program_for(&c, Path::new("a"), &ProjectBinaries::default()).unwrap(),
            ["sleep", "infinity"]
        );
        let none = container(json!({"name": "x", "image": "registry.example/app:1"}));
        let why = program_for(&none, Path::new("a"), &ProjectBinaries::default()).unwrap_err();
        assert!(why.contains("registry.example/app:1"), "{why}");
    }

    #[test]
    fn the_controller_image_runs_the_controller() {
        let binaries = ProjectBinaries {
            controller: Some("/target/release/nad-service-controller".into()),
            prober: Some("/target/release/nad-network-prober".into()),
        };
        let run =
            |value: serde_json::Value| program_for(&container(value), Path::new("a"), &binaries);
        let bin = "/target/release/nad-service-controller";
        for image in [
            "nad-service-controller",
            "ghcr.io/isim/nad-service-controller:v1.4.0",
            "registry.local:5000/team/nad-service-controller@sha256:0123",
            "localhost/nad-service-controller:dev@sha256:0123",
        ] {
            assert_eq!(
                run(json!({"name": "c", "image": image})).unwrap(),
                [bin, "run"],
                "{image}: the image's entrypoint and CMD"
            );
        }
        assert_eq!(
            run(json!({"name": "c", "image": "x/nad-service-controller:1", "args": ["run", "--log-format=json"]})).unwrap(),
            [bin, "run", "--log-format=json"]
        );
        assert_eq!(
            run(json!({"name": "c", "image": "x/nad-service-controller:1",
                       "command": ["/nad-service-controller"], "args": ["explain", "svc"]}))
            .unwrap(),
            [bin, "explain", "svc"]
        );
        assert_eq!(
            run(json!({"name": "c", "image": "x/nad-service-controller:1", "command": ["nad-service-controller", "--version"]})).unwrap(),
            [bin, "--version"]
        );
        assert_eq!(
            run(json!({"name": "c", "image": "x/nad-service-controller:1", "command": ["sh", "-c", "true"]})).unwrap(),
            ["sh", "-c", "true"]
        );
        // Only that exact repository name.
        assert!(run(json!({"name": "c", "image": "x/nad-service-controller-plugins:1"})).is_err());
        let why = program_for(
            &container(json!({"name": "c", "image": "nad-service-controller:1"})),
            Path::new("a"),
            &ProjectBinaries::default(),
        )
        .unwrap_err();
        assert!(why.contains("--controller"), "{why}");
    }

    #[test]
    fn the_prober_image_runs_the_prober() {
        let binaries = ProjectBinaries {
            controller: Some("/target/release/nad-service-controller".into()),
            prober: Some("/target/release/nad-network-prober".into()),
        };
        let run =
            |value: serde_json::Value| program_for(&container(value), Path::new("a"), &binaries);
        let bin = "/target/release/nad-network-prober";
        assert_eq!(
            run(json!({"name": "p", "image": "ghcr.io/isim/nad-network-prober:v1.5.0"})).unwrap(),
            [bin],
            "the image's entrypoint, no CMD"
        );
        assert_eq!(
            run(json!({"name": "p", "image": "nad-network-prober", "args": ["--log-format=json"]}))
                .unwrap(),
            [bin, "--log-format=json"]
        );
        assert_eq!(
            run(json!({"name": "p", "image": "x/nad-network-prober:1", "command": ["/nad-network-prober", "--version"]})).unwrap(),
            [bin, "--version"]
        );
        let why = program_for(
            &container(json!({"name": "p", "image": "nad-network-prober:1"})),
            Path::new("a"),
            &ProjectBinaries::default(),
        )
        .unwrap_err();
        assert!(why.contains("--prober"), "{why}");
    }
}
