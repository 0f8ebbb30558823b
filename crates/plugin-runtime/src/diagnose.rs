//! Why a component does not link, in a plugin author's terms: the imports this host does not
//! provide (and what it does), or the first place where the component's `policy` types differ
//! from the host's (function, parameter, record and field), instead of wasmtime's structural
//! "expected record of 11 fields, found 12 fields".

use wasmtime::{
    Engine,
    component::{
        Component,
        types::{ComponentFunc, ComponentItem, Type},
    },
};

/// The interfaces a plugin may import (any `0.2.x` of WASI, any `1.x` of ours): those
/// [`super::sandbox::link_minimal_wasi`] and the bindings link.
pub const PROVIDED_IMPORTS: [&str; 17] = [
    "isim:nad-endpoints/types",
    "isim:nad-endpoints/log",
    "isim:nad-endpoints/pod-conditions",
    "isim:nad-endpoints/network-devices",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
];

/// `wasi:io/error@0.2.6` -> `wasi:io/error`.
fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(name, _)| name)
}

/// The component's imports this host does not provide.
pub fn unprovided_imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !PROVIDED_IMPORTS.contains(&unversioned(name)))
        .map(str::to_owned)
        .collect()
}

/// What usually pulls in an import a plugin may not have.
fn hint(import: &str) -> Option<&'static str> {
    let name = unversioned(import);
    if name.starts_with("wasi:filesystem/") {
        Some(
            "C's stdio (printf, puts, fopen) and Rust's std::fs pull in wasi:filesystem: log \
             with the log import instead",
        )
    } else if name.starts_with("wasi:clocks/") {
        Some("a clock (time, sleep, Instant::now) pulls in wasi:clocks: decide from the input only")
    } else if name.starts_with("wasi:random/") {
        Some(
            "random numbers (rand, Rust's HashMap with its default RandomState) pull in \
             wasi:random: use a BTreeMap, or a fixed hasher",
        )
    } else if name.starts_with("wasi:sockets/") || name.starts_with("wasi:http/") {
        Some("a plugin has no network: decide from the input only")
    } else {
        None
    }
}

/// The message for imports the host does not provide.
pub fn unprovided_message(imports: &[String]) -> String {
    let mut hints: Vec<&str> = imports.iter().filter_map(|i| hint(i)).collect();
    hints.dedup();
    let mut text = format!(
        "imports {}, which this host does not provide; a plugin may import only {}",
        imports.join(", "),
        PROVIDED_IMPORTS.join(", ")
    );
    for hint in hints {
        text.push_str(" (");
        text.push_str(hint);
        text.push(')');
    }
    text
}

/// The functions of the exported interface `prefix@…` (e.g. `isim:nad-endpoints/policy`),
/// with the names of the types it exports.
struct Interface {
    functions: Vec<(String, ComponentFunc)>,
    types: Vec<(String, Type)>,
}

fn interface(engine: &Engine, component: &Component, prefix: &str) -> Option<Interface> {
    let ty = component.component_type();
    let (_, export) = ty
        .exports(engine)
        .find(|(name, _)| unversioned(name) == prefix)?;
    let ComponentItem::ComponentInstance(instance) = export.ty else {
        return None;
    };
    let mut functions = Vec::new();
    let mut types = Vec::new();
    for (name, item) in instance.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(f) => functions.push((name.to_owned(), f)),
            ComponentItem::Type(t) => types.push((name.to_owned(), t)),
            _ => {}
        }
    }
    Some(Interface { functions, types })
}

/// The first difference between the component's `policy` interface and the host's, if any.
/// `reference` is a component built against the host's WIT (the built-in plugin).
pub fn policy_mismatch(
    engine: &Engine,
    reference: &Component,
    component: &Component,
    interface_name: &str,
) -> Option<String> {
    let host = interface(engine, reference, interface_name)?;
    let found = interface(engine, component, interface_name)?;
    for (name, expected) in &host.functions {
        let Some((_, got)) = found.functions.iter().find(|(n, _)| n == name) else {
            return Some(format!("{interface_name} does not export function {name}"));
        };
        let cx = Cx {
            host: &host.types,
            found: &found.types,
        };
        let expected_params: Vec<_> = expected.params().collect();
        let got_params: Vec<_> = got.params().collect();
        if expected_params.len() != got_params.len() {
            return Some(format!(
                "function {name} takes {} parameters, the host's takes {}",
                got_params.len(),
                expected_params.len()
            ));
        }
        for ((pname, e), (_, g)) in expected_params.iter().zip(&got_params) {
            if let Some(diff) = cx.diff(e, g) {
                return Some(format!("function {name}, parameter {pname}: {diff}"));
            }
        }
        for (e, g) in expected.results().zip(got.results()) {
            if let Some(diff) = cx.diff(&e, &g) {
                return Some(format!("function {name}, result: {diff}"));
            }
        }
    }
    None
}

/// The named types of both sides, to name records, variants and enums.
struct Cx<'a> {
    host: &'a [(String, Type)],
    found: &'a [(String, Type)],
}

impl Cx<'_> {
    fn name_of(types: &[(String, Type)], ty: &Type) -> Option<String> {
        types
            .iter()
            .find(|(_, t)| t == ty)
            .map(|(name, _)| name.clone())
    }

    /// "record pod", or the kind alone for an anonymous type.
    fn describe(&self, ty: &Type, host: bool) -> String {
        let kind = kind(ty);
        let name = Self::name_of(if host { self.host } else { self.found }, ty);
        match name {
            Some(name) => format!("{kind} {name}"),
            None => kind.to_owned(),
        }
    }

    fn diff(&self, expected: &Type, got: &Type) -> Option<String> {
        if kind(expected) != kind(got) {
            return Some(format!(
                "the plugin has {}, the host has {}",
                self.describe(got, false),
                self.describe(expected, true)
            ));
        }
        let what = self.describe(expected, true);
        match (expected, got) {
            (Type::List(e), Type::List(g)) => self
                .diff(&e.ty(), &g.ty())
                .map(|d| format!("list element: {d}")),
            (Type::Option(e), Type::Option(g)) => self.diff(&e.ty(), &g.ty()),
            (Type::Result(e), Type::Result(g)) => self
                .diff_payload("ok", e.ok(), g.ok())
                .or_else(|| self.diff_payload("err", e.err(), g.err())),
            (Type::Record(e), Type::Record(g)) => {
                let ef: Vec<_> = e.fields().map(|f| (f.name.to_owned(), f.ty)).collect();
                let gf: Vec<_> = g.fields().map(|f| (f.name.to_owned(), f.ty)).collect();
                self.diff_fields(&what, &ef, &gf)
            }
            (Type::Variant(e), Type::Variant(g)) => {
                let ec: Vec<_> = e.cases().map(|c| (c.name.to_owned(), c.ty)).collect();
                let gc: Vec<_> = g.cases().map(|c| (c.name.to_owned(), c.ty)).collect();
                self.diff_cases(&what, &ec, &gc)
            }
            (Type::Enum(e), Type::Enum(g)) => diff_names(
                &what,
                "cases",
                &e.names().collect::<Vec<_>>(),
                &g.names().collect::<Vec<_>>(),
            ),
            (Type::Flags(e), Type::Flags(g)) => diff_names(
                &what,
                "flags",
                &e.names().collect::<Vec<_>>(),
                &g.names().collect::<Vec<_>>(),
            ),
            (Type::Tuple(e), Type::Tuple(g)) => {
                let et: Vec<Type> = e.types().collect();
                let gt: Vec<Type> = g.types().collect();
                self.diff_elements(&et, &gt)
            }
            _ => None,
        }
    }

    /// The difference between the `ok` (or `err`) types of two results, `side` naming which.
    fn diff_payload(
        &self,
        side: &str,
        expected: Option<Type>,
        got: Option<Type>,
    ) -> Option<String> {
        match (expected, got) {
            (Some(e), Some(g)) => self.diff(&e, &g).map(|d| format!("{side}: {d}")),
            (None, None) => None,
            _ => Some(format!("the {side} types differ")),
        }
    }

    /// The first difference between the fields of two records: one only the plugin's has,
    /// one it lacks, another order, or a field's type.
    fn diff_fields(
        &self,
        what: &str,
        expected: &[(String, Type)],
        got: &[(String, Type)],
    ) -> Option<String> {
        let names = |fields: &[(String, Type)]| -> Vec<String> {
            fields.iter().map(|(n, _)| n.clone()).collect()
        };
        if let Some((extra, _)) = got
            .iter()
            .find(|(n, _)| !expected.iter().any(|(m, _)| m == n))
        {
            return Some(format!(
                "{what} has field {extra}, which the host's does not ({} fields, the \
                 host's {}): the plugin was built against another version of the WIT",
                got.len(),
                expected.len()
            ));
        }
        if let Some((missing, _)) = expected
            .iter()
            .find(|(n, _)| !got.iter().any(|(m, _)| m == n))
        {
            return Some(format!(
                "{what} lacks field {missing} ({} fields, the host's {}): the plugin \
                 was built against another version of the WIT",
                got.len(),
                expected.len()
            ));
        }
        if names(expected) != names(got) {
            return Some(format!(
                "{what} has its fields in another order ({}; the host's: {})",
                names(got).join(", "),
                names(expected).join(", ")
            ));
        }
        expected.iter().zip(got).find_map(|((name, e), (_, g))| {
            self.diff(e, g)
                .map(|d| format!("{what}, field {name}: {d}"))
        })
    }

    /// The first difference between the cases of two variants: their names, or a case's
    /// payload.
    fn diff_cases(
        &self,
        what: &str,
        expected: &[(String, Option<Type>)],
        got: &[(String, Option<Type>)],
    ) -> Option<String> {
        let en: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
        let gn: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        if let Some(diff) = diff_names(what, "cases", &en, &gn) {
            return Some(diff);
        }
        expected
            .iter()
            .zip(got)
            .find_map(|((name, e), (_, g))| match (e, g) {
                (Some(e), Some(g)) => self.diff(e, g).map(|d| format!("{what}, case {name}: {d}")),
                (None, None) => None,
                _ => Some(format!("{what}, case {name}: the payloads differ")),
            })
    }

    /// The first difference between the elements of two tuples: their number, or an
    /// element's type.
    fn diff_elements(&self, expected: &[Type], got: &[Type]) -> Option<String> {
        if expected.len() != got.len() {
            return Some(format!(
                "a tuple of {} elements; the host's has {}",
                got.len(),
                expected.len()
            ));
        }
        expected
            .iter()
            .zip(got)
            .enumerate()
            .find_map(|(i, (e, g))| self.diff(e, g).map(|d| format!("element {i}: {d}")))
    }
}

/// How the names of an enum's or a variant's cases, or of flags, differ, if they do;
/// `listed` says which they are (`cases`, `flags`).
fn diff_names(what: &str, listed: &str, expected: &[&str], got: &[&str]) -> Option<String> {
    (expected != got).then(|| {
        format!(
            "{what} has {listed} {}; the host's has {}",
            got.join(", "),
            expected.join(", ")
        )
    })
}

fn kind(ty: &Type) -> &'static str {
    match ty {
        Type::Bool => "bool",
        Type::S8 => "s8",
        Type::U8 => "u8",
        Type::S16 => "s16",
        Type::U16 => "u16",
        Type::S32 => "s32",
        Type::U32 => "u32",
        Type::S64 => "s64",
        Type::U64 => "u64",
        Type::Float32 => "f32",
        Type::Float64 => "f64",
        Type::Char => "char",
        Type::String => "string",
        Type::List(_) => "list",
        Type::Map(_) => "map",
        Type::Record(_) => "record",
        Type::Tuple(_) => "tuple",
        Type::Variant(_) => "variant",
        Type::Enum(_) => "enum",
        Type::Option(_) => "option",
        Type::Result(_) => "result",
        Type::Flags(_) => "flags",
        Type::Own(_) => "own",
        Type::Borrow(_) => "borrow",
        Type::Future(_) => "future",
        Type::Stream(_) => "stream",
        Type::ErrorContext => "error-context",
        Type::FixedLengthList(_) => "fixed-length list",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_do_not_matter_for_what_is_provided() {
        assert_eq!(unversioned("wasi:io/error@0.2.6"), "wasi:io/error");
        assert_eq!(unversioned("wasi:io/error"), "wasi:io/error");
    }

    #[test]
    fn the_message_names_the_import_lists_the_provided_ones_and_says_why() {
        let text = unprovided_message(&[
            "wasi:filesystem/types@0.2.0".to_owned(),
            "wasi:filesystem/preopens@0.2.0".to_owned(),
        ]);
        assert!(text.starts_with("imports wasi:filesystem/types@0.2.0, wasi:filesystem/preopens@0.2.0, which this host does not provide"), "{text}");
        assert!(
            text.contains(
                "isim:nad-endpoints/pod-conditions, isim:nad-endpoints/network-devices, wasi:io/error"
            ),
            "{text}"
        );
        assert_eq!(text.matches("printf").count(), 1, "{text}");
    }
}
