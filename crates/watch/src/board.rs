//! A target's standing over a window of probes (the last hour, day, week): the median
//! of the probes' own figures, the success rate over all their requests, and the share
//! of probes that met the SLOs. Shared by the page, `/api/targets` and `watch report`.

use crate::incident::{incidents, Incident};
use crate::probe::Prepared;
use crate::store::{AsPoint, Point, ProbeRow};
use cadence_core::stats::median;

/// A target as the page shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetInfo {
    /// The target's name, unique among the watcher's.
    pub name: String,
    /// Without credentials or query values.
    pub url: String,
    /// Its SLOs as written (`itl.p50<=8ms`).
    pub slos: Vec<String>,
    /// Seconds from one probe's start to the next.
    pub interval_s: f64,
}

impl TargetInfo {
    /// A prepared target as the page shows it.
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
    /// Probes that started in the window.
    pub probes: u64,
    /// Medians over the window's probes of each probe's figure.
    pub ttft_p50_ms: Option<f64>,
    /// The median of the probes' ITL p50 (ms).
    pub itl_p50_ms: Option<f64>,
    /// The median of the probes' ITL p99 (ms).
    pub itl_p99_ms: Option<f64>,
    /// Median per-request output speed.
    pub output_tok_s: Option<f64>,
    /// Succeeded requests over sent requests.
    pub success_rate: Option<f64>,
    /// Probes that met every SLO over probes.
    pub slo_compliance: Option<f64>,
}

/// The standing of `probes` (one target's) that started at or after `since_ms`.
pub fn standing<P: AsPoint>(probes: &[P], since_ms: i64) -> Standing {
    let w: Vec<Point> = probes
        .iter()
        .map(AsPoint::point)
        .filter(|p| p.started_ms >= since_ms)
        .collect();
    if w.is_empty() {
        return Standing::default();
    }
    let med = |f: fn(&Point) -> Option<f64>| median(w.iter().filter_map(f).collect());
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

/// An hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// A day in milliseconds.
pub const DAY_MS: i64 = 24 * HOUR_MS;
/// A week in milliseconds.
pub const WEEK_MS: i64 = 7 * DAY_MS;

/// A figure for a table cell, as every command writes one (cadence-report's cell: the
/// one dash when absent, four significant digits): `ms` a duration, `%` a share (0.25
/// reads `25 %`), none a plain number.
pub fn cell(v: Option<f64>, unit: &str) -> String {
    cadence_report::cell::cell(v, cadence_report::cell::Unit::named(unit))
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn utc(ms: i64) -> String {
    cadence_core::wallclock::format_utc(ms)
}

/// One target's row of the leaderboard and of `/api/targets`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The target.
    #[serde(flatten)]
    pub target: TargetInfo,
    /// Its latest probe, if any.
    pub last_probe: Option<ProbeRow>,
    /// Its standing over the last hour.
    pub hour: Standing,
    /// Its standing over the last day.
    pub day: Standing,
    /// Its standing over the last week.
    pub week: Standing,
    /// The incident still open, if any.
    pub open_incident: Option<Incident>,
}

/// The rows of every target from the last week of probes.
pub fn rows(targets: &[TargetInfo], probes: &[ProbeRow], now: i64) -> Vec<Row> {
    targets
        .iter()
        .map(|t| {
            let mine: Vec<ProbeRow> = probes
                .iter()
                .filter(|p| p.target == t.name)
                .cloned()
                .collect();
            let open = incidents(&mine).into_iter().find(|i| i.end_ms.is_none());
            let week: Vec<Point> = mine.iter().map(AsPoint::point).collect();
            row(t, &week, mine.last().cloned(), open, now)
        })
        .collect()
}

/// A target's row from its week of probes as points, its latest probe and its open
/// incident.
pub fn row(
    t: &TargetInfo,
    week: &[Point],
    last_probe: Option<ProbeRow>,
    open_incident: Option<Incident>,
    now: i64,
) -> Row {
    Row {
        target: t.clone(),
        last_probe,
        hour: standing(week, now - HOUR_MS),
        day: standing(week, now - DAY_MS),
        week: standing(week, now - WEEK_MS),
        open_incident,
    }
}

/// The breaching probes at the end of `points` (in time order), when the latest
/// breached: the open incident's, its first probe first (its cause is that probe's).
pub fn open_run(points: &[Point]) -> &[Point] {
    let passed = points.iter().rposition(|p| p.slo_ok).map_or(0, |i| i + 1);
    &points[passed..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

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
    fn utc_formats_unix_ms() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
    }
}
