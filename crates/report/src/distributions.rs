//! Each level's full distribution table for the HTML report (count, mean, p50, p90,
//! p95, p99, p99.9, max of TTFT, ITL, TPOT and E2E), written by the one table writer
//! and cell formatter, so it reads what the console's level block reads.

use cadence_core::{Distribution, LevelReport, Report};

use crate::cell::{cell, Unit};
use crate::table::Table;

/// The statistics of a distribution's row, as headed.
const STATS: [&str; 8] = ["count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"];

/// A level's rows: TTFT (and TTFT from the schedule in an open loop), the headline ITL
/// and TPOT (`--convention`'s when set, as the summary table), E2E.
fn rows(r: &Report, l: &LevelReport) -> Vec<(String, Option<Distribution>)> {
    let s = &l.summary;
    let (itl, tpot) = crate::headline(r, l);
    let conv = r
        .convention
        .as_deref()
        .filter(|c| *c != "cadence" && l.conventions.iter().any(|v| v.convention == *c))
        .map_or(String::new(), |c| format!(" ({c})"));
    let mut rows = vec![("TTFT".to_string(), s.ttft)];
    if s.ttft_response.is_some() {
        rows.push(("TTFT (response)".to_string(), s.ttft_response));
    }
    rows.extend([
        (format!("ITL{conv}"), itl),
        (format!("TPOT{conv}"), tpot),
        ("E2E".to_string(), s.e2e),
    ]);
    rows
}

/// One level's table.
pub(crate) fn table(r: &Report, l: &LevelReport) -> Table {
    let mut t = Table::new(0).left("", 0);
    for h in STATS {
        t = t.right(h, 0);
    }
    for (name, d) in rows(r, l) {
        let figures: Vec<String> = match d {
            Some(d) => std::iter::once(d.count.to_string())
                .chain(
                    [d.mean, d.p50, d.p90, d.p95, d.p99, d.p999, d.max]
                        .map(|v| cell(Some(v), Unit::Ms)),
                )
                .collect(),
            None => vec![cell(None, Unit::Ms); STATS.len()],
        };
        t.row(std::iter::once(name).chain(figures));
    }
    t
}

/// The report's section: a table per level, under the level's name in a sweep.
pub(crate) fn html(r: &Report, o: &mut String) {
    if r.levels.is_empty() {
        return;
    }
    o.push_str("<h2>Distributions</h2>");
    for l in &r.levels {
        if r.levels.len() > 1 {
            o.push_str(&format!("<h3>{}</h3>", crate::svg::esc(&l.name)));
        }
        o.push_str(&table(r, l).html());
    }
}
