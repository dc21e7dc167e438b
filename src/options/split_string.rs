//! GNU `env -S`'s string split (`build_argv` in coreutils' env.c), byte for byte: for a
//! shebang line that names gpurun (`cli::shebang`) and for an `env -S '...'` in front of a
//! launcher (`plan::launchers`), which gpurun must read as env will run it. Words end at
//! space, tab, newline, \v, \f, \r and at `\_` outside quotes; 'single quotes' keep all but
//! `\\` and `\'`; "double quotes" decode `\_` (a space) and the escapes; `${NAME}` is
//! expanded (not inside single quotes); a `#` that starts a word and `\c` end the string; and
//! what env refuses (`$B`, `${9B}`, an unknown escape, a lone quote) is an error with env's
//! reason.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// `${NAME}` at the start of `text` (which starts with `$`): the name, and the length of the
/// whole form. A name starts with a letter or `_` and goes on with letters, digits and `_`.
fn variable(text: &[u8]) -> Option<(&[u8], usize)> {
    let name = text.strip_prefix(b"${")?;
    let first = *name.first()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let length = name.iter().position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))?;
    (name[length] == b'}').then_some((&name[..length], length + 3))
}

/// The words of `text`, as GNU env's `build_argv` makes them. `lookup` gives a variable's value.
pub(crate) fn split_with(
    text: &[u8],
    lookup: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, String> {
    let (mut single, mut double) = (false, false);
    let mut words: Vec<Vec<u8>> = Vec::new();
    // Whether the last thing seen separates words: the next byte starts a new one.
    let mut separated = true;
    let mut at = 0;
    let start_word = |words: &mut Vec<Vec<u8>>, separated: &mut bool| {
        if *separated {
            words.push(Vec::new());
            *separated = false;
        }
    };
    while at < text.len() {
        let mut byte = text[at];
        match byte {
            b'\'' if !double => {
                single = !single;
                start_word(&mut words, &mut separated);
                at += 1;
                continue;
            }
            b'"' if !single => {
                double = !double;
                start_word(&mut words, &mut separated);
                at += 1;
                continue;
            }
            b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' if !single && !double => {
                separated = true;
                at += 1;
                continue;
            }
            b'#' if separated => return Ok(words),
            // Inside single quotes only \\ and \' are escapes.
            b'\\' if !single || matches!(text.get(at + 1), Some(b'\\' | b'\'')) => {
                at += 1;
                byte = match text.get(at) {
                    Some(escaped @ (b'"' | b'#' | b'$' | b'\'' | b'\\')) => *escaped,
                    Some(b'_') if !double => {
                        separated = true;
                        at += 1;
                        continue;
                    }
                    Some(b'_') => b' ',
                    Some(b'c') if double => {
                        return Err("'\\c' must not appear in double-quoted -S string".to_owned())
                    }
                    Some(b'c') => return Ok(words),
                    Some(b'f') => 0x0c,
                    Some(b'n') => b'\n',
                    Some(b'r') => b'\r',
                    Some(b't') => b'\t',
                    Some(b'v') => 0x0b,
                    None => return Err("invalid backslash at end of string in -S".to_owned()),
                    Some(other) => {
                        return Err(format!(
                            "invalid sequence '\\{}' in -S",
                            String::from_utf8_lossy(&[*other])
                        ))
                    }
                };
            }
            b'$' if !single => {
                let Some((name, length)) = variable(&text[at..]) else {
                    return Err(format!(
                        "only ${{VARNAME}} expansion is supported, error at: {}",
                        String::from_utf8_lossy(&text[at..])
                    ));
                };
                // An unset variable is nothing at all; a set one, even empty, is part of a word.
                if let Some(value) = lookup(name) {
                    start_word(&mut words, &mut separated);
                    words.last_mut().expect("a word was started").extend_from_slice(&value);
                }
                at += length;
                continue;
            }
            _ => {}
        }
        start_word(&mut words, &mut separated);
        words.last_mut().expect("a word was started").push(byte);
        at += 1;
    }
    if single || double {
        return Err("no terminating quote in -S string".to_owned());
    }
    Ok(words)
}

/// The words of `text`, with variables from gpurun's environment (as env expands them).
pub(crate) fn split(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let lookup = |name: &[u8]| std::env::var_os(OsStr::from_bytes(name)).map(OsStringExt::into_vec);
    split_with(text, &lookup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Result<Vec<String>, String> {
        let lookup =
            |name: &[u8]| (name == b"FOO").then(|| b"BAR".to_vec()).or((name == b"EMPTY").then(Vec::new));
        split_with(text.as_bytes(), &lookup)
            .map(|words| words.into_iter().map(|w| String::from_utf8(w).unwrap()).collect())
    }

    /// Cases from coreutils' tests/env/env-S.pl (tests/env_s.rs runs them against GNU env).
    #[test]
    fn splits_exactly_as_env_s() {
        let cases: &[(&str, &[&str])] = &[
            (r"A\_B", &["A", "B"]),
            (r#""A\_B""#, &["A B"]),
            (r"'A\_B'", &["A\\_B"]),
            (r#""B\tC""#, &["B\tC"]),
            ("A\x0bB\x0cC\rD", &["A", "B", "C", "D"]),
            (r"'B\\C' 'B\'C'", &["B\\C", "B'C"]),
            ("x${FOO}x ${FOO}=A", &["xBARx", "BAR=A"]),
            ("A ${UNSET} B", &["A", "B"]),
            ("A ${EMPTY} B", &["A", "", "B"]),
            (r"'x${FOO}x'", &["x${FOO}x"]),
            ("A=B #C=D", &["A=B"]),
            ("A=B#", &["A=B#"]),
            (r"echo FOO \#BAR", &["echo", "FOO", "#BAR"]),
            (r"A=B\cC=D", &["A=B"]),
            (r#"A "" B"#, &["A", "", "B"]),
            (r#"A""B"#, &["AB"]),
            (r"\_ \_printf\_x", &["printf", "x"]),
        ];
        for (text, expected) in cases {
            let expected: Vec<String> = expected.iter().map(|w| w.to_string()).collect();
            assert_eq!(words(text), Ok(expected), "{text:?}");
        }
        for (text, reason) in [
            (r#""\c""#, "'\\c' must not appear in double-quoted -S string"),
            ("A=B\\", "invalid backslash at end of string in -S"),
            (r#""A=B\""#, "no terminating quote in -S string"),
            (r"A=B\q", "invalid sequence '\\q' in -S"),
            ("A=$B", "only ${VARNAME} expansion is supported, error at: $B"),
            ("A=${B", "only ${VARNAME} expansion is supported, error at: ${B"),
            ("A=${B%B}", "only ${VARNAME} expansion is supported, error at: ${B%B}"),
            ("A=${9B}", "only ${VARNAME} expansion is supported, error at: ${9B}"),
        ] {
            assert_eq!(words(text), Err(reason.to_owned()), "{text:?}");
        }
    }
}
