//! The Helm chart on the nodes, as a user installs it (`helm install`), only the image
//! references, the release's names and the networks set: the controller as a Deployment of two
//! replicas with leader election and probes, scoped to one namespace; the network prober as a
//! DaemonSet on every node, probing that namespace's `macvlan`. `testdata/` there resolves to
//! its pods' macvlan IPs through the chart's controller, the nginx-nad pods are ready on the
//! network by the chart's prober, and netutils-nad reaches nginx-nad. Alone in its test binary:
//! it installs cluster-wide objects (under the release's own names).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the nodes reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nad_node_tests::{
    Scene, condition, eventually, image, kubeconfig, kubectl, kubectl_with, network_ips, pods_of,
    repo, resolve, testdata,
};

/// The release's name, its objects' (`fullnameOverride`) and the namespace it is installed in.
const RELEASE: &str = "nsc-helm";
const FULLNAME: &str = "nsc-helm-service-controller";
const RELEASE_NS: &str = "nsc-helm-system";

/// The pinned helm of `hack/tools.sh` (`make test` builds it).
fn helm_binary() -> PathBuf {
    let out = std::process::Command::new(repo().join("hack/tools.sh"))
        .arg("helm")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hack/tools.sh helm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `helm <args>` against the control plane; returns its output, which must succeed.
async fn helm(args: &[&str]) -> String {
    let out = tokio::process::Command::new(helm_binary())
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "helm {}: {text}", args.join(" "));
    text
}

async fn must(args: &[&str]) -> String {
    let (code, out) = kubectl(args).await;
    assert_eq!(code, 0, "kubectl {}: {out}", args.join(" "));
    out
}

/// Removes the release however the test ends.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::process::Command::new(helm_binary())
            .args(["uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait"])
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .status();
        let _ = std::process::Command::new(repo().join(".local/bin/kubectl"))
            .args([
                "delete",
                "namespace",
                RELEASE_NS,
                "--ignore-not-found",
                "--wait=false",
            ])
            .env("KUBECONFIG", kubeconfig())
            .status();
    }
}

#[tokio::test]
async fn the_helm_chart_installs_a_controller_and_a_prober_that_serve_testdata() {
    let scene = Scene::new("helm").await;
    let ns = scene.ns.clone();
    let network = format!("{ns}/macvlan");
    kubectl_with(&["apply", "-n", &ns, "-f", "-"], &testdata()).await;

    let controller = image("nad-service-controller");
    let prober = image("nad-network-prober");
    let (controller_repository, tag) = controller.rsplit_once(':').unwrap();
    let (prober_repository, _) = prober.rsplit_once(':').unwrap();
    let chart = repo().join("deploy/helm/nad-service-controller");
    let _release = Release;
    helm(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NS,
        "--create-namespace",
        "--set",
        &format!("fullnameOverride={FULLNAME}"),
        // As the chart's values say for a namespace helm creates.
        "--set",
        "namespace.create=false",
        "--set",
        "namespace.name=",
        "--set",
        &format!("image.repository={controller_repository}"),
        "--set",
        &format!("image.tag={tag}"),
        "--set",
        &format!("watchNamespace={ns}"),
        "--set",
        "prober.enabled=true",
        "--set",
        &format!("prober.networks={{{network}}}"),
        "--set",
        &format!("prober.image.repository={prober_repository}"),
        "--wait",
        "--timeout=180s",
    ])
    .await;
    let prober_name = FULLNAME.replace("-service-controller", "-network-prober");
    must(&[
        "-n",
        RELEASE_NS,
        "rollout",
        "status",
        &format!("deploy/{FULLNAME}"),
        "--timeout=120s",
    ])
    .await;
    must(&[
        "-n",
        RELEASE_NS,
        "rollout",
        "status",
        &format!("daemonset/{prober_name}"),
        "--timeout=120s",
    ])
    .await;
    for app in ["nginx-basic", "nginx-nad", "netutils-base", "netutils-nad"] {
        must(&[
            "-n",
            &ns,
            "rollout",
            "status",
            &format!("deploy/{app}"),
            "--timeout=120s",
        ])
        .await;
    }

    // The chart's prober: both nginx-nad pods answer on every published port of the network.
    let ready_type = nad_model::input::network_ready::condition_type(&network);
    let nginx = pods_of(&scene.pods, "app=nginx-nad").await;
    for pod in &nginx {
        scene
            .condition_is(&pod.name_any(), &ready_type, "True")
            .await;
    }
    // The chart's controller: nginx-nad resolves to the Ready pods' macvlan IPs.
    let macvlan: BTreeSet<String> = nginx
        .iter()
        .flat_map(|p| network_ips(p, &network))
        .filter(|ip| !ip.contains(':'))
        .collect();
    assert_eq!(macvlan.len(), 2, "{macvlan:?}");
    let nad = pods_of(&scene.pods, "app=netutils-nad").await[0].name_any();
    eventually("nginx-nad resolving to its pods' macvlan IPs", || async {
        (resolve(&ns, &nad, "ahostsv4", "nginx-nad").await == macvlan).then_some(())
    })
    .await;
    assert_eq!(
        nad_node_tests::curl(&ns, &nad, &[], "nginx-nad").await,
        ("200".into(), 0)
    );
    // Its prober's condition is what kubelet and the controller read: both pods serving.
    let prober_pods: Api<Pod> = Api::namespaced(scene.client.clone(), RELEASE_NS);
    let probers = prober_pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=network-prober"))
        .await
        .unwrap()
        .items;
    assert_eq!(probers.len(), 2, "one prober per node");
    for pod in &probers {
        assert_eq!(
            condition(pod, "Ready").map(|c| c.status).as_deref(),
            Some("True"),
            "{}",
            pod.name_any()
        );
    }
    scene.finish().await;
}
