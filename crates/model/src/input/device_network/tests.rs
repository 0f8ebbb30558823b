use super::*;
use serde_json::{Value, json};

const POD_UID: &str = "0b0e6e1c-6d5e-4f0e-9d61-7a1c1b7f2a10";
const OTHER_UID: &str = "5a4c2f3e-1b0d-4c9a-8e7f-6d5c4b3a2910";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn uid(text: &str) -> Uid {
    Uid::parse(text)
}

fn net(class: &str, request: Option<&str>) -> DeviceNetwork {
    DeviceNetwork {
        class: class.to_owned(),
        request: request.map(str::to_owned),
    }
}

/// A claim as kube-scheduler allocates it and kubelet reserves it: `requests` are the spec's,
/// `results` the allocation's, `devices` the driver's status entries.
fn claim(
    name: &str,
    requests: Value,
    results: Value,
    devices: Value,
    reserved: &[&str],
) -> ResourceClaim {
    let reserved: Vec<Value> = reserved
        .iter()
        .map(|uid| json!({"resource": "pods", "name": "web-0", "uid": uid}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": reserved,
            "devices": devices,
        },
    }))
    .unwrap()
}

fn exactly(name: &str, class: &str) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": class}})
}

fn result(request: &str, driver: &str, pool: &str, device: &str) -> Value {
    json!({"request": request, "driver": driver, "pool": pool, "device": device})
}

/// DRANET v1.0.1's write (pkg/driver/nri_hooks.go): the pool is the node's name, the
/// addresses are CIDRs, `Ready` then `NetworkReady`.
fn dranet_status(device: &str, ips: &[&str]) -> Value {
    json!({
        "driver": "dra.net", "pool": "node-0", "device": device,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "NetworkDeviceReady", "message": "",
             "lastTransitionTime": "2026-12-07T00:00:00Z"},
            {"type": "NetworkReady", "status": "True", "reason": "NetworkReady", "message": "",
             "lastTransitionTime": "2026-12-07T00:00:00Z"},
        ],
        "networkData": {"interfaceName": "net1", "hardwareAddress": "02:42:c0:a8:02:04", "ips": ips},
    })
}

fn dranet_claim(ips: &[&str], reserved: &[&str]) -> ClaimRecord {
    ClaimRecord::read(&claim(
        "web-0-nic-x7k2p",
        json!([exactly("nic", "dranet")]),
        json!([result("nic", "dra.net", "node-0", "eth1")]),
        json!([dranet_status("eth1", ips)]),
        reserved,
    ))
}

#[test]
fn the_annotations_name_a_class_and_optionally_a_request() {
    assert_eq!(resolve(" dranet ", None), Ok(net("dranet", None)));
    assert_eq!(
        resolve("sriov.example.com", Some("fast")),
        Ok(net("sriov.example.com", Some("fast")))
    );
    for bad in ["", "DraNet", "-x", "a_b", "a..b"] {
        let problems = resolve(bad, None).unwrap_err();
        assert_eq!(problems.len(), 1, "{bad:?}: {problems:?}");
        assert!(problems[0].contains(CLASS_ANNOTATION), "{problems:?}");
        assert!(
            problems[0].contains("kubectl get deviceclasses"),
            "{problems:?}"
        );
    }
    let long = "n".repeat(64);
    for bad in ["", "a.b", "Nic", long.as_str()] {
        let problems = resolve("dranet", Some(bad)).unwrap_err();
        assert_eq!(problems.len(), 1, "{bad:?}: {problems:?}");
        assert!(problems[0].contains(REQUEST_ANNOTATION), "{problems:?}");
    }
    assert_eq!(resolve("", Some("A")).unwrap_err().len(), 2);
}

#[test]
fn a_key_names_the_network_and_is_never_a_multus_one() {
    for network in [net("dranet", None), net("sriov.example.com", Some("fast"))] {
        let key = network.key();
        assert!(is_device_network(&key), "{key}");
        assert_eq!(DeviceNetwork::from_key(&key), Some(network));
    }
    assert_eq!(net("dranet", Some("nic")).key(), "deviceclass:dranet/nic");
    assert_eq!(DeviceNetwork::from_key("default/macvlan"), None);
    assert!(!is_device_network("deviceclass/macvlan"));
    assert_eq!(
        net("dranet", Some("nic")).to_string(),
        "DeviceClass dranet (request nic)"
    );
}

#[test]
fn a_request_narrows_the_class_and_a_subrequest_counts_for_its_request() {
    let all = net("dranet", None);
    let nic = net("dranet", Some("nic"));
    assert!(all.takes("dranet", "nic") && all.takes("dranet", "rdma/fast"));
    assert!(nic.takes("dranet", "nic") && nic.takes("dranet", "nic/fast"));
    assert!(!nic.takes("dranet", "rdma") && !nic.takes("dranet", "nicx"));
    assert!(!all.takes("gpu.example.com", "nic"));
}

#[test]
fn a_pod_names_its_claims_directly_generated_and_for_extended_resources() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "team-a"},
        "spec": {"containers": [], "resourceClaims": [
            {"name": "shared", "resourceClaimName": "team-nic"},
            {"name": "nic", "resourceClaimTemplateName": "nic-template"},
            {"name": "late", "resourceClaimTemplateName": "nic-template"},
        ]},
        "status": {
            "resourceClaimStatuses": [
                {"name": "nic", "resourceClaimName": "web-0-nic-x7k2p"},
                {"name": "late"},
            ],
            "extendedResourceClaimStatus": {"resourceClaimName": "web-0-extended-resources-q9",
                                            "requestMappings": []},
        },
    }))
    .unwrap();
    assert_eq!(
        claim_names(&pod),
        ["team-nic", "web-0-extended-resources-q9", "web-0-nic-x7k2p"]
    );
    let plain: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
    assert!(claim_names(&plain).is_empty());
}

#[test]
fn dranet_s_write_gives_the_nic_s_addresses_without_prefix_lengths() {
    let record = dranet_claim(&["192.168.2.4/24", "fd00:192:168:2::4/64"], &[POD_UID]);
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&record]).unwrap();
    let ok = got.attachment.unwrap();
    assert_eq!(&*ok.ips, [ip("192.168.2.4"), ip("fd00:192:168:2::4")]);
    assert!(ok.unusable.is_empty());
    assert_eq!(got.devices.len(), 1);
    let device = &got.devices[0];
    assert_eq!(&*device.claim, "web-0-nic-x7k2p");
    assert_eq!(device.device.id(), "dra.net/node-0/eth1");
    let status = device.device.status.as_ref().unwrap();
    assert_eq!(status.interface_name.as_deref(), Some("net1"));
    assert_eq!(
        status.hardware_address.as_deref(),
        Some("02:42:c0:a8:02:04")
    );
    assert_eq!(device.readiness().unwrap().status, Status::True);
}

#[test]
fn link_local_and_other_special_addresses_are_left_out_and_said_why() {
    // DRANET's own examples report these beside the routable ones.
    let record = dranet_claim(
        &[
            "169.254.10.2/16",
            "192.168.2.4/24",
            "fe80::1/64",
            "10.0.0.1/33",
            "fd00::4",
        ],
        &[POD_UID],
    );
    let ok = attachment(&net("dranet", None), &uid(POD_UID), [&record])
        .unwrap()
        .attachment
        .unwrap();
    assert_eq!(&*ok.ips, [ip("192.168.2.4"), ip("fd00::4")]);
    let rules: Vec<&str> = ok.unusable.iter().map(Unusable::rule).collect();
    assert_eq!(rules, ["link-local", "link-local", "not-an-address"]);
    assert_eq!(ok.unusable[0].value, "169.254.10.2/16");

    let only_link_local = dranet_claim(&["169.254.10.2/16"], &[POD_UID]);
    let err = attachment(&net("dranet", None), &uid(POD_UID), [&only_link_local])
        .unwrap()
        .attachment
        .unwrap_err();
    assert!(
        matches!(err, StatusError::NoUsableDeviceIps { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("169.254.10.2/16"), "{err}");
}

#[test]
fn a_claim_counts_only_while_allocated_and_reserved_for_this_pod() {
    let network = net("dranet", None);
    // The claim's name is reused by a new incarnation: reserved for another UID.
    let other = dranet_claim(&["192.168.2.4/24"], &[OTHER_UID]);
    assert_eq!(attachment(&network, &uid(POD_UID), [&other]), None);
    // Not reserved yet (kubelet has not started the pod), or no longer.
    let unreserved = dranet_claim(&["192.168.2.4/24"], &[]);
    assert_eq!(attachment(&network, &uid(POD_UID), [&unreserved]), None);
    // Deallocated while the pod runs: no allocation, whatever the old status says.
    let mut deallocated = claim(
        "web-0-nic-x7k2p",
        json!([exactly("nic", "dranet")]),
        json!([]),
        json!([dranet_status("eth1", &["192.168.2.4/24"])]),
        &[POD_UID],
    );
    assert_eq!(
        attachment(&network, &uid(POD_UID), [&ClaimRecord::read(&deallocated)]),
        None
    );
    deallocated.status.as_mut().unwrap().allocation = None;
    let record = ClaimRecord::read(&deallocated);
    assert!(record.devices.is_empty() && !record.serves(&uid(POD_UID)));
}

#[test]
fn a_late_write_is_a_device_without_addresses_until_the_driver_reports_them() {
    // SR-IOV's standalone mode writes networkData after the pod may already be Ready.
    let before = ClaimRecord::read(&claim(
        "web-0-vf",
        json!([exactly("vf", "sriov.example.com")]),
        json!([result(
            "vf",
            "sriovnetwork.k8snetworkplumbingwg.io",
            "node-0",
            "0000-3b-02-1"
        )]),
        json!([]),
        &[POD_UID],
    ));
    let got = attachment(&net("sriov.example.com", None), &uid(POD_UID), [&before]).unwrap();
    let err = got.attachment.unwrap_err();
    assert!(matches!(err, StatusError::NoDeviceIps { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(
            "claim web-0-vf: device sriovnetwork.k8snetworkplumbingwg.io/node-0/0000-3b-02-1"
        ),
        "{text}"
    );
    assert!(text.contains("networkData.ips"), "{text}");
    assert_eq!(got.devices[0].readiness(), None);
}

#[test]
fn devices_of_another_class_on_the_same_pod_are_not_on_the_network() {
    let record = ClaimRecord::read(&claim(
        "web-0-all",
        json!([exactly("gpu", "gpu.example.com"), exactly("nic", "dranet")]),
        json!([
            result("gpu", "gpu.example.com", "node-0", "gpu-0"),
            result("nic", "dra.net", "node-0", "eth1"),
        ]),
        json!([
            {"driver": "gpu.example.com", "pool": "node-0", "device": "gpu-0",
             "networkData": {"ips": ["10.9.9.9/24"]}},
            dranet_status("eth1", &["192.168.2.4/24"]),
        ]),
        &[POD_UID],
    ));
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&record]).unwrap();
    assert_eq!(&*got.attachment.unwrap().ips, [ip("192.168.2.4")]);
    assert_eq!(got.devices.len(), 1);
    assert_eq!(
        attachment(&net("other", None), &uid(POD_UID), [&record]),
        None
    );
}

#[test]
fn a_request_narrows_to_its_devices_and_subrequests_take_their_class() {
    let record = ClaimRecord::read(&claim(
        "web-0-nics",
        json!([
            exactly("data", "dranet"),
            {"name": "mgmt", "firstAvailable": [
                {"name": "fast", "deviceClassName": "dranet"},
                {"name": "slow", "deviceClassName": "other"},
            ]},
        ]),
        json!([
            result("data", "dra.net", "node-0", "eth1"),
            result("mgmt/fast", "dra.net", "node-0", "eth2"),
        ]),
        json!([
            dranet_status("eth1", &["192.168.2.4/24"]),
            dranet_status("eth2", &["192.168.3.4/24"]),
        ]),
        &[POD_UID],
    ));
    assert_eq!(&*record.devices[1].request, "mgmt/fast");
    assert_eq!(record.devices[1].class.as_deref(), Some("dranet"));
    let ips = |network: DeviceNetwork| {
        attachment(&network, &uid(POD_UID), [&record]).map(|a| a.attachment.unwrap().ips.to_vec())
    };
    assert_eq!(
        ips(net("dranet", None)),
        Some(vec![ip("192.168.2.4"), ip("192.168.3.4")])
    );
    assert_eq!(
        ips(net("dranet", Some("data"))),
        Some(vec![ip("192.168.2.4")])
    );
    assert_eq!(
        ips(net("dranet", Some("mgmt"))),
        Some(vec![ip("192.168.3.4")])
    );
    assert_eq!(ips(net("dranet", Some("other"))), None);
}

#[test]
fn a_shared_device_is_joined_on_its_share_id() {
    let mut shared = dranet_status("eth1", &["192.168.2.7/24"]);
    shared["shareID"] = json!("a1b2");
    let mut first = dranet_status("eth1", &["192.168.2.6/24"]);
    first["shareID"] = json!("ffff");
    let mut allocated = result("nic", "dra.net", "node-0", "eth1");
    allocated["shareID"] = json!("a1b2");
    let record = ClaimRecord::read(&claim(
        "web-0-nic",
        json!([exactly("nic", "dranet")]),
        json!([allocated]),
        json!([first, shared]),
        &[POD_UID],
    ));
    assert_eq!(record.devices[0].share_id.as_deref(), Some("a1b2"));
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&record]).unwrap();
    assert_eq!(&*got.attachment.unwrap().ips, [ip("192.168.2.7")]);
}

#[test]
fn an_ipv6_only_device_and_sixteen_addresses_are_kept_in_order() {
    let many: Vec<String> = (1..=16)
        .map(|i| format!("fd00:192:168:2::{i:x}/64"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let record = dranet_claim(&many, &[POD_UID]);
    let ok = attachment(&net("dranet", None), &uid(POD_UID), [&record])
        .unwrap()
        .attachment
        .unwrap();
    assert_eq!(ok.ips.len(), 16);
    assert!(ok.ips.iter().all(IpAddr::is_ipv6));
    assert_eq!(ok.ips[15], ip("fd00:192:168:2::10"));
}

#[test]
fn several_claims_merge_in_order_without_duplicates() {
    let first = dranet_claim(&["192.168.2.4/24"], &[POD_UID]);
    let second = ClaimRecord::read(&claim(
        "web-0-second",
        json!([exactly("nic", "dranet")]),
        json!([result("nic", "dra.net", "node-0", "eth2")]),
        json!([dranet_status("eth2", &["192.168.2.4/24", "192.168.2.5/24"])]),
        &[POD_UID],
    ));
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&first, &second]).unwrap();
    assert_eq!(
        &*got.attachment.unwrap().ips,
        [ip("192.168.2.4"), ip("192.168.2.5")]
    );
    assert_eq!(got.devices.len(), 2);
}

#[test]
fn readiness_is_false_when_either_condition_is_false() {
    let mut status = dranet_status("eth1", &["192.168.2.4/24"]);
    status["conditions"][1]["status"] = json!("False");
    status["conditions"][1]["reason"] = json!("LinkDown");
    let record = ClaimRecord::read(&claim(
        "web-0-nic",
        json!([exactly("nic", "dranet")]),
        json!([result("nic", "dra.net", "node-0", "eth1")]),
        json!([status]),
        &[POD_UID],
    ));
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&record]).unwrap();
    let readiness = got.devices[0].readiness().unwrap();
    assert_eq!(
        (&*readiness.type_, readiness.status),
        ("NetworkReady", Status::False)
    );
    assert_eq!(&*readiness.reason, "LinkDown");
    // The conditions are kept sorted by type, whatever order the driver wrote.
    let types: Vec<&str> = got.devices[0]
        .device
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .map(|c| &*c.type_)
        .collect();
    assert_eq!(types, ["NetworkReady", "Ready"]);
}

#[test]
fn reservations_by_anything_but_a_pod_do_not_count() {
    let mut object = claim(
        "web-0-nic",
        json!([exactly("nic", "dranet")]),
        json!([result("nic", "dra.net", "node-0", "eth1")]),
        json!([dranet_status("eth1", &["192.168.2.4/24"])]),
        &[],
    );
    object.status.as_mut().unwrap().reserved_for = Some(
        serde_json::from_value(json!([
            {"resource": "jobs", "apiGroup": "batch", "name": "j", "uid": POD_UID},
        ]))
        .unwrap(),
    );
    let record = ClaimRecord::read(&object);
    assert!(record.reserved_for.is_empty());
}

#[test]
fn a_pod_is_on_its_devices_classes_and_on_each_class_and_request() {
    let record = ClaimRecord::read(&claim(
        "web-0-nics",
        json!([exactly("data", "dranet"), exactly("gpu", "gpu.example.com")]),
        json!([
            result("data", "dra.net", "node-0", "eth1"),
            result("gpu", "gpu.example.com", "node-0", "gpu-0"),
        ]),
        json!([dranet_status("eth1", &["192.168.2.4/24"])]),
        &[POD_UID],
    ));
    let all = attachments(&uid(POD_UID), &[&record]);
    let keys: Vec<&str> = all.iter().map(|a| &*a.key).collect();
    assert_eq!(
        keys,
        [
            "deviceclass:dranet",
            "deviceclass:dranet/data",
            "deviceclass:gpu.example.com",
            "deviceclass:gpu.example.com/gpu",
        ]
    );
    assert!(all[0].attachment.is_ok());
    // The GPU reports no address: the pod is on that class's network without one.
    assert!(matches!(
        all[2].attachment,
        Err(StatusError::NoDeviceIps { .. })
    ));
    assert!(attachments(&uid(OTHER_UID), &[&record]).is_empty());
}

#[test]
fn a_pod_is_ready_on_a_network_unless_one_of_its_devices_says_not() {
    let mut down = dranet_status("eth2", &["192.168.2.5/24"]);
    down["conditions"][0]["status"] = json!("False");
    let record = ClaimRecord::read(&claim(
        "web-0-nics",
        json!([exactly("nic", "dranet")]),
        json!([
            result("nic", "dra.net", "node-0", "eth1"),
            result("nic", "dra.net", "node-0", "eth2"),
        ]),
        json!([dranet_status("eth1", &["192.168.2.4/24"]), down]),
        &[POD_UID],
    ));
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&record]).unwrap();
    let readiness = got.readiness().unwrap();
    assert_eq!(
        (&*readiness.type_, readiness.status),
        ("Ready", Status::False)
    );
    let up = dranet_claim(&["192.168.2.4/24"], &[POD_UID]);
    let got = attachment(&net("dranet", None), &uid(POD_UID), [&up]).unwrap();
    assert_eq!(got.readiness().unwrap().status, Status::True);
}
