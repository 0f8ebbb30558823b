//! Containers as local programs: there is no image to pull, so an image stands for a program
//! of this machine, by a short table (`program_for`):
//!
//! | image                      | runs                                                          |
//! |----------------------------|---------------------------------------------------------------|
//! | `…/nad-service-controller` (last path segment exactly that; any registry, tag or digest) | the controller binary given to `run --controller`, as the image's `ENTRYPOINT`: `args` follow it (without `command` and `args`, the image's `CMD`, `run`); a `command` replaces it, a first element naming `nad-service-controller` (with or without a path) being the binary |
//! | `…nginx…` (any registry, tag) | `pod-agent serve-http`: HTTP 200 on every TCP container port, serving `<pod dir>/usr/share/nginx/html` as nginx would |
//! | any other, with `command`  | that command and its `args`, as a program of this machine (`sleep infinity` for netutils) |
//!
//! Anything else cannot run: its container waits with reason `ImageNotInTable`. Each runs in
//! the pod's network namespace, with the pod's directory as working directory and `POD_DIR`
//! set to it (the stand-in for the container's own filesystem), its ServiceAccount token at
//! the standard path and the environment kubelet gives it (see `env`, `serviceaccount`).

use std::path::Path;

use k8s_openapi::api::core::v1::Container;

/// The project's image: its repository's last path segment.
const CONTROLLER_IMAGE: &str = "nad-service-controller";
/// The controller image's `CMD` (Dockerfile).
const CONTROLLER_CMD: &str = "run";

/// What to run for `container` (its `command` and `args` already expanded), or why it cannot
/// run. `agent` is this program, `controller` the controller binary (`run --controller`).
pub fn program_for(
    container: &Container,
    agent: &Path,
    controller: Option<&Path>,
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
    if repository == CONTROLLER_IMAGE {
        let Some(binary) = controller else {
            return Err(format!(
                "image {image:?} runs the controller, but the pod agent was started without --controller \
                 (hack/pod-agent.sh passes the release build's binary)"
            ));
        };
        let binary = binary.display().to_string();
        let names_controller = |program: &str| program.rsplit('/').next() == Some(CONTROLLER_IMAGE);
        let mut argv: Vec<String> = match command.split_first() {
            None => vec![binary],
            Some((first, rest)) if names_controller(first) => std::iter::once(binary)
                .chain(rest.iter().cloned())
                .collect(),
            Some(_) => command.to_vec(),
        };
        if command.is_empty() && args.is_empty() {
            argv.push(CONTROLLER_CMD.into());
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
            program_for(&c, Path::new("/bin/pod-agent"), None).unwrap(),
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
            program_for(&bare, Path::new("a"), None).unwrap(),
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
            program_for(&c, Path::new("a"), None).unwrap(),
            ["sleep", "infinity"]
        );
        let none = container(json!({"name": "x", "image": "registry.example/app:1"}));
        let why = program_for(&none, Path::new("a"), None).unwrap_err();
        assert!(why.contains("registry.example/app:1"), "{why}");
    }

    #[test]
    fn the_controller_image_runs_the_controller() {
        let controller = Some(Path::new("/target/release/nad-service-controller"));
        let run =
            |value: serde_json::Value| program_for(&container(value), Path::new("a"), controller);
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
            None,
        )
        .unwrap_err();
        assert!(why.contains("--controller"), "{why}");
    }
}
