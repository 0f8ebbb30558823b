//! The project's images as `make image-oci` assembles them (the controller's and the network
//! prober's): pushed with its SBOM to a registry
//! on loopback by oras, pulled back by digest, unpacked by umoci to an OCI runtime bundle, and
//! given the
//! runtime configuration the Deployment of `deploy/deploy.yaml` asks a kubelet for, so that
//! `runc` runs it as a cluster would.

#![allow(dead_code)] // not every test binary uses every part

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::registry::{self, Registry};

/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The controller's image: `NSC_IMAGE_LAYOUT`.
pub const CONTROLLER: &str = "NSC_IMAGE_LAYOUT";
/// The network prober's image: `NSC_PROBER_IMAGE_LAYOUT`.
pub const PROBER: &str = "NSC_PROBER_IMAGE_LAYOUT";

/// The `<directory>:<tag>` of an image's OCI layout, from the variable `image` names
/// ([`CONTROLLER`], [`PROBER`]; hack/test.sh sets both).
pub fn layout(image: &str) -> (PathBuf, String) {
    let value = std::env::var(image).unwrap_or_else(|_| {
        panic!(
            "{image} is not set: build the images with `make image-oci` and set it to \
             <layout directory>:<tag> (`make test` does both)"
        )
    });
    let (dir, tag) = value
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{image}={value} is not <layout directory>:<tag>"));
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("index.json").exists(),
        "{} holds no OCI layout: run `make image-oci`",
        dir.display()
    );
    (dir, tag.to_owned())
}

/// The digest of the manifest the layout tags `tag`.
pub fn layout_digest(dir: &Path, tag: &str) -> String {
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let tagged: Vec<&Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .collect();
    assert_eq!(
        tagged.len(),
        1,
        "one image tagged {tag} in {}",
        dir.display()
    );
    tagged[0]["digest"].as_str().unwrap().to_owned()
}

/// The pinned oras of the tool cache.
fn oras() -> String {
    registry::tool("oras").display().to_string()
}

/// A blob of an OCI layout, parsed.
pub fn layout_json(dir: &Path, digest: &str) -> Value {
    let hex = digest.strip_prefix("sha256:").unwrap();
    serde_json::from_slice(&std::fs::read(dir.join("blobs/sha256").join(hex)).unwrap()).unwrap()
}

/// The pulled image's configuration (its `config` blob), parsed.
pub fn config(pulled: &Pulled) -> Value {
    let manifest = layout_json(&pulled.layout, &pulled.digest);
    let digest = manifest["config"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("the manifest names no config: {manifest}"));
    layout_json(&pulled.layout, digest)
}

fn run(program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program} (apt-get install {program}): {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The image pushed to `registry` by tag and pulled back by its digest into `dir`.
pub struct Pulled {
    /// The digest the registry serves the manifest under.
    pub digest: String,
    /// `<registry>/<repository>`.
    pub repository: String,
    /// The pulled OCI layout, the image tagged `pulled`.
    pub layout: PathBuf,
}

/// Pushes the layout's image and what refers to it (its SBOM) to `registry` as repository
/// `name`, reads back the digest the registry serves for the tag, and pulls the image by that
/// digest.
pub fn push_and_pull(
    layout: &Path,
    tag: &str,
    name: &str,
    registry: &Registry,
    dir: &Path,
) -> Pulled {
    let oras = oras();
    let repository = format!("{}/{name}", registry.host);
    run(
        &oras,
        &[
            "copy",
            "--no-tty",
            "--recursive",
            "--from-oci-layout",
            "--to-plain-http",
            &format!("{}:{tag}", layout.display()),
            &format!("{repository}:{tag}"),
        ],
    );
    let manifest = run(
        &oras,
        &[
            "manifest",
            "fetch",
            "--plain-http",
            &format!("{repository}:{tag}"),
        ],
    );
    let digest = format!("sha256:{}", hex(&Sha256::digest(&manifest)));
    let pulled = dir.join("pulled");
    let _ = std::fs::remove_dir_all(&pulled);
    run(
        &oras,
        &[
            "copy",
            "--no-tty",
            "--from-plain-http",
            "--to-oci-layout",
            &format!("{repository}@{digest}"),
            &format!("{}:pulled", pulled.display()),
        ],
    );
    Pulled {
        digest,
        repository,
        layout: pulled,
    }
}

/// The SPDX document the registry holds as a referrer of the pulled image.
pub fn sbom(pulled: &Pulled, dir: &Path) -> Value {
    let oras = oras();
    let subject = format!("{}@{}", pulled.repository, pulled.digest);
    let found: Value = serde_json::from_slice(&run(
        &oras,
        &[
            "discover",
            "--plain-http",
            "--format",
            "json",
            "--artifact-type",
            "application/spdx+json",
            &subject,
        ],
    ))
    .unwrap();
    let referrers = found["referrers"].as_array().cloned().unwrap_or_default();
    assert_eq!(referrers.len(), 1, "one SBOM refers to {subject}: {found}");
    let sbom_dir = dir.join("sbom");
    let reference = format!(
        "{}@{}",
        pulled.repository,
        referrers[0]["digest"].as_str().unwrap()
    );
    run(
        &oras,
        &[
            "pull",
            "--no-tty",
            "--plain-http",
            "--output",
            &sbom_dir.display().to_string(),
            &reference,
        ],
    );
    serde_json::from_slice(&std::fs::read(sbom_dir.join("sbom.spdx.json")).unwrap()).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The pulled image unpacked by umoci into `bundle` (its `rootfs/` and a `config.json` made
/// from the image's configuration).
pub fn unpack(pulled: &Pulled, bundle: &Path) {
    let _ = std::fs::remove_dir_all(bundle);
    run(
        "umoci",
        &[
            "unpack",
            "--image",
            &format!("{}:pulled", pulled.layout.display()),
            &bundle.display().to_string(),
        ],
    );
}

/// Every path in the bundle's root filesystem, relative to it, sorted.
pub fn rootfs_files(bundle: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let root = bundle.join("rootfs");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// What a kubelet would fill in for one pod of the Deployment.
pub struct Pod<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// The API server, as `KUBERNETES_SERVICE_HOST` and `_PORT` give it.
    pub apiserver_host: &'a str,
    pub apiserver_port: u16,
    /// A directory holding `token`, `ca.crt` and `namespace`, mounted at
    /// [`SERVICE_ACCOUNT_DIR`].
    pub service_account: &'a Path,
    /// Arguments appended to the container's (the test binds its ports to loopback).
    pub extra_args: &'a [String],
}

/// The Deployment named `name` among the documents of a manifest.
pub fn deployment<'a>(docs: &'a [Value], name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Deployment {name} in the manifest"))
}

/// Bytes of a Kubernetes quantity such as `256Mi` (the binary suffixes the manifests use).
fn bytes(quantity: &str) -> u64 {
    let (number, unit) = quantity
        .find(|c: char| !c.is_ascii_digit())
        .map_or((quantity, ""), |i| quantity.split_at(i));
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => panic!("quantity {quantity}: unit {other} is not handled here"),
    };
    number.parse::<u64>().unwrap() * scale
}

/// The runtime configuration of the Deployment's one container, on top of `base` (umoci's,
/// from the image's configuration): the image's entrypoint with the container's `args`, its
/// `env` (field references resolved as for `pod`), the pod's and container's security
/// context (user and group, read-only root, capabilities dropped, no new privileges), its
/// memory limit, its `emptyDir` volumes as tmpfs, the ServiceAccount mount and the
/// `KUBERNETES_SERVICE_*` variables. It stays in the host's network namespace (no CNI gives it
/// one here), which is why the test binds its ports to loopback with `extra_args`.
pub fn runtime_config(base: &Value, deployment: &Value, pod: &Pod<'_>) -> Value {
    let spec = &deployment["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(
        containers.len(),
        1,
        "the controller's pod has one container"
    );
    let container = &containers[0];
    let mut config = base.clone();
    let args = process_args(&config, container, pod);
    let env = process_env(container, pod);
    let security = Security::of(spec, container);

    let process = &mut config["process"];
    process["terminal"] = json!(false);
    process["args"] = json!(args);
    process["env"] = json!(env);
    process["user"] = json!({"uid": security.user, "gid": security.group});
    process["noNewPrivileges"] = json!(security.no_new_privileges);
    process["capabilities"] = json!({
        "bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": [],
    });
    config["root"]["readonly"] = json!(security.read_only);

    let mounts = config["mounts"].as_array_mut().unwrap();
    mounts.extend(empty_dir_mounts(spec, container, &security));
    mounts.push(json!({
        "destination": SERVICE_ACCOUNT_DIR, "type": "bind",
        "source": pod.service_account.display().to_string(),
        "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
    }));

    let linux = &mut config["linux"];
    let namespaces: Vec<Value> = linux["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["type"] != "network")
        .cloned()
        .collect();
    linux["namespaces"] = json!(namespaces);
    if let Some(limit) = container["resources"]["limits"]["memory"].as_str() {
        linux["resources"]["memory"] = json!({"limit": bytes(limit)});
    }
    config
}

/// The process's arguments: the image's entrypoint (from `config`, umoci's), the container's
/// `args` and the pod's extra ones. (Kubernetes: `args` replace the image's CMD and keep its
/// ENTRYPOINT.)
fn process_args(config: &Value, container: &Value, pod: &Pod<'_>) -> Vec<String> {
    let mut args: Vec<String> = config["process"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .take(1)
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args, ["/nad-service-controller"], "the image's entrypoint");
    args.extend(
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned()),
    );
    args.extend(pod.extra_args.iter().cloned());
    args
}

/// The process's environment: what a kubelet always sets, then the container's `env` with
/// its field references resolved for `pod`.
fn process_env(container: &Value, pod: &Pod<'_>) -> Vec<String> {
    let mut env: Vec<String> = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        format!("HOSTNAME={}", pod.name),
        format!("KUBERNETES_SERVICE_HOST={}", pod.apiserver_host),
        format!("KUBERNETES_SERVICE_PORT={}", pod.apiserver_port),
    ];
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap();
        let value = if let Some(value) = var["value"].as_str() {
            value.to_owned()
        } else {
            match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod.name.to_owned(),
                Some("metadata.namespace") => pod.namespace.to_owned(),
                other => panic!("env {name}: {other:?} is not resolved here"),
            }
        };
        env.push(format!("{name}={value}"));
    }
    env
}

/// The pod's and container's security context, the container's taking precedence.
struct Security {
    user: u64,
    group: u64,
    no_new_privileges: bool,
    read_only: bool,
}

impl Security {
    /// Reads it from the pod's `spec` and its `container`, which must drop every capability.
    fn of(spec: &Value, container: &Value) -> Self {
        let pod_security = &spec["securityContext"];
        let security = &container["securityContext"];
        let user = security["runAsUser"]
            .as_u64()
            .or(pod_security["runAsUser"].as_u64())
            .expect("runAsUser");
        let group = security["runAsGroup"]
            .as_u64()
            .or(pod_security["runAsGroup"].as_u64())
            .expect("runAsGroup");
        assert_eq!(
            security["capabilities"]["drop"],
            json!(["ALL"]),
            "the container drops every capability"
        );
        Security {
            user,
            group,
            no_new_privileges: security["allowPrivilegeEscalation"] == json!(false),
            read_only: security["readOnlyRootFilesystem"] == json!(true),
        }
    }
}

/// The container's volume mounts, each an `emptyDir` of the pod run as a tmpfs owned by the
/// container's user and group (of its `sizeLimit`, if any).
fn empty_dir_mounts(spec: &Value, container: &Value, security: &Security) -> Vec<Value> {
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = mount["name"].as_str().unwrap();
        let volume = volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("volumeMount {name} names no volume"));
        let empty_dir = volume
            .get("emptyDir")
            .unwrap_or_else(|| panic!("volume {name}: only emptyDir is run here"));
        let mut options = vec![
            "nosuid".to_owned(),
            "nodev".to_owned(),
            "noexec".to_owned(),
            format!("uid={}", security.user),
            format!("gid={}", security.group),
            "mode=0750".to_owned(),
        ];
        if let Some(limit) = empty_dir["sizeLimit"].as_str() {
            options.push(format!("size={}", bytes(limit)));
        }
        mounts.push(json!({
            "destination": mount["mountPath"], "type": "tmpfs", "source": "tmpfs",
            "options": options,
        }));
    }
    mounts
}
