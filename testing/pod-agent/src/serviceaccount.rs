//! The ServiceAccount token, as kubelet projects it (the `kube-api-access-*` volume the
//! ServiceAccount admission adds to a pod): a TokenRequest bound to the pod (default
//! audiences, `expirationSeconds: 3607`, `boundObjectRef` the pod), made with the agent's
//! admin client. The API server puts the pod's node in the token (its users' extra
//! `authentication.kubernetes.io/node-name`), as for kubelet's. With it the pod's directory
//! gets `var/run/secrets/kubernetes.io/serviceaccount/` holding `token`, `ca.crt` (the API
//! server's CA, from the agent's kubeconfig) and `namespace`; the token is requested again
//! at 80 % of its lifetime and replaced atomically (a rename within the directory). The
//! containers see the directory at [`MOUNT_PATH`] (`pod-agent exec-container`, see `exec`).
//!
//! No token for a pod with `automountServiceAccountToken: false`, or whose ServiceAccount
//! says so when the pod does not say ([`automount`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// Where a container finds its token (kube-rs and client-go read this fixed path).
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// kubelet's: the API server extends a token of exactly this lifetime for the pod's sake
/// (`--service-account-extend-token-expiration`), and reports this lifetime.
pub const EXPIRATION_SECONDS: i64 = 3607;

/// The pod's ServiceAccount (`default` when it names none).
pub fn account_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// Whether the pod gets a token: its own `automountServiceAccountToken`, else its
/// ServiceAccount's, else yes.
pub fn automount(pod: &Pod, account: Option<&ServiceAccount>) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token)
        .or_else(|| account.and_then(|a| a.automount_service_account_token))
        .unwrap_or(true)
}

/// The TokenRequest kubelet makes for `pod`.
pub fn token_request(pod: &Pod) -> TokenRequest {
    TokenRequest {
        // No audiences: the API server's own.
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(EXPIRATION_SECONDS),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    }
}

/// When to ask again: at 80 % of the lifetime, as kubelet's token manager does.
pub fn refresh_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(0.8)
}

/// DER certificates as PEM (`ca.crt`).
pub fn pem(certificates: &[Vec<u8>]) -> anyhow::Result<String> {
    let mut out = String::new();
    for der in certificates {
        // k8s-openapi's ByteString is base64 in JSON: the one encoder at hand.
        let encoded = serde_json::to_value(k8s_openapi::ByteString(der.clone()))?;
        let encoded = encoded.as_str().unwrap_or_default();
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    Ok(out)
}

/// The token directory within a pod's directory (the stand-in for its filesystem).
pub fn dir_in(pod_dir: &Path) -> PathBuf {
    pod_dir.join(MOUNT_PATH.trim_start_matches('/'))
}

/// Writes `name` in `dir` by a rename, so that a reader sees the old or the new file whole.
fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let temporary = dir.join(format!("..{name}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(name))
}

/// A pod's projected token: where it is, and how to renew it.
pub struct Projection {
    pub dir: PathBuf,
    /// How long until the token should be requested again.
    pub refresh: Duration,
}

/// Decides whether `pod` gets a token and, if so, requests it and writes the directory
/// under `pod_dir`. `None` when the pod is not to have one.
pub async fn project(
    client: &Client,
    pod: &Pod,
    pod_dir: &Path,
    ca_pem: &str,
) -> anyhow::Result<Option<Projection>> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = account_name(pod);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let account = if pod
        .spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token)
        .is_some()
    {
        None
    } else {
        accounts
            .get_opt(&name)
            .await
            .with_context(|| format!("reading ServiceAccount {namespace}/{name}"))?
    };
    if !automount(pod, account.as_ref()) {
        return Ok(None);
    }
    let dir = dir_in(pod_dir);
    tokio::fs::create_dir_all(&dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    let refresh = renew(client, pod, &dir).await?;
    write_atomically(&dir, "ca.crt", ca_pem.as_bytes())
        .and_then(|()| write_atomically(&dir, "namespace", namespace.as_bytes()))
        .with_context(|| format!("writing {}", dir.display()))?;
    Ok(Some(Projection { dir, refresh }))
}

/// Requests a token for `pod` and replaces `dir/token` with it; returns when to do it again.
pub async fn renew(client: &Client, pod: &Pod, dir: &Path) -> anyhow::Result<Duration> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = account_name(pod);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let issued = k8s_openapi::jiff::Timestamp::now();
    let answer = accounts
        .create_token_request(&name, &PostParams::default(), &token_request(pod))
        .await
        .with_context(|| {
            format!(
                "requesting a token of ServiceAccount {namespace}/{name} for pod {} \
                 (does the ServiceAccount exist?)",
                pod.name_any()
            )
        })?;
    let status = answer.status.with_context(|| {
        format!("the TokenRequest for ServiceAccount {namespace}/{name} came back without a token")
    })?;
    let token = status.token.with_context(|| {
        format!("the TokenRequest for ServiceAccount {namespace}/{name} came back without a token")
    })?;
    write_atomically(dir, "token", token.as_bytes())
        .with_context(|| format!("writing {}", dir.join("token").display()))?;
    let lifetime = status
        .expiration_timestamp
        .and_then(|t| t.0.duration_since(issued).try_into().ok())
        .unwrap_or(Duration::from_secs(600));
    Ok(refresh_after(lifetime))
}

/// Renews the token of `projection` at 80 % of each lifetime (10 s after a failure) until
/// aborted (when the pod stops).
pub async fn keep_fresh(client: Client, pod: std::sync::Arc<Pod>, projection: Projection) {
    let mut wait = projection.refresh;
    loop {
        tokio::time::sleep(wait).await;
        wait = match renew(&client, &pod, &projection.dir).await {
            Ok(next) => {
                tracing::info!(pod = %pod.name_any(), namespace = ?pod.namespace(), next_in_s = next.as_secs(), "ServiceAccount token renewed");
                next
            }
            Err(e) => {
                tracing::warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), error = format!("{e:#}"),
                    "could not renew the ServiceAccount token; trying again in 10 s");
                Duration::from_secs(10)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "n", "uid": "u-1"}, "spec": spec}),
        )
        .unwrap()
    }

    fn account(automount: Option<bool>) -> ServiceAccount {
        serde_json::from_value(
            json!({"metadata": {"name": "sa"}, "automountServiceAccountToken": automount}),
        )
        .unwrap()
    }

    #[test]
    fn the_pod_decides_then_its_service_account_then_yes() {
        let unset = pod(json!({"containers": []}));
        assert!(automount(&unset, None));
        assert!(automount(&unset, Some(&account(None))));
        assert!(!automount(&unset, Some(&account(Some(false)))));
        let yes = pod(json!({"containers": [], "automountServiceAccountToken": true}));
        assert!(automount(&yes, Some(&account(Some(false)))));
        let no = pod(json!({"containers": [], "automountServiceAccountToken": false}));
        assert!(!automount(&no, Some(&account(Some(true)))));
        assert_eq!(account_name(&unset), "default");
        assert_eq!(
            account_name(&pod(
                json!({"containers": [], "serviceAccountName": "prober"})
            )),
            "prober"
        );
    }

    #[test]
    fn the_request_is_kubelets() {
        let request = serde_json::to_value(token_request(&pod(json!({"containers": []})))).unwrap();
        assert_eq!(request["spec"]["expirationSeconds"], 3607);
        assert_eq!(
            request["spec"]["boundObjectRef"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"})
        );
        assert_eq!(
            request["spec"]["audiences"].as_array().map_or(0, Vec::len),
            0,
            "the API server's default audiences"
        );
        assert_eq!(
            refresh_after(Duration::from_secs(3607)),
            Duration::from_secs_f64(2885.6)
        );
    }

    #[test]
    fn certificates_become_pem() {
        let text = pem(&[vec![0_u8; 49]]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2], "AA==");
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
        assert_eq!(
            dir_in(Path::new("/s/pods/n/p")),
            Path::new("/s/pods/n/p/var/run/secrets/kubernetes.io/serviceaccount")
        );
    }

    #[test]
    fn files_are_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("pod-agent-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_atomically(&dir, "token", b"one").unwrap();
        write_atomically(&dir, "token", b"two").unwrap();
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["token"], "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
