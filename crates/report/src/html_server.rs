//! The HTML report's server section (`--server-metrics`): the TTFT split, the decode
//! pace, the stall causes and table, and the client's ITL p99 over time stacked over
//! the server's batch, KV usage and prefill on one shared time axis.

use crate::cell::{cell, Unit};
use crate::figure::{chart, figure, level_color, Figure};
use crate::svg::{esc, Series, Style};
use cadence_core::attribution::{server_series, ServerPoint, ServerReport};
use cadence_core::{LevelReport, Report};
use std::fmt::Write;

/// Stall rows shown per level (the JSON report has up to its own maximum).
const ROWS: usize = 20;

fn with_samples(r: &Report) -> Vec<(usize, &LevelReport, &ServerReport)> {
    r.levels
        .iter()
        .enumerate()
        .filter_map(|(i, l)| Some((i, l, l.server.as_deref()?)))
        .filter(|(_, _, s)| s.scrape.samples.len() >= 2)
        .collect()
}

fn ms(v: Option<f64>) -> String {
    cell(v, Unit::Ms)
}

/// The section, when some level has server samples to show.
pub(crate) fn section(r: &Report, o: &mut String) {
    let levels = with_samples(r);
    if levels.is_empty() {
        return;
    }
    o.push_str("<h2>Server</h2>");
    o.push_str(r#"<p class="sub">The server's own metrics, scraped during each level and lined up with the client's gaps.</p>"#);
    o.push_str("<table><tr><th>level</th><th>engine</th><th>samples</th><th>TTFT</th><th>server queue</th><th>server prefill</th><th>KV transfer</th><th>rest</th><th>server decode per token</th><th>client TPOT</th><th>stalls</th><th>top causes</th></tr>");
    for (_, l, s) in &levels {
        let t = s.ttft_split.as_ref();
        let d = s.decode.as_ref();
        let causes: Vec<String> = s
            .causes
            .iter()
            .take(3)
            .map(|c| format!("{} {}", c.cause.name(), c.gaps))
            .collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"w\">{}</td></tr>",
            esc(&l.name),
            esc(&s.scrape.engine),
            s.scrape.samples.len(),
            ms(t.map(|t| t.client_ms)),
            ms(t.and_then(|t| t.server_queue_ms)),
            ms(t.and_then(|t| t.server_prefill_ms)),
            ms(t.and_then(|t| t.server_kv_transfer_ms)),
            ms(t.and_then(|t| t.rest_ms)),
            ms(d.and_then(|d| d.server_decode_per_token_ms)),
            ms(d.and_then(|d| d.client_tpot_ms)),
            s.stalls_total,
            esc(&causes.join(", "))
        );
    }
    o.push_str("</table>");
    speculation_table(&levels, o);
    worker_table(&levels, o);
    stall_tables(&levels, o);
    o.push_str(r#"<div class="grid">"#);
    for f in figures(&levels) {
        figure(&f, o);
    }
    o.push_str("</div>");
}

/// The server's speculation counters over each level that exported them, as the
/// console's `Speculation` line gives them.
fn speculation_table(levels: &[(usize, &LevelReport, &ServerReport)], o: &mut String) {
    let spec: Vec<_> = levels
        .iter()
        .filter_map(|(_, l, s)| Some((l, s.speculation.as_ref()?)))
        .collect();
    if spec.is_empty() {
        return;
    }
    o.push_str(r#"<p class="sub">Speculative decoding, the server's counters over each level (acceptance length: 1 + accepted ÷ steps, else SGLang's gauge).</p>"#);
    o.push_str("<table><tr><th>level</th><th>steps</th><th>drafted</th><th>accepted</th><th>acceptance length</th><th>drafts accepted</th><th>accepted by draft position</th></tr>");
    let count = |v: Option<f64>| v.map_or(crate::cell::ABSENT.to_string(), |v| format!("{v:.0}"));
    for (l, sp) in spec {
        let by: Vec<String> = sp
            .accepted_by_position
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"w\">{}</td></tr>",
            esc(&l.name),
            count(sp.drafts),
            count(sp.draft_tokens),
            count(sp.accepted),
            sp.acceptance_length
                .map_or(crate::cell::ABSENT.to_string(), |v| format!("{v:.2}")),
            cell(sp.draft_acceptance_rate, Unit::Share),
            esc(&by.join(", "))
        );
    }
    o.push_str("</table>");
}

/// NVIDIA Dynamo's worker types over each level, as the console's `Workers` lines
/// give them.
fn worker_table(levels: &[(usize, &LevelReport, &ServerReport)], o: &mut String) {
    let rows: Vec<_> = levels
        .iter()
        .flat_map(|(_, l, s)| s.workers.iter().map(move |w| (l, w)))
        .collect();
    if rows.is_empty() {
        return;
    }
    o.push_str(
        r#"<p class="sub">Dynamo's workers by type, the most each gauge read over the level.</p>"#,
    );
    o.push_str("<table><tr><th>level</th><th>worker type</th><th>ranks</th><th>prompt tokens queued</th><th>KV blocks decoding</th><th>waiting</th><th>router queue</th><th>last TTFT</th><th>last ITL</th></tr>");
    let count = |v: Option<f64>| v.map_or(crate::cell::ABSENT.to_string(), |v| format!("{v:.0}"));
    for (l, w) in rows {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.name),
            esc(&w.worker_type),
            w.ranks,
            count(w.prefill_tokens_max),
            count(w.decode_blocks_max),
            count(w.waiting_max),
            count(w.router_pending_max),
            ms(w.last_ttft_ms_max),
            ms(w.last_itl_ms_max)
        );
    }
    o.push_str("</table>");
}

/// The longest stalls of each level with the server's state over them.
fn stall_tables(levels: &[(usize, &LevelReport, &ServerReport)], o: &mut String) {
    for (_, l, s) in levels.iter().filter(|(_, _, s)| !s.stalls.is_empty()) {
        let _ = write!(
            o,
            "<details><summary>{}: the {} longest of {} stalls</summary><p class=\"sub\">{}</p>",
            esc(&l.name),
            s.stalls.len().min(ROWS),
            s.stalls_total,
            esc(&s.rule)
        );
        o.push_str("<table><tr><th>start s</th><th>gap ms</th><th>gap</th><th>cause</th><th>batch max</th><th>waiting max</th><th>KV max</th><th>pre-emptions</th><th>prefilled tokens</th></tr>");
        for row in s.stalls.iter().take(ROWS) {
            let _ = write!(
                o,
                "<tr><td>{:.3}</td><td>{:.1}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                row.start_s,
                row.gap_ms,
                row.kind,
                row.cause.name(),
                ms(row.running_max),
                ms(row.waiting_max),
                ms(row.kv_usage_max),
                ms(row.preemptions),
                ms(row.prefill_tokens)
            );
        }
        o.push_str("</table></details>");
    }
}

/// One series per level of one server figure.
fn server_lines(
    levels: &[(usize, &LevelReport, &ServerReport)],
    name: &str,
    f: fn(&ServerPoint) -> Option<f64>,
) -> Vec<Series> {
    levels
        .iter()
        .map(|(i, l, s)| {
            let mut line = Series::new(format!("{} {name}", l.name), level_color(*i), Style::Line);
            line.points = server_series(&s.scrape.samples)
                .iter()
                .filter_map(|p| Some((p.t_s, f(p)?)))
                .collect();
            line
        })
        .collect()
}

/// ITL p99 over time, then batch, KV usage and prefill, all on one time axis.
fn figures(levels: &[(usize, &LevelReport, &ServerReport)]) -> Vec<Figure> {
    let itl: Vec<Series> = levels
        .iter()
        .map(|(i, l, _)| {
            let mut s = Series::new(format!("{} ITL p99", l.name), level_color(*i), Style::Line);
            s.points = l
                .time_series
                .iter()
                .filter_map(|b| Some((b.start_s, b.itl_p99_ms?)))
                .collect();
            s
        })
        .collect();
    let ts = levels
        .iter()
        .flat_map(|(_, l, s)| {
            let samples = s.scrape.samples.iter().map(|x| x.t_ns as f64 / 1e9);
            l.time_series.iter().map(|b| b.start_s).chain(samples)
        })
        .fold(None, |acc: Option<(f64, f64)>, t| {
            Some(acc.map_or((t, t), |(a, b)| (a.min(t), b.max(t))))
        })
        .filter(|(a, b)| b > a);
    let mut batch = server_lines(levels, "running", |p| p.running);
    let mut waiting = server_lines(levels, "waiting", |p| p.waiting);
    waiting.iter_mut().for_each(|s| s.dashed = true);
    batch.extend(waiting);
    let specs: [(&'static str, &'static str, &str, Vec<Series>); 4] = [
        (
            "server-itl",
            "Client ITL p99 over the run",
            "ITL p99 (ms)",
            itl,
        ),
        (
            "server-batch",
            "Server batch (solid) and queue (dashed)",
            "requests",
            batch,
        ),
        (
            "server-kv",
            "Server KV-cache usage",
            "KV usage (share)",
            server_lines(levels, "KV usage", |p| p.kv_usage),
        ),
        (
            "server-prefill",
            "Server prompt tokens prefilled per scrape interval",
            "tokens",
            server_lines(levels, "prefilled", |p| p.prefill_tokens),
        ),
    ];
    specs
        .into_iter()
        .filter(|(_, _, _, series)| series.iter().any(|s| !s.points.is_empty()))
        .map(|(id, title, y, series)| {
            let mut c = chart("run time (s)", y, false, false, series);
            c.x_range = ts;
            Figure {
                id,
                title,
                note: "Shared time axis: a rise in ITL p99 lines up with the server state that explains it.".into(),
                chart: c,
                empty: "no points",
            }
        })
        .collect()
}
