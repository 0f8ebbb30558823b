//! Networks of DRA devices (KEP-4817, GA in Kubernetes 1.37): the addresses a network driver
//! reports for the devices allocated to a pod, in `ResourceClaim.status.devices[].networkData`.
//!
//! A Service names such a network by the DeviceClass its pods' devices are allocated from
//! ([`CLASS_ANNOTATION`]), optionally narrowed to one request of their claims
//! ([`REQUEST_ANNOTATION`]). A pod's addresses on it come from its claims
//! ([`claim_names`]: `spec.resourceClaims` by name, the generated names in
//! `status.resourceClaimStatuses`, and `status.extendedResourceClaimStatus`), each used only
//! while it is allocated and reserved for that pod's UID (a claim's name outlives a pod
//! incarnation); of each, the allocated devices whose request asks for the class, joined to
//! their status on driver, pool, device and share ID; of each status, `networkData.ips` with the
//! prefix length stripped, every address checked as the EndpointSlice API does.
//!
//! Pure: a claim in, a [`ClaimRecord`] out (what the controller keeps of it); records and a pod
//! UID in, the pod's [`DeviceAttachment`]s out.

use std::{collections::BTreeMap, net::IpAddr, sync::Arc};

use k8s_openapi::api::{
    core::v1::Pod,
    resource::v1::{AllocatedDeviceStatus, DeviceRequest, ResourceClaim},
};
use kube_core::ResourceExt;

use crate::input::{
    address::{self, Unparsable},
    network_ready::Status,
    network_status::{Attachment, StatusError, Unusable, UnusableReason},
};
use crate::{condition::KeptCondition, uid::Uid};

/// Opt-in annotation for a DRA network: the name of a DeviceClass. Every device allocated to
/// the pod from that class carries the pod's addresses on the network.
pub const CLASS_ANNOTATION: &str = "isim.dev/device-class";
/// Optional, with [`CLASS_ANNOTATION`]: only the devices of the pods' claim requests of this
/// name (`spec.devices.requests[].name`; a subrequest's device counts for its request).
pub const REQUEST_ANNOTATION: &str = "isim.dev/device-request";
/// How a DRA network's key begins. A Multus network's key is `<namespace>/<name>`, and no
/// namespace holds a `:`, so the two never meet.
pub const KEY_PREFIX: &str = "deviceclass:";

/// The device conditions that decide whether a device carries traffic: `Ready`, which DRA
/// drivers write, and `NetworkReady`, which some network drivers write besides it.
pub const READINESS_CONDITIONS: [&str; 2] = ["Ready", "NetworkReady"];

/// A Service's DRA network: a DeviceClass, optionally one request name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceNetwork {
    pub class: String,
    pub request: Option<String>,
}

impl DeviceNetwork {
    /// The network's key, as Services, pods and the indexes name it:
    /// `deviceclass:<class>` or `deviceclass:<class>/<request>`.
    pub fn key(&self) -> String {
        match &self.request {
            Some(request) => format!("{KEY_PREFIX}{}/{request}", self.class),
            None => format!("{KEY_PREFIX}{}", self.class),
        }
    }

    /// The network of a key made by [`DeviceNetwork::key`]; `None` for any other key (a
    /// Multus network's).
    pub fn from_key(key: &str) -> Option<Self> {
        let rest = key.strip_prefix(KEY_PREFIX)?;
        Some(match rest.split_once('/') {
            Some((class, request)) => DeviceNetwork {
                class: class.to_owned(),
                request: Some(request.to_owned()),
            },
            None => DeviceNetwork {
                class: rest.to_owned(),
                request: None,
            },
        })
    }

    /// Whether an allocated device of `class` for `request` (`<request>` or
    /// `<request>/<subrequest>`) is on this network.
    pub fn takes(&self, class: &str, request: &str) -> bool {
        let top = request.split_once('/').map_or(request, |(top, _)| top);
        class == self.class && self.request.as_deref().is_none_or(|r| r == top)
    }
}

impl std::fmt::Display for DeviceNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceClass {}", self.class)?;
        match &self.request {
            Some(request) => write!(f, " (request {request})"),
            None => Ok(()),
        }
    }
}

/// Whether `key` names a DRA network rather than a NetworkAttachmentDefinition.
pub fn is_device_network(key: &str) -> bool {
    key.starts_with(KEY_PREFIX)
}

/// A DNS subdomain (RFC 1123) of at most `max` characters, as Kubernetes names objects.
fn dns_name(value: &str, max: usize, dots: bool) -> bool {
    let labels_ok = value.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    !value.is_empty() && value.len() <= max && labels_ok && (dots || !value.contains('.'))
}

/// The network of the annotations' values: a DeviceClass name (a DNS subdomain) and, when
/// given, a request name (a DNS label); or what is wrong with them.
pub fn resolve(class: &str, request: Option<&str>) -> Result<DeviceNetwork, Vec<String>> {
    let class = class.trim();
    let mut problems = Vec::new();
    if class.is_empty() {
        problems.push(format!(
            "annotation {CLASS_ANNOTATION} is empty: set it to the name of the DeviceClass the \
             pods' network devices are allocated from (kubectl get deviceclasses)"
        ));
    } else if !dns_name(class, 253, true) {
        problems.push(format!(
            "annotation {CLASS_ANNOTATION}={class:?} is not a valid DeviceClass name: use the \
             name as kubectl get deviceclasses lists it (lowercase letters, digits, '-' and '.')"
        ));
    }
    let request = request.map(str::trim);
    if let Some(request) = request
        && !dns_name(request, 63, false)
    {
        problems.push(format!(
            "annotation {REQUEST_ANNOTATION}={request:?} is not a valid request name: use a \
             request name of the pods' claims (spec.devices.requests[].name: lowercase \
             letters, digits and '-'), or remove the annotation to take every device of the class"
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(DeviceNetwork {
        class: class.to_owned(),
        request: request.map(str::to_owned),
    })
}

/// The names of the ResourceClaims `pod` uses, in its namespace: `spec.resourceClaims` that
/// name a claim, the claims generated from its templates (`status.resourceClaimStatuses`, once
/// the controller made them) and the claim of its extended resources
/// (`status.extendedResourceClaimStatus`). Sorted, without duplicates.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    let status = pod.status.as_ref();
    let generated = status.and_then(|s| s.resource_claim_statuses.as_ref());
    let extended = status.and_then(|s| s.extended_resource_claim_status.as_ref());
    let mut names: Vec<String> = spec
        .into_iter()
        .flatten()
        .filter_map(|c| c.resource_claim_name.clone())
        .chain(
            generated
                .into_iter()
                .flatten()
                .filter_map(|c| c.resource_claim_name.clone()),
        )
        .chain(extended.map(|e| e.resource_claim_name.clone()))
        .filter(|name| !name.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What a driver reports of one allocated device (`status.devices[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceStatus {
    pub interface_name: Option<Box<str>>,
    pub hardware_address: Option<Box<str>>,
    /// `networkData.ips` that a slice may carry, without their prefix length, in order.
    pub ips: Box<[IpAddr]>,
    /// `networkData.ips` left out, as written, and why.
    pub unusable: Box<[Unusable]>,
    /// Sorted by type.
    pub conditions: Box<[KeptCondition]>,
}

impl DeviceStatus {
    fn read(status: &AllocatedDeviceStatus) -> Self {
        let data = status.network_data.as_ref();
        let mut ips: Vec<IpAddr> = Vec::new();
        let mut unusable = Vec::new();
        for value in data.and_then(|d| d.ips.as_ref()).into_iter().flatten() {
            match device_address(value) {
                Ok(ip) if !ips.contains(&ip) => ips.push(ip),
                Ok(_) => {}
                Err(reason) => unusable.push(Unusable {
                    value: value.clone(),
                    reason,
                }),
            }
        }
        let mut conditions: Vec<KeptCondition> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| KeptCondition {
                type_: c.type_.as_str().into(),
                status: Status::parse(&c.status),
                reason: c.reason.as_str().into(),
                message: c.message.as_str().into(),
            })
            .collect();
        conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        let text = |value: Option<&String>| -> Option<Box<str>> {
            value.filter(|v| !v.is_empty()).map(|v| v.as_str().into())
        };
        DeviceStatus {
            interface_name: text(data.and_then(|d| d.interface_name.as_ref())),
            hardware_address: text(data.and_then(|d| d.hardware_address.as_ref())),
            ips: ips.into(),
            unusable: unusable.into(),
            conditions: conditions.into(),
        }
    }

    /// The condition of type `type_`, when the driver wrote one.
    pub fn condition(&self, type_: &str) -> Option<&KeptCondition> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }
}

/// One entry of `networkData.ips`: an address in CIDR form (`192.0.2.5/24`), whose prefix
/// length is left out, checked as the EndpointSlice API checks addresses. A plain address is
/// taken as it is.
fn device_address(value: &str) -> Result<IpAddr, UnusableReason> {
    let (address, prefix) = match value.trim().split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (value.trim(), None),
    };
    let ip = address::parse(address).map_err(UnusableReason::Unparsable)?;
    if let Some(prefix) = prefix {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let valid = !prefix.is_empty()
            && prefix.bytes().all(|b| b.is_ascii_digit())
            && (prefix == "0" || !prefix.starts_with('0'))
            && prefix.parse::<u8>().is_ok_and(|p| p <= max);
        if !valid {
            return Err(UnusableReason::Unparsable(Unparsable::NotAnAddress));
        }
    }
    address::check(ip).map_err(UnusableReason::Rejected)
}

/// One device allocated to a claim (`status.allocation.devices.results[]`), with its class and
/// what its driver reports of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimDevice {
    /// The request the device was allocated for: `<request>` or `<request>/<subrequest>`.
    pub request: Box<str>,
    /// The DeviceClass that request (or subrequest) asks for, from the claim's spec; `None`
    /// when the spec has no such request (the claim was allocated by someone who knew better).
    pub class: Option<Box<str>>,
    pub driver: Box<str>,
    pub pool: Box<str>,
    pub device: Box<str>,
    pub share_id: Option<Box<str>>,
    /// `None` until the driver writes the device's status.
    pub status: Option<DeviceStatus>,
}

impl ClaimDevice {
    /// `<driver>/<pool>/<device>`, as `kubectl describe resourceclaim` shows a device.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// What the controller keeps of a ResourceClaim: the pods it is reserved for and its allocated
/// devices with their status. Never its whole object, and nothing of ResourceSlices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    pub namespace: Box<str>,
    pub name: Box<str>,
    /// The UIDs of the pods in `status.reservedFor`.
    pub reserved_for: Box<[Uid]>,
    /// The allocated devices in allocation order; empty while the claim is not allocated.
    /// Shared with the pods' attachments ([`AttachedDevice`]), which hold them too.
    pub devices: Box<[Arc<ClaimDevice>]>,
}

/// What joins a device's status to its allocation result: driver, pool, device and share ID
/// (a shared device has one status per share).
type DeviceKey<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);

fn device_key<'a>(
    driver: &'a str,
    pool: &'a str,
    device: &'a str,
    share_id: Option<&'a str>,
) -> DeviceKey<'a> {
    (driver, pool, device, share_id)
}

impl ClaimRecord {
    pub fn read(claim: &ResourceClaim) -> Self {
        let status = claim.status.as_ref();
        let reserved_for = status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| {
                r.resource == "pods" && r.api_group.as_deref().unwrap_or_default().is_empty()
            })
            .map(|r| Uid::parse(&r.uid))
            .collect();
        let requests: &[DeviceRequest] = claim
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.requests.as_deref())
            .unwrap_or_default();
        let statuses: BTreeMap<DeviceKey<'_>, &AllocatedDeviceStatus> = status
            .and_then(|s| s.devices.as_ref())
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    device_key(&d.driver, &d.pool, &d.device, d.share_id.as_deref()),
                    d,
                )
            })
            .collect();
        let devices = status
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .map(|result| {
                let key = device_key(
                    &result.driver,
                    &result.pool,
                    &result.device,
                    result.share_id.as_deref(),
                );
                Arc::new(ClaimDevice {
                    request: result.request.as_str().into(),
                    class: request_class(requests, &result.request).map(Into::into),
                    driver: result.driver.as_str().into(),
                    pool: result.pool.as_str().into(),
                    device: result.device.as_str().into(),
                    share_id: result.share_id.as_deref().map(Into::into),
                    status: statuses.get(&key).copied().map(DeviceStatus::read),
                })
            })
            .collect();
        ClaimRecord {
            namespace: claim.namespace().unwrap_or_default().into(),
            name: claim.name_any().into(),
            reserved_for,
            devices,
        }
    }

    /// Whether the claim is allocated and reserved for the pod with `uid`.
    pub fn serves(&self, uid: &Uid) -> bool {
        !self.devices.is_empty() && self.reserved_for.contains(uid)
    }
}

/// The DeviceClass of a result's `request` (`<request>` or `<request>/<subrequest>`) in the
/// claim's spec.
fn request_class<'a>(requests: &'a [DeviceRequest], request: &str) -> Option<&'a str> {
    let (top, sub) = match request.split_once('/') {
        Some((top, sub)) => (top, Some(sub)),
        None => (request, None),
    };
    let found = requests.iter().find(|r| r.name == top)?;
    match sub {
        None => found.exactly.as_ref().map(|e| e.device_class_name.as_str()),
        Some(sub) => found
            .first_available
            .iter()
            .flatten()
            .find(|s| s.name == sub)
            .map(|s| s.device_class_name.as_str()),
    }
}

/// A device behind a pod's addresses on a DRA network, for plugins and `explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedDevice {
    pub claim: Box<str>,
    /// The claim record's own device, shared.
    pub device: Arc<ClaimDevice>,
}

impl AttachedDevice {
    /// The device's readiness: `False` when its `Ready` or `NetworkReady` condition is
    /// `False` (that condition), else `True` when either is `True`, else `None` (the driver
    /// says nothing).
    pub fn readiness(&self) -> Option<&KeptCondition> {
        let status = self.device.status.as_ref()?;
        let written = READINESS_CONDITIONS.map(|t| status.condition(t));
        written
            .iter()
            .flatten()
            .find(|c| c.status == Status::False)
            .or_else(|| written.iter().flatten().find(|c| c.status == Status::True))
            .copied()
    }
}

/// A pod's attachment to one DRA network: its addresses there (or why it has none), and the
/// devices they come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttachment {
    /// The network's key ([`DeviceNetwork::key`]).
    pub key: Box<str>,
    pub attachment: Result<Attachment, StatusError>,
    pub devices: Box<[AttachedDevice]>,
}

impl DeviceAttachment {
    /// The pod's readiness on the network, as its devices' drivers report it: a device's
    /// `False` condition if any ([`AttachedDevice::readiness`]), else a `True` one, else `None`.
    pub fn readiness(&self) -> Option<&KeptCondition> {
        let each: Vec<&KeptCondition> = self
            .devices
            .iter()
            .filter_map(AttachedDevice::readiness)
            .collect();
        each.iter()
            .find(|c| c.status == Status::False)
            .or_else(|| each.first())
            .copied()
    }
}

/// The pod's attachments to every DRA network the devices of its claims that serve it are on:
/// per DeviceClass, and per DeviceClass and request. Sorted by key.
pub fn attachments(uid: &Uid, claims: &[&ClaimRecord]) -> Vec<DeviceAttachment> {
    let mut networks: Vec<DeviceNetwork> = claims
        .iter()
        .filter(|claim| claim.serves(uid))
        .flat_map(|claim| claim.devices.iter())
        .filter_map(|device| {
            let class = device.class.as_deref()?;
            let top = device
                .request
                .split_once('/')
                .map_or(&*device.request, |(top, _)| top);
            Some([
                DeviceNetwork {
                    class: class.to_owned(),
                    request: None,
                },
                DeviceNetwork {
                    class: class.to_owned(),
                    request: Some(top.to_owned()),
                },
            ])
        })
        .flatten()
        .collect();
    networks.sort_by_key(DeviceNetwork::key);
    networks.dedup();
    networks
        .iter()
        .filter_map(|network| attachment(network, uid, claims.iter().copied()))
        .collect()
}

/// The pod's attachment to `network`, from the records of its claims (the claims it names
/// that exist; see [`claim_names`]); `None` when no claim that serves the pod has a device on
/// the network. Several devices' addresses are merged in order, duplicates dropped.
pub fn attachment<'a>(
    network: &DeviceNetwork,
    uid: &Uid,
    claims: impl IntoIterator<Item = &'a ClaimRecord>,
) -> Option<DeviceAttachment> {
    let devices: Vec<AttachedDevice> = claims
        .into_iter()
        .filter(|claim| claim.serves(uid))
        .flat_map(|claim| {
            claim
                .devices
                .iter()
                .filter(|d| {
                    d.class
                        .as_deref()
                        .is_some_and(|class| network.takes(class, &d.request))
                })
                .map(|d| AttachedDevice {
                    claim: claim.name.clone(),
                    device: Arc::clone(d),
                })
        })
        .collect();
    if devices.is_empty() {
        return None;
    }
    let key = network.key();
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut unusable: Vec<Unusable> = Vec::new();
    for status in devices.iter().filter_map(|d| d.device.status.as_ref()) {
        for ip in &status.ips {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        unusable.extend(status.unusable.iter().cloned());
    }
    let attachment = if !ips.is_empty() {
        Ok(Attachment {
            ips: ips.into(),
            unusable: unusable.into(),
        })
    } else if unusable.is_empty() {
        Err(StatusError::NoDeviceIps {
            network: key.clone(),
            devices: devices.iter().map(described).collect(),
        })
    } else {
        Err(StatusError::NoUsableDeviceIps {
            network: key.clone(),
            unusable,
        })
    };
    Some(DeviceAttachment {
        key: key.into(),
        attachment,
        devices: devices.into(),
    })
}

/// `claim <name>: device <driver>/<pool>/<device>` for a message.
fn described(device: &AttachedDevice) -> String {
    format!("claim {}: device {}", device.claim, device.device.id())
}

#[cfg(test)]
mod tests;
