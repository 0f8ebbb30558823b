//! `plugin test`: fixture directories run through a plugin and compared with their expected
//! output (golden files).
//!
//! A case is a directory with `service.yaml` and `pods.yaml`, optionally `nodes.yaml` and
//! `config.json` (the plugin's configuration), and the expectations: `decisions.txt` (as
//! `plugin eval -o decisions` prints it), `slices.yaml` (as `-o slices` prints it), or
//! `error.txt` (the message when the plugin refuses the configuration or the Service). A case
//! without `pods.yaml` or `nodes.yaml` takes the nearest one above it, so that cases sharing
//! their pods keep them once.

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use super::{
    eval, files, render,
    sandbox::SandboxArgs,
    source::{self, PluginArg},
};

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The plugin component (`.wasm`), or `default` for the built-in plugin.
    #[arg(long, value_parser = PluginArg::parse)]
    pub plugin: PluginArg,
    /// Fixture directories: each is one case (it holds `service.yaml`) or holds cases in
    /// its subdirectories.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Rewrite each case's expected files from what the plugin does now.
    #[arg(long)]
    pub update: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

const SERVICE: &str = "service.yaml";
const PODS: &str = "pods.yaml";
const NODES: &str = "nodes.yaml";
const CONFIG: &str = "config.json";
const DECISIONS: &str = "decisions.txt";
const SLICES: &str = "slices.yaml";
const ERROR: &str = "error.txt";

/// The cases under `dir`: itself, or the cases among its subdirectories (at any depth), sorted.
fn cases(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        if dir.join(SERVICE).is_file() {
            found.push(dir.to_owned());
            return Ok(());
        }
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("{}: cannot read it", dir.display()))?;
        let mut subdirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        for sub in subdirs {
            walk(&sub, found)?;
        }
        Ok(())
    }
    let mut found = Vec::new();
    walk(dir, &mut found)?;
    if found.is_empty() {
        bail!(
            "{}: no fixture case in it (a case is a directory with {SERVICE} and {PODS})",
            dir.display()
        );
    }
    Ok(found)
}

/// An input file of a case: its own, or the nearest one in the directories above it, up to
/// the directory given (cases that share their pods keep them once, beside them).
fn input(case: &Path, root: &Path, name: &str) -> Option<PathBuf> {
    case.ancestors()
        .take_while(|dir| dir.starts_with(root))
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// What a case produced: its files' would-be contents.
struct Produced {
    files: Vec<(&'static str, String)>,
}

fn produce(
    runtime: &nad_plugin_runtime::Runtime,
    args: &TestArgs,
    loaded: &mut HashMap<String, source::Loaded>,
    (root, case): (&Path, &Path),
) -> anyhow::Result<Produced> {
    let config_path = case.join(CONFIG);
    let config = source::config(config_path.is_file().then_some(config_path.as_path()))?;
    let outcome = (|| {
        if !loaded.contains_key(&config) {
            let plugin = source::load(runtime, &args.sandbox.registry, &args.plugin, &config)?;
            loaded.insert(config.clone(), plugin);
        }
        let plugin = &loaded[&config];
        let pods = input(case, root, PODS)
            .with_context(|| format!("{}: no {PODS} in it or above it", case.display()))?;
        let nodes = input(case, root, NODES);
        let inputs = files::case(&case.join(SERVICE), &pods, nodes.as_deref())?;
        eval::evaluate(
            plugin,
            &inputs,
            nad_core::slices::DEFAULT_MAX_ENDPOINTS_PER_SLICE,
        )
    })();
    Ok(match outcome {
        Ok(evaluation) => Produced {
            files: vec![
                (DECISIONS, render::decisions(&evaluation)),
                (SLICES, render::slices(&evaluation)?),
            ],
        },
        Err(e) => Produced {
            files: vec![(ERROR, format!("{}\n", error_text(&e)))],
        },
    })
}

/// An error as a fixture expects it: without the plugin's file, name and hash, which differ
/// between builds and copies of one plugin.
fn error_text(e: &anyhow::Error) -> String {
    match e.downcast_ref::<source::Failed>() {
        Some(source::Failed(_, failed)) => {
            format!("{} check failed: {}", failed.step.as_str(), failed.message)
        }
        None => format!("{e:#}"),
    }
}

/// Runs every case; fails when one differs from its expectations.
pub fn test(args: &TestArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let mut loaded = HashMap::new();
    let mut all = Vec::new();
    for dir in &args.dirs {
        all.extend(cases(dir)?.into_iter().map(|case| (dir.clone(), case)));
    }
    let mut failed = 0;
    for (root, case) in &all {
        let produced = produce(&runtime, args, &mut loaded, (root, case))?;
        if args.update {
            update(case, &produced)?;
            writeln!(out, "updated {}", case.display())?;
            continue;
        }
        let problems = compare(case, &produced)?;
        if problems.is_empty() {
            writeln!(out, "ok      {}", case.display())?;
        } else {
            failed += 1;
            writeln!(out, "FAIL    {}", case.display())?;
            for problem in problems {
                writeln!(out, "{problem}")?;
            }
        }
    }
    if args.update {
        return Ok(());
    }
    writeln!(
        out,
        "{} {}: {} passed, {failed} failed",
        all.len(),
        if all.len() == 1 { "case" } else { "cases" },
        all.len() - failed
    )?;
    if failed > 0 {
        bail!(
            "{failed} of {} fixture {} differ from their expectations (above); if the new \
             output is right, rerun with --update",
            all.len(),
            if all.len() == 1 { "case" } else { "cases" }
        );
    }
    Ok(())
}

/// Every difference between the case's expected files and what it produced.
fn compare(case: &Path, produced: &Produced) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut checked = 0;
    for name in [DECISIONS, SLICES, ERROR] {
        let path = case.join(name);
        let got = produced.files.iter().find(|(n, _)| *n == name);
        if !path.is_file() {
            continue;
        }
        checked += 1;
        let expected = files::read(&path)?;
        match got {
            Some((_, got)) if *got == expected => {}
            Some((_, got)) => problems.push(diff(name, &expected, got)),
            None => {
                let (other, got) = &produced.files[0];
                problems.push(format!(
                    "  expected {name}, but the case produced {other}:\n{}",
                    indent(got)
                ));
            }
        }
    }
    if checked == 0 {
        problems.push(format!(
            "  no {DECISIONS}, {SLICES} or {ERROR} to compare with: run with --update to \
             write them"
        ));
    }
    Ok(problems)
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>()
}

/// A unified diff of the expected file against what the plugin produced.
fn diff(name: &str, expected: &str, got: &str) -> String {
    let diff = similar::TextDiff::from_lines(expected, got);
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header(&format!("expected {name}"), "produced")
        .to_string();
    indent(&text)
}

/// Writes what the case produced: the expected files it had, or all of them for a new case;
/// an error replaces the decisions and slices, and the other way round.
fn update(case: &Path, produced: &Produced) -> anyhow::Result<()> {
    let existing: Vec<&str> = [DECISIONS, SLICES]
        .into_iter()
        .filter(|n| case.join(n).is_file())
        .collect();
    for (name, text) in &produced.files {
        if *name == ERROR || existing.is_empty() || existing.contains(name) {
            let path = case.join(name);
            std::fs::write(&path, text)
                .with_context(|| format!("{}: cannot write it", path.display()))?;
        }
    }
    let stale: &[&str] = if produced.files.iter().any(|(n, _)| *n == ERROR) {
        &[DECISIONS, SLICES]
    } else {
        &[ERROR]
    };
    for name in stale {
        let path = case.join(name);
        if path.is_file() {
            std::fs::remove_file(&path)
                .with_context(|| format!("{}: cannot remove it", path.display()))?;
        }
    }
    Ok(())
}
