//! What the caches keep of the objects they hold: managed fields and the last-applied
//! annotation are dropped, since nothing reads them and they are most of an object's size.

use kube::api::ObjectMeta;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}
