//! `man/gpurun.1` is generated from the clap definition and checked in. This test fails when it
//! is stale; `make man` (GPURUN_BLESS=1) rewrites it.

use std::path::Path;

use roff::{bold, roman, Roff};

/// clap_mangen's sections, with gpurun's reference sections (`cli::REFERENCE`) in place of its
/// catch-all EXTRA section.
fn render() -> String {
    let command = gpurun::cli::command();
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page).unwrap();
    man.render_name_section(&mut page).unwrap();
    man.render_synopsis_section(&mut page).unwrap();
    man.render_description_section(&mut page).unwrap();
    man.render_options_section(&mut page).unwrap();
    let mut reference = Roff::new();
    for (heading, entries) in gpurun::cli::REFERENCE {
        reference.control("SH", [heading.to_uppercase().as_str()]);
        for (term, meaning) in *entries {
            reference.control("TP", []).text([bold(*term)]).text([roman(*meaning)]);
        }
    }
    reference.to_writer(&mut page).unwrap();
    man.render_version_section(&mut page).unwrap();
    String::from_utf8(page).expect("man page is UTF-8")
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
fn man_page_has_the_reference_sections() {
    let page = render();
    for heading in ["EXAMPLES", "ENVIRONMENT", "EXIT STATUS", "JSON OUTPUT"] {
        assert!(
            page.contains(&format!(".SH \"{heading}\"")) || page.contains(&format!(".SH {heading}")),
            "{heading}"
        );
    }
    assert!(!page.contains(".SH EXTRA"));
}
