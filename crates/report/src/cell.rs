//! One answer to "a figure → the text of a table cell", for every command and format:
//! a duration reads in µs, ms or s with four significant digits, other figures with four
//! significant digits and their unit, and an absent figure is one dash ([`ABSENT`]),
//! never a 0. Report, compare, calibrate, import and watch write numbers through it, so
//! a figure several of them print reads the same in each.

/// Shown wherever a value is absent (no samples): never a 0.
pub const ABSENT: &str = "–";

/// How a figure reads: its unit, which also decides its precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit<'a> {
    /// A duration in milliseconds, written in µs, ms or s (the smallest that keeps it
    /// under 1000), four significant digits: `812.3 µs`, `23.46 ms`, `1.234 s`.
    Ms,
    /// A share of a whole (0.25) as a percentage, at most three decimals, trailing
    /// zeros cut: `25 %`, `2.5 %`.
    Share,
    /// A relative change (0.05) with its sign and this many decimals: `+5.0%`.
    Change(usize),
    /// A plain number (a count, tokens per second in a column so headed), four
    /// significant digits: `53.21`, `5321`.
    Number,
    /// A rate or level as given (`2`, `0.5`, `12.5`): four significant digits, trailing
    /// zeros cut.
    Rate,
    /// A number followed by its unit (`tok/s`, `req/s`, `tokens`), four significant
    /// digits: `226.3 tok/s`.
    Of(&'a str),
}

impl<'a> Unit<'a> {
    /// The unit a figure's unit name stands for: `ms` a duration, `%` a percentage
    /// (the value already times 100), none a plain number, any other written after
    /// the number.
    pub fn named(name: &'a str) -> Self {
        match name {
            "ms" => Unit::Ms,
            "%" => Unit::Share,
            "" => Unit::Number,
            other => Unit::Of(other),
        }
    }
}

/// A figure's cell: [`ABSENT`] when there is none, else the figure as its unit reads.
pub fn cell(v: Option<f64>, unit: Unit) -> String {
    v.map_or_else(|| ABSENT.to_string(), |x| figure(x, unit))
}

/// A figure whose unit is named at run time (a report's or another tool's unit):
/// a duration (`ms`, `s`, `sec`, `us`, `µs`, `ns`) reads as [`Unit::Ms`], a percentage
/// value (`%`, 2.5 for 2.5 %) as the share it is, any other as [`Unit::named`].
pub fn named(v: Option<f64>, unit: &str) -> String {
    let ms_per = match unit {
        "s" | "sec" => Some(1e3),
        "us" | "µs" => Some(1e-3),
        "ns" => Some(1e-6),
        _ => None,
    };
    match (ms_per, unit) {
        (Some(k), _) => cell(v.map(|x| x * k), Unit::Ms),
        (None, "%") => cell(v.map(|x| x / 100.0), Unit::Share),
        (None, _) => cell(v, Unit::named(unit)),
    }
}

/// A present figure as its unit reads.
pub fn figure(x: f64, unit: Unit) -> String {
    match unit {
        Unit::Ms => fmt_ms(x),
        Unit::Share => fmt_pct(x),
        Unit::Change(decimals) => signed_pct(x * 100.0, decimals),
        Unit::Number => sig4(x),
        Unit::Rate => fmt_rate(x),
        Unit::Of(u) => format!("{} {u}", sig4(x)),
    }
}

/// A percentage value (25.0 for 25 %) with `decimals` decimals and no space: `25.0%`.
/// A value that rounds to zero reads `0.0%`, never `-0.0%`.
pub fn pct(percent: f64, decimals: usize) -> String {
    format!("{}%", unsigned_zero(format!("{percent:.decimals$}")))
}

/// A percentage value with its sign (`+5.0%`, `-2.5%`); one that rounds to zero reads
/// `+0.0%`, never `-0.0%`.
pub fn signed_pct(percent: f64, decimals: usize) -> String {
    let s = format!("{percent:+.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if is_zero(rest) => format!("+{rest}%"),
        _ => format!("{s}%"),
    }
}

fn is_zero(digits: &str) -> bool {
    digits.chars().all(|c| c == '0' || c == '.')
}

/// A formatted number without the minus of a negative zero (`-0.0` reads `0.0`).
fn unsigned_zero(s: String) -> String {
    match s.strip_prefix('-') {
        Some(rest) if is_zero(rest) => rest.to_string(),
        _ => s,
    }
}

/// A count and its noun, the noun plural unless the count is one: `1 request`,
/// `2 requests`, `0 requests`.
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A rate as given (`2`, `0.5`, `12.5`): four significant digits, trailing zeros cut.
pub fn fmt_rate(r: f64) -> String {
    let s = sig4(r);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A share (0.25) as a percentage ("25 %"), at most three decimals, trailing zeros cut.
pub fn fmt_pct(share: f64) -> String {
    let v = share * 100.0;
    let dec = if v.abs() >= 10.0 {
        1
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    let s = unsigned_zero(format!("{v:.dec$}"));
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    format!("{s} %")
}

/// A number with about four significant digits (at most three decimals).
pub fn sig4(v: f64) -> String {
    let decimals = if v == 0.0 || !v.is_finite() {
        0
    } else {
        sig_decimals(v, 3)
    };
    format!("{v:.decimals$}")
}

/// The decimals that show `v` with four significant digits (at most `max_dec`; values
/// under 1 get `max_dec`). Judged again after rounding, so a value that rounds up past
/// a power of ten keeps four digits: 9.9996 reads `10.00`, not `10.000`.
fn sig_decimals(v: f64, max_dec: usize) -> usize {
    let by_magnitude = |x: f64| {
        if x.abs() >= 1.0 {
            (3 - x.abs().log10().floor() as i32).clamp(0, max_dec as i32) as usize
        } else {
            max_dec
        }
    };
    let dec = by_magnitude(v);
    let rounded: f64 = format!("{v:.dec$}").parse().unwrap_or(v);
    by_magnitude(rounded).min(dec)
}

/// A duration given in milliseconds, in µs, ms or s, whichever reads best.
pub fn fmt_ms(ms: f64) -> String {
    if ms == 0.0 {
        return "0 ms".into();
    }
    // Each unit from the smallest that keeps the figure under 1000 after rounding;
    // seconds take whatever is left.
    for (scale, unit, max_dec) in [(1e3, "µs", 1usize), (1.0, "ms", 3)] {
        let v = ms * scale;
        let dec = sig_decimals(v, max_dec);
        let s = format!("{v:.dec$}");
        let rounded: f64 = s.parse().unwrap_or(v);
        if rounded.abs() < 1000.0 {
            return format!("{s} {unit}");
        }
    }
    let s = ms * 1e-3;
    let dec = sig_decimals(s, 3);
    format!("{s:.dec$} s")
}

/// A duration given in seconds.
pub fn fmt_seconds(s: f64) -> String {
    fmt_ms(s * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_zero_reads_as_zero_in_every_percentage() {
        assert_eq!(pct(-0.01, 1), "0.0%");
        assert_eq!(pct(-0.06, 1), "-0.1%");
        assert_eq!(pct(12.34, 1), "12.3%");
        assert_eq!(signed_pct(-0.01, 1), "+0.0%");
        assert_eq!(signed_pct(-2.5, 1), "-2.5%");
        assert_eq!(cell(Some(-0.0001), Unit::Change(1)), "+0.0%");
        assert_eq!(fmt_pct(-0.000_000_1), "0 %");
        assert_eq!(fmt_pct(-0.25), "-25 %");
    }

    #[test]
    fn a_count_of_one_takes_the_singular() {
        assert_eq!(plural(1, "request"), "1 request");
        assert_eq!(plural(0, "request"), "0 requests");
        assert_eq!(plural(2, "gap"), "2 gaps");
    }

    #[test]
    fn absent_is_one_dash_in_every_unit() {
        for u in [
            Unit::Ms,
            Unit::Share,
            Unit::Change(1),
            Unit::Number,
            Unit::Rate,
            Unit::Of("tok/s"),
        ] {
            assert_eq!(cell(None, u), "–", "{u:?}");
        }
        assert_eq!(named(None, "ms"), "–");
        assert_eq!(named(None, "%"), "–");
    }

    #[test]
    fn each_unit_reads_as_documented() {
        assert_eq!(cell(Some(23.456), Unit::Ms), "23.46 ms");
        assert_eq!(cell(Some(0.25), Unit::Share), "25 %");
        assert_eq!(cell(Some(0.05), Unit::Change(1)), "+5.0%");
        assert_eq!(cell(Some(-0.0123), Unit::Change(3)), "-1.230%");
        assert_eq!(cell(Some(5321.44), Unit::Number), "5321");
        assert_eq!(cell(Some(12.5), Unit::Rate), "12.5");
        assert_eq!(cell(Some(226.31), Unit::Of("tok/s")), "226.3 tok/s");
        assert_eq!(named(Some(812.3e-3), "ms"), "812.3 µs");
        assert_eq!(named(Some(2.5), "%"), "2.5 %", "a percentage value");
        assert_eq!(named(Some(12.0), "requests"), "12.00 requests");
        assert_eq!(named(Some(53.21), ""), "53.21");
        assert_eq!(
            named(Some(0.022475), "s"),
            "22.47 ms",
            "another tool's seconds"
        );
        assert_eq!(named(Some(0.89594), "sec"), "895.9 ms");
        assert_eq!(named(Some(1500.0), "ns"), "1.5 µs");
    }

    #[test]
    fn units_follow_magnitude() {
        assert_eq!(fmt_ms(0.0), "0 ms");
        assert_eq!(fmt_ms(0.0004), "0.4 µs");
        assert_eq!(fmt_ms(0.25), "250.0 µs");
        assert_eq!(fmt_ms(0.8123), "812.3 µs");
        assert_eq!(fmt_ms(1.0), "1.000 ms");
        assert_eq!(fmt_ms(23.456), "23.46 ms");
        assert_eq!(fmt_ms(102.34), "102.3 ms");
        assert_eq!(
            fmt_ms(999.96),
            "1.000 s",
            "rounding up moves to the next unit"
        );
        assert_eq!(fmt_ms(1234.5), "1.234 s");
        assert_eq!(fmt_ms(65_000.0), "65.00 s");
        assert_eq!(fmt_ms(3_600_000.0), "3600 s");
        assert_eq!(fmt_seconds(12.0), "12.00 s");
        assert_eq!(fmt_seconds(0.2), "200.0 ms");
    }

    #[test]
    fn rounding_up_past_a_power_of_ten_keeps_four_digits() {
        assert_eq!(fmt_ms(9.9996), "10.00 ms");
        assert_eq!(fmt_ms(9.9994), "9.999 ms");
        assert_eq!(fmt_ms(99.996), "100.0 ms");
        assert_eq!(fmt_ms(99.994), "99.99 ms");
        assert_eq!(fmt_ms(-9.9996), "-10.00 ms");
        assert_eq!(fmt_ms(0.99996), "1.000 ms", "999.96 µs rounds into ms");
        assert_eq!(fmt_ms(0.0099996), "10.0 µs");
        assert_eq!(fmt_ms(9_999.6), "10.00 s");
        assert_eq!(fmt_ms(99_999.6), "100.0 s");
        assert_eq!(fmt_ms(999_999.6), "1000 s");
        assert_eq!(sig4(9.9996), "10.00");
        assert_eq!(sig4(99.9996), "100.0");
        assert_eq!(sig4(999.96), "1000");
        assert_eq!(fmt_rate(9.9996), "10");
    }

    #[test]
    fn percentages_and_rates_read_as_written() {
        assert_eq!(fmt_pct(0.001), "0.1 %");
        assert_eq!(fmt_pct(0.5), "50 %");
        assert_eq!(fmt_pct(1.0), "100 %");
        assert_eq!(fmt_pct(0.0), "0 %");
        assert_eq!(fmt_pct(0.95652), "95.7 %");
        assert_eq!(fmt_pct(0.025), "2.5 %");
        assert_eq!(fmt_pct(0.00012), "0.012 %");
        assert_eq!(fmt_rate(2.0), "2");
        assert_eq!(fmt_rate(0.5), "0.5");
        assert_eq!(fmt_rate(12.5), "12.5");
        assert_eq!(fmt_rate(1000.0), "1000");
        assert_eq!(fmt_rate(1.0 / 3.0), "0.333");
    }

    #[test]
    fn sig4_keeps_four_digits() {
        assert_eq!(sig4(0.0), "0");
        assert_eq!(sig4(1.3333333), "1.333");
        assert_eq!(sig4(53.21), "53.21");
        assert_eq!(sig4(5321.44), "5321");
        assert_eq!(sig4(0.05), "0.050");
    }
}
