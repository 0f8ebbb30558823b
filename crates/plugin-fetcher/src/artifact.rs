//! What a plugin artifact's manifest must hold: one Wasm layer, in one of the media types the
//! Wasm OCI conventions use, no larger than a plugin may be. Pure: read before any layer is
//! downloaded.

use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE, OciImageManifest,
};

/// The layer media types of a Wasm component: the CNCF Wasm OCI artifact layout (`wkg`,
/// `oras push … :application/wasm`), the older wasm-to-oci one (Kubewarden), and Istio's
/// WasmPlugin compat variant.
pub const LAYER_MEDIA_TYPES: [&str; 3] = [
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

/// The layer `plugin push` writes, and the config media type of the CNCF layout.
pub const PUSH_LAYER_MEDIA_TYPE: &str = LAYER_MEDIA_TYPES[0];
pub const PUSH_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// The manifest media types asked for.
pub const MANIFEST_MEDIA_TYPES: [&str; 2] = [OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE];

/// The component's layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub digest: String,
    pub size: u64,
    pub media_type: String,
}

/// The Wasm layer of the manifest `body`, or why it has none a plugin can come from.
pub fn wasm_layer(body: &[u8], limit: u64) -> Result<Layer, String> {
    let kind: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("its manifest is not JSON: {e}"))?;
    let media_type = kind.get("mediaType").and_then(|m| m.as_str());
    if matches!(
        media_type,
        Some(OCI_IMAGE_INDEX_MEDIA_TYPE | IMAGE_MANIFEST_LIST_MEDIA_TYPE)
    ) || kind.get("manifests").is_some()
    {
        return Err(
            "it is an image index (a list of manifests), not a plugin artifact: reference one \
             manifest by its digest"
                .to_owned(),
        );
    }
    let manifest: OciImageManifest = serde_json::from_value(kind)
        .map_err(|e| format!("its manifest is not an OCI image manifest: {e}"))?;
    let wasm: Vec<_> = manifest
        .layers
        .iter()
        .filter(|l| LAYER_MEDIA_TYPES.contains(&l.media_type.as_str()))
        .collect();
    let layer = match wasm.as_slice() {
        [layer] => *layer,
        [] => {
            let found: Vec<&str> = manifest
                .layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect();
            return Err(format!(
                "it has no Wasm layer (its layers: {}): a plugin artifact has one layer of media \
                 type {}",
                if found.is_empty() {
                    "none".to_owned()
                } else {
                    found.join(", ")
                },
                LAYER_MEDIA_TYPES.join(", ")
            ));
        }
        several => {
            return Err(format!(
                "it has {} Wasm layers: a plugin artifact has exactly one",
                several.len()
            ));
        }
    };
    super::reference::check_digest(&layer.digest).map_err(|e| format!("its Wasm layer's {e}"))?;
    let size = u64::try_from(layer.size)
        .map_err(|_| format!("its Wasm layer's size is {}", layer.size))?;
    if size > limit {
        return Err(format!(
            "its Wasm layer is {size} bytes, over the limit of {limit} bytes for a plugin (not \
             downloaded)"
        ));
    }
    Ok(Layer {
        digest: layer.digest.clone(),
        size,
        media_type: layer.media_type.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYER: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const CONFIG: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn manifest(layers: &[(&str, i64)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(media_type, size)| {
                serde_json::json!({"mediaType": media_type, "digest": LAYER, "size": size})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "config": {"mediaType": PUSH_CONFIG_MEDIA_TYPE, "digest": CONFIG, "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn every_wasm_layer_convention_is_accepted() {
        for media_type in LAYER_MEDIA_TYPES {
            let layer = wasm_layer(&manifest(&[(media_type, 10)]), 100).unwrap();
            assert_eq!(
                layer,
                Layer {
                    digest: LAYER.into(),
                    size: 10,
                    media_type: media_type.into()
                }
            );
        }
    }

    #[test]
    fn other_layers_beside_the_wasm_one_are_ignored() {
        let body = manifest(&[
            ("application/vnd.oci.image.layer.v1.tar", 5),
            ("application/wasm", 10),
        ]);
        assert_eq!(wasm_layer(&body, 100).unwrap().size, 10);
    }

    #[test]
    fn a_layer_over_the_limit_is_refused_before_download() {
        let e = wasm_layer(&manifest(&[("application/wasm", 101)]), 100).unwrap_err();
        assert_eq!(
            e,
            "its Wasm layer is 101 bytes, over the limit of 100 bytes for a plugin (not downloaded)"
        );
    }

    #[test]
    fn artifacts_without_exactly_one_wasm_layer_are_refused() {
        let e = wasm_layer(
            &manifest(&[("application/vnd.oci.image.layer.v1.tar+gzip", 5)]),
            100,
        )
        .unwrap_err();
        assert!(
            e.starts_with(
                "it has no Wasm layer (its layers: application/vnd.oci.image.layer.v1.tar+gzip)"
            ),
            "{e}"
        );
        assert!(
            e.contains("application/vnd.module.wasm.content.layer.v1+wasm"),
            "{e}"
        );
        let e = wasm_layer(
            &manifest(&[("application/wasm", 5), ("application/wasm", 6)]),
            100,
        )
        .unwrap_err();
        assert_eq!(e, "it has 2 Wasm layers: a plugin artifact has exactly one");
    }

    #[test]
    fn an_index_is_not_an_artifact() {
        let body = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": []
        }))
        .unwrap();
        assert!(
            wasm_layer(&body, 100)
                .unwrap_err()
                .starts_with("it is an image index")
        );
        assert!(
            wasm_layer(b"{", 100)
                .unwrap_err()
                .starts_with("its manifest is not JSON")
        );
    }
}
