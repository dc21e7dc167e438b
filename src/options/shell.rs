//! Words as a shell would read them back: for logs, reports and the wait queue, and for the
//! `export` lines that `eval` reads.

use std::ffi::OsString;

/// `text` in single quotes, a quote inside as `'\''`: one word to any POSIX shell.
pub(crate) fn single_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `text` as bash's, zsh's and ksh's `$'...'` quoting: the form that holds a control character
/// on one line of a terminal (`$'a\nb'`, `$'\x1b[2J'`), as GNU ls and coreutils quote it.
fn ansi_c_quoted(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::from("$'");
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The words as a shell would take them back: words with blanks or quotes are single-quoted,
/// words with control characters `$'...'`-quoted (so a logged command stays one line).
pub(crate) fn quote(command: &[OsString]) -> String {
    command
        .iter()
        .map(|word| {
            let word = word.to_string_lossy();
            let plain = !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@^".contains(c));
            if plain {
                word.into_owned()
            } else if word.chars().any(char::is_control) {
                ansi_c_quoted(&word)
            } else {
                single_quoted(&word)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_shell_quoted() {
        let words: Vec<OsString> =
            ["python3", "./job.py", "a", "b c", "it's", ""].iter().map(OsString::from).collect();
        assert_eq!(quote(&words), r#"python3 ./job.py a 'b c' 'it'\''s' ''"#);
        let words: Vec<OsString> = ["echo", "a\nb", "\x1b[2J it's \\"].iter().map(OsString::from).collect();
        assert_eq!(quote(&words), r#"echo $'a\nb' $'\x1b[2J it\'s \\'"#);
    }
}
