//! Containers as local programs: there is no image to pull, so an image stands for a program
//! of this machine, by a short table (`program_for`):
//!
//! | image                      | runs                                                          |
//! |----------------------------|---------------------------------------------------------------|
//! | `…nginx…` (any registry, tag) | `pod-agent serve-http`: HTTP 200 on every TCP container port, serving `<pod dir>/usr/share/nginx/html` as nginx would |
//! | any other, with `command`  | that command and its `args`, as a program of this machine (`sleep infinity` for netutils) |
//!
//! Anything else cannot run: its container waits with reason `ImageNotInTable`. Each runs in
//! the pod's network namespace, with the pod's directory as working directory and `POD_DIR`
//! set to it (the stand-in for the container's own filesystem).

use std::path::Path;

use k8s_openapi::api::core::v1::Container;

/// What to run for `container`, or why it cannot run.
pub fn program_for(container: &Container, agent: &Path) -> Result<Vec<String>, String> {
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
    let argv: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .cloned()
        .collect();
    if argv.is_empty() {
        return Err(format!(
            "image {image:?} has no local stand-in and the container sets no command; the pod agent runs nginx images \
             (an HTTP server) and containers with a command (see hack/README.md)"
        ));
    }
    Ok(argv)
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
            program_for(&c, Path::new("/bin/pod-agent")).unwrap(),
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
            program_for(&bare, Path::new("a")).unwrap(),
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
            program_for(&c, Path::new("a")).unwrap(),
            ["sleep", "infinity"]
        );
        let none = container(json!({"name": "x", "image": "registry.example/app:1"}));
        let why = program_for(&none, Path::new("a")).unwrap_err();
        assert!(why.contains("registry.example/app:1"), "{why}");
    }
}
