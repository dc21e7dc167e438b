//! `--gpus`: how many GPUs, as a number, a range or `all`.

use std::fmt;

/// At least `min`, at most `max` (`None`: every one that qualifies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) min: u32,
    pub(crate) max: Option<u32>,
}

impl Count {
    pub(crate) const fn exactly(n: u32) -> Count {
        Count { min: n, max: Some(n) }
    }

    /// Whether the command runs with no GPU at all (`--gpus 0`).
    pub(crate) fn is_none(&self) -> bool {
        self.max == Some(0)
    }

    /// How many of `qualifying` GPUs to take, or `None` when they are too few.
    pub(crate) fn take(&self, qualifying: usize) -> Option<usize> {
        let most = self.max.map_or(usize::MAX, |max| max as usize);
        (qualifying >= self.min as usize).then(|| qualifying.min(most))
    }
}

impl Default for Count {
    fn default() -> Count {
        Count::exactly(1)
    }
}

/// As the user types it: `2`, `2-4`, `all`.
impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.max {
            Some(max) if max == self.min => write!(f, "{max}"),
            Some(max) => write!(f, "{}-{max}", self.min),
            None => f.write_str("all"),
        }
    }
}

const GRAMMAR: &str = "a number of GPUs (0 runs with none), a range MIN-MAX such as 2-4, or all";

/// Parses `N`, `MIN-MAX` or `all`.
pub(crate) fn parse(text: &str) -> Result<Count, String> {
    let number = |part: &str| -> Result<u32, String> {
        match part.parse::<u32>() {
            Ok(n) if part.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
                Err(format!("'{text}' is too large: a machine has at most thousands of GPUs"))
            }
            _ => Err(format!("'{text}' is not {GRAMMAR}")),
        }
    };
    if text.eq_ignore_ascii_case("all") {
        return Ok(Count { min: 1, max: None });
    }
    match text.split_once('-') {
        None => number(text).map(Count::exactly),
        Some((min, max)) => {
            let (min, max) = (number(min)?, number(max)?);
            if min > max {
                return Err(format!("'{text}': the range's first number is larger than its second"));
            }
            Ok(Count { min, max: Some(max) })
        }
    }
}

impl serde::Serialize for Count {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// From its text, or a bare number (tickets of gpurun versions before ranges).
impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Count, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(u32),
            Text(String),
        }
        match Either::deserialize(deserializer)? {
            Either::Number(n) => Ok(Count::exactly(n)),
            Either::Text(text) => parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_ranges_and_all() {
        assert_eq!(parse("2"), Ok(Count::exactly(2)));
        assert_eq!(parse("0"), Ok(Count::exactly(0)));
        assert_eq!(parse("2-4"), Ok(Count { min: 2, max: Some(4) }));
        assert_eq!(parse("0-2"), Ok(Count { min: 0, max: Some(2) }));
        assert_eq!(parse("all"), Ok(Count { min: 1, max: None }));
        for bad in ["two", "-1", "", "4-2", "2-", "-", "1.5", "+2", " 2", "2--3", "99999999999"] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains(&format!("'{bad}'")), "{bad}: {error}");
        }
        assert!(parse("two").unwrap_err().contains("a range MIN-MAX such as 2-4, or all"));
    }

    /// A number too large for any machine says so; an empty part is no number at all (the two
    /// mutants `make mutants` found that no test noticed).
    #[test]
    fn too_large_is_said_only_of_numbers() {
        assert!(parse("99999999999").unwrap_err().contains("is too large"));
        assert!(parse("2-99999999999").unwrap_err().contains("is too large"));
        for empty in ["2-", "-2", ""] {
            let error = parse(empty).unwrap_err();
            assert!(!error.contains("too large") && error.contains("is not"), "{empty:?}: {error}");
        }
    }

    /// The edges (issue 44): a range of one, the range's ends taken exactly.
    #[test]
    fn a_range_of_one_and_the_ends_of_a_range() {
        assert_eq!(parse("2-2"), Ok(Count::exactly(2)));
        assert_eq!(parse("2-2").unwrap().to_string(), "2");
        let range = Count { min: 2, max: Some(4) };
        assert_eq!(range.take(2), Some(2), "exactly the minimum qualifies");
        assert_eq!(range.take(4), Some(4), "exactly the maximum is taken whole");
        assert!(!Count::exactly(1).is_none() && Count::exactly(0).is_none());
        assert!(!parse("0-2").unwrap().is_none(), "a range from 0 may still take GPUs");
    }

    #[test]
    fn how_many_are_taken() {
        let range = Count { min: 2, max: Some(4) };
        assert_eq!(range.take(1), None);
        assert_eq!(range.take(3), Some(3));
        assert_eq!(range.take(8), Some(4));
        let all = parse("all").unwrap();
        assert_eq!(all.take(0), None);
        assert_eq!(all.take(7), Some(7));
        assert_eq!(Count::exactly(0).take(0), Some(0));
    }

    proptest! {
        #[test]
        fn text_round_trips(min in 0u32..64, extra in 0u32..64, all in any::<bool>()) {
            let count = if all { Count { min: 1, max: None } } else { Count { min, max: Some(min + extra) } };
            prop_assert_eq!(parse(&count.to_string()), Ok(count));
            let json = serde_json::to_string(&count).unwrap();
            prop_assert_eq!(serde_json::from_str::<Count>(&json).unwrap(), count);
        }
    }
}
