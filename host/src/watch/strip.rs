//! What the caches keep of the objects they hold: managed fields and the last-applied
//! annotation are dropped, since nothing reads them and they are most of an object's size.
//! (Services are not kept as objects at all: the Service store holds records,
//! [`nad_model::input::service_record`].)

use kube::api::ObjectMeta;

use nad_model::input::service_record::LAST_APPLIED;

pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn managed_fields_and_the_last_applied_annotation_are_dropped() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "web-ipv4-0", "annotations": {LAST_APPLIED: "{}", "team": "a"},
            "managedFields": [{"manager": "kubectl"}],
        }))
        .unwrap();
        strip_meta(&mut meta);
        let expected: ObjectMeta =
            serde_json::from_value(json!({"name": "web-ipv4-0", "annotations": {"team": "a"}}))
                .unwrap();
        assert_eq!(meta, expected);
    }
}
