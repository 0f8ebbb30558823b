//! Plugins held in a ConfigMap read through the API (`--plugin-configmap`): `binaryData`
//! entries `<name>.wasm` are components, `data` entries `<name>.oci` references to OCI
//! artifacts (`oci://<registry>/<repository>@sha256:<digest>`), and `<name>.json` (in `data`
//! or `binaryData`) their configuration. Pure: the watch lives in `watch::plugin_dir`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::{Component, Entry};

/// The ConfigMap's plugins, and the keys that are not one (to report once).
pub fn entries(configmap: &ConfigMap) -> (Vec<Entry>, Vec<String>) {
    let no_binary = BTreeMap::new();
    let no_data = BTreeMap::new();
    let binary = configmap.binary_data.as_ref().unwrap_or(&no_binary);
    let data = configmap.data.as_ref().unwrap_or(&no_data);
    let mut configs: BTreeMap<&str, String> = BTreeMap::new();
    let mut components: BTreeMap<&str, Component> = BTreeMap::new();
    let mut ignored = Vec::new();
    for (key, value) in data {
        if let Some(name) = key.strip_suffix(".json").filter(|n| !n.is_empty()) {
            configs.insert(name, value.clone());
        } else if let Some(name) = key.strip_suffix(".oci").filter(|n| !n.is_empty()) {
            components.insert(name, Component::Reference(value.clone()));
        } else {
            ignored.push(format!(
                "data.{key} (a component must be in binaryData as <name>.wasm; data holds <name>.oci references and <name>.json configurations)"
            ));
        }
    }
    for (key, value) in binary {
        if let Some(name) = key.strip_suffix(".json").filter(|n| !n.is_empty()) {
            match String::from_utf8(value.0.clone()) {
                Ok(text) => {
                    configs.insert(name, text);
                }
                Err(_) => ignored.push(format!("binaryData.{key} (not UTF-8 text)")),
            }
        } else if let Some(name) = key.strip_suffix(".wasm").filter(|n| !n.is_empty()) {
            if components.contains_key(name) {
                ignored.push(format!(
                    "data.{name}.oci (binaryData.{name}.wasm is loaded instead; remove one of them)"
                ));
            }
            components.insert(name, Component::Wasm(value.0.clone()));
        } else {
            ignored.push(format!(
                "binaryData.{key} (neither <name>.wasm nor <name>.json)"
            ));
        }
    }
    let entries = components
        .into_iter()
        .map(|(name, component)| Entry {
            name: name.to_owned(),
            component,
            config: configs.remove(name).unwrap_or_default(),
        })
        .collect();
    for name in configs.keys() {
        ignored.push(format!(
            "{name}.json (no {name}.wasm or {name}.oci beside it)"
        ));
    }
    (entries, ignored)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn components_and_their_configuration_are_read_and_strays_reported() {
        let configmap = ConfigMap {
            binary_data: Some(BTreeMap::from([
                ("opt-out.wasm".to_owned(), ByteString(b"\0asm-1".to_vec())),
                ("zones.wasm".to_owned(), ByteString(b"\0asm-2".to_vec())),
                ("zones.json".to_owned(), ByteString(b"{\"a\":1}".to_vec())),
                ("notes.txt".to_owned(), ByteString(b"x".to_vec())),
            ])),
            data: Some(BTreeMap::from([
                ("opt-out.json".to_owned(), "{\"label\":\"x\"}".to_owned()),
                ("lonely.json".to_owned(), "{}".to_owned()),
                ("README".to_owned(), "hi".to_owned()),
                (
                    "pinned.oci".to_owned(),
                    "oci://r.example/p@sha256:ab".to_owned(),
                ),
                ("zones.oci".to_owned(), "oci://r.example/zones:1".to_owned()),
            ])),
            ..ConfigMap::default()
        };
        let (entries, ignored) = entries(&configmap);
        let got: Vec<(&str, &Component, &str)> = entries
            .iter()
            .map(|e| (e.name.as_str(), &e.component, e.config.as_str()))
            .collect();
        let wasm = |b: &[u8]| Component::Wasm(b.to_vec());
        assert_eq!(
            got,
            vec![
                ("opt-out", &wasm(b"\0asm-1"), "{\"label\":\"x\"}"),
                (
                    "pinned",
                    &Component::Reference("oci://r.example/p@sha256:ab".into()),
                    ""
                ),
                ("zones", &wasm(b"\0asm-2"), "{\"a\":1}"),
            ]
        );
        assert_eq!(ignored.len(), 4, "{ignored:?}");
        assert!(
            ignored
                .iter()
                .any(|i| i.starts_with("data.zones.oci (binaryData.zones.wasm is loaded"))
        );
        assert!(ignored.iter().any(|i| i.starts_with("data.README")));
        assert!(
            ignored
                .iter()
                .any(|i| i.starts_with("binaryData.notes.txt"))
        );
        assert!(
            ignored
                .iter()
                .any(|i| i.starts_with("lonely.json (no lonely.wasm or lonely.oci"))
        );
        assert!(entries_of_nothing_is_empty());
    }

    fn entries_of_nothing_is_empty() -> bool {
        let (entries, ignored) = entries(&ConfigMap::default());
        entries.is_empty() && ignored.is_empty()
    }
}
