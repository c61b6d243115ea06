//! A closed-loop level's plateau ([`cadence_core::plateau`]) beside the whole level's
//! figures: one line in a level's block, one table for a sweep (console and HTML); and
//! a sweep's knees ([`cadence_core::knee`]), a line each and a marker on the charts.

use crate::cell::{cell, fmt_rate, plural, Unit};
use crate::table::Table;
use cadence_core::metrics::LevelSummary;
use cadence_core::{Distribution, LevelReport, Plateau, PlateauWindow, Report};
use std::fmt::Write;

fn q(d: Option<Distribution>, p: fn(&Distribution) -> f64) -> String {
    cell(d.as_ref().map(p), Unit::Ms)
}

fn rate(v: Option<f64>) -> String {
    v.map_or(crate::cell::ABSENT.to_string(), fmt_rate)
}

/// Where the plateau lies and what it holds: `≥ 9 of 10 in flight, 1.2–13.2 s, 412
/// requests`.
fn span(l: &LevelReport, p: &Plateau) -> String {
    let of = l.concurrency.map_or(String::new(), |c| format!(" of {c}"));
    match &p.window {
        Some(w) => format!(
            "≥ {}{of} in flight, {}–{} s, {}",
            p.min_in_flight,
            fmt_rate(w.start_s),
            fmt_rate(w.end_s),
            plural(w.requests, "request")
        ),
        None => format!("≥ {}{of} in flight", p.min_in_flight),
    }
}

/// The plateau's figure and the whole level's: TTFT p90, ITL p99, TPOT p50, E2E p90,
/// requests/s.
fn pairs(w: &PlateauWindow, s: &LevelSummary) -> [(String, String); 5] {
    [
        (q(w.ttft, |d| d.p90), q(s.ttft, |d| d.p90)),
        (q(w.itl, |d| d.p99), q(s.itl, |d| d.p99)),
        (q(w.tpot, |d| d.p50), q(s.tpot, |d| d.p50)),
        (q(w.e2e, |d| d.p90), q(s.e2e, |d| d.p90)),
        (
            fmt_rate(w.requests_per_s),
            rate(s.throughput.requests_per_s),
        ),
    ]
}

/// The level's one line: the plateau's figures, the whole level's in brackets.
pub(crate) fn line(l: &LevelReport) -> Option<String> {
    let p = l.plateau.as_ref()?;
    let Some(w) = &p.window else {
        return Some(format!(
            "Plateau ({}): {}",
            span(l, p),
            p.absent.as_deref().unwrap_or("none")
        ));
    };
    let [ttft, itl, tpot, e2e, rps] = pairs(w, &l.summary);
    Some(format!(
        "Plateau ({}): TTFT p90 {} (level {}), ITL p99 {} ({}), TPOT p50 {} ({}), E2E p90 {} ({}), {} req/s ({})",
        span(l, p),
        ttft.0,
        ttft.1,
        itl.0,
        itl.1,
        tpot.0,
        tpot.1,
        e2e.0,
        e2e.1,
        rps.0,
        rps.1,
    ))
}

/// The sweep's table: a row per closed-loop level, the plateau's figure then the
/// level's; `None` when no level has a plateau to show.
pub(crate) fn table(r: &Report) -> Option<Table> {
    let levels: Vec<(&LevelReport, &Plateau)> = r
        .levels
        .iter()
        .filter_map(|l| Some((l, l.plateau.as_ref()?)))
        .collect();
    if levels.is_empty() {
        return None;
    }
    let mut t = Table::new(2).left("level", 14).left("plateau", 10);
    for h in ["TTFT p90", "level", "ITL p99", "level"] {
        t = t.right(h, 9);
    }
    t = t.right("req/s", 6).right("level", 6);
    for (l, p) in levels {
        let Some(w) = &p.window else {
            let why = p.absent.as_deref().unwrap_or("none");
            t.note_row(&l.name, &format!("{}: {why}", span(l, p)));
            continue;
        };
        let [ttft, itl, _, _, rps] = pairs(w, &l.summary);
        t.row([
            l.name.clone(),
            span(l, p),
            ttft.0,
            ttft.1,
            itl.0,
            itl.1,
            rps.0,
            rps.1,
        ]);
    }
    Some(t)
}

/// The console's plateau lines for a sweep's summary.
pub(crate) fn console_sweep(out: &mut String, r: &Report) {
    if let Some(t) = table(r) {
        let _ = writeln!(
            out,
            "Plateau (the steady state of each closed-loop level; its figure, then the whole level's):"
        );
        out.push_str(&t.text());
    }
}

/// The console's knee lines of a sweep: `Knee: ITL p99 bends at c=16: …`.
pub(crate) fn console_knees(out: &mut String, r: &Report) {
    for k in &r.knees {
        let _ = writeln!(out, "Knee: {}", k.line(crate::cell::fmt_ms));
    }
}

/// The vertical marker of a by-level chart's knee (`figure`: `ITL p99` or `TTFT p90`):
/// at the knee's load, labelled with its line.
pub(crate) fn knee_marker(r: &Report, figure: &str) -> Vec<(f64, String)> {
    r.knees
        .iter()
        .filter(|k| k.figure == figure)
        .filter_map(|k| {
            let at = k.at.as_ref()?;
            Some((at.load, format!("{} knee", k.figure)))
        })
        .collect()
}

/// The HTML section: the same table, with the method in a line.
pub(crate) fn html(r: &Report, o: &mut String) {
    let Some(t) = table(r) else { return };
    o.push_str("<h2>Steady state</h2>");
    let _ = write!(
        o,
        r#"<p class="sub">The plateau of each closed-loop level: {}. Its figure, then the whole level's.</p>"#,
        crate::svg::esc(cadence_core::plateau::FORMULA)
    );
    o.push_str(&t.html());
}
