//! A Service by namespace and name: the key of everything kept per Service.

use std::fmt;

use kube_core::{Resource, ResourceExt};

/// A Service by namespace and name (Services are namespaced; the namespace is never empty for
/// a Service read from the API).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
}

impl ServiceRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The reference of `service` (a Service, or its record).
    pub fn of(service: &impl Resource) -> Self {
        ServiceRef::new(service.namespace().unwrap_or_default(), service.name_any())
    }
}

/// `namespace/name`, as kubectl names it.
impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_service_is_named_by_namespace_and_name() {
        let service = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            ..Service::default()
        };
        let key = ServiceRef::of(&service);
        assert_eq!(key, ServiceRef::new("shop", "web"));
        assert_eq!(key.to_string(), "shop/web");
    }
}
