//! Shebang use (DESIGN 7.9). With `#!/usr/local/bin/gpurun --gpus 1 -- python3`, Linux passes
//! everything after the interpreter path as one argument: `["/usr/local/bin/gpurun",
//! "--gpus 1 -- python3", "script.py", ...]`. Only in exactly that situation (the next argument
//! is a readable file whose first line is a `#!` line naming this very argv[0] with that very
//! text, as the kernel passes it) is the packed argument split, exactly as GNU `env -S` splits
//! its string (`build_argv` in coreutils' env.c, whose `tests/env/env-S.pl` cases
//! `tests/env_s.rs` runs against the real env): words end at space, tab, newline, \v, \f, \r
//! and at `\_` outside quotes; 'single quotes' keep all but `\\` and `\'`; "double quotes"
//! decode `\_` (a space) and the escapes; `${NAME}` is expanded (not inside single quotes); a
//! `#` that starts a word and `\c` end the string; and what env refuses (`$B`, `${9B}`, an
//! unknown escape, a lone quote) is refused with env's reason. Anywhere else an argument with
//! blanks is an ordinary argument (`gpurun '--model=Tesla T4' --dry-run`), and so is one typed
//! by hand with argv[0] exactly the `#!` line's path (`gpurun 'pa -n' ./s`, which GNU env
//! runs as a command named "pa -n"): the kernel says which file it executed (`AT_EXECFN`), the
//! script when it ran gpurun as the script's interpreter. (The
//! `#!/usr/bin/env -S gpurun ...` form needs none of this: env splits.)

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The kernel reads at most this much of a `#!` line.
const SHEBANG_LINE_MAX: u64 = 4096;

/// Whether `script`'s first line is `#!<interpreter> <packed>`, with the interpreter being
/// exactly `argv0`: the kernel's binfmt_script passes the interpreter as written on the line
/// as argv[0], so `gpurun 'pa -n' ./s` typed by hand (argv[0] `gpurun`, the line
/// `#!/usr/local/bin/gpurun pa -n`) is not the interpreter situation, as it is not for GNU env.
fn is_interpreter_line(argv0: &OsStr, packed: &[u8], script: &OsStr) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(script) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    let mut head = Vec::new();
    if file.take(SHEBANG_LINE_MAX).read_to_end(&mut head).is_err() {
        return false;
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Some(rest) = line.strip_prefix(b"#!") else { return false };
    let rest = trim(rest);
    let end = rest.iter().position(|b| *b == b' ' || *b == b'\t').unwrap_or(rest.len());
    let (interpreter, arguments) = rest.split_at(end);
    OsStr::from_bytes(interpreter) == argv0 && trim(arguments) == trim(packed)
}

/// Whether the kernel ran gpurun for `script` (binfmt_script: what execve(2) was given is the
/// script's path, which the kernel passes on as this argument) rather than a person or a
/// program running gpurun (then it is gpurun's own path). Where the kernel does not say, the
/// `#!` line alone decides.
fn run_for(script: &OsStr, executed: Option<OsString>) -> bool {
    executed.is_none_or(|executed| executed == script)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let blank = |b: &u8| *b == b' ' || *b == b'\t' || *b == b'\r';
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !blank(b)).map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

/// Splits argv[1] when it is a shebang's packed options; otherwise returns argv unchanged.
pub(crate) fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    expand_as_executed(args, crate::process::exec_file::exec_filename())
}

/// `expand`, `executed` being the path execve(2) was given (`None`: the kernel did not say).
fn expand_as_executed(args: Vec<OsString>, executed: Option<OsString>) -> Result<Vec<OsString>, String> {
    let (Some(first), Some(script)) = (args.get(1), args.get(2)) else { return Ok(args) };
    let bytes = first.as_bytes();
    // Only a word with blanks is worth a look at the next argument's first line: a one-word
    // shebang splits into itself.
    let packed = bytes.iter().any(|b| b.is_ascii_whitespace());
    if !packed || !is_interpreter_line(&args[0], bytes, script) || !run_for(script, executed) {
        return Ok(args);
    }
    let words = split(bytes)?;
    let mut expanded = Vec::with_capacity(args.len() + words.len());
    expanded.push(args[0].clone());
    expanded.extend(words.into_iter().map(OsString::from_vec));
    expanded.extend(args.into_iter().skip(2));
    Ok(expanded)
}

fn split(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    crate::options::split_string::split(text).map_err(|reason| {
        format!("shebang arguments {:?}: {reason} (split as env -S splits)", String::from_utf8_lossy(text))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    /// A script whose first line is `line`, and its path.
    fn script(line: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.py");
        std::fs::write(&path, format!("{line}\nprint(1)\n")).unwrap();
        (dir, path.to_str().unwrap().to_owned())
    }

    #[test]
    fn packed_first_argument_is_split_in_the_interpreter_situation() {
        let (_dir, path) = script("#!/usr/local/bin/gpurun --gpus 1 -- python3  ");
        let expanded = expand_as_executed(
            argv(&["/usr/local/bin/gpurun", "--gpus 1 -- python3", &path, "--lr 3"]),
            None,
        )
        .unwrap();
        assert_eq!(
            expanded,
            argv(&["/usr/local/bin/gpurun", "--gpus", "1", "--", "python3", &path, "--lr 3"])
        );
    }

    /// The kernel ends the interpreter at a space or a tab; the packed text need not be
    /// options (`#!/usr/local/bin/gpurun python3 -u` runs `python3 -u script`).
    #[test]
    fn a_tab_or_a_command_without_options_is_split_too() {
        let (_dir, path) = script("#!/usr/local/bin/gpurun\t--gpus 1\t-- python3\t");
        let expanded =
            expand_as_executed(argv(&["/usr/local/bin/gpurun", "--gpus 1\t-- python3", &path]), None)
                .unwrap();
        assert_eq!(expanded, argv(&["/usr/local/bin/gpurun", "--gpus", "1", "--", "python3", &path]));
        let (_dir, path) = script("#!/usr/local/bin/gpurun python3 -u");
        let expanded =
            expand_as_executed(argv(&["/usr/local/bin/gpurun", "python3 -u", &path]), None).unwrap();
        assert_eq!(expanded, argv(&["/usr/local/bin/gpurun", "python3", "-u", &path]));
        // Not that line: left alone.
        let unchanged = argv(&["/usr/local/bin/gpurun", "python3 -X", &path]);
        assert_eq!(expand_as_executed(unchanged.clone(), None).unwrap(), unchanged);
    }

    #[test]
    fn quotes_and_escapes_follow_env_s() {
        let packed = r#"--model 'A100 SXM4' --x "a\"b" c\_d -- sh"#;
        let (_dir, path) = script(&format!("#!/usr/bin/gpurun {packed}"));
        let expanded = expand_as_executed(argv(&["/usr/bin/gpurun", packed, &path]), None).unwrap();
        assert_eq!(
            expanded,
            argv(&["/usr/bin/gpurun", "--model", "A100 SXM4", "--x", "a\"b", "c", "d", "--", "sh", &path])
        );
        let (_dir, path) = script("#!/usr/bin/gpurun --model 'A100");
        assert!(expand_as_executed(argv(&["/usr/bin/gpurun", "--model 'A100", &path]), None)
            .unwrap_err()
            .contains("no terminating quote in -S string"));
    }

    /// `gpurun 'pa -n' ./s` typed by hand, argv[0] exactly the `#!` line's path: the kernel
    /// executed gpurun itself, not the script, so it is an ordinary argument (GNU env runs a
    /// command named "pa -n"); executed for the script, it is split.
    #[test]
    fn a_packed_argument_typed_by_hand_is_not_split() {
        let (_dir, path) = script("#!/usr/local/bin/gpurun pa -n");
        let typed = argv(&["/usr/local/bin/gpurun", "pa -n", &path]);
        let by_hand = expand_as_executed(typed.clone(), Some("/usr/local/bin/gpurun".into())).unwrap();
        assert_eq!(by_hand, typed);
        let by_kernel = expand_as_executed(typed, Some(path.clone().into())).unwrap();
        assert_eq!(by_kernel, argv(&["/usr/local/bin/gpurun", "pa", "-n", &path]));
    }

    #[test]
    fn ordinary_argv_is_untouched() {
        let (_dir, other) = script("#!/bin/sh --model Tesla T4");
        let (_dir2, different) = script("#!/usr/bin/gpurun --gpus 2");
        for words in [
            &["gpurun", "--gpus", "1", "--", "x y"][..],
            &["gpurun", "python3 -c x"],
            &["gpurun"],
            &["gpurun", "--model=Tesla T4", "--dry-run"],
            &["gpurun", "--model=Tesla T4", "/no/such/file"],
            &["gpurun", "--model Tesla T4", &other],
            &["/usr/bin/gpurun", "--gpus 1", &different],
        ] {
            assert_eq!(expand_as_executed(argv(words), None).unwrap(), argv(words));
        }
    }
}
