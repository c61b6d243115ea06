//! A target's standing over a window of probes (the last hour, day, week): the median
//! of the probes' own figures, the success rate over all their requests, and the share
//! of probes that met the SLOs. Shared by the page, `/api/targets` and `watch report`.

use crate::probe::Prepared;
use crate::store::ProbeRow;
use cadence_core::stats::median;

/// A target as the page shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetInfo {
    pub name: String,
    /// Without credentials or query values.
    pub url: String,
    pub slos: Vec<String>,
    pub interval_s: f64,
}

impl TargetInfo {
    pub fn of(p: &Prepared) -> TargetInfo {
        TargetInfo {
            name: p.target.name.clone(),
            url: p.display.clone(),
            slos: p.target.slos.iter().map(|s| s.text.clone()).collect(),
            interval_s: p.target.probe.interval.as_secs_f64(),
        }
    }
}

/// One target over one window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Standing {
    pub probes: u64,
    /// Medians over the window's probes of each probe's figure.
    pub ttft_p50_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    /// Median per-request output speed.
    pub output_tok_s: Option<f64>,
    /// Succeeded requests over sent requests.
    pub success_rate: Option<f64>,
    /// Probes that met every SLO over probes.
    pub slo_compliance: Option<f64>,
}

/// The standing of `probes` (one target's) that started at or after `since_ms`.
pub fn standing(probes: &[ProbeRow], since_ms: i64) -> Standing {
    let w: Vec<&ProbeRow> = probes.iter().filter(|p| p.started_ms >= since_ms).collect();
    if w.is_empty() {
        return Standing::default();
    }
    let med = |f: fn(&ProbeRow) -> Option<f64>| median(w.iter().filter_map(|p| f(p)).collect());
    let sent: u64 = w.iter().map(|p| p.sent).sum();
    let ok: u64 = w.iter().map(|p| p.succeeded).sum();
    Standing {
        probes: w.len() as u64,
        ttft_p50_ms: med(|p| p.ttft_p50_ms),
        itl_p50_ms: med(|p| p.itl_p50_ms),
        itl_p99_ms: med(|p| p.itl_p99_ms),
        output_tok_s: med(|p| p.output_tok_s),
        success_rate: (sent > 0).then(|| ok as f64 / sent as f64),
        slo_compliance: Some(w.iter().filter(|p| p.slo_ok).count() as f64 / w.len() as f64),
    }
}

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;
pub const WEEK_MS: i64 = 7 * DAY_MS;

/// A figure for a table cell, as every command writes one (cadence-report's cell: the
/// one dash when absent, four significant digits): `ms` a duration, `%` a share (0.25
/// reads `25 %`), none a plain number.
pub fn cell(v: Option<f64>, unit: &str) -> String {
    cadence_report::cell::cell(v, cadence_report::cell::Unit::named(unit))
}

/// The series' names in their colours.
pub fn legend(series: &[cadence_report::svg::Series]) -> String {
    let items: Vec<String> = series
        .iter()
        .map(|s| {
            format!(
                "<span style=\"color:{}\">&#9679; {}</span>",
                cadence_report::svg::esc(&s.color),
                cadence_report::svg::esc(&s.name)
            )
        })
        .collect();
    format!("<p>{}</p>", items.join(" &nbsp; "))
}

/// A chart over time with `y` from zero; the series' x are hours from now (negative:
/// the past). Spans under two hours are drawn in minutes, so a watch that started a
/// minute ago reads "-1", not "-0.017".
pub fn hours_chart(
    y: &str,
    mut series: Vec<cadence_report::svg::Series>,
) -> cadence_report::svg::Chart {
    let span = series
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| p.0.abs())
        .fold(0.0, f64::max);
    let x_label = if span < 2.0 {
        for s in &mut series {
            for p in &mut s.points {
                p.0 *= 60.0;
            }
        }
        "minutes from now"
    } else {
        "hours from now"
    };
    cadence_report::svg::Chart {
        x_label: x_label.into(),
        y_label: y.into(),
        x_log: false,
        y_log: false,
        y_zero: true,
        series,
        x_range: None,
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn utc(ms: i64) -> String {
    cadence_core::wallclock::format_utc(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::probe;

    #[test]
    fn a_standing_takes_medians_rates_and_compliance_of_its_window() {
        let rows = vec![
            probe("a", 0, true),
            probe("a", 10, false),
            probe("a", 20, true),
            probe("a", 30, true),
        ];
        let s = standing(&rows, 10);
        assert_eq!(s.probes, 3);
        assert_eq!(s.itl_p50_ms, Some(5.0), "median of 10, 5, 5");
        assert_eq!(s.success_rate, Some(11.0 / 12.0));
        assert_eq!(s.slo_compliance, Some(2.0 / 3.0));
        assert_eq!(standing(&rows, 1_000), Standing::default());
    }

    #[test]
    fn a_short_span_is_drawn_in_minutes_and_a_long_one_in_hours() {
        use cadence_report::svg::{Series, Style};
        let series = |xs: &[f64]| {
            let mut s = Series::new("a", "#000", Style::LinePoints);
            s.points = xs.iter().map(|x| (*x, 1.0)).collect();
            vec![s]
        };
        let c = hours_chart("y", series(&[-0.5, -0.25]));
        assert_eq!(c.x_label, "minutes from now");
        assert_eq!(c.series[0].points, vec![(-30.0, 1.0), (-15.0, 1.0)]);
        let c = hours_chart("y", series(&[-5.0, -1.0]));
        assert_eq!(c.x_label, "hours from now");
        assert_eq!(c.series[0].points, vec![(-5.0, 1.0), (-1.0, 1.0)]);
    }

    #[test]
    fn utc_formats_unix_ms() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
    }
}
