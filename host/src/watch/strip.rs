//! What the caches keep of the objects they hold: managed fields and the last-applied
//! annotation are dropped, since nothing reads them and they are most of an object's size.

use k8s_openapi::api::core::v1::Service;
use kube::api::ObjectMeta;

use nad_model::input::target;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// A Service not annotated for this controller is kept as its metadata alone: a reconcile of it
/// only removes slices this controller may have left, and most Services of a cluster are such.
pub fn strip_service(service: &mut Service) {
    strip_meta(&mut service.metadata);
    let managed = service
        .metadata
        .annotations
        .as_ref()
        .is_some_and(target::opted_in);
    if !managed {
        service.spec = None;
        service.status = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nad_model::input::{device_network::CLASS_ANNOTATION, target::NETWORK_ANNOTATION};
    use serde_json::json;

    #[test]
    fn an_unmanaged_service_keeps_its_metadata_only() {
        let service = |annotations: serde_json::Value| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "annotations": annotations,
                             "managedFields": [{"manager": "kubectl"}]},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
            }))
            .unwrap()
        };
        let mut plain = service(json!({LAST_APPLIED: "{}", "team": "a"}));
        strip_service(&mut plain);
        assert!(plain.spec.is_none() && plain.metadata.managed_fields.is_none());
        assert_eq!(plain.metadata.annotations.unwrap().len(), 1);
        let mut ours = service(json!({NETWORK_ANNOTATION: "macvlan"}));
        strip_service(&mut ours);
        assert!(
            ours.spec.is_some(),
            "a managed Service keeps what planning reads"
        );
        let mut on_devices = service(json!({CLASS_ANNOTATION: "dranet"}));
        strip_service(&mut on_devices);
        assert!(
            on_devices.spec.is_some(),
            "a Service on a DRA network is managed too"
        );
    }
}
