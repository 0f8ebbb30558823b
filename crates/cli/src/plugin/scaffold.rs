//! `plugin new`: a plugin project of its own, outside this repository, that builds and passes
//! its own `plugin test` on the first try. It starts as the default policy, with the WIT this
//! host speaks vendored in `wit/` and one fixture case in `testdata/basic/`.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use nad_plugin_runtime::{HOST_WIT_VERSION, WIT_PACKAGE};

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's name: what Services select with isim.dev/endpoint-policy, and its file
    /// name (`<name>.wasm`).
    pub name: String,
    /// The language of the project.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// Where to create it (default: ./<name>); it must not exist or be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The WIT package this host was built with.
pub const WIT: &str = include_str!("../../../../wit/nad-endpoints.wit");
/// Its file name in a plugin's `wit/` directory.
pub const WIT_FILE: &str = "nad-endpoints.wit";

/// The plugin languages `plugin new` scaffolds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with wit-bindgen: `cargo`, and the `wasm32-wasip2` target.
    #[default]
    Rust,
    /// C, with wit-bindgen's C generator, clang and wasi-libc, and `wasm-tools component new`
    /// with the WASI reactor adapter (written into the project).
    C,
}

/// The wit-bindgen version the Rust template pins: the one this repository builds with.
pub const WIT_BINDGEN_VERSION: &str = "0.63.0";

/// The template files of each language: (path in the project, contents).
const RUST: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
    ("Makefile", include_str!("templates/rust/Makefile")),
    ("README.md", include_str!("templates/rust/README.md")),
    (".gitignore", include_str!("templates/rust/.gitignore")),
    ("src/lib.rs", include_str!("templates/rust/src/lib.rs")),
    (
        "src/policy.rs",
        include_str!("templates/rust/src/policy.rs"),
    ),
];

/// The C project: the repository's C example of the default policy, its name set by the
/// Makefile.
const C: &[(&str, &str)] = &[
    ("Makefile", include_str!("templates/c/Makefile")),
    ("README.md", include_str!("templates/c/README.md")),
    (".gitignore", include_str!("templates/c/.gitignore")),
    (
        "policy.c",
        include_str!("../../../../plugins/examples/default-c/policy.c"),
    ),
    (
        "rust_str.h",
        include_str!("../../../../plugins/examples/default-c/rust_str.h"),
    ),
    (
        "rust_escapes.h",
        include_str!("../../../../plugins/examples/default-c/rust_escapes.h"),
    ),
];

/// Where a C project keeps wasmtime's WASI preview1 reactor adapter, which turns the module's
/// (preview1) imports into a component's.
const ADAPTER: &str = "adapter/wasi_snapshot_preview1.reactor.wasm";

/// The fixture every project starts with: the default policy's `app-label` case, whose
/// expectations the template's policy meets.
const FIXTURE: &[(&str, &str)] = &[
    (
        "testdata/basic/service.yaml",
        include_str!("../../../../plugins/default/testdata/app-label/service.yaml"),
    ),
    (
        "testdata/basic/pods.yaml",
        include_str!("../../../../plugins/default/testdata/app-label/pods.yaml"),
    ),
    (
        "testdata/basic/nodes.yaml",
        include_str!("../../../../plugins/default/testdata/app-label/nodes.yaml"),
    ),
    (
        "testdata/basic/decisions.txt",
        include_str!("../../../../plugins/default/testdata/app-label/decisions.txt"),
    ),
    (
        "testdata/basic/slices.yaml",
        include_str!("../../../../plugins/default/testdata/app-label/slices.yaml"),
    ),
];

/// A plugin name is a file name and an annotation value: lowercase letters, digits and `-`,
/// starting with a letter, at most 63 characters (a DNS label, as Kubernetes names are).
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a plugin name: use lowercase letters, digits and '-', starting \
             with a letter (at most 63), e.g. my-policy; Services select it by this name"
        ))
    }
}

/// Fills the template's `{{name}}`-style placeholders.
fn fill(template: &str, name: &str) -> String {
    let (major, minor, patch) = HOST_WIT_VERSION;
    template
        .replace("{{name}}", name)
        .replace("{{c_name}}", &name.replace('-', "_"))
        .replace(
            "{{wit_package}}",
            &format!("{WIT_PACKAGE}@{major}.{minor}.{patch}"),
        )
        .replace("{{wit_bindgen}}", WIT_BINDGEN_VERSION)
        .replace("{{host_version}}", env!("CARGO_PKG_VERSION"))
}

/// The files of a new project, by path.
pub fn files(name: &str, lang: Lang) -> Vec<(PathBuf, Vec<u8>)> {
    let template = match lang {
        Lang::Rust => RUST,
        Lang::C => C,
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = template
        .iter()
        .chain(FIXTURE)
        .map(|(path, text)| (PathBuf::from(path), fill(text, name).into_bytes()))
        .collect();
    files.push((Path::new("wit").join(WIT_FILE), WIT.as_bytes().to_vec()));
    if lang == Lang::C {
        files.push((
            PathBuf::from(ADAPTER),
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
                .to_vec(),
        ));
    }
    files
}

pub fn new(args: &NewArgs, out: &mut impl Write) -> anyhow::Result<()> {
    check_name(&args.name).map_err(anyhow::Error::msg)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("{}: cannot read it", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: the directory exists and is not empty; give another with --dir",
            dir.display()
        );
    }
    for (path, contents) in files(&args.name, args.lang) {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("{}: cannot create it", parent.display()))?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("{}: cannot write it", path.display()))?;
    }
    writeln!(
        out,
        "created {} ({:?} plugin {}, WIT {WIT_PACKAGE}@{}.{}.{})",
        dir.display(),
        args.lang,
        args.name,
        HOST_WIT_VERSION.0,
        HOST_WIT_VERSION.1,
        HOST_WIT_VERSION.2
    )?;
    writeln!(
        out,
        "next: cd {} && make test   (NSC=<path to nad-service-controller> if it is not on PATH)",
        dir.display()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        assert!(check_name("my-policy").is_ok());
        assert!(check_name("zones2").is_ok());
        for bad in ["", "My", "1st", "a_b", "a-", "a.b", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_template_pins_the_wit_bindgen_this_repository_builds_with() {
        let manifest = include_str!("../../../../Cargo.toml");
        assert!(
            manifest.contains(&format!(
                "wit-bindgen = {{ version = \"={WIT_BINDGEN_VERSION}\""
            )),
            "update WIT_BINDGEN_VERSION with the workspace's wit-bindgen"
        );
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::C] {
            for (path, contents) in files("my-policy", lang) {
                let text = String::from_utf8_lossy(&contents);
                for placeholder in [
                    "{{name}}",
                    "{{c_name}}",
                    "{{wit_package}}",
                    "{{wit_bindgen}}",
                    "{{host_version}}",
                ] {
                    assert!(
                        !text.contains(placeholder),
                        "{placeholder} in {}",
                        path.display()
                    );
                }
            }
        }
    }
}
