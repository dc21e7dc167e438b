//! The README says every rule of the docs is tested through the real binary; this keeps that
//! sentence checkable. tests/promises.md is a table: each rule sentence of README.md and
//! the guide (doc/guide.md and its pages, doc/guide/*.md) (a sentence that says "never", "always", "refused", "exits N", "is an error" or
//! "no two"), named by words of it, beside the tests that check it. A rule sentence that no row
//! names (a new promise), a row whose words are no longer in the docs, and a row naming a test
//! that does not exist each fail here. The options of the clap definition are held to a test each
//! too.

use std::collections::BTreeMap;
use std::path::Path;

/// README.md, the guide's first page and its task pages (doc/guide/*.md).
fn docs() -> Vec<String> {
    let mut docs = vec!["README.md".to_owned(), "doc/guide.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root().join("doc/guide"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("doc/guide/{name}"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Paragraphs, list items and table rows outside code blocks and headings, each on one line.
fn units(text: &str) -> Vec<String> {
    let mut units = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let starts_unit = line.is_empty()
            || line.starts_with('#')
            || line.starts_with("- ")
            || line.starts_with("| ")
            || line
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if starts_unit && !current.is_empty() {
            units.push(current.join(" "));
            current.clear();
        }
        if !line.is_empty() && !line.starts_with('#') {
            current.push(line);
        }
    }
    if !current.is_empty() {
        units.push(current.join(" "));
    }
    units.into_iter().map(|u| u.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// A unit cut after `.`, `;`, `:`, `!` or `?` where the next word starts with a capital, a
/// backquote, `(` or `*`.
fn sentences(unit: &str) -> Vec<String> {
    let words: Vec<&str> = unit.split(' ').collect();
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for (i, word) in words.iter().enumerate() {
        current.push(word);
        let ends = word.ends_with(['.', ';', ':', '!', '?']);
        let next_starts = words
            .get(i + 1)
            .and_then(|w| w.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase() || matches!(c, '`' | '(' | '*'));
        if ends && next_starts {
            out.push(current.join(" "));
            current.clear();
        }
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out
}

fn word_at(lower: &str, at: usize, word: &str, whole: bool) -> bool {
    let before = lower[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
    let after = lower[at + word.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric());
    before && (after || !whole)
}

/// Whether a sentence says what gpurun always or never does, refuses, or exits with.
fn is_rule(sentence: &str) -> bool {
    let lower = sentence.to_lowercase();
    let has =
        |word: &str, whole: bool| lower.match_indices(word).any(|(at, _)| word_at(&lower, at, word, whole));
    let exits_with_a_number = lower.match_indices("exit").any(|(at, _)| {
        let rest = lower[at + 4..].strip_prefix('s').unwrap_or(&lower[at + 4..]);
        let rest = rest.strip_prefix(' ').map(|r| r.strip_prefix("with ").unwrap_or(r));
        word_at(&lower, at, "exit", false)
            && rest.is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    });
    ["never", "always", "is an error", "no two"].iter().any(|w| has(w, true))
        || has("refus", false)
        || exits_with_a_number
}

fn rule_sentences(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    units(&text).iter().flat_map(|u| sentences(u)).filter(|s| is_rule(s)).collect()
}

struct Row {
    words: String,
    file: String,
    tests: String,
    line: usize,
}

fn table() -> Vec<Row> {
    let text = std::fs::read_to_string(root().join("tests/promises.md")).unwrap();
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(inner) = line.strip_prefix("| ").and_then(|l| l.strip_suffix(" |")) else { continue };
        let cells: Vec<&str> = inner.split(" | ").collect();
        assert_eq!(cells.len(), 3, "tests/promises.md:{}: three cells: {line}", n + 1);
        if cells[0] == "rule (words of the sentence)" || cells[0].starts_with("---") {
            continue;
        }
        let words = cells[0].replace("\\|", "|");
        rows.push(Row { words, file: cells[1].to_owned(), tests: cells[2].to_owned(), line: n + 1 });
    }
    rows
}

/// Every test function of the integration tests (`module::name`) and of the library's unit
/// tests (`src/path.rs::name`), with whether it is ignored.
fn tests_defined() -> BTreeMap<String, bool> {
    let mut found = BTreeMap::new();
    let mut collect = |prefix: String, path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        let mut test = false;
        let mut ignored = false;
        for line in text.lines().map(str::trim) {
            if line == "#[test]" {
                test = true;
            } else if line.starts_with("#[ignore") {
                ignored = true;
            } else if let Some(rest) = line.strip_prefix("fn ").filter(|_| test) {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.insert(format!("{prefix}::{name}"), ignored);
                test = false;
                ignored = false;
            } else if !line.starts_with("#[") && !line.starts_with("//") {
                test = false;
                ignored = false;
            }
        }
    };
    for entry in std::fs::read_dir(root().join("tests")).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "rs") {
            collect(path.file_stem().unwrap().to_string_lossy().into_owned(), &path);
        }
    }
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root()).unwrap().display().to_string();
                collect(relative, &path);
            }
        }
    }
    found
}

#[test]
fn every_rule_sentence_of_the_docs_has_its_tests() {
    let rows = table();
    let defined = tests_defined();
    let docs = docs();
    let mut problems = Vec::new();
    for row in &rows {
        if !docs.contains(&row.file) {
            problems.push(format!("tests/promises.md:{}: {:?} is none of {docs:?}", row.line, row.file));
        }
        if let Some(why) = row.tests.strip_prefix("not a rule: ") {
            if why.trim().is_empty() {
                problems.push(format!("tests/promises.md:{}: \"not a rule\" says why", row.line));
            }
            continue;
        }
        for test in row.tests.split(", ") {
            match defined.get(test) {
                None => problems.push(format!("tests/promises.md:{}: no test {test}", row.line)),
                Some(true) => problems.push(format!("tests/promises.md:{}: {test} is ignored", row.line)),
                Some(false) => {}
            }
        }
    }
    for file in &docs {
        let file = file.as_str();
        let sentences = rule_sentences(file);
        for row in rows.iter().filter(|r| r.file == file) {
            let matching = sentences.iter().filter(|s| s.contains(&row.words)).count();
            if matching != 1 {
                problems.push(format!(
                    "tests/promises.md:{}: {:?} is in {matching} rule sentences of {file}, not one",
                    row.line, row.words
                ));
            }
        }
        for sentence in &sentences {
            if !rows.iter().any(|r| r.file == file && sentence.contains(&r.words)) {
                problems.push(format!("{file}: a rule with no row in tests/promises.md: {sentence}"));
            }
        }
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

/// Every long option of gpurun's clap definition (what `--help` and the man page show) is given
/// to gpurun by some test; the rule sentences above say what they do, this says none is left
/// untried.
#[test]
fn every_option_is_used_by_a_test() {
    let mut tests = String::new();
    for entry in std::fs::read_dir(root().join("tests")).unwrap().flatten() {
        let path = entry.path();
        let own = ["promises.rs", "man_page.rs"].iter().any(|n| path.ends_with(n));
        if path.extension().is_some_and(|e| e == "rs") && !own {
            tests.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let command = gpurun::cli::command();
    let options: Vec<String> =
        command.get_arguments().filter_map(|arg| arg.get_long()).map(|long| format!("--{long}")).collect();
    let used = |option: &str| {
        tests.match_indices(option).any(|(at, _)| {
            let next = tests[at + option.len()..].chars().next();
            next.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        })
    };
    let unused: Vec<&String> = options.iter().filter(|o| !used(o)).collect();
    assert!(options.len() > 40, "{} options in the clap definition", options.len());
    assert!(unused.is_empty(), "options no test gives gpurun: {unused:?}");
}
