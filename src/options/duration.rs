//! DURATION as `timeout(1)` reads it, plus milliseconds: `30` (seconds), `1.5s`, `500ms`, `2m`,
//! `1h`, `1d`.

use std::time::Duration;

pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let seconds_per_unit = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => f64::NAN,
    };
    // Digits and dots only, so f64's parser refuses exactly "", ".", and two dots or more.
    let value: f64 = number.parse().unwrap_or(f64::NAN);
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds > 1e9 {
        return Err(format!(
            "{text:?} is not a duration: expected a number of seconds with an optional unit ms, s, m, h or d, \
             like 30, 1.5s, 500ms or 2m"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration that must not be zero (a deadline of nothing fails every time).
pub(crate) fn parse_positive(text: &str) -> Result<Duration, String> {
    match parse(text)? {
        zero if zero.is_zero() => Err(format!("{text:?} is no time at all: expected more than 0, like 30s")),
        duration => Ok(duration),
    }
}

/// A duration, or `off` (so is 0): `--idle-warn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrOff(pub Option<Duration>);

pub(crate) fn parse_or_off(text: &str) -> Result<OrOff, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(OrOff(None));
    }
    let duration = parse(text).map_err(|e| format!("{e}, or off"))?;
    Ok(OrOff(Some(duration).filter(|d| !d.is_zero())))
}

/// A duration as the options take it: `4h`, `30m`, `90s`, `1.5s`.
pub(crate) fn compact(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    match duration.as_secs() {
        whole if seconds.fract() != 0.0 || whole == 0 => format!("{seconds}s"),
        whole if whole % 3600 == 0 => format!("{}h", whole / 3600),
        whole if whole % 60 == 0 => format!("{}m", whole / 60),
        whole => format!("{whole}s"),
    }
}

/// A duration as gpurun writes it in messages: `30 s`, `1.5 s`, `250 ms`.
pub(crate) fn shown(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 1.0 && !duration.is_zero() {
        format!("{} ms", duration.as_millis())
    } else if seconds.fract() == 0.0 {
        format!("{seconds:.0} s")
    } else {
        format!("{seconds:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        // As timeout(1) reads them: a dot at either end of the number.
        assert_eq!(parse(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_or_off("off"), Ok(OrOff(None)));
        assert_eq!(parse_or_off("0"), Ok(OrOff(None)));
        assert_eq!(parse_or_off("2s"), Ok(OrOff(Some(Duration::from_secs(2)))));
        assert!(parse_or_off("soon").unwrap_err().ends_with("like 30, 1.5s, 500ms or 2m, or off"));
        assert_eq!(shown(Duration::from_secs(30)), "30 s");
        assert_eq!(shown(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(shown(Duration::from_millis(250)), "250 ms");
        assert_eq!(shown(Duration::from_secs(1)), "1 s");
        assert_eq!(shown(Duration::from_millis(999)), "999 ms");
        for bad in ["", "s", "-1", "1x", "1.2.3", "inf", "1 s s", "."] {
            assert!(parse(bad).unwrap_err().contains(&format!("{bad:?}")), "{bad}");
        }
    }

    /// The edges a mutant could move unnoticed (issue 44): days, the 1e9 s bound, zero.
    #[test]
    fn the_edges_of_a_duration() {
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1000000000"), Ok(Duration::from_secs(1_000_000_000)));
        assert!(parse("1000000001").is_err(), "above 1e9 s is refused");
        assert!(parse("11575d").is_err(), "11575 days is above 1e9 s");
        assert_eq!(parse("0.001s"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_positive("1ms"), Ok(Duration::from_millis(1)));
        for zero in ["0", "0s", "0.0", "0ms"] {
            assert!(parse_positive(zero).unwrap_err().contains("no time at all"), "{zero}");
        }
    }

    #[test]
    fn compact_durations_read_back_as_themselves() {
        assert_eq!(compact(Duration::from_secs(4 * 3600)), "4h");
        assert_eq!(compact(Duration::from_secs(30 * 60)), "30m");
        assert_eq!(compact(Duration::from_secs(90)), "90s");
        assert_eq!(compact(Duration::from_millis(1500)), "1.5s");
        assert_eq!(compact(Duration::ZERO), "0s");
        assert_eq!(compact(Duration::from_secs(3600 + 60)), "61m");
        for duration in [7200, 5400, 61, 1].map(Duration::from_secs) {
            assert_eq!(parse(&compact(duration)), Ok(duration));
        }
    }
}
