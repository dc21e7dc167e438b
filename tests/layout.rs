//! The layout shows the architecture (DESIGN 14): one folder per pipeline stage, and imports that
//! only go one way. A module that imports from a module that (through others) imports it back,
//! or anything that imports from the crate root, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// `src/launch/spawn.rs` -> `launch::spawn`; `src/launch/mod.rs` -> `launch`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.last().map(String::as_str) {
        Some("mod") => parts[..parts.len() - 1].join("::"),
        _ => parts.join("::"),
    }
}

/// The module a `crate::a::b::Item` path lands in: the longest prefix that is a module.
fn target(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|candidate| modules.contains(candidate))
}

/// Imports outside tests, module -> modules.
fn graph(crate_dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let from = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut to = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let path: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let path = path.trim_end_matches(':');
            // An item no module holds is the crate root's.
            let module = target(&modules, path).unwrap_or_else(|| "lib".to_owned());
            if module != from {
                to.insert(module);
            }
        }
        edges.insert(from, to);
    }
    edges
}

fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut found = path[start..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

fn folders(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_owned();
    let mut folded: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in edges {
        let entry = folded.entry(top(from)).or_default();
        entry.extend(to.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    folded
}

#[test]
fn imports_go_one_way_between_files_and_between_stages() {
    for crate_dir in [
        Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/nvml-sim"),
    ] {
        let edges = graph(&crate_dir);
        assert!(edges.len() > 5, "no sources found in {}", crate_dir.display());
        assert_eq!(cycle(&edges), None, "{}: an import cycle between files", crate_dir.display());
        assert_eq!(cycle(&folders(&edges)), None, "{}: an import cycle between folders", crate_dir.display());
        for (from, to) in &edges {
            assert!(from == "main" || !to.contains("lib"), "{from} imports from the crate root: {to:?}");
        }
    }
}

#[test]
fn the_stages_have_their_folders() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for stage in ["cli", "probe", "select", "reserve", "launch", "verify", "output", "options", "process"] {
        assert!(src.join(stage).join("mod.rs").exists(), "src/{stage}/ is missing");
    }
}

/// The gpurun crate's sources, as (path relative to src/, text without its unit tests).
fn crate_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_owned();
            (file.strip_prefix(&src).unwrap().display().to_string(), code)
        })
        .collect()
}

/// DESIGN 1: `unsafe` lives only at the seams, the kernel's (src/process/) and the driver's
/// (src/probe/nvml/); the rest of the tree calls safe functions from there.
#[test]
fn unsafe_code_lives_only_at_the_seams() {
    let mut outside = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("process/") || path.starts_with("probe/nvml/") {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            if code_part.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == "unsafe") {
                outside.push(format!("src/{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "unsafe outside src/process/ and src/probe/nvml/:\n{}", outside.join("\n"));
}

/// DESIGN 1: nothing is `pub` that main.rs and the tests do not need (the rest is
/// `pub(crate)`, so rustc reports what nobody uses); `run()` stays a short dispatch, and no
/// function grows past a hundred lines.
#[test]
fn the_public_surface_is_small_and_functions_are_short() {
    let mut public = Vec::new();
    let mut long = Vec::new();
    for (path, code) in crate_sources() {
        let lines: Vec<&str> = code.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("pub ") && path != "main.rs" {
                public.push(format!("src/{path}:{}", number + 1));
            }
            let Some(at) = trimmed.find("fn ").filter(|_| !trimmed.starts_with("//")) else { continue };
            let head = &trimmed[..at];
            let is_item = head.split_whitespace().all(|w| {
                ["pub", "pub(crate)", "pub(super)", "const", "unsafe", "extern", "\"C\"", "async"]
                    .contains(&w)
            });
            if !is_item || line.trim_end().ends_with(';') {
                continue;
            }
            let indent = line.len() - trimmed.len();
            let close = format!("{}}}", " ".repeat(indent));
            let length = lines[number..].iter().position(|l| l.starts_with(&close) && l.trim().len() <= 2);
            let name: String =
                trimmed[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            match length.map(|n| n + 1) {
                Some(n) if name == "run" && path == "lib.rs" && n > 40 => {
                    long.push(format!("run() is {n} lines"))
                }
                Some(n) if n > 100 => long.push(format!("src/{path}:{} {name}: {n} lines", number + 1)),
                _ => {}
            }
        }
    }
    assert!(public.len() <= 60, "{} bare pub items (at most 60): {public:?}", public.len());
    assert!(long.is_empty(), "functions too long:\n{}", long.join("\n"));
}

/// STYLE: no wall-clock assertion in the tests (time is the bench's): a test waits for the
/// event, with a bound that only catches a hang (`common::HANG`).
#[test]
fn no_test_asserts_on_the_clock() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = Vec::new();
    sources(&tests, &mut files);
    let needle = ["elapsed()", " <"].concat();
    let timed: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let hits: Vec<String> = text
                .lines()
                .enumerate()
                .filter(|(_, line)| line.contains(&needle))
                .map(|(number, line)| format!("{}:{}: {}", file.display(), number + 1, line.trim()))
                .collect();
            hits
        })
        .collect();
    assert!(timed.is_empty(), "wall-clock assertions in tests:\n{}", timed.join("\n"));
}
