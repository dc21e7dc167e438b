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

/// A source file's text before its unit tests (a `#[cfg(test)]` module, or the whole file of
/// one that is `#![cfg(test)]`).
fn without_tests(text: &str) -> &str {
    let end = ["#[cfg(test)]", "#![cfg(test)]"].iter().filter_map(|marker| text.find(marker)).min();
    &text[..end.unwrap_or(text.len())]
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
        let code = without_tests(&text);
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
    folded_to(edges, 1)
}

/// The graph with each module folded into its folder `depth` levels down (`probe::nvml` at 2).
fn folded_to(edges: &BTreeMap<String, BTreeSet<String>>, depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
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
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/amdsmi-sim"),
    ] {
        let edges = graph(&crate_dir);
        assert!(edges.len() > 5, "no sources found in {}", crate_dir.display());
        assert_eq!(cycle(&edges), None, "{}: an import cycle between files", crate_dir.display());
        // At every folder level: probe/amd and probe/nvml must not import each other either.
        for depth in 1..=3 {
            let folded = folded_to(&edges, depth);
            assert_eq!(cycle(&folded), None, "{}: an import cycle between folders", crate_dir.display());
        }
        for (from, to) in &edges {
            assert!(from == "main" || !to.contains("lib"), "{from} imports from the crate root: {to:?}");
        }
    }
}

#[test]
fn the_stages_have_their_folders() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for stage in [
        "cli", "config", "probe", "runtime", "select", "reserve", "plan", "launch", "verify", "output",
        "options", "process",
    ] {
        assert!(src.join(stage).join("mod.rs").exists(), "src/{stage}/ is missing");
    }
}

/// The gpurun crate's sources, as (path relative to src/, text without its unit tests): a file
/// its folder's `mod.rs` declares under `#[cfg(test)]` is left out whole.
fn crate_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let test_only = |file: &Path| {
        let stem = file.file_stem().unwrap().to_string_lossy();
        let parent = std::fs::read_to_string(file.with_file_name("mod.rs")).unwrap_or_default();
        parent.contains(&format!("#[cfg(test)]\nmod {stem};"))
    };
    files
        .iter()
        .filter(|file| !test_only(file))
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let code = without_tests(&text).to_owned();
            (file.strip_prefix(&src).unwrap().display().to_string(), code)
        })
        .collect()
}

/// DESIGN 1: `unsafe` lives only at the seams, the kernel's (src/process/) and the drivers'
/// (src/probe/nvml/, src/probe/amd/); the rest of the tree calls safe functions from there.
#[test]
fn unsafe_code_lives_only_at_the_seams() {
    let mut outside = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("process/") || path.starts_with("probe/nvml/") || path.starts_with("probe/amd/") {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            if code_part.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == "unsafe") {
                outside.push(format!("src/{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "unsafe outside src/process/, src/probe/nvml/ and src/probe/amd/:\n{}",
        outside.join("\n")
    );
}

/// Issue 64: the runtime's rules live in src/runtime.rs; outside it and src/probe/ no code asks
/// "is this AMD?" or "is this NVIDIA?" (a third vendor would fall through such a test as the
/// other one). Every vendor or runtime decision elsewhere is an exhaustive `match`, which the
/// compiler flags for a new arm, or a question put to `Runtime`.
#[test]
fn no_code_outside_the_seams_tests_for_a_vendor() {
    let tests =
        ["== Vendor::", "!= Vendor::", "== VendorChoice::", "!= VendorChoice::", "is_rocm(", "is_cuda("];
    let mut found = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("probe/") || path.starts_with("runtime/") {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            let flat = code_part.replace("crate::probe::vendor::", "");
            if tests.iter().any(|test| flat.contains(test)) {
                found.push(format!("src/{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "vendor tests outside src/probe/ and src/runtime/:\n{}", found.join("\n"));
}

/// `code` with its comments taken out and each string literal's text kept apart: (code,
/// strings). Enough of Rust's lexing for names: `//` and `/* */` comments, `"..."` with
/// escapes, `r#"..."#`, and char literals (so that `'"'` opens no string).
fn code_and_strings(code: &str) -> (String, Vec<String>) {
    let (mut kept, mut strings) = (String::new(), Vec::new());
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &code[at..];
        let after_name = at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        if rest.starts_with("//") {
            at += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            at += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if rest.starts_with('r') && !after_name && rest[1..].trim_start_matches('#').starts_with('"') {
            let hashes = rest[1..].len() - rest[1..].trim_start_matches('#').len();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = &rest[2 + hashes..];
            let end = body.find(&close).unwrap_or(body.len());
            strings.push(body[..end].to_owned());
            at += 2 + hashes + end + close.len();
        } else if rest.starts_with('"') {
            let mut end = 1;
            while end < rest.len() && rest.as_bytes()[end] != b'"' {
                end += if rest.as_bytes()[end] == b'\\' { 2 } else { 1 };
            }
            strings.push(rest[1..end.min(rest.len())].to_owned());
            at += end + 1;
        } else if rest.starts_with('\'') && (rest.get(2..3) == Some("'") || rest.get(3..4) == Some("'")) {
            at += if rest.get(2..3) == Some("'") { 3 } else { 4 };
        } else {
            let c = rest.chars().next().unwrap();
            kept.push(c);
            at += c.len_utf8();
        }
    }
    (kept, strings)
}

/// The parts of a Rust name, lower-cased: `rocr_index` -> rocr, index; `RocrId` -> rocr, id.
fn name_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in name.split('_').filter(|p| !p.is_empty()) {
        let mut part = String::new();
        let chars: Vec<char> = piece.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let starts = c.is_uppercase()
                && !part.is_empty()
                && (part.chars().last().is_some_and(|p| p.is_lowercase() || p.is_ascii_digit())
                    || next_lower);
            if starts {
                parts.push(std::mem::take(&mut part).to_lowercase());
            }
            part.push(c);
        }
        parts.push(part.to_lowercase());
    }
    parts
}

/// The runtime seam (issue 64): outside `src/probe/` (the drivers' libraries) and
/// `src/runtime/` (CUDA's and ROCm's rules), no name says AMD, ROCm, ROCr, HIP or AMD SMI, and
/// no code or string names a driver function (`nvmlDevice...`, `amdsmi_...`): a stage asks
/// the runtime or the probe, and a third vendor touches neither. The command line's own words
/// are the one exception: `--vendor amd` and `--amd-smi-lib` are what the user types.
#[test]
fn no_vendor_word_outside_the_seams() {
    const VENDOR_PARTS: [&str; 6] = ["amd", "rocm", "rocr", "hip", "amdsmi", "kfd"];
    let users_words = |path: &str, name: &str| {
        name == "amd_smi_lib" && (path == "cli/args.rs" || path == "config/resolve.rs")
            || name == "Amd" && path == "options/mod.rs"
    };
    let mut found = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("probe/") || path.starts_with("runtime/") {
            continue;
        }
        let (kept, strings) = code_and_strings(&code);
        for name in words(&kept) {
            let vendor = name_parts(name).iter().any(|part| VENDOR_PARTS.contains(&part.as_str()));
            let driver_call = name.starts_with("nvml") && name[4..].starts_with(char::is_uppercase);
            if (vendor || driver_call || name.starts_with("amdsmi_")) && !users_words(&path, name) {
                found.push(format!("src/{path}: {name}"));
            }
        }
        for text in strings {
            let call = words(&text).into_iter().find(|word| {
                word.starts_with("amdsmi_")
                    || word.starts_with("nvml") && word[4..].starts_with(char::is_uppercase)
            });
            if let Some(call) = call {
                found.push(format!("src/{path}: \"...{call}...\""));
            }
        }
    }
    assert!(found.is_empty(), "vendor words outside src/probe/ and src/runtime/:\n{}", found.join("\n"));
    // The splitter sees what the guard is for, and what it is not.
    assert_eq!(name_parts("rocr_index"), ["rocr", "index"]);
    assert_eq!(name_parts("RocrId"), ["rocr", "id"]);
    assert_eq!(name_parts("AMDSmi"), ["amd", "smi"]);
    assert_eq!(name_parts("membership"), ["membership"]);
    assert_eq!(name_parts("sigprocmask"), ["sigprocmask"]);
    let (kept, strings) = code_and_strings("let a = \"nvmlInit\"; // rocr\nlet b = '\"'; hip_id");
    assert_eq!(strings, ["nvmlInit"]);
    assert!(words(&kept).contains(&"hip_id") && !kept.contains("rocr"));
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

/// What reads the test's own clock: a `let` whose value comes from one of these (or from a
/// name that does) holds a time.
const CLOCK_SOURCES: [&str; 6] =
    ["Instant::now()", "SystemTime::now()", ".elapsed()", "duration_since(", "as_secs_f64()", "cpu_ticks("];

/// The statements of `text` (code split at `;`, `{` and `}`, comments dropped), with the
/// line each starts on.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for c in code.chars() {
            if current.trim().is_empty() {
                start = number + 1;
            }
            match c {
                ';' | '{' | '}' => found.push((start, std::mem::take(&mut current))),
                _ => current.push(c),
            }
        }
        current.push(' ');
    }
    found
}

/// The statements of a test file that assert on a time it measured: an assertion that
/// compares (`<`, `>`, a range's `contains`) or equates a value read from the clock, in any
/// spelling (`took < ...`, `gap_ms < 1000.0`, `(a..b).contains(&took)`, `spent <= 10` of CPU
/// ticks in a slept window).
fn clock_assertions(text: &str) -> Vec<(usize, String)> {
    let mut clocked: Vec<String> = Vec::new();
    let reads_clock = |statement: &str, clocked: &[String]| {
        CLOCK_SOURCES.iter().any(|source| statement.contains(source))
            || words(statement).iter().any(|word| clocked.iter().any(|name| name == word))
    };
    let mut found = Vec::new();
    for (line, statement) in statements(text) {
        let trimmed = statement.trim();
        if let Some(binding) = trimmed.strip_prefix("let ") {
            let (name, value) = binding.split_once('=').unwrap_or_default();
            let name = words(name).into_iter().rfind(|w| *w != "mut").unwrap_or_default().to_owned();
            if !name.is_empty() && reads_clock(value, &clocked) {
                clocked.push(name);
            }
        }
        let asserts = words(trimmed).iter().any(|w| w.starts_with("assert") || w.starts_with("prop_assert"));
        let compares =
            ["<", ">", ".contains(&"].iter().any(|op| trimmed.contains(op)) || trimmed.contains("assert_eq");
        if asserts && compares && reads_clock(trimmed, &clocked) {
            found.push((line, trimmed.to_owned()));
        }
    }
    found
}

/// STYLE: no wall-clock assertion in the tests (time is the bench's): a test waits for the
/// event, with a bound that only catches a hang (`common::HANG`).
#[test]
fn no_test_asserts_on_the_clock() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = Vec::new();
    sources(&tests, &mut files);
    let timed: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let hits: Vec<String> = clock_assertions(&text)
                .into_iter()
                .map(|(line, statement)| format!("{}:{line}: {statement}", file.display()))
                .collect();
            hits
        })
        .filter(|hit| !hit.contains("tests/layout.rs"))
        .collect();
    assert!(timed.is_empty(), "wall-clock assertions in tests:\n{}", timed.join("\n"));
    // Every spelling the guard is for is found.
    for spelled in [
        "let started = Instant::now(); run(); assert!(started.elapsed() < Duration::from_secs(3));",
        "let took = started.elapsed(); assert!(took >= Duration::from_secs(2) && took < LIMIT, \"{took:?}\");",
        "let t = Instant::now(); let took = t.elapsed(); assert!((A..B).contains(&took));",
        "let gap_ms = (SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()) * 1e3; assert!(gap_ms < 1000.0);",
        "let before = cpu_ticks(pid); sleep(); let spent = cpu_ticks(pid) - before; assert!(spent <= 10);",
        "let seconds = flood.elapsed().as_secs_f64(); let most = 8 + seconds as usize; assert!(flooded <= most);",
    ] {
        assert_eq!(clock_assertions(spelled).len(), 1, "not found: {spelled}");
    }
    assert!(clock_assertions("let n = things.len(); assert!(n < 3);").is_empty());
}

/// DESIGN 1: the command line is parsed, then resolved once into the plan, outside `cli`: the
/// command line's folder builds no later stage's types (it imports nothing from them).
#[test]
fn the_command_line_imports_no_later_stage() {
    let edges = graph(Path::new(env!("CARGO_MANIFEST_DIR")));
    let later = ["plan", "launch", "reserve", "rank", "select", "verify", "probe", "runtime"];
    let imports: Vec<String> = edges
        .iter()
        .filter(|(from, _)| from.split("::").next() == Some("cli"))
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|module| later.contains(&module.split("::").next().unwrap_or_default()))
                .map(move |module| format!("{from} -> {module}"))
        })
        .collect();
    assert!(imports.is_empty(), "cli imports later stages:\n{}", imports.join("\n"));
}

/// The words of `code` split at anything that cannot be in a Rust name.
fn words(code: &str) -> Vec<&str> {
    code.split(|c: char| !c.is_alphanumeric() && c != '_').filter(|w| !w.is_empty()).collect()
}

/// The run's end belongs to verification: how a run finished and what is diagnosed of it are
/// built in `verify/` alone, where their rules are unit-tested.
#[test]
fn the_end_of_a_run_is_built_in_verify() {
    let mut outside = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("verify/") {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            let found = words(code_part);
            if found.windows(2).any(|pair| pair[0] == "fn" && ["finish", "diagnose"].contains(&pair[1])) {
                outside.push(format!("src/{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "a run's end assembled outside src/verify/:\n{}", outside.join("\n"));
}

/// Issue 64, by shape: no file outside src/verify/ builds the run's end by hand, as a struct
/// literal of verification's `ending::Run`, `monitor::Seen` or `report::Report` (launch hands
/// over `ending::Launched` and `ending::Ended`; verification assembles the rest).
#[test]
fn no_file_outside_verify_builds_the_runs_end() {
    let mut outside = Vec::new();
    for (path, code) in crate_sources() {
        if path.starts_with("verify/") {
            continue;
        }
        // The names this file takes from verify/ (`use crate::verify::...;`, each to its `;`).
        let mut imported: Vec<&str> = Vec::new();
        for (at, _) in code.match_indices("use crate::verify") {
            let statement = &code[at..at + code[at..].find(';').unwrap_or(0)];
            imported
                .extend(["Run", "Seen", "Report"].into_iter().filter(|name| words(statement).contains(name)));
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            let found = words(code_part);
            let declares = found.iter().any(|word| ["struct", "impl", "enum", "use"].contains(word));
            // `NAME {` as a whole word (`RankReport {` is not `Report {`).
            let literal = |name: &str| {
                code_part.match_indices(&format!("{name} {{")).any(|(at, _)| {
                    code_part[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric() && c != '_')
                })
            };
            let built = |name: &str| {
                code_part.contains(&format!("ending::{name} {{"))
                    || (imported.contains(&name) && !declares && literal(name))
            };
            if ["Run", "Seen", "Report"].into_iter().any(built) {
                outside.push(format!("src/{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "the run's end built outside src/verify/:\n{}", outside.join("\n"));
}

/// The fields of each struct declared in `code` with braces: (name, line, field count). A field
/// is a line one indent deeper than the `struct` line that names a field (`name: Type`).
fn struct_fields(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (number, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let head = trimmed.split_whitespace().collect::<Vec<_>>();
        let at = head.iter().position(|w| *w == "struct");
        let Some(at) = at.filter(|_| trimmed.ends_with('{') && !trimmed.starts_with("//")) else { continue };
        let name: String = head
            .get(at + 1)
            .unwrap_or(&"")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indent = line.len() - trimmed.len();
        let inner = " ".repeat(indent + 4);
        let close = format!("{}}}", " ".repeat(indent));
        let mut fields = 0;
        for body in &lines[number + 1..] {
            if body.starts_with(&close) {
                break;
            }
            let Some(rest) = body.strip_prefix(&inner).filter(|rest| !rest.starts_with(' ')) else {
                continue;
            };
            let rest = rest
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            let field: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !field.is_empty() && rest[field.len()..].starts_with(':') && !rest.starts_with("//") {
                fields += 1;
            }
        }
        found.push((name, number + 1, fields));
    }
    found
}

/// Verification, the plan and the config grow by parts: a feature adds a part (a health
/// watch, the receipt, the supervision's limits), not one more field to a struct that holds
/// everything.
#[test]
fn no_struct_of_verification_the_plan_or_the_config_holds_more_than_twelve_fields() {
    let mut wide = Vec::new();
    let grouped = |path: &str| ["verify/", "plan/", "config/"].iter().any(|folder| path.starts_with(folder));
    for (path, code) in crate_sources().into_iter().filter(|(path, _)| grouped(path)) {
        for (name, line, fields) in struct_fields(&code) {
            if fields > 12 {
                wide.push(format!("src/{path}:{line} {name}: {fields} fields"));
            }
        }
    }
    assert!(wide.is_empty(), "structs of more than 12 fields:\n{}", wide.join("\n"));
    // The counter counts: a struct of 13 named fields is seen as one.
    let thirteen: String = (0..13).map(|n| format!("    f{n}: u32,\n")).collect();
    assert_eq!(
        struct_fields(&format!("pub(crate) struct Wide {{\n{thirteen}}}\n")),
        [("Wide".to_owned(), 1, 13)]
    );
}

/// One acquisition loop: leases are taken (`lease::reserve`) by one module, whatever the launch
/// waits for (GPUs, or a `--per-rank` group's set).
#[test]
fn leases_are_taken_by_one_module() {
    let callers: Vec<String> = crate_sources()
        .into_iter()
        .filter(|(path, code)| path != "reserve/lease.rs" && code.contains("lease::reserve("))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(callers, ["reserve/acquire.rs"], "the modules that take leases");
}

/// Small modules with one job each: no source file of the crate is over 800 lines (its unit
/// tests included).
#[test]
fn no_source_file_is_over_800_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let long: Vec<String> = files
        .iter()
        .map(|file| (file, std::fs::read_to_string(file).unwrap().lines().count()))
        .filter(|(_, lines)| *lines > 800)
        .map(|(file, lines)| format!("{}: {lines} lines", file.display()))
        .collect();
    assert!(long.is_empty(), "files over 800 lines:\n{}", long.join("\n"));
}

/// The repository's commit-msg hook (`make setup`) refuses a subject over 72 characters or one
/// that stops mid-sentence, and lets a whole short sentence through.
#[test]
fn the_commit_message_hook_refuses_long_or_cut_subjects() {
    let hook = Path::new(env!("CARGO_MANIFEST_DIR")).join(".githooks/commit-msg");
    let dir = tempfile::tempdir().unwrap();
    let verdict = |subject: &str| {
        let message = dir.path().join("COMMIT_EDITMSG");
        let text = match subject {
            "" => "# a comment git leaves, and nothing else\n\n".to_owned(),
            _ => format!("# a comment git leaves\n{subject}\n\nThe body, as long as it likes.\n"),
        };
        std::fs::write(&message, text).unwrap();
        let out = std::process::Command::new("bash").arg(&hook).arg(&message).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for whole in
        ["One acquisition loop, whatever it waits for (50)", "Split nvml.rs by NVML area.", "fixup! anything"]
    {
        assert_eq!(verdict(whole), (true, String::new()), "{whole}");
    }
    for (cut, why) in [
        ("A subject of seventy-three characters is one character over the limit, ok", "73 characters"),
        ("guide: a resumed gpurun continues the command, unless it was", "mid-sentence (on 'was')"),
        ("Two test races seen under load: a comm read after spawn, and", "mid-sentence (on 'and')"),
        ("The probe reads the fabric:", "mid-sentence (on ':')"),
        ("", "empty"),
    ] {
        let (passed, said) = verdict(cut);
        assert!(!passed && said.contains(why), "{cut:?}: {said}");
    }
}

/// Issue 64: doc/development.md's code map names every source file: each `src/FOLDER/NAME.rs`
/// is a word of its folder's entry (a folder's `mod.rs` is the folder itself), each top-level
/// file has an entry of its own.
#[test]
fn the_code_map_names_every_source_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("doc/development.md")).unwrap();
    let start = doc.find("\nsrc/main.rs ").expect("the code map's table");
    let table = &doc[start..doc[start..].find("\n```").map_or(doc.len(), |end| start + end)];
    // Each entry: its key (`src/probe/`, `src/lib.rs`) and its text, continuation lines included.
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in table.lines().filter(|line| !line.is_empty()) {
        match line.starts_with(' ') {
            true => entries.last_mut().expect("an entry before").1.push_str(line),
            false => {
                let (key, text) = line.split_once(' ').unwrap_or((line, ""));
                entries.push((key.to_owned(), text.to_owned()));
            }
        }
    }
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut missing = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).unwrap().display().to_string();
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let named = match entries.iter().find(|(key, _)| relative == *key) {
            Some(_) => true,
            None => {
                let folder = entries
                    .iter()
                    .filter(|(key, _)| key.ends_with('/') && relative.starts_with(key.as_str()))
                    .max_by_key(|(key, _)| key.len());
                folder.is_some_and(|(_, text)| {
                    stem == "mod"
                        || text.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == stem)
                })
            }
        };
        if !named {
            missing.push(relative);
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "doc/development.md's code map does not name:\n{}", missing.join("\n"));
}

/// Issue 64: doc/development.md's table of which stage imports which is the imports' own
/// (outside unit tests; `options`, `process` and `exit_code` left out, as the table says).
#[test]
fn the_import_table_is_the_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("doc/development.md")).unwrap();
    let start = doc.find("\nlib      -> ").expect("the import table");
    let table = &doc[start + 1..doc[start..].find("\n```").map_or(doc.len(), |end| start + end)];
    let actual = folders(&graph(root));
    let shared = ["options", "process", "exit_code"];
    let mut differ = Vec::new();
    for line in table.lines() {
        let (from, to) = line.split_once("->").expect("NAME -> NAMES");
        let listed: BTreeSet<String> = to
            .split('(')
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        let imports: BTreeSet<String> = actual
            .get(from.trim())
            .into_iter()
            .flatten()
            .filter(|m| !shared.contains(&m.as_str()))
            .cloned()
            .collect();
        if listed != imports {
            differ.push(format!("{}: the table says {listed:?}, the code {imports:?}", from.trim()));
        }
    }
    assert!(differ.is_empty(), "doc/development.md's import table:\n{}", differ.join("\n"));
}

/// Issue 64: the plan reads nothing of gpurun's environment or process itself (what it needs
/// is read once in resolution: `plan::Surroundings`, with the caller's variables in
/// `plan::env::CallerVariables`), neither where it is built nor where it writes the variables.
#[test]
fn the_plan_reads_no_environment_itself() {
    for file in ["plan/mod.rs", "plan/env.rs"] {
        let (_, plan) = crate_sources().into_iter().find(|(path, _)| path == file).expect(file);
        for read in ["std::env::", "env::var", "from_env(", "own_cpus(", "sched_getaffinity"] {
            assert!(!plan.contains(read), "{file} reads {read}: read it in config::resolve instead");
        }
    }
}

/// Issue 64: each stage's input comes from the plan or the resolved config (as ripgrep's
/// `HiArgs::searcher()`): launch/ and lib.rs build none of them field by field, and the monitor
/// has no `for_*` builders to be assembled with.
#[test]
fn the_plan_builds_each_stages_input() {
    let inputs = ["Watching {", "Launched {", "Placement {", "PlanInput {", "Supervision {", "Monitor::new("];
    let mut found = Vec::new();
    for (path, code) in crate_sources() {
        let builds_inputs = path.starts_with("plan/") || path.starts_with("config/");
        if builds_inputs || path.starts_with("verify/") {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or_default();
            if let Some(input) = inputs.iter().find(|input| code_part.contains(*input)) {
                found.push(format!("src/{path}:{}: {input}", number + 1));
            }
        }
    }
    let builders = crate_sources()
        .into_iter()
        .filter(|(path, code)| path.starts_with("verify/") && code.contains("pub(crate) fn for_"))
        .map(|(path, _)| format!("src/{path}: a for_* builder"));
    found.extend(builders);
    assert!(found.is_empty(), "stage inputs built outside the plan and the config:\n{}", found.join("\n"));
}
