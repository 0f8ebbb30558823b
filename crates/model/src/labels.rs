//! The labels and annotations this controller writes on EndpointSlices, as Kubernetes' own
//! EndpointSlice controller names them.

/// Only slices carrying this label with [`MANAGED_BY`] are ever touched.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "nad-service-controller.isim.dev";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// When the change that caused a slice's last write happened (RFC 3339), as Kubernetes'
/// EndpointSlice controller sets it.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
