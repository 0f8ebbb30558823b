//! A Service as the controller keeps it: its key, and what it is to this controller,
//! classified once when it arrives ([`target::classify`]). The whole object is dropped as it
//! is decoded: a Service kept whole took 2.2 KB (its spec and status, and a 544-byte map node
//! for its labels and another for its annotations); a record of a managed Service keeps the
//! fields planning reads, its labels and annotations as [`crate::pairs::Pairs`].

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Deserializer};

use super::target::{self, Target};

/// A Service reduced to its key and its [`Target`]. Its metadata holds the name, namespace,
/// uid and resource version (the reconcile's key, its Events' reference) and the deletion
/// timestamp (a Service being deleted is released), nothing else.
///
/// It is a [`Resource`] of the Service kind, decoded from a Service: the Service watch, its
/// store and the reconciles hold records, never whole Services.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceRecord {
    metadata: ObjectMeta,
    target: Target,
}

impl ServiceRecord {
    /// What the Service is to this controller.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The network of a managed, valid Service.
    pub fn network(&self) -> Option<&str> {
        match &self.target {
            Target::Managed(target) => Some(&target.network),
            _ => None,
        }
    }
}

/// kubectl's copy of the object it applied: nothing reads it, and it is as large as the
/// Service.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl From<Service> for ServiceRecord {
    fn from(mut service: Service) -> Self {
        if let Some(annotations) = service.metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED);
        }
        let target = target::classify(&service);
        let meta = service.metadata;
        ServiceRecord {
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                deletion_timestamp: meta.deletion_timestamp,
                ..ObjectMeta::default()
            },
            target,
        }
    }
}

impl From<&Service> for ServiceRecord {
    fn from(service: &Service) -> Self {
        ServiceRecord::from(service.clone())
    }
}

impl<'de> Deserialize<'de> for ServiceRecord {
    /// Decodes a Service and keeps its record.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Service::deserialize(deserializer).map(ServiceRecord::from)
    }
}

impl Resource for ServiceRecord {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Service::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        Service::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        Service::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Service::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::target::NETWORK_ANNOTATION;
    use kube_core::ResourceExt;
    use serde_json::json;

    fn service(annotations: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "team-a", "uid": "u-1",
                         "resourceVersion": "42", "generation": 3,
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "deletionTimestamp": "2026-01-02T00:00:00Z",
                         "labels": {"app": "web"}, "annotations": annotations,
                         "finalizers": ["x"], "managedFields": [{"manager": "kubectl"}]},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
                     "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "sessionAffinity": "None", "publishNotReadyAddresses": true,
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            "status": {"loadBalancer": {}},
        })
    }

    #[test]
    fn a_record_is_decoded_from_a_service_and_keeps_its_key_and_classification() {
        for annotations in [
            json!({NETWORK_ANNOTATION: "macvlan", "team": "a", LAST_APPLIED: "{}"}),
            json!({NETWORK_ANNOTATION: "Not Valid"}),
            json!({"team": "a"}),
        ] {
            let mut whole: Service = serde_json::from_value(service(annotations.clone())).unwrap();
            // What the record classifies: the Service without kubectl's copy of itself.
            whole
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .remove(LAST_APPLIED);
            let record: ServiceRecord =
                serde_json::from_value(service(annotations.clone())).unwrap();
            assert_eq!(record.target(), &target::classify(&whole), "{annotations}");
            let expected_meta: ObjectMeta = serde_json::from_value(json!({
                "name": "web", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42",
                "deletionTimestamp": "2026-01-02T00:00:00Z",
            }))
            .unwrap();
            assert_eq!(record.meta(), &expected_meta);
            assert_eq!(record.object_ref(&()), whole.object_ref(&()));
            assert_eq!(record.name_any(), "web");
        }
        let managed: ServiceRecord =
            serde_json::from_value(service(json!({NETWORK_ANNOTATION: "macvlan"}))).unwrap();
        assert_eq!(managed.network(), Some("team-a/macvlan"));
        let with_last_applied: ServiceRecord = serde_json::from_value(service(
            json!({NETWORK_ANNOTATION: "macvlan", LAST_APPLIED: "{}"}),
        ))
        .unwrap();
        let Target::Managed(target) = with_last_applied.target() else {
            panic!("managed: {with_last_applied:?}");
        };
        assert_eq!(target.annotations.get(LAST_APPLIED), None);
        assert_eq!(target.annotations.get(NETWORK_ANNOTATION), Some("macvlan"));
        let unmanaged: ServiceRecord = serde_json::from_value(service(json!({}))).unwrap();
        assert_eq!(unmanaged.network(), None);
        assert_eq!(
            ServiceRecord::url_path(&(), Some("team-a")),
            Service::url_path(&(), Some("team-a"))
        );
    }
}
