//! A sweep's console summary: one row per level, and each level's warnings said once,
//! grouped by what they say, so four levels that lagged alike read as one warning
//! naming four levels rather than four copies of it.

use cadence_core::{Distribution, LevelReport, Report};
use std::fmt::Write;

use crate::cell::{cell, fmt_ms, fmt_pct, fmt_rate, Unit, ABSENT};
use crate::paint::Painter;
use crate::table::Table;

/// The summary table of a sweep, its flag column pointing at [`notes`]' letters.
pub(crate) fn sweep_table(out: &mut String, report: &Report, p: Painter) {
    let levels = &report.levels;
    let name_w = levels
        .iter()
        .map(|l| l.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(5)
        + 2;
    let (load_head, load) = load_column(levels);
    let any_slo = levels.iter().any(|l| !l.slos.is_empty());
    let any_goodput = levels.iter().any(|l| l.goodput.is_some());
    let groups = group_notes(levels);

    // (heading, width) per column; narrow ones for counts.
    let mut heads: Vec<(&str, usize)> = vec![
        (load_head, 8),
        ("sent", 8),
        ("ok", 8),
        ("errors", 8),
        ("TTFT p50", 10),
        ("TTFT p99", 10),
        ("ITL p50", 10),
        ("ITL p99", 10),
        ("TPOT p50", 10),
        ("E2E p50", 10),
        ("E2E p99", 10),
        ("tok/s", 10),
        ("req/s", 10),
    ];
    if any_goodput {
        heads.push(("good/s", 10));
    }
    if any_slo {
        heads.push(("SLOs", 10));
    }
    let mut t = Table::new(0).left("level", name_w);
    for (h, w) in &heads {
        t = t.right(h, *w).gap(0);
    }
    if !groups.is_empty() {
        t = t.left("notes", 0).gap(2);
    }
    let mut alarms = Vec::new();
    for (i, l) in levels.iter().enumerate() {
        let mut cells = sweep_cells(report, l, load, any_goodput, any_slo);
        if !groups.is_empty() {
            let marks: Vec<String> = groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.levels.iter().any(|(at, _)| *at == i))
                .map(|(k, _)| mark(k))
                .collect();
            cells.push((marks.join(" "), !marks.is_empty()));
        }
        alarms.push(cells.iter().map(|(_, alarm)| *alarm).collect::<Vec<_>>());
        t.row(std::iter::once(l.name.clone()).chain(cells.into_iter().map(|(c, _)| c)));
    }
    let _ = writeln!(out, "{}", p.bold("Summary by level"));
    out.push_str(&t.text_painted(|row, col, cell| {
        let alarm = row
            .zip(col.checked_sub(1))
            .is_some_and(|(r, c)| alarms[r][c]);
        if alarm {
            p.red(&cell)
        } else {
            cell
        }
    }));
}

/// The load column of the sweep table: its heading and each level's cell.
fn load_column(levels: &[LevelReport]) -> (&'static str, fn(&LevelReport) -> String) {
    if levels.iter().all(|l| l.concurrency.is_some()) {
        ("conc", |l| {
            l.concurrency.map_or(ABSENT.into(), |c| c.to_string())
        })
    } else if levels.iter().all(|l| l.rate.is_some()) {
        ("rate/s", |l| l.rate.map_or(ABSENT.into(), fmt_rate))
    } else {
        ("load", |l| match (l.concurrency, l.rate) {
            (Some(c), _) => format!("c={c}"),
            (None, Some(r)) => format!("{}/s", fmt_rate(r)),
            (None, None) => ABSENT.into(),
        })
    }
}

/// One level's row of the sweep table: each cell and whether it is an alarm (red).
fn sweep_cells(
    report: &Report,
    l: &LevelReport,
    load: fn(&LevelReport) -> String,
    any_goodput: bool,
    any_slo: bool,
) -> Vec<(String, bool)> {
    let s = &l.summary;
    let (itl, tpot) = crate::headline(report, l);
    let t =
        |d: &Option<Distribution>, f: fn(&Distribution) -> f64| cell(d.as_ref().map(f), Unit::Ms);
    let errors = s.requests.failed_total();
    let mut cells = vec![
        (load(l), false),
        (s.requests.sent.to_string(), false),
        (s.requests.succeeded.to_string(), false),
        (errors.to_string(), errors > 0),
        (t(&s.ttft, |d| d.p50), false),
        (t(&s.ttft, |d| d.p99), false),
        (t(&itl, |d| d.p50), false),
        (t(&itl, |d| d.p99), false),
        (t(&tpot, |d| d.p50), false),
        (t(&s.e2e, |d| d.p50), false),
        (t(&s.e2e, |d| d.p99), false),
        (cell(s.throughput.output_tokens_per_s, Unit::Number), false),
        (cell(s.throughput.requests_per_s, Unit::Number), false),
    ];
    if any_goodput {
        cells.push((
            cell(l.goodput.and_then(|g| g.requests_per_s), Unit::Number),
            false,
        ));
    }
    if any_slo {
        let failed = l.slos.iter().filter(|r| !r.pass).count();
        cells.push(match (l.slos.len(), failed) {
            (0, _) => (ABSENT.into(), false),
            (_, 0) => ("pass".into(), false),
            (n, f) => (format!("FAIL {f}/{n}"), true),
        });
    }
    cells
}

/// A note's letter in the table's flag column: a, b, … z, then n27, n28, ….
fn mark(k: usize) -> String {
    match u8::try_from(k).ok().filter(|k| *k < 26) {
        Some(k) => char::from(b'a' + k).to_string(),
        None => format!("n{}", k + 1),
    }
}

/// What a level's block would have said beside its figures: its warnings, an early
/// stop, stalls, pacing that makes the level invalid, broken accounting.
pub(crate) fn level_notes(l: &LevelReport) -> Vec<String> {
    let s = &l.summary;
    let mut notes = s.warnings.clone();
    if let Some(why) = &l.stopped_early {
        notes.push(format!("stopped early: {why}"));
    }
    let st = &s.stalls;
    if st.total() > 0 {
        notes.push(format!(
            "{} (waits over {}) in {}: {} for the first token, {} between chunks",
            crate::cell::plural(st.total(), "stall"),
            fmt_ms(st.threshold_ms),
            crate::cell::plural(st.requests, "request"),
            st.first_token,
            st.gaps
        ));
    }
    if let Some(pc) = l.pacing.as_ref().filter(|pc| pc.invalid) {
        notes.push(format!(
            "INVALID: {} of sends were late (over --max-late {}): the client fell behind its \
             schedule",
            pc.late_share().map_or(ABSENT.to_string(), fmt_pct),
            fmt_pct(pc.max_late_share)
        ));
    }
    if let Err(e) = s.requests.check() {
        notes.push(e.to_string());
    }
    notes
}

/// Notes alike but for their figures, with the levels that said each (index, text).
#[derive(Debug)]
pub(crate) struct Group {
    levels: Vec<(usize, String)>,
}

/// A note's shape: its text with every figure replaced, so "lagged (p99 18.3 ms)" and
/// "lagged (p99 7.1 ms)" are one kind of note.
fn shape(note: &str) -> String {
    let mut out = String::with_capacity(note.len());
    let mut in_figure = false;
    for c in note.chars() {
        let figure = c.is_ascii_digit() || (in_figure && matches!(c, '.' | ','));
        if figure && !in_figure {
            out.push('#');
        } else if !figure {
            out.push(c);
        }
        in_figure = figure;
    }
    out
}

/// Every level's notes grouped by shape, in the order they first appear.
pub(crate) fn group_notes(levels: &[LevelReport]) -> Vec<Group> {
    let mut keys: Vec<String> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    for (i, l) in levels.iter().enumerate() {
        for n in level_notes(l) {
            let key = shape(&n);
            match keys.iter().position(|k| *k == key) {
                Some(at) => groups[at].levels.push((i, n)),
                None => {
                    keys.push(key);
                    groups.push(Group {
                        levels: vec![(i, n)],
                    });
                }
            }
        }
    }
    groups
}

/// The grouped notes, one line each under the table, lettered as its flag column:
/// the levels it concerns, then the note (the first level's figures when they differ).
pub(crate) fn notes(out: &mut String, levels: &[LevelReport], p: Painter) {
    let groups = group_notes(levels);
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(out, "{}", p.bold("Notes (the table's notes column)"));
    for (k, g) in groups.iter().enumerate() {
        let at: Vec<usize> = g.levels.iter().map(|(i, _)| *i).collect();
        let mut seen = at.clone();
        seen.dedup();
        let which = if seen.len() == levels.len() && levels.len() > 1 {
            "every level".to_string()
        } else {
            let names: Vec<&str> = seen.iter().map(|i| levels[*i].name.as_str()).collect();
            names.join(", ")
        };
        let (first_at, first) = &g.levels[0];
        let same = g.levels.iter().all(|(_, n)| n == first);
        let figures = if same {
            String::new()
        } else {
            format!(
                " (figures of {}; each level's with --detail)",
                levels[*first_at].name
            )
        };
        let _ = writeln!(
            out,
            "  {} {which}: {}{figures}",
            p.yellow(&format!("{:<2}", mark(k))),
            first
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notes_shape_ignores_its_figures_only() {
        assert_eq!(
            shape("the client's event loop lagged (p99 18.3 ms, max 77.3 ms)"),
            shape("the client's event loop lagged (p99 7.1 ms, max 1,031 ms)")
        );
        assert_eq!(shape("325 of 2048 chunks arrived"), "# of # chunks arrived");
        assert_ne!(shape("3 gaps over 500 ms"), shape("3 requests over 500 ms"));
    }

    #[test]
    fn marks_run_a_to_z_then_number() {
        assert_eq!(mark(0), "a");
        assert_eq!(mark(25), "z");
        assert_eq!(mark(26), "n27");
    }
}
