//! Shebang use (DESIGN 7.9). With `#!/usr/local/bin/gpurun --gpus 1 -- python3`, Linux passes
//! everything after the interpreter path as one argument: `["gpurun", "--gpus 1 -- python3",
//! "script.py", ...]`. A first argument that starts with `-` and contains whitespace is split
//! the way `env -S` splits its string: on blanks, with 'single quotes' (literal), "double
//! quotes" (backslash escapes \" \\ \$ inside), and the escapes \\ \' \" \_ (a space) \t \n
//! outside. (The `#!/usr/bin/env -S gpurun ...` form needs none of this: env splits.)

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Splits argv[1] when it is a shebang's packed options; otherwise returns argv unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(first) = args.get(1) else { return Ok(args) };
    let bytes = first.as_bytes();
    let packed = bytes.first() == Some(&b'-') && bytes.iter().any(|b| b.is_ascii_whitespace());
    if !packed {
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

    #[test]
    fn packed_first_argument_is_split() {
        let expanded = expand(argv(&["gpurun", "--gpus 1 -- python3", "train.py", "--lr 3"])).unwrap();
        assert_eq!(expanded, argv(&["gpurun", "--gpus", "1", "--", "python3", "train.py", "--lr 3"]));
    }

    #[test]
    fn quotes_and_escapes_follow_env_s() {
        let expanded = expand(argv(&["gpurun", r#"--model 'A100 SXM4' --x "a\"b" c\_d -- sh"#])).unwrap();
        assert_eq!(expanded, argv(&["gpurun", "--model", "A100 SXM4", "--x", "a\"b", "c d", "--", "sh"]));
        assert!(expand(argv(&["gpurun", "--model 'A100"]))
            .unwrap_err()
            .contains("unterminated single quote"));
        assert!(expand(argv(&["gpurun", "--a \\q"])).unwrap_err().contains("unknown escape"));
    }

    #[test]
    fn ordinary_argv_is_untouched() {
        for words in [&["gpurun", "--gpus", "1", "--", "x y"][..], &["gpurun", "python3 -c x"], &["gpurun"]] {
            assert_eq!(expand(argv(words)).unwrap(), argv(words));
        }
    }
}
