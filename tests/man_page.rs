//! `man/gpurun.1` is generated from the clap definition and checked in. This test fails when it
//! is stale; `make man` (GPURUN_BLESS=1) rewrites it.

use std::path::Path;

use roff::{bold, roman, Roff};

/// Sections a man page reader looks for at the end, in the conventional order (man-pages(7)).
const LAST: &[&str] = &["Environment", "Files", "Exit status", "Examples"];

/// clap_mangen's sections, each option group a subsection of OPTIONS, then gpurun's reference
/// sections (`cli::REFERENCE`) in place of clap_mangen's catch-all EXTRA section, ENVIRONMENT,
/// FILES, EXIT STATUS and EXAMPLES last, then SEE ALSO.
fn render() -> String {
    // An option kept out of `-h` keeps its text in the man page: clap_mangen gives an option
    // whose help is one paragraph (no long help of its own) no text when it is hidden from -h.
    let command = gpurun::cli::command().mut_args(|arg| arg.hide_short_help(false));
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page).unwrap();
    man.render_name_section(&mut page).unwrap();
    man.render_synopsis_section(&mut page).unwrap();
    man.render_description_section(&mut page).unwrap();
    let mut options = Vec::new();
    man.render_options_section(&mut options).unwrap();
    // clap_mangen gives each help heading a section of its own; they are parts of OPTIONS.
    for line in String::from_utf8(options).unwrap().lines() {
        let line = match line.strip_prefix(".SH ") {
            Some(heading) if heading != "OPTIONS" => format!(".SS {}", as_spelled(&command, heading)),
            _ => line.to_owned(),
        };
        page.extend_from_slice(line.as_bytes());
        page.push(b'\n');
    }
    let mut reference = Roff::new();
    let sections = gpurun::cli::REFERENCE.iter().filter(|(heading, _)| !LAST.contains(heading));
    let last = LAST.iter().map(|heading| {
        gpurun::cli::REFERENCE
            .iter()
            .find(|(h, _)| h == heading)
            .unwrap_or_else(|| panic!("no {heading} section"))
    });
    for (heading, entries) in sections.chain(last) {
        reference.control("SH", [heading.to_uppercase().as_str()]);
        for (term, meaning) in *entries {
            reference.control("TP", []).text([bold(*term)]).text([roman(*meaning)]);
        }
    }
    reference.control("SH", ["SEE ALSO"]);
    let see_also: Vec<_> = gpurun::cli::SEE_ALSO
        .iter()
        .enumerate()
        .flat_map(|(i, (name, section))| {
            [
                bold(*name),
                roman(format!("({section}){}", if i + 1 < gpurun::cli::SEE_ALSO.len() { ", " } else { "" })),
            ]
        })
        .collect();
    reference.text(see_also);
    reference.to_writer(&mut page).unwrap();
    man.render_version_section(&mut page).unwrap();
    String::from_utf8(page).expect("man page is UTF-8")
}

/// clap_mangen's `.SH "COMMAND ENVIRONMENT"` -> the heading as the definition spells it.
fn as_spelled(command: &clap::Command, shouted: &str) -> String {
    let bare = shouted.trim_matches('"');
    let heading = command
        .get_arguments()
        .filter_map(|arg| arg.get_help_heading())
        .find(|heading| heading.to_uppercase() == bare)
        .unwrap_or(bare);
    if heading.contains(' ') {
        format!("\"{heading}\"")
    } else {
        heading.to_owned()
    }
}

#[test]
fn man_page_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("man/gpurun.1");
    let rendered = render();
    if std::env::var_os("GPURUN_BLESS").is_some() {
        std::fs::write(&path, &rendered).expect("write man page");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(checked_in == rendered, "man/gpurun.1 is stale: run `make man` and commit it");
}

#[test]
fn man_page_has_each_section_once_and_the_conventional_ones() {
    let page = render();
    let sections: Vec<&str> =
        page.lines().filter_map(|l| l.strip_prefix(".SH ")).map(|h| h.trim_matches('"')).collect();
    let mut unique = sections.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), sections.len(), "a section twice: {sections:?}");
    let end = ["ENVIRONMENT", "FILES", "EXIT STATUS", "EXAMPLES", "SEE ALSO", "VERSION"];
    assert_eq!(&sections[sections.len() - end.len()..], end, "{sections:?}");
    assert_eq!(&sections[..4], ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS"]);
    assert!(sections.contains(&"JSON OUTPUT") && !sections.contains(&"EXTRA"));
    // The options of each group are a subsection of OPTIONS.
    assert!(page.contains(".SS Selection\n") && page.contains(".SS \"Command environment\"\n"), "{page}");
    // ENVIRONMENT holds variables, not options.
    let environment = page.split(".SH ENVIRONMENT").nth(1).unwrap().split(".SH ").next().unwrap();
    assert!(environment.contains("CUDA_VISIBLE_DEVICES") && environment.contains("GPURUN_LOG"));
    assert!(!environment.contains("\\-\\-visible\\-as\\fR"), "{environment}");
    let see_also = page.split(".SH \"SEE ALSO\"").nth(1).unwrap();
    for name in ["nvidia\\-smi", "env", "timeout", "numactl", "srun"] {
        assert!(see_also.contains(&format!("\\fB{name}\\fR(")), "{name}: {see_also}");
    }
}

#[test]
fn every_option_in_the_man_page_says_what_it_does() {
    let page = render();
    let options = page.split(".SH OPTIONS").nth(1).unwrap().split(".SH ").next().unwrap();
    let lines: Vec<&str> = options.lines().collect();
    let mut without = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if *line != ".TP" {
            continue;
        }
        let term = lines.get(at + 1).copied().unwrap_or_default();
        let text = lines.get(at + 2).copied().unwrap_or_default();
        if text.is_empty() || text.starts_with('.') {
            without.push(term.to_owned());
        }
    }
    assert!(without.is_empty(), "options with no text in the man page: {without:?}");
    // The ones issue 25 found empty.
    for option in ["min\\-total", "max\\-util", "exclude", "fallback", "nvml\\-lib"] {
        let entry = options.split(&format!("\\fB\\-\\-{option}\\fR")).nth(1).unwrap_or_default();
        let text = entry.lines().nth(1).unwrap_or_default();
        assert!(!text.is_empty() && !text.starts_with('.'), "--{option}: {entry:.200}");
    }
}
