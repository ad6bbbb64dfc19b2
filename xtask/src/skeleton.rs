//! `cargo xtask skeleton`: checks that every adapter crate has the one file skeleton and that
//! its imports point one way, top to bottom, and that no crate of the workspace has an import
//! circle.
//!
//! Each top-level module of an adapter's `src/` has a rank; a module may be a directory, whose
//! files belong to it:
//!
//! | rank | modules | what they hold |
//! | --- | --- | --- |
//! | 0 | `lib` | narrow re-exports |
//! | 1 | `builder` | builds only |
//! | 2 | `provider`, `sandbox` | trait impls and inherent extras |
//! | 3 | `lifecycle`, `exec`, `files` | the operations |
//! | 4 | `api` | the only code that speaks HTTP, WebSocket or SSH |
//! | 5 | `config`, `wire`, `error`, `capabilities` | settings, DTOs, error mapping, capabilities |
//!
//! An import `A -> B` (a `crate::B…` or `super::B…` path in A's non-test code) may point down
//! (rank A < rank B) or sideways without closing a circle; one that points up fails, naming the
//! file and line. Sibling files of one module directory must not import each other in a circle.
//! `#[cfg(test)]` modules and `tests.rs` files are not checked.
//!
//! Every other crate of the workspace (its `src/`) is held to the circle rule alone: no two
//! top-level modules may import each other, directly or through others, and no sibling files of
//! one module directory either. A path through a re-export of the crate root (`crate::Error`)
//! counts as an import of the root, which is not a module here.

use crate::Result;
use crate::args::Args;
use crate::shell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The adapter crates the skeleton applies to.
const ADAPTERS: &[&str] = &[
    "sandbox-e2b",
    "sandbox-daytona",
    "sandbox-fly",
    "sandbox-vercel",
    "sandbox-sprites",
];

/// The other crates of the workspace, held to the circle rule only.
const CRATES: &[&str] = &[
    "sandbox-core",
    "sandbox-sim",
    "sandbox-conformance",
    "sandbox-tools",
    "sandbox-sdk",
    "sandbox-bench",
    "sbox-cli",
    "xtask",
];

/// Every top-level module an adapter may have, with its rank.
const RANKS: &[(&str, u8)] = &[
    ("lib", 0),
    ("builder", 1),
    ("provider", 2),
    ("sandbox", 2),
    ("lifecycle", 3),
    ("exec", 3),
    ("files", 3),
    // Stateful code, where the provider has a kernel of its own (DESIGN.md: each adapter's
    // `code.rs`).
    ("code", 3),
    ("api", 4),
    ("config", 5),
    ("wire", 5),
    ("error", 5),
    ("capabilities", 5),
];

/// Runs the check and prints what it found.
pub fn run(_args: Args) -> Result {
    check()
}

/// The CI step.
pub fn check() -> Result {
    let root = shell::workspace_root();
    let mut problems = Vec::new();
    let mut imports = 0;
    for adapter in ADAPTERS {
        let report = check_crate(&root.join(adapter).join("src"))?;
        imports += report.imports;
        problems.extend(
            report
                .problems
                .into_iter()
                .map(|p| format!("{adapter}: {p}")),
        );
    }
    for name in CRATES {
        let files = read_sources(&root.join(name).join("src"))?;
        let report = check_circles(&files);
        imports += report.imports;
        problems.extend(report.problems.into_iter().map(|p| format!("{name}: {p}")));
    }
    if problems.is_empty() {
        println!(
            "skeleton: {} adapters and {} other crates, {imports} imports checked, 0 circles, 0 problems",
            ADAPTERS.len(),
            CRATES.len()
        );
        Ok(())
    } else {
        for problem in &problems {
            eprintln!("{problem}");
        }
        Err(format!("skeleton: {} problem(s)", problems.len()))
    }
}

/// What one crate's check found.
#[derive(Debug, Default)]
struct Report {
    imports: usize,
    problems: Vec<String>,
}

/// One source file: where it is and which module (and submodule) it belongs to.
struct SourceFile {
    relative: String,
    module: String,
    /// The file's name inside its module directory (`None` for `x.rs` and `x/mod.rs`).
    submodule: Option<String>,
    text: String,
}

fn check_crate(src: &Path) -> Result<Report> {
    let files = read_sources(src)?;
    Ok(check_sources(&files))
}

fn read_sources(src: &Path) -> Result<Vec<SourceFile>> {
    let mut paths = Vec::new();
    collect(src, &mut paths)?;
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let relative = path
            .strip_prefix(src)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        files.push(source_file(relative, text));
    }
    Ok(files)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn source_file(relative: String, text: String) -> SourceFile {
    let parts: Vec<&str> = relative.trim_end_matches(".rs").split('/').collect();
    let module = parts[0].to_string();
    let submodule = match parts.get(1) {
        Some(&"mod") | None => None,
        Some(name) => Some(name.to_string()),
    };
    SourceFile {
        relative,
        module,
        submodule,
        text,
    }
}

fn rank(module: &str) -> Option<u8> {
    RANKS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

fn check_sources(files: &[SourceFile]) -> Report {
    let mut report = Report::default();
    // Sideways arrows between top-level modules, and arrows between sibling submodules.
    let mut sideways: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut siblings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unknown = BTreeSet::new();
    for file in files {
        if file.submodule.as_deref() == Some("tests") {
            continue;
        }
        let Some(from_rank) = rank(&file.module) else {
            if unknown.insert(file.module.clone()) {
                report.problems.push(format!(
                    "src/{}: module `{}` is not in the skeleton (allowed: {})",
                    file.relative,
                    file.module,
                    RANKS.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
                ));
            }
            continue;
        };
        for import in imports(file) {
            report.imports += 1;
            match import.target {
                Target::Module(target) if target != file.module => {
                    let Some(to_rank) = rank(&target) else {
                        continue; // reported where that module is defined
                    };
                    if to_rank < from_rank {
                        report.problems.push(format!(
                            "src/{}:{}: `{}` (rank {from_rank}) imports `{target}` (rank {to_rank}): the arrow points up",
                            file.relative, import.line, file.module
                        ));
                    } else if to_rank == from_rank {
                        sideways
                            .entry(file.module.clone())
                            .or_default()
                            .insert(target);
                    }
                }
                Target::Module(_) => {}
                Target::Sibling(name) => {
                    if let Some(own) = &file.submodule
                        && *own != name
                    {
                        siblings
                            .entry(format!("{}::{own}", file.module))
                            .or_default()
                            .insert(format!("{}::{name}", file.module));
                    }
                }
            }
        }
    }
    for graph in [&sideways, &siblings] {
        for circle in circles(graph) {
            report
                .problems
                .push(format!("import circle: {}", circle.join(" -> ")));
        }
    }
    report
}

/// The circle rule alone, file by file: an arrow goes from a file to the file a `crate::` or
/// `super::` path names. A path into a module directory names the submodule file it goes
/// through, or the one its `mod.rs` re-exports the item from (`crate::fleet::Usage` is
/// `fleet::usage` when `fleet/mod.rs` says `pub use usage::{Usage, …}`); a directory's
/// `mod.rs` re-exporting its own files draws no arrow.
fn check_circles(files: &[SourceFile]) -> Report {
    let mut report = Report::default();
    let nodes: BTreeSet<String> = files.iter().map(node_of).collect();
    let reexports = reexports(files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        if file.submodule.as_deref() == Some("tests") {
            continue;
        }
        let from = node_of(file);
        for (_, code) in non_test_lines(&file.text) {
            for path in paths_in(code) {
                report.imports += 1;
                let Some(to) = file_target(file, &path, &nodes, &reexports) else {
                    continue;
                };
                let own_facade = file.submodule.is_none() && to.starts_with(&format!("{from}::"));
                if to != from && !own_facade && !matches!(to.as_str(), "lib" | "main") {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    for circle in circles(&graph) {
        report
            .problems
            .push(format!("import circle: {}", circle.join(" -> ")));
    }
    report
}

/// The graph node of a file: `module` for `module.rs` and `module/mod.rs`, `module::sub` for
/// `module/sub.rs`.
fn node_of(file: &SourceFile) -> String {
    match &file.submodule {
        Some(sub) => format!("{}::{sub}", file.module),
        None => file.module.clone(),
    }
}

/// For each module directory, the items its `mod.rs` re-exports from its own files:
/// `(module, item) -> submodule`.
fn reexports(files: &[SourceFile]) -> BTreeMap<(String, String), String> {
    let mut found = BTreeMap::new();
    for file in files.iter().filter(|f| f.relative.ends_with("/mod.rs")) {
        let text = file.text.replace('\n', " ");
        for statement in text.split(';') {
            let Some(at) = statement.find("pub use ") else {
                continue;
            };
            let used = statement[at + "pub use ".len()..].trim();
            for path in expand(used) {
                if let [sub, .., item] = path.as_slice()
                    && path.len() >= 2
                {
                    found.insert((file.module.clone(), item.clone()), sub.clone());
                }
            }
        }
    }
    found
}

/// The file a path names, seen from `file`, if it is one of `nodes`.
fn file_target(
    file: &SourceFile,
    path: &[String],
    nodes: &BTreeSet<String>,
    reexports: &BTreeMap<(String, String), String>,
) -> Option<String> {
    let in_directory = file.relative.contains('/');
    let is_mod_file = file.relative.ends_with("/mod.rs");
    // The path from the crate root, or from the importing file's module directory.
    let (module, rest): (&str, &[String]) = match path {
        [root, rest @ ..] if root == "crate" => (rest.first()?, &rest[1..]),
        [a, b, rest @ ..] if a == "super" && b == "super" => (rest.first()?, &rest[1..]),
        [root, rest @ ..] if root == "super" && in_directory && !is_mod_file => {
            (file.module.as_str(), rest)
        }
        [root, rest @ ..] if root == "self" && is_mod_file => (file.module.as_str(), rest),
        [root, rest @ ..] if root == "super" => (rest.first()?, &rest[1..]),
        _ => return None,
    };
    if let Some(next) = rest.first() {
        let sub = format!("{module}::{next}");
        if nodes.contains(&sub) {
            return Some(sub);
        }
        if let Some(sub) = reexports.get(&(module.to_owned(), next.clone())) {
            return Some(format!("{module}::{sub}"));
        }
    }
    nodes.contains(module).then(|| module.to_owned())
}

/// Where an import points.
#[derive(Debug, PartialEq)]
enum Target {
    /// A top-level module of the crate.
    Module(String),
    /// A sibling file in the importing file's module directory.
    Sibling(String),
}

#[derive(Debug)]
struct Import {
    line: usize,
    target: Target,
}

/// The imports of a file's non-test code.
fn imports(file: &SourceFile) -> Vec<Import> {
    let mut found = Vec::new();
    for (index, code) in non_test_lines(&file.text) {
        let line = index + 1;
        for path in paths_in(code) {
            if let Some(target) = resolve(file, &path) {
                found.push(Import { line, target });
            }
        }
    }
    found
}

/// Lines of code outside `#[cfg(test)]` items, with comments removed.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut skipping = false;
    let mut pending_cfg_test = false;
    let mut depth: i64 = 0;
    for (index, raw) in text.lines().enumerate() {
        let code = strip_comment(raw);
        let trimmed = code.trim();
        if skipping {
            depth += brace_balance(code);
            if depth <= 0 && (code.contains('}') || trimmed.ends_with(';')) {
                skipping = false;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test && !trimmed.is_empty() && !trimmed.starts_with("#[") {
            pending_cfg_test = false;
            depth = brace_balance(code);
            if depth > 0 {
                skipping = true;
            }
            continue;
        }
        lines.push((index, code));
    }
    lines
}

fn strip_comment(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

fn brace_balance(code: &str) -> i64 {
    code.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// Every `crate::…`, `super::…` or `self::…` path in a line, expanded over `{…}` groups into
/// their first two segments (`crate::{a, b::c}` gives `crate::a` and `crate::b::c`).
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(root) {
            let at = from + found;
            from = at + root.len();
            let preceded = at > 0 && {
                let c = bytes[at - 1];
                c == b'$' || c == b'_' || c.is_ascii_alphanumeric() || c == b':'
            };
            if preceded {
                continue;
            }
            let first = root.trim_end_matches("::").to_string();
            let tails = expand(&code[from..]);
            if tails.is_empty() {
                paths.push(vec![first.clone()]); // a glob: `use super::*;`
            }
            for tail in tails {
                let mut path = vec![first.clone()];
                path.extend(tail);
                paths.push(path);
            }
        }
    }
    paths
}

/// The segments after a `root::`, expanding one level of `{…}`.
fn expand(rest: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            return inner
                .split(',')
                .map(|item| {
                    let mut path = segments.clone();
                    path.extend(
                        item.split("::")
                            .map(|s| ident(s.trim()))
                            .take_while(|s| !s.is_empty()),
                    );
                    path
                })
                .filter(|p| !p.is_empty())
                .collect();
        }
        let name = ident(rest);
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        segments.push(name);
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if segments.is_empty() {
        Vec::new()
    } else {
        vec![segments]
    }
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// What a path names, seen from `file`.
fn resolve(file: &SourceFile, path: &[String]) -> Option<Target> {
    let in_directory = file.relative.contains('/');
    let is_mod_file = file.relative.ends_with("/mod.rs");
    let module = |name: &String| Some(Target::Module(name.clone()));
    match path {
        [root, name, ..] if root == "crate" => module(name),
        [root, next, name, ..] if root == "super" && next == "super" => module(name),
        [root, name, ..] if root == "super" => {
            if in_directory && !is_mod_file {
                Some(Target::Sibling(name.clone()))
            } else if in_directory {
                module(name)
            } else {
                // A top-level file's `super` is the crate root.
                module(name)
            }
        }
        [root] if root == "super" && !in_directory => Some(Target::Module("lib".into())),
        [root, name, ..] if root == "self" && is_mod_file => Some(Target::Sibling(name.clone())),
        _ => None,
    }
}

/// The circles in a directed graph, each named from its smallest node, once.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    for start in graph.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((node, path)) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if next == start {
                    let mut circle = path.clone();
                    let min = circle.iter().enumerate().min_by_key(|(_, n)| *n).unwrap().0;
                    circle.rotate_left(min);
                    circle.push(circle[0].clone());
                    found.insert(circle);
                } else if !path.contains(next) && next > start {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(files: &[(&str, &str)]) -> Report {
        let files: Vec<SourceFile> = files
            .iter()
            .map(|(path, text)| source_file(path.to_string(), text.to_string()))
            .collect();
        check_sources(&files)
    }

    #[test]
    fn downward_and_sideways_imports_pass() {
        let report = check(&[
            ("lib.rs", "pub use crate::builder::B;\nmod builder;"),
            ("builder.rs", "use crate::{provider::P, config::Settings};"),
            ("provider.rs", "use crate::sandbox::S;\nuse super::exec;"),
            ("sandbox.rs", "use crate::exec::run;"),
            (
                "exec/mod.rs",
                "mod follow;\nuse self::follow::f;\nuse crate::api;",
            ),
            ("exec/follow.rs", "use super::super::wire::Frame;"),
            ("api.rs", "use crate::wire::{A, B};"),
            ("wire.rs", "use crate::error::map;"),
            ("error.rs", ""),
        ]);
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!(report.imports, 12); // a `{A, B}` group counts twice
    }

    #[test]
    fn an_upward_import_is_named_with_its_line() {
        let report = check(&[
            ("api.rs", "\n\nuse crate::{wire::X, builder::Settings};"),
            ("builder.rs", ""),
            ("wire.rs", ""),
        ]);
        assert_eq!(
            report.problems,
            ["src/api.rs:3: `api` (rank 4) imports `builder` (rank 1): the arrow points up"]
        );
    }

    #[test]
    fn a_sideways_circle_is_named() {
        let report = check(&[
            ("provider.rs", "use crate::sandbox::S;"),
            ("sandbox.rs", "fn f() { crate::provider::g() }"),
        ]);
        assert_eq!(
            report.problems,
            ["import circle: provider -> sandbox -> provider"]
        );
    }

    #[test]
    fn sibling_submodules_in_a_circle_are_named() {
        let report = check(&[
            ("exec/mod.rs", "mod a;\nmod b;"),
            ("exec/a.rs", "use super::b::X;"),
            ("exec/b.rs", "use super::a::Y;"),
        ]);
        assert_eq!(
            report.problems,
            ["import circle: exec::a -> exec::b -> exec::a"]
        );
    }

    #[test]
    fn a_module_outside_the_skeleton_is_named_once() {
        let report = check(&[("demux.rs", "use crate::wire::X;"), ("demux/x.rs", "")]);
        assert_eq!(report.problems.len(), 1);
        assert!(
            report.problems[0].starts_with("src/demux.rs: module `demux` is not in the skeleton")
        );
    }

    #[test]
    fn test_code_comments_and_macro_paths_are_not_imports() {
        let report = check(&[
            (
                "wire.rs",
                "// use crate::builder::X;\nmacro_rules! m { () => { $crate::builder::X } }\n\
                 #[cfg(test)]\nmod tests {\n    use crate::builder::B;\n    fn f() { if true { } }\n}\n\
                 #[cfg(test)]\nuse crate::lib_only;\n",
            ),
            ("exec/tests.rs", "use crate::builder::B;"),
            ("builder.rs", ""),
        ]);
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!(report.imports, 0);
    }

    #[test]
    fn a_top_level_glob_of_super_points_at_the_crate_root() {
        let report = check(&[("exec.rs", "use super::*;"), ("lib.rs", "")]);
        assert_eq!(
            report.problems,
            ["src/exec.rs:1: `exec` (rank 3) imports `lib` (rank 0): the arrow points up"]
        );
    }

    fn circles_of(files: &[(&str, &str)]) -> Vec<String> {
        let files: Vec<SourceFile> = files
            .iter()
            .map(|(path, text)| source_file(path.to_string(), text.to_string()))
            .collect();
        check_circles(&files).problems
    }

    #[test]
    fn any_crate_is_checked_for_circles_file_by_file() {
        // Two top-level modules importing each other, in any direction: a circle.
        assert_eq!(
            circles_of(&[
                ("cassette.rs", "use crate::record::SecretCheck;"),
                ("record.rs", "use crate::cassette::Cassette;"),
            ]),
            ["import circle: cassette -> record -> cassette"]
        );
        // Through a directory's re-export, the arrow goes to the file that defines the item, so
        // a type the trait uses and an algorithm over the trait do not make a circle.
        let through_reexport = [
            ("provider.rs", "use crate::fleet::{Usage, Prepared};"),
            (
                "fleet/mod.rs",
                "mod reap;\nmod usage;\npub use usage::{\n    Usage,\n    Prepared,\n};\npub use reap::reap;",
            ),
            ("fleet/reap.rs", "use crate::provider::Provider;"),
            ("fleet/usage.rs", "pub struct Usage;"),
        ];
        assert!(circles_of(&through_reexport).is_empty());
        // Sibling files of one directory.
        assert_eq!(
            circles_of(&[
                ("e2b/envd.rs", "use super::process::run;"),
                ("e2b/process.rs", "use super::envd::user_of;"),
                ("e2b/mod.rs", "mod envd;\nmod process;"),
            ]),
            ["import circle: e2b::envd -> e2b::process -> e2b::envd"]
        );
    }
}
