//! Plugins held in a ConfigMap read through the API (`--plugin-configmap`): `binaryData`
//! entries `<name>.wasm` are components, `<name>.json` (in `data` or `binaryData`) their
//! configuration. Pure: the watch lives in `watch::plugin_dir`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::Entry;

/// The ConfigMap's plugins, and the keys that are not one (to report once).
pub fn entries(configmap: &ConfigMap) -> (Vec<Entry>, Vec<String>) {
    let no_binary = BTreeMap::new();
    let no_data = BTreeMap::new();
    let binary = configmap.binary_data.as_ref().unwrap_or(&no_binary);
    let data = configmap.data.as_ref().unwrap_or(&no_data);
    let mut configs: BTreeMap<&str, String> = BTreeMap::new();
    let mut ignored = Vec::new();
    for (key, value) in data {
        match key.strip_suffix(".json") {
            Some(name) if !name.is_empty() => {
                configs.insert(name, value.clone());
            }
            _ => ignored.push(format!(
                "data.{key} (a component must be in binaryData as <name>.wasm, a configuration <name>.json)"
            )),
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
        }
    }
    let mut entries = Vec::new();
    for (key, value) in binary {
        if let Some(name) = key.strip_suffix(".wasm").filter(|n| !n.is_empty()) {
            entries.push(Entry {
                name: name.to_owned(),
                component: value.0.clone(),
                config: configs.remove(name).unwrap_or_default(),
            });
        } else if !key.ends_with(".json") {
            ignored.push(format!(
                "binaryData.{key} (neither <name>.wasm nor <name>.json)"
            ));
        }
    }
    for name in configs.keys() {
        ignored.push(format!("{name}.json (no {name}.wasm beside it)"));
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
            ])),
            ..ConfigMap::default()
        };
        let (entries, ignored) = entries(&configmap);
        let got: Vec<(&str, &[u8], &str)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.component.as_slice(), e.config.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("opt-out", &b"\0asm-1"[..], "{\"label\":\"x\"}"),
                ("zones", &b"\0asm-2"[..], "{\"a\":1}"),
            ]
        );
        assert_eq!(ignored.len(), 3, "{ignored:?}");
        assert!(ignored.iter().any(|i| i.starts_with("data.README")));
        assert!(
            ignored
                .iter()
                .any(|i| i.starts_with("binaryData.notes.txt"))
        );
        assert!(
            ignored
                .iter()
                .any(|i| i.starts_with("lonely.json (no lonely.wasm"))
        );
        assert!(entries_of_nothing_is_empty());
    }

    fn entries_of_nothing_is_empty() -> bool {
        let (entries, ignored) = entries(&ConfigMap::default());
        entries.is_empty() && ignored.is_empty()
    }
}
