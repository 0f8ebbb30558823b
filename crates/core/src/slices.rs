//! Where the desired endpoints go among a Service's EndpointSlices, as Kubernetes' own
//! EndpointSlice reconciler places them, so that a change costs as few writes as it can.
//!
//! - An endpoint that is still wanted stays in its slice, updated in place when it changed;
//!   an unchanged endpoint never moves to another slice.
//! - New endpoints top up the slices that are written anyway first, then the others, fullest
//!   first; a slice is created only when no existing one has room.
//! - A slice left empty, or whose ports are no longer wanted, is deleted; when the same pass
//!   creates a slice, the create takes over the deleted slice's name instead (one write, not
//!   two).
//!
//! So one added or removed pod costs one slice write, whatever the Service's size. Pure.
//!
//! Every write says what it was planned against, so that it never lands on an object this
//! controller does not own: a slice that exists is written with the `resourceVersion` it was
//! seen with (someone who changed it since, its `managed-by` say, makes the write fail, and the
//! next plan sees the change), and a new slice carries none, which the writer sends as a
//! create that never takes over an existing object of that name ([`crate::apply`] then tries
//! [`next_free_name`]).

use nad_model::labels::{
    HEADLESS_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION,
};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    sync::Arc,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{
    api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
    jiff::Timestamp,
};
use kube_core::ResourceExt;

use super::plan::{Desired, EndpointKey, PortKey, endpoint_key, port_key};
use nad_model::input::target::{Family, ServiceTarget};

pub const DEFAULT_MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The API server rejects slices with more endpoints than this.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

/// The writes that turn a Service's slices into what [`Desired`] asks for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    /// Slices to write, whole: an update carries the `uid` and `resourceVersion` of the slice
    /// it replaces, a new slice none.
    pub write: Vec<EndpointSlice>,
    /// Slices that are no longer wanted, as they were seen.
    pub delete: Vec<Seen>,
    /// The names the Service's slices have (a new slice takes none of them).
    pub taken: BTreeSet<String>,
    /// Slices already as desired: no write.
    pub unchanged: usize,
    /// Endpoints that are new in this pass.
    pub added: usize,
    /// Endpoints that leave the slices in this pass.
    pub removed: usize,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.write.is_empty() && self.delete.is_empty()
    }

    /// The deletion of every one of `existing` (a Service no longer this controller's).
    pub fn remove_all(existing: &[Arc<EndpointSlice>]) -> Self {
        Changes {
            delete: existing.iter().map(|s| Seen::of(s)).collect(),
            removed: existing
                .iter()
                .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
                .sum(),
            ..Changes::default()
        }
    }
}

/// A slice as this controller last saw it: a write or delete of it is conditional on it being
/// still so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Seen {
    pub fn of(slice: &EndpointSlice) -> Self {
        Seen {
            name: slice.name_any(),
            uid: slice.uid(),
            resource_version: slice.resource_version(),
        }
    }
}

/// Whether `slice` is a new slice (to be created) rather than an update of one seen.
pub fn is_new(slice: &EndpointSlice) -> bool {
    slice.metadata.resource_version.is_none()
}

/// The labels every slice of `target` carries: the Service's own, then this controller's.
pub fn slice_labels(target: &ServiceTarget) -> BTreeMap<String, String> {
    let mut labels = target.labels.to_map();
    labels.insert(SERVICE_NAME_LABEL.to_owned(), target.name.clone());
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels.insert(HEADLESS_LABEL.to_owned(), String::new());
    labels
}

/// Whether a slice is managed by this controller for the Service `name`.
pub fn is_managed_slice_of(slice: &EndpointSlice, name: &str) -> bool {
    let labels = slice.labels();
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        && labels.get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
}

/// Whether what this controller sets besides endpoints and ports is as it should be: the
/// labels exactly the Service's and this controller's (an update writes them so: a label added
/// by hand is repaired, as upstream's controller does), and the Service as controlling owner.
/// What others add where this controller sets nothing (annotations, finalizers) does not count.
fn metadata_up_to_date(target: &ServiceTarget, existing: &EndpointSlice) -> bool {
    *existing.labels() == slice_labels(target)
        && existing.owner_references().iter().any(|have| {
            have.uid == target.uid && have.controller == Some(true) && have.kind == "Service"
        })
}

/// The desired endpoints of each family and port set, by identity, not placed yet.
type Wanted = BTreeMap<(Family, PortKey), (Vec<EndpointPort>, HashMap<EndpointKey, Endpoint>)>;

/// A slice of the new layout: an existing one (kept, perhaps changed) or a new one.
struct Working<'a> {
    base: Option<&'a EndpointSlice>,
    family: Family,
    ports: Vec<EndpointPort>,
    key: PortKey,
    endpoints: Vec<Endpoint>,
    changed: bool,
}

/// The writes that place `desired` among `existing` (this controller's slices of the
/// Service), with slices of at most `max_endpoints` (clamped to 1..=1000). `trigger` is when
/// the change being applied happened; a slice written without one keeps its old time.
pub fn place(
    target: &ServiceTarget,
    desired: &Desired,
    existing: &[Arc<EndpointSlice>],
    max_endpoints: usize,
    trigger: Option<Timestamp>,
) -> Changes {
    let max = max_endpoints.clamp(1, MAX_ENDPOINTS_PER_SLICE);
    let mut changes = Changes::default();
    let mut existing: Vec<&EndpointSlice> = existing.iter().map(|s| &**s).collect();
    existing.sort_by_key(|s| s.name_any());
    let mut wanted: Wanted = desired
        .groups
        .iter()
        .map(|g| {
            let endpoints = g.endpoints.iter().map(|e| (endpoint_key(e), e.clone()));
            (
                (g.family, port_key(&g.ports)),
                (g.ports.clone(), endpoints.collect()),
            )
        })
        .collect();
    let Layout {
        mut working,
        obsolete,
    } = keep(target, &existing, &mut wanted, &mut changes);
    for ((family, key), (ports, rest)) in wanted {
        let mut rest: Vec<Endpoint> = rest.into_values().collect();
        rest.sort_by_cached_key(endpoint_key);
        changes.added += rest.len();
        top_up(&mut working, family, &key, &ports, rest, max);
    }
    name_and_build(target, &existing, working, &obsolete, trigger, &mut changes);
    changes
}

/// The existing slices after the first pass: those that stay, with their wanted endpoints
/// (updated in place), and those no longer wanted.
struct Layout<'a> {
    working: Vec<Working<'a>>,
    obsolete: Vec<&'a EndpointSlice>,
}

/// Keeps every wanted endpoint where it is (taking it out of `wanted`), drops the others.
fn keep<'a>(
    target: &ServiceTarget,
    existing: &[&'a EndpointSlice],
    wanted: &mut Wanted,
    changes: &mut Changes,
) -> Layout<'a> {
    let mut layout = Layout {
        working: Vec::new(),
        obsolete: Vec::new(),
    };
    for &slice in existing {
        let count = slice.endpoints.as_ref().map_or(0, Vec::len);
        let family = match slice.address_type.as_str() {
            "IPv4" => Family::V4,
            "IPv6" => Family::V6,
            _ => {
                changes.removed += count;
                layout.obsolete.push(slice);
                continue;
            }
        };
        if slice.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = port_key(slice.ports.as_deref().unwrap_or_default());
        let Some((ports, want)) = wanted.get_mut(&(family, key.clone())) else {
            changes.removed += count;
            layout.obsolete.push(slice);
            continue;
        };
        let mut endpoints = Vec::with_capacity(count);
        let mut changed = !metadata_up_to_date(target, slice);
        for have in slice.endpoints.iter().flatten() {
            match want.remove(&endpoint_key(have)) {
                Some(endpoint) => {
                    changed |= endpoint != *have;
                    endpoints.push(endpoint);
                }
                None => {
                    changed = true;
                    changes.removed += 1;
                }
            }
        }
        if endpoints.is_empty() {
            layout.obsolete.push(slice);
            continue;
        }
        layout.working.push(Working {
            base: Some(slice),
            family,
            ports: ports.clone(),
            key,
            endpoints,
            changed,
        });
    }
    layout
}

/// Places new endpoints: into the slices written anyway first, then the others, fullest first
/// within each; what is left into new slices.
fn top_up(
    working: &mut Vec<Working<'_>>,
    family: Family,
    key: &PortKey,
    ports: &[EndpointPort],
    rest: Vec<Endpoint>,
    max: usize,
) {
    let mut rest = VecDeque::from(rest);
    let mut order: Vec<usize> = (0..working.len())
        .filter(|&i| working[i].family == family && working[i].key == *key)
        .collect();
    order.sort_by_key(|&i| (!working[i].changed, usize::MAX - working[i].endpoints.len()));
    for i in order {
        while working[i].endpoints.len() < max
            && let Some(endpoint) = rest.pop_front()
        {
            working[i].endpoints.push(endpoint);
            working[i].changed = true;
        }
    }
    while !rest.is_empty() {
        let take = rest.len().min(max);
        working.push(Working {
            base: None,
            family,
            ports: ports.to_vec(),
            key: key.clone(),
            endpoints: rest.drain(..take).collect(),
            changed: true,
        });
    }
}

/// Turns the changed slices into writes: new slices take the names of obsolete ones first (an
/// update instead of a create and a delete), then fresh names; obsolete slices left over are
/// deleted.
fn name_and_build(
    target: &ServiceTarget,
    existing: &[&EndpointSlice],
    working: Vec<Working<'_>>,
    obsolete: &[&EndpointSlice],
    trigger: Option<Timestamp>,
    changes: &mut Changes,
) {
    // Names stay taken while a slice of that name exists, even one being deleted.
    let taken = &mut changes.taken;
    taken.extend(existing.iter().map(|s| s.name_any()));
    let mut reusable = obsolete.to_vec();
    for slice in &working {
        if !slice.changed {
            changes.unchanged += 1;
            continue;
        }
        let previous = slice.base.or_else(|| {
            // A slice's address type is immutable: only one of the same family is taken over.
            let at = reusable
                .iter()
                .position(|s| s.address_type == slice.family.address_type())?;
            Some(reusable.remove(at))
        });
        let name = match previous {
            Some(previous) => previous.name_any(),
            None => fresh_name(&target.name, slice.family, taken),
        };
        let time = trigger.map(|t| t.to_string());
        changes
            .write
            .push(build(target, name, previous, slice, time));
    }
    changes.delete = reusable.iter().map(|s| Seen::of(s)).collect();
}

/// `<service>-<ipv4|ipv6>-<n>` with the smallest `n` not taken.
fn fresh_name(service: &str, family: Family, taken: &mut BTreeSet<String>) -> String {
    let name = (0..)
        .map(|n| format!("{service}-{}-{n}", family.slug()))
        .find(|name| !taken.contains(name))
        .unwrap_or_default();
    taken.insert(name.clone());
    name
}

/// The name a new slice takes when its own turns out to belong to an object this controller
/// does not manage (one its watch does not show): the next one not in `taken`, which gains it.
pub fn next_free_name(slice: &EndpointSlice, taken: &mut BTreeSet<String>) -> String {
    let family = match slice.address_type.as_str() {
        "IPv6" => Family::V6,
        _ => Family::V4,
    };
    let service = slice
        .labels()
        .get(SERVICE_NAME_LABEL)
        .cloned()
        .unwrap_or_default();
    taken.insert(slice.name_any());
    fresh_name(&service, family, taken)
}

/// The slice as it is to be written. A new slice has this controller's metadata only. An
/// update is written whole (an update replaces the object): it carries the `uid` and
/// `resourceVersion` it was planned against, and keeps what others added to the metadata and
/// this controller does not set (annotations, finalizers, other owners), as the upstream
/// EndpointSlice controller keeps them; the labels are the Service's and this controller's
/// only, so a label removed from the Service, or added by hand, leaves the slice.
fn build(
    target: &ServiceTarget,
    name: String,
    previous: Option<&EndpointSlice>,
    slice: &Working<'_>,
    trigger_time: Option<String>,
) -> EndpointSlice {
    let owner = OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Service".to_owned(),
        name: target.name.clone(),
        uid: target.uid.clone(),
        controller: Some(true),
        ..OwnerReference::default()
    };
    let mut metadata = match previous {
        Some(previous) => ObjectMeta {
            managed_fields: None,
            ..previous.metadata.clone()
        },
        None => ObjectMeta::default(),
    };
    metadata.name = Some(name);
    metadata.namespace = Some(target.namespace.clone());
    metadata.labels = Some(slice_labels(target));
    if let Some(time) = trigger_time {
        metadata
            .annotations
            .get_or_insert_default()
            .insert(TRIGGER_TIME_ANNOTATION.to_owned(), time);
    }
    let others = metadata.owner_references.take().into_iter().flatten();
    let others = others.filter(|o| o.uid != target.uid && o.controller != Some(true));
    metadata.owner_references = Some(std::iter::once(owner).chain(others).collect());
    EndpointSlice {
        metadata,
        address_type: slice.family.address_type().to_owned(),
        endpoints: Some(slice.endpoints.clone()),
        ports: Some(slice.ports.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{observe::tests::target, plan::EndpointGroup};
    use k8s_openapi::api::{core::v1::ObjectReference, discovery::v1::EndpointConditions};

    fn endpoint(pod: &str, ip: &str, ready: bool) -> Endpoint {
        Endpoint {
            addresses: vec![ip.to_owned()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            }),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                namespace: Some("team-a".into()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }
    }

    fn pods(range: std::ops::Range<usize>) -> Vec<Endpoint> {
        range
            .map(|i| {
                endpoint(
                    &format!("p{i:04}"),
                    &format!("10.0.{}.{}", i / 200, i % 200 + 1),
                    true,
                )
            })
            .collect()
    }

    fn desired(endpoints: Vec<Endpoint>) -> Desired {
        desired_with(endpoints, vec![http(80)])
    }

    fn http(port: i32) -> EndpointPort {
        EndpointPort {
            name: Some("http".into()),
            port: Some(port),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }
    }

    fn desired_with(mut endpoints: Vec<Endpoint>, ports: Vec<EndpointPort>) -> Desired {
        endpoints.sort_by_cached_key(endpoint_key);
        Desired {
            groups: if endpoints.is_empty() {
                vec![]
            } else {
                vec![EndpointGroup {
                    family: Family::V4,
                    ports,
                    endpoints,
                }]
            },
            ..Desired::default()
        }
    }

    /// What the API returns for written slices: the same fields plus server-set metadata and
    /// an annotation someone else added.
    fn stored(slices: &[EndpointSlice]) -> Vec<Arc<EndpointSlice>> {
        slices
            .iter()
            .map(|slice| {
                let mut s = slice.clone();
                s.metadata.resource_version = Some("42".into());
                s.metadata.uid = Some(format!("uid-{}", s.name_any()));
                s.annotations_mut()
                    .insert("added-by-someone".into(), "x".into());
                Arc::new(s)
            })
            .collect()
    }

    /// Applies `changes` to `existing`, as the API would.
    fn after(existing: &[Arc<EndpointSlice>], changes: &Changes) -> Vec<Arc<EndpointSlice>> {
        let mut out: BTreeMap<String, Arc<EndpointSlice>> =
            existing.iter().map(|s| (s.name_any(), s.clone())).collect();
        for gone in &changes.delete {
            out.remove(&gone.name);
        }
        for slice in stored(&changes.write) {
            out.insert(slice.name_any(), slice);
        }
        out.into_values().collect()
    }

    fn layout(slices: &[Arc<EndpointSlice>]) -> Vec<(String, usize)> {
        slices
            .iter()
            .map(|s| (s.name_any(), s.endpoints.as_ref().map_or(0, Vec::len)))
            .collect()
    }

    fn place_all(want: &Desired, existing: &[Arc<EndpointSlice>]) -> Changes {
        place(&target("team-a/m"), want, existing, 100, None)
    }

    #[test]
    fn a_new_service_gets_full_slices_named_in_turn() {
        let changes = place_all(&desired(pods(0..250)), &[]);
        let slices = stored(&changes.write);
        assert_eq!(
            layout(&slices),
            [
                ("web-ipv4-0".into(), 100),
                ("web-ipv4-1".into(), 100),
                ("web-ipv4-2".into(), 50)
            ]
        );
        assert_eq!((changes.added, changes.removed), (250, 0));
        let s = &slices[0];
        assert_eq!(s.labels()[SERVICE_NAME_LABEL], "web");
        assert_eq!(s.labels()[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(s.labels()[HEADLESS_LABEL], "");
        assert_eq!(s.owner_references()[0].uid, "svc-uid");
        assert!(is_managed_slice_of(s, "web") && !is_managed_slice_of(s, "other"));
    }

    /// The slice cache keeps what this controller writes as records, not whole: every field
    /// it sets reads back from one exactly.
    #[test]
    fn what_this_controller_writes_is_cached_as_a_record() {
        use nad_model::slice::{SliceInterners, SliceRecord};
        let mut endpoints = pods(0..30);
        endpoints[3].hostname = Some("p0003".into());
        endpoints[4].node_name = Some("node-a".into());
        endpoints[4].zone = Some("zone-1".into());
        endpoints[5].conditions = Some(EndpointConditions {
            ready: Some(false),
            serving: Some(true),
            terminating: Some(true),
        });
        if let Some(pod) = endpoints[6].target_ref.as_mut() {
            pod.uid = Some("6f1c2a3b-4d5e-4f60-8a7b-000000000006".into());
        }
        let at: Timestamp = "2026-12-01T10:00:00.5Z".parse().unwrap();
        let changes = place(&target("team-a/m"), &desired(endpoints), &[], 100, Some(at));
        let mut interners = SliceInterners::default();
        for slice in stored(&changes.write) {
            let mut slice = (*slice).clone();
            slice.metadata.generation = Some(1);
            slice.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-12-01T10:00:01Z".parse().unwrap(),
                ));
            let record = SliceRecord::of(&slice, &mut interners);
            assert_eq!(record.map(|r| r.to_slice()), Some(slice));
        }
    }

    #[test]
    fn an_unchanged_input_writes_nothing() {
        let want = desired(pods(0..250));
        let existing = stored(&place_all(&want, &[]).write);
        let changes = place_all(&want, &existing);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(changes.unchanged, 3);
        assert_eq!((changes.added, changes.removed), (0, 0));
    }

    /// The upstream reconciler's rule: one added pod costs one write at any size, and no
    /// unchanged endpoint moves.
    #[test]
    fn a_pod_added_in_the_middle_tops_up_one_slice() {
        let mut endpoints = pods(0..250);
        let existing = stored(&place_all(&desired(endpoints.clone()), &[]).write);
        endpoints.push(endpoint("p0100a", "10.9.0.1", true));
        let changes = place_all(&desired(endpoints), &existing);
        assert_eq!(
            changes.write.len(),
            1,
            "{:?}",
            layout(&stored(&changes.write))
        );
        assert!(changes.delete.is_empty());
        assert_eq!(
            changes.write[0].name_any(),
            "web-ipv4-2",
            "the only one with room"
        );
        assert_eq!(changes.write[0].endpoints.as_ref().unwrap().len(), 51);
        assert_eq!((changes.added, changes.removed), (1, 0));
    }

    #[test]
    fn new_endpoints_fill_the_fullest_slice_with_room_first() {
        let existing = stored(&place_all(&desired(pods(0..150)), &[]).write);
        // Two pods of the first slice go: it has room for two, the second for fifty.
        let mut endpoints = pods(0..150);
        endpoints.retain(|e| !["p0003", "p0004"].contains(&endpoint_key(e).0.as_str()));
        let existing = after(
            &existing,
            &place_all(&desired(endpoints.clone()), &existing),
        );
        assert_eq!(
            layout(&existing),
            [("web-ipv4-0".into(), 98), ("web-ipv4-1".into(), 50)]
        );
        endpoints.push(endpoint("q1", "10.9.0.1", true));
        let changes = place_all(&desired(endpoints.clone()), &existing);
        assert_eq!(changes.write.len(), 1);
        assert_eq!(
            changes.write[0].name_any(),
            "web-ipv4-0",
            "98 is fuller than 50"
        );
        // A change that writes a slice anyway takes new endpoints first.
        let existing = after(&existing, &changes);
        endpoints.retain(|e| endpoint_key(e).0 != "p0149");
        endpoints.push(endpoint("q2", "10.9.0.2", true));
        let changes = place_all(&desired(endpoints), &existing);
        assert_eq!(
            changes.write.len(),
            1,
            "{:?}",
            layout(&stored(&changes.write))
        );
        assert_eq!(changes.write[0].name_any(), "web-ipv4-1");
    }

    #[test]
    fn a_flip_updates_its_endpoint_in_place() {
        let mut endpoints = pods(0..250);
        let existing = stored(&place_all(&desired(endpoints.clone()), &[]).write);
        endpoints[120] = endpoint("p0120", "10.0.0.121", false);
        let changes = place_all(&desired(endpoints), &existing);
        assert_eq!(changes.write.len(), 1);
        let slice = &changes.write[0];
        assert_eq!(slice.name_any(), "web-ipv4-1");
        let before = existing[1].endpoints.as_ref().unwrap();
        let now = slice.endpoints.as_ref().unwrap();
        let keys = |e: &[Endpoint]| e.iter().map(endpoint_key).collect::<Vec<_>>();
        assert_eq!(keys(before), keys(now), "same endpoints, same order");
        assert_eq!((changes.added, changes.removed), (0, 0));
    }

    #[test]
    fn removed_pods_leave_their_slice_and_an_emptied_slice_is_deleted() {
        let endpoints = pods(0..250);
        let existing = stored(&place_all(&desired(endpoints.clone()), &[]).write);
        let mut fewer = endpoints.clone();
        fewer.remove(10);
        let changes = place_all(&desired(fewer), &existing);
        assert_eq!(changes.write.len(), 1);
        assert_eq!(changes.write[0].name_any(), "web-ipv4-0");
        assert_eq!((changes.added, changes.removed), (0, 1));

        let changes = place_all(&desired(endpoints[..1].to_vec()), &existing);
        let deleted: Vec<_> = changes.delete.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(deleted, ["web-ipv4-1", "web-ipv4-2"]);
        assert_eq!(
            changes.delete[0],
            Seen {
                name: "web-ipv4-1".into(),
                uid: Some("uid-web-ipv4-1".into()),
                resource_version: Some("42".into()),
            },
            "deleted only as it was seen"
        );
        assert_eq!(changes.write.len(), 1, "the first slice shrinks");
        let changes = place_all(&desired(vec![]), &existing);
        assert_eq!(changes.delete.len(), 3);
        assert_eq!(changes.removed, 250);
    }

    #[test]
    fn a_create_and_a_delete_become_one_update() {
        let endpoints = pods(0..50);
        let existing = stored(&place_all(&desired(endpoints.clone()), &[]).write);
        // Every pod's port changes: the old slice's ports are no longer wanted.
        let changes = place(
            &target("team-a/m"),
            &desired_with(endpoints, vec![http(8080)]),
            &existing,
            100,
            None,
        );
        assert!(changes.delete.is_empty(), "{changes:?}");
        assert_eq!(changes.write.len(), 1);
        assert_eq!(changes.write[0].name_any(), "web-ipv4-0");
        assert_eq!(changes.write[0].ports.as_ref().unwrap()[0].port, Some(8080));
    }

    /// An update replaces the slice whole, as the upstream controller writes it: what others
    /// added where this controller sets nothing stays, the labels are exactly the Service's and
    /// this controller's, and it is conditional on the uid and version seen.
    #[test]
    fn an_update_keeps_what_others_added_except_labels() {
        let want = desired(pods(0..3));
        let mut edited = (*stored(&place_all(&want, &[]).write)[0]).clone();
        edited.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        let other = OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Audit".into(),
            name: "audit".into(),
            uid: "uid-audit".into(),
            ..OwnerReference::default()
        };
        edited.owner_references_mut().push(other.clone());
        let clean = place_all(&want, &[Arc::new(edited.clone())]);
        assert!(
            clean.is_empty(),
            "others' annotations, finalizers and owners are no change"
        );

        edited
            .labels_mut()
            .insert("added-by-hand".into(), "x".into());
        let changes = place_all(&want, &[Arc::new(edited)]);
        let [update] = &changes.write[..] else {
            panic!("{changes:?}")
        };
        assert!(
            !update.labels().contains_key("added-by-hand"),
            "a hand-added label is repaired"
        );
        assert_eq!(*update.labels(), slice_labels(&target("team-a/m")));
        assert_eq!(update.annotations()["added-by-someone"], "x");
        assert_eq!(
            update.finalizers(),
            ["example.com/keep".to_owned()],
            "a finalizer of someone else's is not dropped"
        );
        assert_eq!(update.owner_references().len(), 2);
        assert_eq!(update.owner_references()[0].controller, Some(true));
        assert_eq!(update.owner_references()[1], other);
        assert_eq!(update.uid().as_deref(), Some("uid-web-ipv4-0"));
        assert_eq!(update.resource_version().as_deref(), Some("42"));
    }

    /// An obsolete slice's name is taken over only by a slice of its address type: the API
    /// refuses to change a slice's `addressType`.
    #[test]
    fn an_obsolete_slice_is_taken_over_only_by_its_own_family() {
        let existing = stored(&place_all(&desired(pods(0..5)), &[]).write);
        let mut v6 = desired(vec![endpoint("p0000", "fd00::1", true)]);
        v6.groups[0].family = Family::V6;
        let changes = place_all(&v6, &existing);
        assert_eq!(layout(&stored(&changes.write)), [("web-ipv6-0".into(), 1)]);
        assert_eq!(changes.write[0].address_type, "IPv6");
        assert!(
            is_new(&changes.write[0]),
            "created, not an update of the IPv4 slice"
        );
        let deleted: Vec<_> = changes.delete.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(deleted, ["web-ipv4-0"]);
    }

    #[test]
    fn edited_or_deleted_slices_are_written_again() {
        let want = desired(pods(0..3));
        let written = place_all(&want, &[]).write;
        let existing = stored(&written);
        // Deleted by someone: created again.
        assert_eq!(place_all(&want, &[]).write, written);
        let edit = |f: &dyn Fn(&mut EndpointSlice)| {
            let mut slice = (*existing[0]).clone();
            f(&mut slice);
            place_all(&want, &[Arc::new(slice)])
        };
        let c = edit(&|s| s.endpoints.as_mut().unwrap()[0].addresses = vec!["10.9.9.9".into()]);
        assert_eq!(
            (c.write.len(), c.delete.len()),
            (1, 0),
            "endpoints edited by hand"
        );
        assert_eq!(c.write[0].endpoints.as_ref().unwrap().len(), 3);
        let c = edit(&|s| {
            s.labels_mut().insert(HEADLESS_LABEL.into(), "no".into());
        });
        assert_eq!(c.write.len(), 1, "our label changed");
        let c = edit(&|s| s.ports = Some(vec![http(1)]));
        assert_eq!(
            (c.write.len(), c.delete.len()),
            (1, 0),
            "ports edited: rewritten in place"
        );
        let c = edit(&|s| s.metadata.owner_references = None);
        assert_eq!(c.write.len(), 1, "owner reference removed");
        let c = edit(&|s| {
            s.annotations_mut().insert("someone".into(), "else".into());
        });
        assert!(c.is_empty(), "fields others own are theirs");
    }

    #[test]
    fn written_slices_carry_the_trigger_time_and_keep_it_otherwise() {
        let t = target("team-a/m");
        let at: Timestamp = "2026-12-01T10:00:00.5Z".parse().unwrap();
        let first = place(&t, &desired(pods(0..150)), &[], 100, Some(at));
        let times: Vec<_> = first
            .write
            .iter()
            .map(|s| s.annotations()[TRIGGER_TIME_ANNOTATION].clone())
            .collect();
        assert_eq!(times, ["2026-12-01T10:00:00.5Z", "2026-12-01T10:00:00.5Z"]);
        let existing = stored(&first.write);
        let mut endpoints = pods(0..150);
        endpoints[0] = endpoint("p0000", "10.0.0.1", false);
        let again = place(&t, &desired(endpoints), &existing, 100, None);
        assert_eq!(
            again.write[0].annotations()[TRIGGER_TIME_ANNOTATION],
            "2026-12-01T10:00:00.5Z",
            "no new time: the old one stays"
        );
    }

    #[test]
    fn the_slice_size_is_clamped_to_what_the_api_accepts() {
        let t = target("team-a/m");
        let sizes = |max| {
            place(&t, &desired(pods(0..1001)), &[], max, None)
                .write
                .iter()
                .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(5000), [1000, 1]);
        assert_eq!(sizes(0).len(), 1001);
    }

    #[test]
    fn terminating_slices_are_left_alone_and_keep_their_names() {
        let want = desired(pods(0..3));
        let mut doomed = (*stored(&place_all(&want, &[]).write)[0]).clone();
        doomed.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        let changes = place_all(&want, &[Arc::new(doomed)]);
        assert!(changes.delete.is_empty());
        assert_eq!(
            changes.write[0].name_any(),
            "web-ipv4-1",
            "the name is still taken"
        );
    }

    /// A slice that exists is written only as it was seen; a new one carries no
    /// resourceVersion, which the writer sends as a create.
    #[test]
    fn writes_are_conditional_on_the_slice_as_it_was_seen() {
        let existing = stored(&place_all(&desired(pods(0..150)), &[]).write);
        assert!(
            place_all(&desired(pods(0..150)), &[])
                .write
                .iter()
                .all(is_new)
        );
        let mut endpoints = pods(0..150);
        endpoints[0] = endpoint("p0000", "10.0.0.1", false);
        endpoints.extend(pods(150..260));
        let changes = place_all(&desired(endpoints), &existing);
        let seen: Vec<_> = changes
            .write
            .iter()
            .map(|s| (s.name_any(), s.resource_version()))
            .collect();
        assert_eq!(
            seen,
            [
                ("web-ipv4-0".into(), Some("42".into())),
                ("web-ipv4-1".into(), Some("42".into())),
                ("web-ipv4-2".into(), None),
            ]
        );
        assert_eq!(
            changes.taken,
            BTreeSet::from([
                "web-ipv4-0".into(),
                "web-ipv4-1".into(),
                "web-ipv4-2".into()
            ])
        );
        // A new slice that takes over an obsolete one's name updates that one.
        let moved = place(
            &target("team-a/m"),
            &desired_with(pods(0..50), vec![http(8080)]),
            &existing[..1],
            100,
            None,
        );
        assert_eq!(moved.write[0].resource_version().as_deref(), Some("42"));
    }

    #[test]
    fn a_taken_name_gives_the_next_free_one() {
        let changes = place_all(&desired(pods(0..3)), &[]);
        let mut slice = changes.write[0].clone();
        let mut taken = changes.taken;
        assert_eq!(next_free_name(&slice, &mut taken), "web-ipv4-1");
        slice.metadata.name = Some("web-ipv4-1".into());
        taken.insert("web-ipv4-2".into());
        assert_eq!(next_free_name(&slice, &mut taken), "web-ipv4-3");
        slice.address_type = "IPv6".into();
        assert_eq!(next_free_name(&slice, &mut taken), "web-ipv6-0");
    }

    #[test]
    fn a_slice_of_another_controller_is_not_this_controllers() {
        let mut foreign = (*stored(&place_all(&desired(pods(0..1)), &[]).write)[0]).clone();
        foreign.labels_mut().insert(
            MANAGED_BY_LABEL.into(),
            "endpointslice-controller.k8s.io".into(),
        );
        assert!(!is_managed_slice_of(&foreign, "web"));
    }

    /// kubernetes#136502: the API returns a slice written with `ports: []` without ports; a
    /// Service without ports must not see that as a change.
    #[test]
    fn a_service_without_ports_is_not_rewritten_for_a_missing_empty_port_list() {
        let want = desired_with(pods(0..3), vec![]);
        let written = place_all(&want, &[]).write;
        assert_eq!(written[0].ports, Some(vec![]));
        let mut returned = (*stored(&written)[0]).clone();
        returned.ports = None;
        let changes = place_all(&want, &[Arc::new(returned)]);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(changes.unchanged, 1);
    }
}
