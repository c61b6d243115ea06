//! A Markdown summary for a pull-request comment: the table by level, SLO verdicts,
//! the compatibility view and the warnings, short enough to read in a review.

use crate::cell::{cell, Unit, ABSENT};
use crate::table::Table;
use crate::{headline, slo_observed};
use cadence_core::Report;
use std::fmt::Write;

fn ms(v: Option<f64>) -> String {
    cell(v, Unit::Ms)
}

/// The Markdown text.
pub fn render(r: &Report) -> String {
    // A server's strings carry no tag into the Markdown (nor terminal controls).
    let r = &*crate::escape::for_markdown(r);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "### Cadence {}: {} (model `{}`)\n",
        r.cadence_version, r.run.target, r.run.model
    );
    level_table(r, &mut o);
    let conv = r.convention.as_deref().unwrap_or("cadence");
    if conv != "cadence" {
        let _ = writeln!(o, "\nITL and TPOT follow the **{conv}** convention.");
    }
    let slos: Vec<String> = r
        .levels
        .iter()
        .flat_map(|l| {
            l.slos.iter().map(move |s| {
                format!(
                    "- {} `{}`: observed {}, {}",
                    l.name,
                    s.slo,
                    slo_observed(s),
                    if s.pass { "pass" } else { "**FAIL**" }
                )
            })
        })
        .collect();
    if !slos.is_empty() {
        o.push_str("\n**SLOs**\n\n");
        o.push_str(&slos.join("\n"));
        o.push('\n');
    }
    sessions_table(r, &mut o);
    clock_checks(r, &mut o);
    conventions_details(r, &mut o);
    o.push_str(&crate::imported::markdown(r));
    let warnings: Vec<&String> = r
        .warnings
        .iter()
        .chain(r.levels.iter().flat_map(|l| l.summary.warnings.iter()))
        .collect();
    if !warnings.is_empty() {
        o.push_str("\n**Warnings**\n\n");
        for w in warnings {
            let _ = writeln!(o, "- {w}");
        }
    }
    o
}

/// One row per level: counts, the headline latencies, throughput, SLO verdict.
fn level_table(r: &Report, o: &mut String) {
    let mut t = Table::new(0).left("level", 0).right("ok/sent", 0);
    for h in [
        "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p99", "tok/s",
    ] {
        t = t.right(h, 0);
    }
    t = t.left("SLOs", 0);
    for l in &r.levels {
        let s = &l.summary;
        let (itl, tpot) = headline(r, l);
        let failed = l.slos.iter().filter(|x| !x.pass).count();
        let slo = match (l.slos.len(), failed) {
            (0, _) => ABSENT.to_string(),
            (_, 0) => "pass".into(),
            (n, f) => format!("**FAIL {f}/{n}**"),
        };
        t.row([
            l.name.clone(),
            format!("{}/{}", s.requests.succeeded, s.requests.sent),
            ms(s.ttft.map(|d| d.p50)),
            ms(s.ttft.map(|d| d.p99)),
            ms(itl.map(|d| d.p50)),
            ms(itl.map(|d| d.p99)),
            ms(tpot.map(|d| d.p50)),
            ms(s.e2e.map(|d| d.p99)),
            cell(s.throughput.output_tokens_per_s, Unit::Number),
            slo,
        ]);
    }
    o.push_str(&t.markdown());
}

/// Whole sessions by level (agent loops, multi-turn chats): wall time, its split and
/// the what-ifs; nothing when no level has sessions.
fn sessions_table(r: &Report, o: &mut String) {
    let levels: Vec<_> = r
        .levels
        .iter()
        .filter_map(|l| Some((l, l.summary.sessions.as_ref()?)))
        // Sessions that called no tool are single requests (the level's warning says).
        .filter(|(_, s)| !s.tool_use.not_agent_loops())
        .collect();
    if levels.is_empty() {
        return;
    }
    let mut t = Table::new(0).left("level", 0);
    for h in [
        "complete",
        "wall p50",
        "wall p99",
        "TTFT",
        "decode (ITL)",
        "tool",
        "rest",
    ] {
        t = t.right(h, 0);
    }
    let pct = |v: Option<f64>| v.map_or(ABSENT.into(), |v| crate::cell::pct(v, 1));
    for (l, s) in &levels {
        let sp = s.split;
        t.row([
            l.name.clone(),
            format!("{}/{}", s.complete, s.sessions),
            ms(s.wall.map(|d| d.p50)),
            ms(s.wall.map(|d| d.p99)),
            pct(sp.map(|x| x.ttft_pct)),
            pct(sp.map(|x| x.decode_pct)),
            pct(sp.map(|x| x.tool_pct)),
            pct(sp.map(|x| x.rest_pct)),
        ]);
    }
    o.push_str("\n**Sessions**\n\n");
    o.push_str(&t.markdown());
    for (l, s) in &levels {
        for w in &s.what_if {
            let _ = writeln!(
                o,
                "\n- {} what if `{}`: wall p50 {} → {}",
                l.name,
                w.label,
                ms(s.wall.map(|d| d.p50)),
                ms(w.wall.map(|d| d.p50))
            );
        }
    }
}

/// Each level's clock self-check (which clock stamped the chunks, how late the
/// client read them), as the console's Clock line words it; nothing when no level
/// has one.
fn clock_checks(r: &Report, o: &mut String) {
    let lines: Vec<String> = r
        .levels
        .iter()
        .filter_map(|l| {
            let k = l.summary.clock.as_ref()?;
            Some(format!("- {}: {}", l.name, crate::console::clock_line(k)))
        })
        .collect();
    if !lines.is_empty() {
        o.push_str("\n**Clock**\n\n");
        o.push_str(&lines.join("\n"));
        o.push('\n');
    }
}

/// The compatibility view of the first level that has one, folded away.
fn conventions_details(r: &Report, o: &mut String) {
    let Some(l) = r.levels.iter().find(|l| !l.conventions.is_empty()) else {
        return;
    };
    let _ = writeln!(
        o,
        "\n<details><summary>ITL/TPOT as other tools define them ({})</summary>\n",
        l.name
    );
    let mut t = Table::new(0).left("convention", 0);
    for h in ["ITL mean", "ITL p50", "ITL p99", "TPOT mean", "TPOT p50"] {
        t = t.right(h, 0);
    }
    for c in &l.conventions {
        t.row([
            c.tools.to_string(),
            ms(c.itl.map(|d| d.mean)),
            ms(c.itl.map(|d| d.p50)),
            ms(c.itl.map(|d| d.p99)),
            ms(c.tpot.map(|d| d.mean)),
            ms(c.tpot.map(|d| d.p50)),
        ]);
    }
    o.push_str(&t.markdown());
    o.push_str("\n</details>\n");
}
