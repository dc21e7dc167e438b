//! Byte counts as people read them.

/// `31.7 GiB`, `512 MiB`, `0 B`: binary units, as nvidia-smi and the size options use.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::{exact, human};

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(512 << 20), "512 MiB");
        assert_eq!(human(80 << 30), "80 GiB");
        assert_eq!(human((6 << 30) + (1 << 27)), "6.1 GiB");
        // From 100 up no decimal: 150.25 MiB is 150 MiB.
        assert_eq!(human((150 << 20) + (1 << 18)), "150 MiB");
    }

    #[test]
    fn decimal_sizes_say_what_they_were_read_as() {
        assert_eq!(exact(8_000_000_000), "8 GB = 7.45 GiB");
        assert_eq!(exact(8 << 30), "8 GiB");
        assert_eq!(exact(2_000_000_000_000), "2 TB = 1862.65 GiB");
        assert_eq!(exact(500_000_000), "500 MB = 476.84 MiB");
        // The largest unit the size is a whole number of, not the largest it exceeds.
        assert_eq!(exact(2_500_000_000_000), "2500 GB = 2328.31 GiB");
        // A whole number of MiB is binary whatever else it is.
        assert_eq!(exact(1_048_576_000_000), human(1_048_576_000_000));
        assert_eq!(exact(0), "0 B");
    }
}

/// A size as it was most likely typed, where decimal and binary units part: `8 GB = 7.45 GiB`
/// for a whole number of MB, GB or TB that is no whole number of MiB, else `human`. `--min-free
/// 8GB` admits a card with 7.6 GiB free that `8G` refuses; said this way, the two never look
/// alike.
pub(crate) fn exact(bytes: u64) -> String {
    const DECIMAL: [(u64, &str); 3] = [(1_000_000_000_000, "TB"), (1_000_000_000, "GB"), (1_000_000, "MB")];
    let decimal = DECIMAL.iter().find(|(unit, _)| bytes >= *unit && bytes % unit == 0);
    match decimal {
        Some((unit, name)) if bytes % (1 << 20) != 0 => {
            let binary = bytes as f64 / (1u64 << 30) as f64;
            let shown = match binary >= 1.0 {
                true => format!("{binary:.2} GiB"),
                false => format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64),
            };
            format!("{} {name} = {shown}", bytes / unit)
        }
        _ => human(bytes),
    }
}

/// A memory requirement: bytes, or a percentage of each card's total.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Threshold {
    Bytes(u64),
    PercentOfTotal(f64),
    /// Whichever of the two is more on each card (a request under a house-rule floor).
    Larger {
        bytes: u64,
        percent: f64,
    },
}

impl Threshold {
    /// The bytes this means on a card with `total_bytes`.
    pub(crate) fn bytes_on(&self, total_bytes: u64) -> u64 {
        let share = |percent: f64| (total_bytes as f64 * percent / 100.0).ceil() as u64;
        match *self {
            Threshold::Bytes(bytes) => bytes,
            Threshold::PercentOfTotal(percent) => share(percent),
            Threshold::Larger { bytes, percent } => bytes.max(share(percent)),
        }
    }

    /// At least `floor` on every card, and at least this.
    pub(crate) fn at_least(self, floor: Threshold) -> Threshold {
        let parts = |t: Threshold| match t {
            Threshold::Bytes(bytes) => (bytes, 0.0),
            Threshold::PercentOfTotal(percent) => (0, percent),
            Threshold::Larger { bytes, percent } => (bytes, percent),
        };
        let ((a_bytes, a_percent), (b_bytes, b_percent)) = (parts(self), parts(floor));
        match (a_bytes.max(b_bytes), a_percent.max(b_percent)) {
            (bytes, 0.0) => Threshold::Bytes(bytes),
            (0, percent) => Threshold::PercentOfTotal(percent),
            (bytes, percent) => Threshold::Larger { bytes, percent },
        }
    }
}

/// `8 GiB`, `50%`, `8 GiB or 50%, whichever is more`.
impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match *self {
            Threshold::Bytes(bytes) => f.write_str(&human(bytes)),
            Threshold::PercentOfTotal(percent) => write!(f, "{percent}%"),
            Threshold::Larger { bytes, percent } => {
                write!(f, "{} or {percent}%, whichever is more", human(bytes))
            }
        }
    }
}

const SIZE_GRAMMAR: &str = "a number and a unit: K, M, G, T or KiB, MiB, GiB, TiB (binary: 1K = 1024), \
KB, MB, GB, TB (decimal: 1KB = 1000), B (bytes); for example 8G, 8GiB, 8192M, 0.5T (0 needs no unit)";

/// Parses DESIGN 4's SIZE: `8G`, `8GiB`, `8192M`, `0.5T`, `8000000000B`, `16GB`. Units are
/// case-insensitive; K/M/G/T and KiB..TiB are binary, KB..TB decimal, B bytes. A bare number
/// other than 0 is refused: nobody means `--min-free 8` as 8 bytes, and `--min-free 8 GB` must
/// not go on to run a command called `GB`. Fractions are exact in decimal and rounded down to
/// whole bytes.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let bare = unit.trim().is_empty();
    let multiplier: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("{text:?} is not a size: expected {SIZE_GRAMMAR}")),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(format!("{text:?} is not a size: expected {SIZE_GRAMMAR}"));
    }
    let too_large = || format!("{text:?} is too large (at most 16 EiB)");
    if whole.len() + fraction.len() > 30 {
        return Err(too_large());
    }
    // mantissa / 10^scale, exactly, in u128.
    let mantissa: u128 = format!("{whole}{fraction}").parse().unwrap_or(0);
    let scale = 10u128.pow(fraction.len() as u32);
    let bytes = mantissa.checked_mul(multiplier).ok_or_else(too_large)? / scale;
    if bare && mantissa != 0 {
        return Err(format!(
            "{text:?} has no unit: did you mean {number}G? (K, M, G, T or KiB, MiB, GiB, TiB are \
             binary, KB, MB, GB, TB decimal; {number}B is {number} bytes)"
        ));
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

/// `--min-free`: a SIZE, or `P%` of each card's total memory (0 to 100).
pub(crate) fn parse_threshold(text: &str) -> Result<Threshold, String> {
    match text.trim().strip_suffix('%') {
        Some(percent) => parse_percent(percent)
            .map(Threshold::PercentOfTotal)
            .map_err(|_| format!("{text:?} is not a percentage: expected 0% to 100%, for example 25%")),
        None => parse_bytes(text)
            .map(Threshold::Bytes)
            .map_err(|e| format!("{e}, or P% of the card's total memory")),
    }
}

/// `--min-free`: a threshold, or `auto` sized from history (with a size for when there is none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MinFree {
    Given(Threshold),
    Auto { fallback: Option<Threshold> },
}

/// Parses `8G`, `50%`, `auto` or `auto:8G`.
pub(crate) fn parse_min_free(text: &str) -> Result<MinFree, String> {
    match text.trim().strip_prefix("auto") {
        Some("") => Ok(MinFree::Auto { fallback: None }),
        Some(rest) => match rest.strip_prefix(':') {
            Some(size) => parse_threshold(size)
                .map(|t| MinFree::Auto { fallback: Some(t) })
                .map_err(|e| format!("in {text:?}: {e}")),
            None => Err(format!("{text:?} is not a size, a percentage, auto or auto:SIZE")),
        },
        None => parse_threshold(text)
            .map(MinFree::Given)
            .map_err(|e| format!("{e}; or auto (sized from this command's earlier runs), or auto:SIZE")),
    }
}

fn parse_percent(text: &str) -> Result<f64, ()> {
    let valid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let value: f64 = if valid {
        text.parse().map_err(|_| ())?
    } else {
        return Err(());
    };
    if (0.0..=100.0).contains(&value) {
        Ok(value)
    } else {
        Err(())
    }
}

/// `--max-util`: a whole percentage, `50` or `50%`.
pub(crate) fn parse_util_percent(text: &str) -> Result<u32, String> {
    let digits = text.trim().strip_suffix('%').unwrap_or(text.trim());
    digits
        .parse::<u32>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("{text:?} is not a utilization: expected a whole percentage from 0 to 100"))
}

/// `--mps-threads P`: a share of the GPU's threads, 1 to 100 (0 would leave the client none).
/// `--mps-mem SIZE`: a size above zero (MPS would pin no memory at all for the client, and
/// every allocation would fail; no limit is no `--mps-mem`).
pub(crate) fn parse_pinned(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err(format!(
            "{text:?} pins no memory at all (every allocation of the command would fail): give a size above \
             zero, like 8G, or leave --mps-mem out for no limit"
        )),
        bytes => Ok(bytes),
    }
}

pub(crate) fn parse_thread_percent(text: &str) -> Result<u32, String> {
    let digits = text.trim().strip_suffix('%').unwrap_or(text.trim());
    digits.parse::<u32>().ok().filter(|p| (1..=100).contains(p)).ok_or_else(|| {
        format!("{text:?} is not a share of the threads: expected a whole percentage from 1 to 100")
    })
}

#[cfg(test)]
mod parse_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_pinned_limit_is_a_size_above_zero() {
        assert_eq!(parse_pinned("512M"), Ok(512 << 20));
        assert_eq!(parse_pinned("1B"), Ok(1));
        assert!(parse_pinned("1").unwrap_err().contains("has no unit"));
        for zero in ["0", "0G", "0.0"] {
            assert!(parse_pinned(zero).unwrap_err().contains("pins no memory at all"), "{zero}");
        }
        assert!(parse_pinned("lots").is_err());
    }

    const VALID: &[(&str, u64)] = &[
        ("0", 0),
        ("0.0", 0),
        ("512B", 512),
        ("1K", 1024),
        ("1KiB", 1024),
        ("1KB", 1000),
        ("8G", 8 << 30),
        ("8GiB", 8 << 30),
        ("8g", 8 << 30),
        ("8gib", 8 << 30),
        ("8192M", 8 << 30),
        ("8192MiB", 8 << 30),
        ("16GB", 16_000_000_000),
        ("0.5T", 1 << 39),
        ("0.5TiB", 1 << 39),
        ("1.5TB", 1_500_000_000_000),
        ("0.1GB", 100_000_000),
        ("0.1K", 102),
        (".5G", 1 << 29),
        ("2.B", 2),
        (" 8G ", 8 << 30),
        ("8 GiB", 8 << 30),
        ("16777215T", 16_777_215 << 40),
        ("18446744073709551615B", u64::MAX),
    ];

    const INVALID: &[&str] = &[
        "",
        " ",
        "G",
        ".",
        "-1G",
        "+1G",
        "8X",
        "8Gi",
        "8 G B",
        "1e9",
        "0x10",
        "8,5G",
        "1.2.3G",
        "nan",
        "inf",
        "16777216T",
        "18446744073709551616B",
        "99999999999999999999999999999999T",
        "8",
        "512",
        "0.5",
        " 8 ",
        "８G",
    ];

    /// The edges (issue 44): 16 EiB and the 30-digit bound; a huge size is refused, never read
    /// as 0 bytes (which would be no filter at all).
    #[test]
    fn huge_sizes_are_refused_never_read_as_nothing() {
        assert_eq!(parse_bytes("17179869183G"), Ok(17_179_869_183 << 30));
        assert!(parse_bytes("17179869184G").unwrap_err().contains("too large"));
        let digits = "9".repeat(39);
        assert!(parse_bytes(&format!("{digits}B")).unwrap_err().contains("too large"));
        assert!(parse_bytes(&format!("0.{}1G", "0".repeat(40))).unwrap_err().contains("too large"));
        assert_eq!(parse_bytes("0.000000001G"), Ok(1), "a fraction rounds down to whole bytes");
        // 30 digits are read, 31 are too many.
        assert_eq!(parse_bytes(&format!("{}1G", "0".repeat(29))), Ok(1 << 30));
        assert!(parse_bytes(&format!("{}1G", "0".repeat(30))).unwrap_err().contains("too large"));
    }

    #[test]
    fn valid_sizes() {
        for (text, bytes) in VALID {
            assert_eq!(parse_bytes(text), Ok(*bytes), "{text:?}");
        }
    }

    #[test]
    fn invalid_sizes_name_the_value() {
        for text in INVALID {
            let error = parse_bytes(text).expect_err(text);
            assert!(error.contains(&format!("{text:?}")), "{error}");
        }
    }

    #[test]
    fn a_bare_number_names_the_units() {
        for (bare, suggested) in [("8", "8G"), ("0.5", "0.5G"), ("8000000000", "8000000000G")] {
            let error = parse_bytes(bare).unwrap_err();
            assert!(error.contains(&format!("did you mean {suggested}?")), "{error}");
            assert!(error.contains("KiB") && error.contains("GB"), "{error}");
        }
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_threshold("8").unwrap_err().contains("did you mean 8G?"));
        assert!(parse_min_free("8").unwrap_err().contains("did you mean 8G?"));
    }

    #[test]
    fn thresholds() {
        assert_eq!(parse_threshold("50%"), Ok(Threshold::PercentOfTotal(50.0)));
        assert_eq!(parse_threshold("12.5%"), Ok(Threshold::PercentOfTotal(12.5)));
        assert_eq!(parse_threshold("8G"), Ok(Threshold::Bytes(8 << 30)));
        // Digits and one dot: not f64's other spellings (1e1 would be 10).
        for bad in ["101%", "-1%", "%", "x%", "8G%", "1e1%", "inf%", "NaN%"] {
            assert!(parse_threshold(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(Threshold::PercentOfTotal(50.0).bytes_on(1000), 500);
        assert_eq!(Threshold::PercentOfTotal(33.3).bytes_on(10), 4);
    }

    #[test]
    fn a_floor_raises_a_threshold_on_every_card() {
        let gib = |n: u64| n << 30;
        assert_eq!(Threshold::Bytes(gib(4)).at_least(Threshold::Bytes(gib(8))), Threshold::Bytes(gib(8)));
        let mixed = Threshold::PercentOfTotal(50.0).at_least(Threshold::Bytes(gib(8)));
        assert_eq!(mixed.bytes_on(gib(80)), gib(40));
        assert_eq!(mixed.bytes_on(gib(10)), gib(8));
        assert_eq!(mixed.to_string(), "8 GiB or 50%, whichever is more");
    }

    #[test]
    fn min_free_takes_auto() {
        assert_eq!(parse_min_free("8G"), Ok(MinFree::Given(Threshold::Bytes(8 << 30))));
        assert_eq!(parse_min_free("auto"), Ok(MinFree::Auto { fallback: None }));
        assert_eq!(
            parse_min_free("auto:50%"),
            Ok(MinFree::Auto { fallback: Some(Threshold::PercentOfTotal(50.0)) })
        );
        assert!(parse_min_free("auto:x").unwrap_err().contains("in \"auto:x\""));
        assert!(parse_min_free("automatic").unwrap_err().contains("\"automatic\" is not a size"));
        assert!(parse_min_free("8X").unwrap_err().contains("or auto:SIZE"));
    }

    #[test]
    fn utilization() {
        assert_eq!(parse_util_percent("50"), Ok(50));
        assert_eq!(parse_util_percent("50%"), Ok(50));
        assert_eq!(parse_util_percent("0"), Ok(0));
        for bad in ["101", "-1", "5.5", "", "x"] {
            assert!(parse_util_percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn thread_shares() {
        assert_eq!(parse_thread_percent("1"), Ok(1));
        assert_eq!(parse_thread_percent("25%"), Ok(25));
        assert_eq!(parse_thread_percent(" 100 "), Ok(100));
        for bad in ["0", "101", "-1", "5.5", "", "x"] {
            assert!(parse_thread_percent(bad).unwrap_err().contains("1 to 100"), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn whole_units_multiply_exactly(n in 0u64..1_000_000, unit in 0usize..9) {
            let (suffix, multiplier) = [("B", 1u64), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30),
                ("KiB", 1 << 10), ("GiB", 1 << 30), ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000)][unit];
            prop_assert_eq!(parse_bytes(&format!("{n}{suffix}")), Ok(n * multiplier));
        }

        #[test]
        fn never_panics(text in ".{0,24}") {
            let _ = parse_bytes(&text);
            let _ = parse_threshold(&text);
        }
    }
}
