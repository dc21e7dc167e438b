//! Shebang use (DESIGN 7.9). With `#!/usr/local/bin/gpurun --gpus 1 -- python3`, Linux passes
//! everything after the interpreter path as one argument: `["/usr/local/bin/gpurun",
//! "--gpus 1 -- python3", "script.py", ...]`. Only in exactly that situation (the next argument
//! is a readable file whose first line is a `#!` line naming gpurun with that very text) is the
//! packed argument split, the way `env -S` splits its string: on blanks, with 'single quotes'
//! (literal), "double quotes" (backslash escapes \" \\ \$ inside), and the escapes \\ \' \"
//! \_ (a space) \t \n outside. Anywhere else an argument with blanks is an ordinary argument
//! (`gpurun '--model=Tesla T4' --dry-run`). (The `#!/usr/bin/env -S gpurun ...` form needs none
//! of this: env splits.)

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The kernel reads at most this much of a `#!` line.
const SHEBANG_LINE_MAX: u64 = 4096;

/// Whether `script`'s first line is `#!<interpreter> <packed>`, with the interpreter being
/// this gpurun (as `argv0` names it, or any file called gpurun).
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
    let interpreter = OsStr::from_bytes(interpreter);
    let names_gpurun = interpreter == argv0
        || std::path::Path::new(interpreter).file_name() == Some(OsStr::new("gpurun"))
        || std::path::Path::new(interpreter).file_name() == std::path::Path::new(argv0).file_name();
    names_gpurun && trim(arguments) == trim(packed)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let blank = |b: &u8| *b == b' ' || *b == b'\t' || *b == b'\r';
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !blank(b)).map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

/// Splits argv[1] when it is a shebang's packed options; otherwise returns argv unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let (Some(first), Some(script)) = (args.get(1), args.get(2)) else { return Ok(args) };
    let bytes = first.as_bytes();
    let packed = bytes.first() == Some(&b'-') && bytes.iter().any(|b| b.is_ascii_whitespace());
    if !packed || !is_interpreter_line(&args[0], bytes, script) {
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
    let shown = String::from_utf8_lossy(text).into_owned();
    let mut words = Vec::new();
    let mut word: Option<Vec<u8>> = None;
    let mut bytes = text.iter().copied();
    while let Some(byte) = bytes.next() {
        match byte {
            b' ' | b'\t' | b'\n' => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            b'\'' => {
                let current = word.get_or_insert_with(Vec::new);
                loop {
                    match bytes.next() {
                        Some(b'\'') => break,
                        Some(other) => current.push(other),
                        None => {
                            return Err(format!("shebang arguments {shown:?}: unterminated single quote"))
                        }
                    }
                }
            }
            b'"' => {
                let current = word.get_or_insert_with(Vec::new);
                loop {
                    match bytes.next() {
                        Some(b'"') => break,
                        Some(b'\\') => match bytes.next() {
                            Some(escaped @ (b'"' | b'\\' | b'$')) => current.push(escaped),
                            Some(other) => current.extend([b'\\', other]),
                            None => {
                                return Err(format!("shebang arguments {shown:?}: unterminated double quote"))
                            }
                        },
                        Some(other) => current.push(other),
                        None => {
                            return Err(format!("shebang arguments {shown:?}: unterminated double quote"))
                        }
                    }
                }
            }
            b'\\' => {
                let current = word.get_or_insert_with(Vec::new);
                match bytes.next() {
                    Some(b'_') => current.push(b' '),
                    Some(b't') => current.push(b'\t'),
                    Some(b'n') => current.push(b'\n'),
                    Some(escaped @ (b'\\' | b'\'' | b'"' | b' ' | b'#' | b'$')) => current.push(escaped),
                    Some(other) => {
                        return Err(format!(
                            "shebang arguments {shown:?}: unknown escape \\{}",
                            char::from(other)
                        ))
                    }
                    None => return Err(format!("shebang arguments {shown:?}: ends with a backslash")),
                }
            }
            other => word.get_or_insert_with(Vec::new).push(other),
        }
    }
    if let Some(done) = word {
        words.push(done);
    }
    Ok(words)
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
        let expanded =
            expand(argv(&["/usr/local/bin/gpurun", "--gpus 1 -- python3", &path, "--lr 3"])).unwrap();
        assert_eq!(
            expanded,
            argv(&["/usr/local/bin/gpurun", "--gpus", "1", "--", "python3", &path, "--lr 3"])
        );
    }

    #[test]
    fn quotes_and_escapes_follow_env_s() {
        let packed = r#"--model 'A100 SXM4' --x "a\"b" c\_d -- sh"#;
        let (_dir, path) = script(&format!("#!/usr/bin/gpurun {packed}"));
        let expanded = expand(argv(&["/usr/bin/gpurun", packed, &path])).unwrap();
        assert_eq!(
            expanded,
            argv(&["/usr/bin/gpurun", "--model", "A100 SXM4", "--x", "a\"b", "c d", "--", "sh", &path])
        );
        let (_dir, path) = script("#!/usr/bin/gpurun --model 'A100");
        assert!(expand(argv(&["/usr/bin/gpurun", "--model 'A100", &path]))
            .unwrap_err()
            .contains("unterminated single quote"));
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
            assert_eq!(expand(argv(words)).unwrap(), argv(words));
        }
    }
}
