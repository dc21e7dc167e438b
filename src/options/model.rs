//! `--model PATTERN`: case-insensitive; `*` and `?` are wildcards over the whole name, otherwise
//! the pattern may match anywhere in it (`A100` matches `NVIDIA A100-SXM4-80GB`).

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelPattern(pub String);

impl ModelPattern {
    pub(crate) fn matches(&self, name: &str) -> bool {
        let pattern: Vec<char> = self.0.to_lowercase().chars().collect();
        let name: Vec<char> = name.to_lowercase().chars().collect();
        if pattern.iter().any(|c| *c == '*' || *c == '?') {
            wildcard(&pattern, &name)
        } else {
            pattern.is_empty() || name.windows(pattern.len()).any(|w| w == &pattern[..])
        }
    }
}

/// `*`/`?` matching in O(pattern x text) time, whatever the pattern: a mismatch after a `*`
/// only moves that star's start one character on (the last star is the only one worth
/// retrying), so `************x` cannot explode the way a recursive matcher does.
fn wildcard(pattern: &[char], text: &[char]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last star was, and the text position it is currently made to cover up to.
    let mut last_star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                last_star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match last_star {
                Some((star, covered)) => {
                    p = star + 1;
                    t = covered + 1;
                    last_star = Some((star, covered + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn model_patterns() {
        let a100 = ModelPattern("a100".to_owned());
        assert!(a100.matches("NVIDIA A100-SXM4-80GB"));
        assert!(!a100.matches("NVIDIA H100 80GB HBM3"));
        assert!(ModelPattern("*80GB".to_owned()).matches("NVIDIA A100-SXM4-80GB"));
        assert!(!ModelPattern("*80GB".to_owned()).matches("NVIDIA H100 80GB HBM3"));
        assert!(ModelPattern("NVIDIA ?100*".to_owned()).matches("NVIDIA H100 80GB HBM3"));
        assert!(ModelPattern("*".to_owned()).matches(""));
        assert!(!ModelPattern("?".to_owned()).matches(""));
    }

    #[test]
    fn many_stars_take_no_time() {
        let started = std::time::Instant::now();
        let pattern = ModelPattern(format!("{}x", "*".repeat(200)));
        assert!(!pattern.matches(&"a".repeat(200)));
        assert!(pattern.matches(&format!("{}x", "a".repeat(200))));
        // A recursive matcher needs longer than the age of the universe here.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    /// The obvious recursive definition, exponential but right, for the property below.
    fn reference(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => (0..=text.len()).any(|skip| reference(rest, &text[skip..])),
            Some(('?', rest)) => !text.is_empty() && reference(rest, &text[1..]),
            Some((c, rest)) => text.first() == Some(c) && reference(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_recursive_definition(pattern in "[ab*?]{0,8}", text in "[ab]{0,10}") {
            let pattern: Vec<char> = pattern.chars().collect();
            let text: Vec<char> = text.chars().collect();
            prop_assert_eq!(wildcard(&pattern, &text), reference(&pattern, &text));
        }
    }
}
