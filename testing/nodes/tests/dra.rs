//! A Service on a DRA network, on the real nodes: DRANET v1.0.1 runs on each node
//! (`hack/nodes.sh`: a DRA LAN of its own, four macvlan NICs a node), kube-controller-manager
//! makes each pod's ResourceClaim from a template, kube-scheduler allocates it a NIC from
//! DRANET's ResourceSlices, and DRANET moves the NIC into the pod and writes the claim's
//! `networkData`. `testdata/dra/` applied to a namespace of the test's own (the DeviceClass is
//! cluster-wide), the controller binary of this build run on the host for that namespace.
//! The clients are pods: one with a NIC on the LAN, one without.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the control plane reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::{collections::BTreeSet, time::Instant};

use k8s_openapi::api::{
    core::v1::{Namespace, Pod},
    resource::v1::ResourceClaim,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use nad_node_tests::{
    HostController, client, curl, eventually, image, kubectl_apart, kubectl_with, manifests,
    namespace, nodes, pods_of, resolve,
};
use serde_json::json;

/// The Service of `testdata/dra/`, on its DeviceClass `dra-lan`.
const SERVICE: &str = "netutils-dra";

/// The claim behind `pod`'s `nic` (the name kube-controller-manager generated from the
/// template, in `status.resourceClaimStatuses`).
fn claim_of(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "nic")?
        .resource_claim_name
        .clone()
}

/// The addresses DRANET reported for the claim's device, without their prefix lengths, once
/// it has; and the device's `Ready` condition.
fn reported(claim: &ResourceClaim) -> Option<(Vec<String>, String)> {
    let device = claim.status.as_ref()?.devices.as_ref()?.first()?;
    let ips = device.network_data.as_ref()?.ips.as_ref()?;
    let ready = device
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .status
        .clone();
    let ips = ips
        .iter()
        .map(|ip| ip.split('/').next().unwrap().to_owned())
        .collect();
    Some((ips, ready))
}

/// `kubectl -n <ns> <args>`, which must succeed.
async fn kubectl(ns: &str, args: &[&str]) -> String {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    let (code, out, err) = kubectl_apart(&all).await;
    assert_eq!(code, 0, "kubectl {}: {out}{err}", all.join(" "));
    out
}

/// Sets the `Ready` condition of the claim's first device (DRANET writes `Ready` first), as a
/// driver that saw its link go down would: DRANET itself does not report a link's state.
async fn device_ready(ns: &str, claim: &str, status: &str) {
    let patch = json!([
        {"op": "test", "path": "/status/devices/0/conditions/0/type", "value": "Ready"},
        {"op": "replace", "path": "/status/devices/0/conditions/0/status", "value": status},
        {"op": "replace", "path": "/status/devices/0/conditions/0/reason",
         "value": if status == "True" { "NetworkDeviceReady" } else { "LinkDown" }},
    ]);
    kubectl(
        ns,
        &[
            "patch",
            "resourceclaim",
            claim,
            "--subresource=status",
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
    )
    .await;
}

/// The Service of `testdata/dra/` resolves to the NICs DRANET moved into its pods (the
/// addresses it reported in their claims), a client on the LAN gets 200 from each, a pod off
/// the LAN times out, and a device whose claim reports `Ready=False` leaves DNS until it is
/// Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_a_dra_network_resolves_to_the_pods_nics_and_serves_only_that_lan() {
    let client = client().await;
    nodes(&client).await;
    let ns = namespace(&client, "dra").await;
    kubectl_with(&["apply", "-n", &ns, "-f", "-"], &manifests("testdata/dra")).await;
    let outside = json!({
        "metadata": {"name": "outside"},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "netutils", "image": image("netutils"),
                                 "command": ["sleep", "infinity"]}]},
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(outside).unwrap(),
    )
    .await
    .unwrap();
    let controller = HostController::start(&ns);
    for deployment in ["deploy/netutils-dra", "deploy/netutils-dra-client"] {
        kubectl(&ns, &["rollout", "status", deployment, "--timeout=120s"]).await;
    }
    kubectl(
        &ns,
        &[
            "wait",
            "pod/outside",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
    )
    .await;
    let client_pod = pods_of(&pods, "app=netutils-dra-client").await[0].name_any();

    // Each server pod's claim, the NIC DRANET moved into it, and the addresses it reported.
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let servers = pods_of(&pods, &format!("app={SERVICE}")).await;
    assert_eq!(servers.len(), 2);
    let mut nics = Vec::new();
    for pod in &servers {
        let name = pod.name_any();
        let claim = claim_of(pod).unwrap_or_else(|| panic!("{name} has no claim for nic"));
        let (ips, ready) = eventually(&format!("DRANET's networkData in {claim}"), || async {
            reported(&claims.get(&claim).await.unwrap())
        })
        .await;
        assert_eq!(ready, "True", "{claim}");
        assert_eq!(ips.len(), 1, "{claim}: {ips:?}");
        assert!(ips[0].starts_with("192.168.70."), "{claim}: {ips:?}");
        let (code, inside) = nad_node_tests::kubectl(&[
            "exec", "-n", &ns, &name, "--", "ip", "-o", "-4", "addr", "show",
        ])
        .await;
        assert_eq!(code, 0, "{inside}");
        assert!(
            inside.contains(&format!("inet {}/24", ips[0])),
            "{name} does not hold the NIC of {}: {inside}",
            ips[0]
        );
        eprintln!("{name}: claim {claim}, NIC {}", ips[0]);
        nics.push((name, claim, ips[0].clone()));
    }
    let all: BTreeSet<String> = nics.iter().map(|(_, _, ip)| ip.clone()).collect();

    let started = Instant::now();
    let answered = |want: BTreeSet<String>| {
        let (ns, client_pod) = (&ns, &client_pod);
        async move {
            let got = resolve(ns, client_pod, "ahostsv4", SERVICE).await;
            (got == want).then_some(got)
        }
    };
    eventually(&format!("{SERVICE} resolving to {all:?}"), || {
        answered(all.clone())
    })
    .await;
    eprintln!(
        "{SERVICE} resolves to the NICs {all:?} ({:?} after the rollouts)",
        started.elapsed()
    );

    // On the LAN: the Service and each NIC answer. Off it: the name resolves, nothing connects.
    let url = format!("http://{SERVICE}:8080/");
    assert_eq!(curl(&ns, &client_pod, &[], &url).await, ("200".into(), 0));
    for address in &all {
        let direct = format!("http://{address}:8080/");
        assert_eq!(
            curl(&ns, &client_pod, &[], &direct).await,
            ("200".into(), 0),
            "{direct}"
        );
    }
    assert_eq!(
        resolve(&ns, "outside", "ahostsv4", SERVICE).await,
        all,
        "the name resolves everywhere"
    );
    assert_eq!(
        curl(&ns, "outside", &[], &url).await,
        ("000".into(), 28),
        "a pod off the DRA LAN times out"
    );

    // The device of one pod reports Ready=False: it leaves DNS, the other still serves.
    let (down_pod, down_claim, down_ip) = &nics[0];
    device_ready(&ns, down_claim, "False").await;
    let flipped = Instant::now();
    let rest: BTreeSet<String> = all.iter().filter(|ip| *ip != down_ip).cloned().collect();
    eventually(&format!("{down_ip} out of DNS"), || answered(rest.clone())).await;
    eprintln!(
        "{down_pod}'s device Ready=False: out of DNS after {:?}",
        flipped.elapsed()
    );
    assert_eq!(curl(&ns, &client_pod, &[], &url).await, ("200".into(), 0));
    let slice = kubectl(
        &ns,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={SERVICE}"),
            "-o",
            "jsonpath={range .items[*].endpoints[*]}{.addresses[0]}={.conditions.serving} {end}",
        ],
    )
    .await;
    assert!(
        slice.contains(&format!("{down_ip}=false")),
        "published not serving: {slice}"
    );
    device_ready(&ns, down_claim, "True").await;
    eventually(&format!("{down_ip} back in DNS"), || answered(all.clone())).await;

    controller.stop().await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
}
