//! Wall-clock times on the command line and in reports: RFC 3339 read and written
//! (`bench --start-at`), with no calendar crate for two small conversions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as ms since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Parses an RFC 3339 time: `2026-11-23T14:00:00Z`, with optional fractional seconds
/// and a `Z` or `±HH:MM` offset (a space may stand for the `T`), from 1970 on.
pub fn parse_rfc3339(s: &str) -> Result<SystemTime, String> {
    let bad = || format!("'{s}' is not an RFC 3339 time; write e.g. 2026-11-23T14:00:00Z");
    let t = s.trim();
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = t.get(r).ok_or_else(bad)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &t[19..];
    let mut nanos = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let kept = &frac[..digits.min(9)];
        nanos = kept.parse::<i64>().map_err(|_| bad())? * 10i64.pow(9 - kept.len() as u32);
        rest = &frac[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let h: i64 = o[1..3].parse().map_err(|_| bad())?;
            let m: i64 = o[4..6].parse().map_err(|_| bad())?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return Err(bad()),
    };
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second < 61;
    if !valid {
        return Err(bad());
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    u64::try_from(secs)
        .map_err(|_| format!("'{s}' is before 1970"))
        .map(|secs| UNIX_EPOCH + Duration::new(secs, nanos as u32))
}

/// `t` as RFC 3339 in UTC, to the millisecond.
pub fn format_rfc3339(t: SystemTime) -> String {
    let (date, [h, mi, s], ms) = utc_parts(unix_ms(t) as i64);
    format!("{date}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

/// `unix_ms` (ms since the Unix epoch, before it when negative) as `YYYY-MM-DD
/// HH:MM:SS` in UTC, for people to read.
pub fn format_utc(unix_ms: i64) -> String {
    let (date, [h, mi, s], _) = utc_parts(unix_ms);
    format!("{date} {h:02}:{mi:02}:{s:02}")
}

/// The date (`YYYY-MM-DD`), the time of day and the milliseconds of `unix_ms`.
fn utc_parts(unix_ms: i64) -> (String, [i64; 3], i64) {
    let (days, in_day) = (
        unix_ms.div_euclid(86_400_000),
        unix_ms.rem_euclid(86_400_000),
    );
    let (y, m, d) = civil_from_days(days);
    let s = in_day / 1000;
    (
        format!("{y:04}-{m:02}-{d:02}"),
        [s / 3600, s / 60 % 60, s % 60],
        in_day % 1000,
    )
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_for_people_is_right_across_leap_years_and_before_1970() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_utc(1_700_000_000_999), "2023-11-14 22:13:20");
        assert_eq!(format_utc(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn rfc3339_times_read_and_print_back() {
        let t = parse_rfc3339("2026-11-23T14:00:00Z").unwrap();
        assert_eq!(unix_ms(t), 1_795_442_400_000);
        assert_eq!(format_rfc3339(t), "2026-11-23T14:00:00.000Z");
        let same = parse_rfc3339("2026-11-23T15:30:00.250+01:30").unwrap();
        assert_eq!(unix_ms(same), 1_795_442_400_250);
        assert_eq!(
            unix_ms(parse_rfc3339("2024-02-29 00:00:00Z").unwrap()) % 86_400_000,
            0
        );
        for bad in [
            "2026-11-23",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-23T14:00:00",
            "tomorrow",
            "2026-11-23T14:00:00+0100",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
        assert!(parse_rfc3339("1969-12-31T23:59:59Z")
            .unwrap_err()
            .contains("1970"));
    }
}
