//! The HTML report: one self-contained file (inline CSS, inline SVG, no network) with
//! the charts people would rather look at than a table — ITL CDF and histogram, ITL
//! and TTFT by level, the capacity curve, ITL over time and by token position, tokens
//! per chunk — plus the summary tables, the compatibility view and the run metadata.

use crate::cell::{cell, fmt_ms, Unit, ABSENT};
use crate::figure::{chart, level_color, Figure};
use crate::svg::{esc, Series, Style, PALETTE};
use crate::{headline, slo_observed};
use cadence_core::{Distribution, LevelReport, Report};
use std::fmt::Write;

const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555;margin:0 0 8px}
table{border-collapse:collapse;background:#fff;margin:4px 0 8px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f0f0f0}td.l,th.l{text-align:left}
td.w{text-align:left;white-space:normal;min-width:240px;font-size:12px;color:#444}
table.meta td{text-align:left;white-space:normal}table.meta td:first-child{color:#555;width:130px}
code{font-size:12px;word-break:break-all}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:16px}
figure.chart{background:#fff;border:1px solid #ddd;margin:0;padding:8px 10px}
figure.chart figcaption{font-weight:600;margin-bottom:2px}
figure.chart p.note{color:#666;font-size:12px;margin:2px 0 4px}
figure.chart svg{width:100%;height:auto;display:block}
.legend{font-size:12px;color:#333}.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
.legend i.d{background-image:linear-gradient(90deg,#fff 50%,transparent 50%);background-size:6px 3px}
.fail{color:#b00;font-weight:600}.pass{color:#070}
.warn{color:#8a5a00}
dl.defs dt{font-weight:600;margin-top:6px}dl.defs dd{margin-left:16px;color:#444}
footer{color:#777;font-size:12px;margin-top:24px}
"#;

/// Written into the page's `#cadence-check` element once it has loaded: how many
/// charts drew marks, and any script error — what the headless-browser test reads.
const CHECK_SCRIPT: &str = r#"(function(){
var figs=document.querySelectorAll('figure.chart');var missing=[];
for(var i=0;i<figs.length;i++){var n=figs[i].querySelectorAll('svg g.marks > *').length;figs[i].setAttribute('data-marks',String(n));if(n===0){missing.push(figs[i].id);}}
var errs=window.__cadenceErrors||[];var el=document.getElementById('cadence-check');
el.setAttribute('data-charts',String(figs.length));el.setAttribute('data-missing',missing.join(' '));el.setAttribute('data-errors',String(errs.length));
el.textContent='self-check: '+((missing.length===0&&errs.length===0)?'ok':'problem')+', '+figs.length+' charts'+(missing.length?', no marks in '+missing.join(' '):'')+(errs.length?', errors: '+errs.join(' | '):'');
})();"#;

const ERROR_HOOK: &str = r#"window.__cadenceErrors=[];window.addEventListener('error',function(e){window.__cadenceErrors.push(String(e.message||e));});"#;

/// Colours of the p50 / p90 / p99 lines in the by-level charts.
const STAT_COLORS: [&str; 3] = ["#2ca02c", "#ff7f0e", "#d62728"];

/// The x value of a level in by-level charts, and the axis name.
fn load_axis(levels: &[LevelReport]) -> (String, Vec<f64>, bool) {
    if levels.iter().all(|l| l.concurrency.is_some()) {
        let v: Vec<f64> = levels
            .iter()
            .map(|l| f64::from(l.concurrency.unwrap_or(1)))
            .collect();
        let log = spread(&v) >= 8.0;
        ("concurrency".into(), v, log)
    } else if levels.iter().all(|l| l.rate.is_some()) {
        let v: Vec<f64> = levels.iter().map(|l| l.rate.unwrap_or(1.0)).collect();
        let log = spread(&v) >= 8.0;
        ("arrival rate (req/s)".into(), v, log)
    } else {
        (
            "level".into(),
            (1..=levels.len()).map(|i| i as f64).collect(),
            false,
        )
    }
}

fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo > 0.0 {
        hi / lo
    } else {
        1.0
    }
}

/// A named figure of a distribution.
type Stat = (&'static str, fn(&Distribution) -> f64);

fn stat_lines(
    levels: &[LevelReport],
    xs: &[f64],
    d: impl Fn(&LevelReport) -> Option<Distribution>,
) -> Vec<Series> {
    let stats: [Stat; 3] = [("p50", |d| d.p50), ("p90", |d| d.p90), ("p99", |d| d.p99)];
    stats
        .iter()
        .enumerate()
        .map(|(i, (name, f))| {
            let mut s = Series::new(*name, STAT_COLORS[i], Style::LinePoints);
            s.points = levels
                .iter()
                .zip(xs)
                .filter_map(|(l, &x)| d(l).map(|d| (x, f(&d))))
                .collect();
            s
        })
        .collect()
}

fn figures(r: &Report) -> Vec<Figure> {
    let levels = &r.levels;
    let mut figs = Vec::with_capacity(8);
    figs.extend(itl_distribution_figures(levels));
    figs.extend(by_level_figures(r));
    figs.push(capacity_figure(r));
    figs.push(itl_over_time_figure(levels));
    figs.push(itl_by_position_figure(levels));
    figs.push(tokens_per_chunk_figure(levels));
    figs
}

/// ITL CDF and histogram, one line per level.
fn itl_distribution_figures(levels: &[LevelReport]) -> [Figure; 2] {
    let mut cdf = Vec::new();
    let mut hist = Vec::new();
    for (i, l) in levels.iter().enumerate() {
        let Some(c) = &l.charts else { continue };
        let mut s = Series::new(l.name.clone(), level_color(i), Style::Line);
        s.points = c.itl_cdf.iter().map(|p| (p.ms, p.percent)).collect();
        cdf.push(s);
        let total: u64 = c.itl_histogram.iter().map(|b| b.count).sum();
        if total > 0 {
            let mut h = Series::new(l.name.clone(), level_color(i), Style::Steps);
            for b in &c.itl_histogram {
                let share = b.count as f64 * 100.0 / total as f64;
                h.points.push((b.lo_ms, share));
                h.points.push((b.hi_ms, share));
            }
            hist.push(h);
        }
    }
    [
        Figure {
            id: "itl-cdf",
            title: "ITL distribution (CDF)",
            note: "Share of inter-chunk gaps at or below each latency; the right tail is what readers feel as stutter.".into(),
            chart: chart("ITL (ms, log scale)", "% of gaps ≤ x", true, false, cdf),
            empty: "no ITL gaps (no succeeded request had two chunks)",
        },
        Figure {
            id: "itl-histogram",
            title: "ITL histogram",
            note: "Gaps per log-spaced bin, as a share of each level's gaps.".into(),
            chart: chart("ITL (ms, log scale)", "% of gaps", true, false, hist),
            empty: "no ITL gaps",
        },
    ]
}

/// ITL and TTFT p50/p90/p99 against the load axis (concurrency or rate).
fn by_level_figures(r: &Report) -> [Figure; 2] {
    let levels = &r.levels;
    let (load_name, xs, load_log) = load_axis(levels);
    [
        Figure {
            id: "itl-by-level",
            title: "ITL p50 / p90 / p99 by level",
            note: format!("Pooled chunk gaps at each {load_name}."),
            chart: chart(
                &load_name,
                "ITL (ms)",
                load_log,
                false,
                stat_lines(levels, &xs, |l| headline(r, l).0),
            ),
            empty: "no ITL gaps",
        },
        Figure {
            id: "ttft-by-level",
            title: "TTFT p50 / p90 / p99 by level",
            note: format!("Time to first token at each {load_name}."),
            chart: chart(
                &load_name,
                "TTFT (ms)",
                load_log,
                false,
                stat_lines(levels, &xs, |l| l.summary.ttft),
            ),
            empty: "no TTFT samples",
        },
    ]
}

/// Capacity curve: throughput against ITL p99, one point per level in order.
fn capacity_figure(r: &Report) -> Figure {
    let mut cap = Series::new("levels in order", PALETTE[0], Style::LinePoints);
    for l in &r.levels {
        if let (Some(t), Some(d)) = (l.summary.throughput.output_tokens_per_s, headline(r, l).0) {
            cap.points.push((t, d.p99));
            cap.labels.push(l.name.clone());
        }
    }
    Figure {
        id: "capacity",
        title: "Capacity: output tok/s against ITL p99",
        note: "Each point is a level: how much throughput costs in tail latency.".into(),
        chart: chart("output tokens/s", "ITL p99 (ms)", false, false, vec![cap]),
        empty: "no level with both throughput and ITL",
    }
}

/// A level's p99 (solid) and p50 (dashed) lines.
fn p99_p50_series(l: &LevelReport, i: usize) -> (Series, Series) {
    let p99 = Series::new(format!("{} p99", l.name), level_color(i), Style::Line);
    let mut p50 = Series::new(format!("{} p50", l.name), level_color(i), Style::Line);
    p50.dashed = true;
    (p99, p50)
}

/// ITL over time (per time bucket), p99 solid and p50 dashed.
fn itl_over_time_figure(levels: &[LevelReport]) -> Figure {
    let mut over = Vec::new();
    for (i, l) in levels.iter().enumerate() {
        let (mut p99, mut p50) = p99_p50_series(l, i);
        for b in &l.time_series {
            if let Some(v) = b.itl_p99_ms {
                p99.points.push((b.start_s, v));
            }
            if let Some(v) = b.itl_p50_ms {
                p50.points.push((b.start_s, v));
            }
        }
        over.push(p99);
        over.push(p50);
    }
    Figure {
        id: "itl-over-time",
        title: "ITL over the run",
        note: "ITL p99 (solid) and p50 (dashed) per time bucket of the run clock: degradation during a run shows here.".into(),
        chart: chart("run time (s)", "ITL (ms)", false, false, over),
        empty: "no time series (no bucket had an ITL gap)",
    }
}

/// ITL by output-token position.
fn itl_by_position_figure(levels: &[LevelReport]) -> Figure {
    let mut pos = Vec::new();
    for (i, l) in levels.iter().enumerate() {
        let Some(c) = &l.charts else { continue };
        let (mut p99, mut p50) = p99_p50_series(l, i);
        for b in &c.itl_by_position {
            let mid = (b.from + b.to) as f64 / 2.0;
            p99.points.push((mid, b.p99_ms));
            p50.points.push((mid, b.p50_ms));
        }
        pos.push(p99);
        pos.push(p50);
    }
    Figure {
        id: "itl-by-position",
        title: "ITL by output position",
        note: "ITL p99 (solid) and p50 (dashed) by the chunk's place in its stream: growth means the KV cache or context length is costing time.".into(),
        chart: chart("chunk position in the stream", "ITL (ms)", false, false, pos),
        empty: "no ITL gaps",
    }
}

/// Tokens per chunk: share of chunks by their token count, bars per level.
fn tokens_per_chunk_figure(levels: &[LevelReport]) -> Figure {
    let mut bars = Vec::new();
    let mut estimated = false;
    for (i, l) in levels.iter().enumerate() {
        let Some(c) = &l.charts else { continue };
        let total: u64 = c.tokens_per_chunk.iter().map(|b| b.chunks).sum();
        if total == 0 {
            continue;
        }
        if c.tokens_per_chunk_basis == "request_average" {
            estimated = true;
        }
        let mut s = Series::new(l.name.clone(), level_color(i), Style::Bars);
        s.points = c
            .tokens_per_chunk
            .iter()
            .map(|b| (f64::from(b.tokens), b.chunks as f64 * 100.0 / total as f64))
            .collect();
        bars.push(s);
    }
    Figure {
        id: "tokens-per-chunk",
        title: "Tokens per chunk",
        note: if estimated {
            "Share of chunks by tokens carried. The server did not say per chunk, so each chunk counts as its request's output tokens ÷ chunks: more than 1 means bursty delivery.".into()
        } else {
            "Share of chunks by how many tokens each carried: more than 1 means bursty delivery."
                .into()
        },
        chart: chart("tokens in the chunk", "% of chunks", false, false, bars),
        empty: "no succeeded request had a chunk",
    }
}

fn td(v: impl std::fmt::Display) -> String {
    format!("<td>{v}</td>")
}

fn ms_or_dash(v: Option<f64>) -> String {
    cell(v, Unit::Ms)
}

fn num_or_dash(v: Option<f64>) -> String {
    cell(v, Unit::Number)
}

/// `YYYY-MM-DD HH:MM:SS UTC` from Unix milliseconds (proleptic Gregorian calendar).
pub fn utc(ms: u64) -> String {
    format!("{} UTC", cadence_core::wallclock::format_utc(ms as i64))
}

fn meta_table(r: &Report, out: &mut String) {
    let run = &r.run;
    let target = if run.builtin_sim {
        format!("{} (built-in simulator)", run.target)
    } else {
        run.target.clone()
    };
    let rows: Vec<(&str, String)> = vec![
        ("target", esc(&target)),
        ("model", esc(&run.model)),
        ("api", esc(&run.api)),
        ("load", esc(&run.mode)),
        (
            "started",
            if run.started_at_unix_ms == 0 {
                "unknown".into()
            } else {
                utc(run.started_at_unix_ms)
            },
        ),
        (
            "duration",
            if run.duration_s > 0.0 {
                fmt_ms(run.duration_s * 1e3)
            } else {
                ABSENT.into()
            },
        ),
        (
            "command",
            format!("<code>{}</code>", esc(&run.command.join(" "))),
        ),
        ("Cadence", esc(&r.cadence_version)),
        ("machine", esc(run.machine.as_deref().unwrap_or("unknown"))),
    ];
    out.push_str(r#"<table class="meta">"#);
    for (k, v) in rows {
        let _ = write!(out, "<tr><td>{k}</td><td>{v}</td></tr>");
    }
    out.push_str("</table>");
}

fn summary_table(r: &Report, out: &mut String) {
    let conv = r.convention.as_deref().unwrap_or("cadence");
    let _ = write!(
        out,
        r#"<table><tr><th class="l">level</th><th>sent</th><th>ok</th><th>failed</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p90</th><th>ITL p99</th><th>TPOT p50</th><th>E2E p99</th><th>tok/s</th><th>req/s</th><th>goodput</th><th>SLOs</th></tr>"#
    );
    for l in &r.levels {
        let s = &l.summary;
        let (itl, tpot) = headline(r, l);
        let slo = if l.slos.is_empty() {
            ABSENT.to_string()
        } else {
            let failed = l.slos.iter().filter(|x| !x.pass).count();
            if failed == 0 {
                r#"<span class="pass">pass</span>"#.into()
            } else {
                format!(
                    r#"<span class="fail">FAIL {failed}/{}</span>"#,
                    l.slos.len()
                )
            }
        };
        let good = l.goodput.map_or(ABSENT.to_string(), |g| {
            format!(
                "{} ({})",
                cell(g.requests_per_s, Unit::Of("req/s")),
                cell(g.share, Unit::Share)
            )
        });
        let _ = write!(
            out,
            r#"<tr><td class="l">{}</td>{}{}{}{}{}{}{}{}{}{}{}{}{}{}</tr>"#,
            esc(&l.name),
            td(s.requests.sent),
            td(s.requests.succeeded),
            td(s.requests.failed_total()),
            td(ms_or_dash(s.ttft.map(|d| d.p50))),
            td(ms_or_dash(s.ttft.map(|d| d.p99))),
            td(ms_or_dash(itl.map(|d| d.p50))),
            td(ms_or_dash(itl.map(|d| d.p90))),
            td(ms_or_dash(itl.map(|d| d.p99))),
            td(ms_or_dash(tpot.map(|d| d.p50))),
            td(ms_or_dash(s.e2e.map(|d| d.p99))),
            td(num_or_dash(s.throughput.output_tokens_per_s)),
            td(num_or_dash(s.throughput.requests_per_s)),
            td(good),
            td(slo),
        );
    }
    out.push_str("</table>");
    if conv != "cadence" {
        let _ = write!(
            out,
            r#"<p class="sub">ITL and TPOT columns follow the <b>{}</b> convention (see the compatibility table).</p>"#,
            esc(conv)
        );
    }
}

fn conventions_table(r: &Report, out: &mut String) {
    for l in r.levels.iter().filter(|l| !l.conventions.is_empty()) {
        if r.levels.len() > 1 {
            let _ = write!(out, "<h3>{}</h3>", esc(&l.name));
        }
        out.push_str(r#"<table><tr><th class="l">convention</th><th class="l">tools</th><th>ITL mean</th><th>ITL p50</th><th>ITL p99</th><th>TPOT mean</th><th>TPOT p50</th><th>TPOT p99</th><th class="l">ITL formula</th></tr>"#);
        for c in &l.conventions {
            let headline = r.convention.as_deref() == Some(c.convention.as_str());
            let _ = write!(
                out,
                r#"<tr><td class="l">{}{}</td><td class="l">{}</td>{}{}{}{}{}{}<td class="w">{}</td></tr>"#,
                esc(&c.convention),
                if headline { " (headline)" } else { "" },
                esc(&c.tools),
                td(ms_or_dash(c.itl.map(|d| d.mean))),
                td(ms_or_dash(c.itl.map(|d| d.p50))),
                td(ms_or_dash(c.itl.map(|d| d.p99))),
                td(ms_or_dash(c.tpot.map(|d| d.mean))),
                td(ms_or_dash(c.tpot.map(|d| d.p50))),
                td(ms_or_dash(c.tpot.map(|d| d.p99))),
                esc(&c.itl_formula)
            );
        }
        out.push_str("</table>");
    }
}

/// The whole page.
pub fn render(r: &Report) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Cadence report: {}</title><style>{CSS}</style><script>{ERROR_HOOK}</script></head><body><main>"#,
        esc(&r.run.target)
    );
    let _ = write!(
        o,
        r#"<h1>Cadence report</h1><p class="sub">{} · model {} · {} level(s)</p>"#,
        esc(&r.run.target),
        esc(&r.run.model),
        r.levels.len()
    );
    if r.run.interrupted {
        o.push_str(r#"<p class="warn">Interrupted: the figures cover what was measured before the stop.</p>"#);
    }
    o.push_str("<h2>Summary</h2>");
    summary_table(r, &mut o);
    crate::distributions::html(r, &mut o);

    charts_section(r, &mut o);
    crate::html_server::section(r, &mut o);
    crate::time_split::html(r, &mut o);
    crate::steady::html(r, &mut o);
    crate::html_sessions::section(r, &mut o);
    slos_section(r, &mut o);

    if r.levels.iter().any(|l| !l.conventions.is_empty()) {
        o.push_str("<h2>Compatibility: ITL and TPOT as other tools define them</h2>");
        o.push_str(r#"<p class="sub">The same requests, re-expressed with each tool's published formula, so figures from those tools can be compared with this run.</p>"#);
        conventions_table(r, &mut o);
    }

    crate::imported::html(r, &mut o);
    clock_section(r, &mut o);
    warnings_section(r, &mut o);

    o.push_str("<h2>Run</h2>");
    meta_table(r, &mut o);

    o.push_str(r#"<h2>Definitions</h2><details><summary>Every formula behind these numbers</summary><dl class="defs">"#);
    for (k, v) in &r.definitions {
        let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
    }
    o.push_str("</dl></details>");
    let _ = writeln!(
        o,
        r#"<footer>Generated by Cadence {} · <span id="cadence-check" data-status="pending">self-check pending</span></footer></main><script>{CHECK_SCRIPT}</script></body></html>"#,
        esc(&r.cadence_version)
    );
    o
}

/// Every figure, each with its chart or the reason it has none.
fn charts_section(r: &Report, o: &mut String) {
    o.push_str(r#"<h2>Charts</h2><div class="grid">"#);
    for f in figures(r) {
        // A sweep's knee marks the chart of its figure against load.
        let knee = match f.id {
            "itl-by-level" => "ITL p99",
            "ttft-by-level" => "TTFT p90",
            _ => "",
        };
        let overlay = crate::svg::Overlay {
            x_lines: crate::steady::knee_marker(r, knee),
            ..Default::default()
        };
        crate::figure::figure_with(&f, &overlay, o);
    }
    o.push_str("</div>");
}

/// The SLO verdicts of every level, when there are any.
fn slos_section(r: &Report, o: &mut String) {
    if r.levels.iter().all(|l| l.slos.is_empty()) {
        return;
    }
    o.push_str("<h2>SLOs</h2><table><tr><th class=\"l\">level</th><th class=\"l\">SLO</th><th>observed</th><th>verdict</th></tr>");
    for l in &r.levels {
        for s in &l.slos {
            let _ = write!(
                o,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(&l.name),
                esc(&s.slo),
                slo_observed(s),
                if s.pass {
                    r#"<span class="pass">pass</span>"#
                } else {
                    r#"<span class="fail">FAIL</span>"#
                }
            );
        }
    }
    o.push_str("</table>");
}

/// The clock self-check of each level that has one: which clock stamped the chunks,
/// reads that carried several chunks, and how late the client read them.
fn clock_section(r: &Report, o: &mut String) {
    let levels: Vec<_> = r
        .levels
        .iter()
        .filter_map(|l| Some((l, l.summary.clock.as_ref()?)))
        .collect();
    if levels.is_empty() {
        return;
    }
    o.push_str("<h2>Clock</h2>");
    o.push_str(r#"<p class="sub">Which clock stamped the chunks (the kernel's receive time of the socket read, or the client's clock when the read returned), and the client's read delay: how long after the bytes arrived the client read them.</p>"#);
    o.push_str(r#"<table><tr><th class="l">level</th><th class="l">clock</th><th>kernel</th><th>user</th><th>multi-event reads</th><th>read delay p50</th><th>read delay p99</th><th>read delay max</th></tr>"#);
    for (l, k) in levels {
        let clock = if k.kernel_requests > 0 {
            "kernel receive time"
        } else {
            "user clock"
        };
        let d = k.read_delay.as_ref();
        let _ = write!(
            o,
            r#"<tr><td class="l">{}</td><td class="l">{clock}</td>{}{}{}{}{}{}</tr>"#,
            esc(&l.name),
            td(k.kernel_requests),
            td(k.user_requests),
            td(k.multi_event_reads),
            td(ms_or_dash(d.map(|d| d.p50))),
            td(ms_or_dash(d.map(|d| d.p99))),
            td(ms_or_dash(d.map(|d| d.max))),
        );
    }
    o.push_str("</table>");
}

/// Run-wide warnings, then each level's, named by level.
fn warnings_section(r: &Report, o: &mut String) {
    let warnings: Vec<String> = r
        .warnings
        .iter()
        .cloned()
        .chain(r.levels.iter().flat_map(|l| {
            l.summary
                .warnings
                .iter()
                .map(move |w| format!("{}: {w}", l.name))
        }))
        .collect();
    if warnings.is_empty() {
        return;
    }
    o.push_str("<h2>Warnings</h2><ul>");
    for w in warnings {
        let _ = write!(o, r#"<li class="warn">{}</li>"#, esc(&w));
    }
    o.push_str("</ul>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_right_across_leap_years() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
    }
}
