//! The one duration parser: every flag, distribution and alert rule that takes a time
//! reads it here, so `1.5s`, `250us` and `1h 30m` mean the same wherever they are typed.
//!
//! Accepted: a bare `0`, or one or more terms `NUMBER UNIT` (spaces allowed between and
//! within terms; the terms add up). NUMBER is non-negative, decimals allowed (`1.5s`).
//! UNIT is `ns`, `us` or `µs` (micro sign or Greek mu), `ms`, `s`, `m` (minutes), `h`
//! or `d`, or a long name of one (`nsec`, `usec`, `msec`, `millis`, `sec`, `secs`,
//! `second(s)`, `min`, `mins`, `minute(s)`, `hr`, `hrs`, `hour(s)`, `day(s)`, and the
//! `…second(s)` names).

use std::time::Duration;

/// The longest duration any flag takes: a soak test runs for days, a year is a typo
/// (and `Instant + 10⁹ s` would overflow).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// Why a duration was rejected; the text says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty or only whitespace.
    #[error("empty duration")]
    Empty,
    /// A term does not start with a non-negative number (a bare unit, a word, a minus
    /// sign); holds the text from there on.
    #[error("missing number before `{0}`")]
    MissingNumber(String),
    /// The number of a term does not parse (`1.2.3`, `.`); holds that number's text.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// A number has no unit after it (only a bare `0` may go without); holds the number.
    #[error("missing unit after {0} (ns, us, ms, s, m or h)")]
    MissingUnit(String),
    /// The unit is none of the accepted spellings; holds the unit as written.
    #[error("unknown unit `{0}` (use ns, us, ms, s, m or h)")]
    UnknownUnit(String),
    /// The total overflows: more than a `Duration` holds.
    #[error("too large")]
    TooLarge,
}

/// Nanoseconds per unit and the unit's short name, by every accepted spelling.
fn unit_ns(unit: &str) -> Option<(u128, &'static str)> {
    Some(match unit {
        "ns" | "nsec" | "nsecs" | "nanosecond" | "nanoseconds" => (1, "ns"),
        // The micro sign (U+00B5) and the Greek mu (U+03BC) look alike; both are typed.
        "us" | "µs" | "μs" | "usec" | "usecs" | "microsecond" | "microseconds" => (1_000, "us"),
        "ms" | "msec" | "msecs" | "millis" | "millisecond" | "milliseconds" => (1_000_000, "ms"),
        "s" | "sec" | "secs" | "second" | "seconds" => (1_000_000_000, "s"),
        "m" | "min" | "mins" | "minute" | "minutes" => (60_000_000_000, "m"),
        "h" | "hr" | "hrs" | "hour" | "hours" => (3_600_000_000_000, "h"),
        "d" | "day" | "days" => (86_400_000_000_000, "d"),
        _ => return None,
    })
}

/// Parses a duration in the forms the module describes.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    parse(input, None)
}

/// Parses a duration as [`parse_duration`] does, and spells it the one way: each term
/// as its number (no leading or trailing zeros) and its unit's short name, with no
/// spaces (`2.50 msec` → `2.5ms`, `1h 30min` → `1h30m`, `250µs` → `250us`). For
/// expressions that show a duration as it was written (an SLO's bound).
pub fn parse_duration_spelled(input: &str) -> Result<(Duration, String), DurationError> {
    let mut spelled = String::new();
    let d = parse(input, Some(&mut spelled))?;
    Ok((d, spelled))
}

/// The parser, writing the canonical spelling into `spelled` when given.
fn parse(input: &str, mut spelled: Option<&mut String>) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s == "0" {
        if let Some(out) = spelled {
            out.push('0');
        }
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let (term_ns, after) = term(rest, spelled.as_deref_mut())?;
        total_ns = total_ns
            .checked_add(term_ns)
            .ok_or(DurationError::TooLarge)?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total_ns / 1_000_000_000).map_err(|_| DurationError::TooLarge)?;
    Ok(Duration::new(secs, (total_ns % 1_000_000_000) as u32))
}

/// One `NUMBER UNIT` term at the start of `s`: its nanoseconds and what follows it;
/// its canonical spelling goes to `spelled` when given.
fn term<'a>(s: &'a str, spelled: Option<&mut String>) -> Result<(u128, &'a str), DurationError> {
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, after) = s.split_at(number_end);
    let after = after.trim_start();
    let unit_end = after
        .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
        .unwrap_or(after.len());
    let (unit, rest) = after.split_at(unit_end);
    if number.is_empty() {
        return Err(DurationError::MissingNumber(s.to_owned()));
    }
    if unit.is_empty() {
        return Err(DurationError::MissingUnit(number.to_owned()));
    }
    let (scale, short) =
        unit_ns(unit).ok_or_else(|| DurationError::UnknownUnit(unit.to_owned()))?;
    let not_a_number = || DurationError::NotANumber(number.to_owned());
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(not_a_number());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| not_a_number())?
    };
    let frac_ns = if frac.is_empty() {
        0
    } else {
        let f: f64 = format!("0.{frac}").parse().map_err(|_| not_a_number())?;
        (f * scale as f64).round() as u128
    };
    let ns = whole
        .checked_mul(scale)
        .and_then(|n| n.checked_add(frac_ns))
        .ok_or(DurationError::TooLarge)?;
    if let Some(out) = spelled {
        out.push_str(&whole.to_string());
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        out.push_str(short);
    }
    Ok((ns, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        parse_duration(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn every_unit_and_its_long_names() {
        assert_eq!(ok("500ns"), Duration::from_nanos(500));
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("250µs"), Duration::from_micros(250));
        assert_eq!(ok("250μs"), Duration::from_micros(250));
        assert_eq!(ok("10ms"), Duration::from_millis(10));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1d"), Duration::from_secs(86_400));
        assert_eq!(ok("5min"), Duration::from_secs(300));
        assert_eq!(ok("3 seconds"), Duration::from_secs(3));
        assert_eq!(ok("2 msec"), Duration::from_millis(2));
        assert_eq!(ok("1hr"), Duration::from_secs(3600));
    }

    #[test]
    fn decimals_zero_and_sums() {
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("0.5ms"), Duration::from_micros(500));
        assert_eq!(ok(".25s"), Duration::from_millis(250));
        assert_eq!(ok("2.s"), Duration::from_secs(2));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok(" 10ms "), Duration::from_millis(10));
        assert_eq!(ok("1h 30m"), Duration::from_secs(5400));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1s 500ms"), Duration::from_millis(1500));
        // Exact for whole numbers however large the unit.
        assert_eq!(ok("123456789s"), Duration::from_secs(123_456_789));
        assert_eq!(ok("1.000000001s"), Duration::new(1, 1));
    }

    #[test]
    fn the_one_spelling_of_each_duration() {
        for (input, want, spelled) in [
            ("0", Duration::ZERO, "0"),
            ("0ms", Duration::ZERO, "0ms"),
            ("2.50 msec", Duration::from_micros(2500), "2.5ms"),
            ("007s", Duration::from_secs(7), "7s"),
            (".25s", Duration::from_millis(250), "0.25s"),
            ("2.s", Duration::from_secs(2), "2s"),
            ("1.0s", Duration::from_secs(1), "1s"),
            ("250µs", Duration::from_micros(250), "250us"),
            ("250μs", Duration::from_micros(250), "250us"),
            ("500 us", Duration::from_micros(500), "500us"),
            ("1500000ns", Duration::from_micros(1500), "1500000ns"),
            ("1h 30min", Duration::from_secs(5400), "1h30m"),
            ("1 minute 30 seconds", Duration::from_secs(90), "1m30s"),
            ("2 days", Duration::from_secs(172_800), "2d"),
        ] {
            let (d, s) = parse_duration_spelled(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!((d, s.as_str()), (want, spelled), "{input:?}");
            // The spelling reads back as the same duration.
            assert_eq!(ok(spelled), want, "{spelled:?}");
        }
        assert_eq!(
            parse_duration_spelled("10 parsecs"),
            Err(DurationError::UnknownUnit("parsecs".into()))
        );
    }

    #[test]
    fn rejects_with_the_reason() {
        for (input, want) in [
            ("", DurationError::Empty),
            ("10", DurationError::MissingUnit("10".into())),
            ("10 parsecs", DurationError::UnknownUnit("parsecs".into())),
            ("ms", DurationError::MissingNumber("ms".into())),
            ("soon", DurationError::MissingNumber("soon".into())),
            ("-5s", DurationError::MissingNumber("-5s".into())),
            ("1.2.3s", DurationError::NotANumber("1.2.3".into())),
            (".s", DurationError::NotANumber(".".into())),
            ("1s 2", DurationError::MissingUnit("2".into())),
            ("99999999999999999999999d", DurationError::TooLarge),
        ] {
            assert_eq!(parse_duration(input), Err(want), "{input:?}");
        }
        assert!(parse_duration("10 parsecs")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("10")
            .unwrap_err()
            .to_string()
            .contains("missing unit"));
    }
}
