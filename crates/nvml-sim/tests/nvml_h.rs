//! The simulator against NVIDIA's own nvml.h (the PyPI package nvidia-nvml-dev, installed by
//! `make venv`): every struct size and field offset, constant and enum value it uses
//! (`nvml_sim::header_facts`) is evaluated by a C program compiled against the header, and
//! every symbol the built library exports must be declared there, in the version the header
//! maps the unversioned name to. Nothing here is a number copied from the header by hand.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// NVML_H, else the header in the project's virtual environment.
fn header() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NVML_H") {
        return Some(PathBuf::from(path));
    }
    let lib = workspace().join(".venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|python| {
        let path = python.path().join("site-packages/nvidia/cu13/include/nvml.h");
        path.exists().then_some(path)
    })
}

fn skip(why: &str) {
    if std::env::var_os("CI_NO_SKIP").is_some() {
        panic!("not skipped under CI_NO_SKIP: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// The `nvml*` functions the built simulator exports.
fn exported() -> Vec<String> {
    // target/debug/deps/nvml_h-* -> target/debug
    let dir = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_owned();
    let library = dir.join("libnvml_sim.so");
    let output =
        Command::new("nm").args(["-D", "--defined-only"]).arg(&library).output().expect("nm (binutils)");
    assert!(output.status.success(), "nm {}: {}", library.display(), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] if name.starts_with("nvml") => Some(name.to_owned()),
            _ => None,
        })
        .collect()
}

/// `#define nvmlInit nvmlInit_v2` and the like: what a caller built against the header calls.
fn upgrades(header: &str) -> Vec<(String, String)> {
    header
        .lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["#define", from, to] if from.starts_with("nvml") && to.starts_with(from) => {
                Some((from.to_owned(), to.to_owned()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn structs_constants_and_symbols_are_nvml_hs() {
    let Some(header) = header() else {
        return skip("nvml.h from nvidia-nvml-dev is not installed (make venv)");
    };
    let text = std::fs::read_to_string(&header).unwrap();
    let facts = nvml_sim::header_facts();
    let symbols = exported();
    assert!(symbols.len() > 40, "{symbols:?}");

    let mut program =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include \"nvml.h\"\nint main(void) {\n");
    for symbol in &symbols {
        // A compile error where the header declares no such function.
        let _ = writeln!(program, "    (void)sizeof(&{symbol});");
    }
    for (expression, _) in &facts {
        let _ = writeln!(program, "    printf(\"%llu\\n\", (unsigned long long)({expression}));");
    }
    program.push_str("    return 0;\n}\n");
    let dir = tempfile_dir();
    let source = dir.join("check.c");
    std::fs::write(&source, &program).unwrap();
    let binary = dir.join("check");
    // Both the unversioned and the versioned declarations, as older callers see them;
    // deprecated ones (nvmlDeviceGetTemperature, 13.0) are still declared and still called.
    let compiled = Command::new("cc")
        .args([
            "-std=c11",
            "-Werror",
            "-Wno-deprecated-declarations",
            "-DNVML_NO_UNVERSIONED_FUNC_DEFS",
            "-I",
        ])
        .arg(header.parent().unwrap())
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .expect("cc");
    assert!(
        compiled.status.success(),
        "the simulator exports functions nvml.h ({}) does not declare:\n{}",
        header.display(),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let output = Command::new(&binary).output().unwrap();
    assert!(output.status.success());
    let values: Vec<u64> =
        String::from_utf8(output.stdout).unwrap().lines().map(|line| line.parse().unwrap()).collect();
    let wrong: Vec<String> = facts
        .iter()
        .zip(&values)
        .filter(|((_, ours), theirs)| ours != *theirs)
        .map(|((expression, ours), theirs)| format!("{expression}: the simulator {ours}, nvml.h {theirs}"))
        .collect();
    assert!(wrong.is_empty(), "the simulator disagrees with nvml.h:\n{}", wrong.join("\n"));
    assert_eq!(values.len(), facts.len());

    // A caller built against this header calls the versioned name: where the simulator serves
    // the call at all, it must serve that version.
    let missing: Vec<String> = upgrades(&text)
        .into_iter()
        .filter(|(from, to)| symbols.contains(from) && !symbols.contains(to))
        .map(|(from, to)| format!("{from} is exported but {to}, which nvml.h maps it to, is not"))
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvml-h-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
