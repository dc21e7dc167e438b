//! Words as a shell would read them back: for logs, reports and the wait queue, and for the
//! `export` lines that `eval` reads.

use std::ffi::OsString;

/// `text` in single quotes, a quote inside as `'\''`: one word to any POSIX shell.
pub(crate) fn single_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The words as a shell would take them back: words with blanks or quotes are single-quoted.
pub(crate) fn quote(command: &[OsString]) -> String {
    command
        .iter()
        .map(|word| {
            let word = word.to_string_lossy();
            let plain = !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@^".contains(c));
            if plain {
                word.into_owned()
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
    }
}
