//! Wall-clock times as gpurun writes them: UTC, with no time zone database.

use std::time::{SystemTime, UNIX_EPOCH};

/// `2026-11-30 18:44:12` (UTC) from Unix seconds: days to a civil date (Howard Hinnant's
/// algorithm), no time zone database needed.
pub(crate) fn utc(seconds: f64) -> String {
    let seconds = seconds.max(0.0) as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `2026-11-30T18:44:12.250Z`: RFC 3339 in UTC, to the millisecond (the report's `job`).
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let date = utc(since.as_secs() as f64);
    format!("{}T{}.{:03}Z", &date[..10], &date[11..], since.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00");
        assert_eq!(utc(1_796_063_853.9), "2026-11-30 18:37:33");
    }

    #[test]
    fn rfc3339_times() {
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1_796_063_853_250);
        assert_eq!(rfc3339(at), "2026-11-30T18:37:33.250Z");
    }
}
