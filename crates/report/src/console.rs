//! The human summary printed at the end of a run, in the spirit of hyperfine and oha:
//! a header, one latency table per level with readable units, the counts that say
//! whether the figures can be trusted, and one line naming the formulas.

use cadence_core::attribution::ServerReport;
use cadence_core::metrics::{formula, LevelSummary};
use cadence_core::sessions::SessionSummary;
use cadence_core::{Distribution, LevelReport, Pacing, Report, SloResult};
use std::fmt::Write;

use crate::cell::{cell, fmt_pct, fmt_rate, pct, plural, sig4, Unit};
pub use crate::cell::{fmt_ms, fmt_seconds, ABSENT};
use crate::paint::Painter;
use crate::table::Table;

const LABEL_W: usize = 16;
const COUNT_W: usize = 7;
const VALUE_W: usize = 11;

/// Renders the report for a terminal, complete: every level's tables and facts, then
/// a sweep's summary. `color` adds ANSI styling. [`render_with`] chooses the view.
pub fn render(report: &Report, color: bool) -> String {
    render_with(report, color, View::Detail)
}

/// How much of a run the console says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// A sweep's summary first and alone: one row per level, each warning once with
    /// the levels it concerns; a single level's block as in [`View::Detail`].
    Summary,
    /// Every level's distribution table, facts, warnings and conventions (`--detail`).
    Detail,
}

/// Renders the report for a terminal in `view`; `color` adds ANSI styling.
pub fn render_with(report: &Report, color: bool, view: View) -> String {
    // A server's strings reach the terminal with their controls written out.
    let report = &*crate::escape::for_console(report);
    let p = Painter(color);
    let mut out = String::new();
    header(&mut out, report, p);
    let sweep = report.levels.len() > 1;
    if sweep && view == View::Summary {
        out.push('\n');
        crate::sweep::sweep_table(&mut out, report, p);
        crate::steady::console_sweep(&mut out, report);
        crate::steady::console_knees(&mut out, report);
        if let Some(c) = report.convention.as_deref().filter(|c| *c != "cadence") {
            let _ = writeln!(out, "ITL and TPOT above: {c}'s formulas (--convention {c})");
        }
        crate::sweep::notes(&mut out, &report.levels, p);
    } else {
        for level in &report.levels {
            out.push('\n');
            level_block(&mut out, level, report.convention.as_deref(), p);
            if let Some(line) = crate::steady::line(level) {
                let _ = writeln!(out, "{line}");
            }
            crate::time_split::console(&mut out, report, level);
            conventions(&mut out, report, level, p);
        }
        if sweep {
            out.push('\n');
            crate::sweep::sweep_table(&mut out, report, p);
            crate::steady::console_knees(&mut out, report);
        }
    }
    if let Some(s) = &report.search {
        out.push('\n');
        search_line(&mut out, s, p);
    }
    if let Some(f) = &report.fleet {
        out.push('\n');
        fleet_block(&mut out, f, p);
    }
    out.push_str(&crate::imported::console(report));
    if !report.warnings.is_empty() {
        out.push('\n');
        for w in &report.warnings {
            let _ = writeln!(out, "{} {w}", p.yellow("Warning:"));
        }
    }
    out.push('\n');
    if sweep && view == View::Summary {
        let _ = writeln!(
            out,
            "{}",
            p.dim(
                "Each level's percentiles, facts, server figures and other tools' conventions: \
                 --detail."
            )
        );
    }
    let _ = writeln!(out, "{}", p.dim(&format!("Formulas: {}.", formula::SHORT)));
    out
}

/// `--find-max`: the answer first, then how it was found.
fn search_line(out: &mut String, s: &cadence_core::SearchReport, p: Painter) {
    let unit = if s.axis == "rate" { " req/s" } else { "" };
    let answer = match (s.best, s.first_fail) {
        (Some(b), Some(f)) => format!("{b}{unit} (the next probe up, {f}{unit}, breached an SLO)"),
        (Some(b), None) => {
            format!("at least {b}{unit} (no probe breached an SLO; raise the probe limit)")
        }
        (None, _) => p.red("none: even the lowest probe breached an SLO"),
    };
    let probes: Vec<String> = s
        .probes
        .iter()
        .map(|pr| format!("{}{}", pr.level, if pr.pass { "✓" } else { "✗" }))
        .collect();
    let _ = writeln!(
        out,
        "{} highest {} meeting every SLO: {answer}",
        p.bold("Search"),
        s.axis
    );
    let _ = writeln!(out, "       probes in order: {}", probes.join(" "));
}

/// A merged fleet run: which shards it holds, and each shard's self-checks per level.
fn fleet_block(out: &mut String, f: &cadence_core::FleetReport, p: Painter) {
    let merged = format!("{} of {} shards merged", f.merged.len(), f.shards);
    let state = if f.complete {
        String::new()
    } else {
        let missing: Vec<String> = f.missing.iter().map(|m| m.index.to_string()).collect();
        format!(
            " — {}",
            p.red(&format!(
                "INCOMPLETE: shard(s) {} missing",
                missing.join(", ")
            ))
        )
    };
    let _ = writeln!(out, "{} {merged}{state}", p.bold("Fleet"));
    let mut t = Table::new(2).right("shard", 5).left("level", 18).gap(2);
    for (h, w) in [
        ("sent", 8),
        ("ok", 8),
        ("start skew", 11),
        ("pacing p99", 11),
        ("late", 7),
        ("loop p99", 11),
        ("CPU", 5),
    ] {
        t = t.right(h, w);
    }
    t = t.left("notes", 0).gap(2);
    let ms = |v: Option<f64>| cell(v, Unit::Ms);
    let pct = |v: Option<f64>| v.map_or(ABSENT.to_string(), |v| format!("{:.0}%", v * 100.0));
    let count = |v: Option<u64>| v.map_or(ABSENT.to_string(), |v| v.to_string());
    for c in &f.checks {
        let mut notes = c.flags.join(", ");
        if f.excluded.contains(&c.shard) {
            notes = format!(
                "excluded{}{notes}",
                if notes.is_empty() { "" } else { "; " }
            );
        }
        t.row([
            c.shard.to_string(),
            c.level.clone(),
            count(c.sent),
            count(c.succeeded),
            ms(c.start_skew_ms),
            ms(c.pacing_lag_p99_ms),
            c.late_share
                .map_or(ABSENT.to_string(), |v| crate::cell::pct(v * 100.0, 1)),
            ms(c.loop_lag_p99_ms),
            pct(c.cpu_share),
            notes,
        ]);
    }
    for m in &f.missing {
        t.note_row(&m.index.to_string(), &p.red(&format!("missing: {}", m.why)));
    }
    let notes_col = 9;
    out.push_str(&t.text_painted(|row, col, cell| {
        if row.is_some() && col == notes_col && !cell.trim().is_empty() {
            p.yellow(cell.trim_end()) + &" ".repeat(cell.len() - cell.trim_end().len())
        } else {
            cell
        }
    }));
}

fn header(out: &mut String, r: &Report, p: Painter) {
    let run = &r.run;
    let sim = if run.builtin_sim {
        " (built-in simulator)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{} {}",
        p.bold(&format!("Cadence {}", r.cadence_version)),
        p.bold(&format!("{}{sim}", run.target))
    );
    let load = match r.levels.as_slice() {
        [one] => load_of(one),
        many => format!("{} levels", many.len()),
    };
    let sent: u64 = r.levels.iter().map(|l| l.summary.requests.sent).sum();
    let _ = writeln!(
        out,
        "  api {}, model {}, {}, {load}, {} sent, {}",
        run.api,
        run.model,
        run.mode,
        plural(sent, "request"),
        // 0: unknown (an imported run whose file holds no send times).
        if run.duration_s > 0.0 {
            fmt_seconds(run.duration_s)
        } else {
            format!("duration {ABSENT}")
        }
    );
    if run.interrupted {
        let _ = writeln!(
            out,
            "  {}",
            p.yellow("interrupted: figures cover what was measured before the stop")
        );
    }
}

fn load_of(l: &LevelReport) -> String {
    match (l.concurrency, l.rate) {
        (Some(c), _) => format!("concurrency {c}"),
        (None, Some(r)) => format!("rate {} req/s", fmt_rate(r)),
        (None, None) => l.name.clone(),
    }
}

fn level_block(out: &mut String, l: &LevelReport, convention: Option<&str>, p: Painter) {
    let s = &l.summary;
    let q = &s.requests;
    let _ = writeln!(
        out,
        "{} {} sent, {} succeeded",
        p.bold(&format!("── {} ──", l.name)),
        q.sent,
        q.succeeded
    );
    distribution_table(out, l, convention, p);
    facts(out, s, p);
    if let Some(pc) = &l.pacing {
        pacing(out, pc, p);
    }
    slos(out, &l.slos, p);
    if let Some(g) = &l.goodput {
        let share = g
            .share
            .map_or(String::new(), |s| format!(" ({} of sent)", fmt_pct(s)));
        let _ = writeln!(
            out,
            "{}{} met every SLO{share}, {} req/s",
            label("Goodput"),
            plural(g.good_requests, "request"),
            cell(g.requests_per_s, Unit::Number)
        );
    }
    if let Some(sv) = &l.server {
        server(out, sv);
    }
    if let Some(why) = &l.stopped_early {
        let _ = writeln!(out, "{}{why}", p.yellow(&label("Stopped early")));
    }
    for w in &s.warnings {
        let _ = writeln!(out, "{}{}", p.yellow(&label("Warning")), w);
    }
}

/// Causes the console names, at most (the JSON report has them all).
const TOP_CAUSES: usize = 3;

/// The server's side of the level: where it was read, the TTFT split, the decode pace
/// next to the client's, and the top stall causes one line each.
fn server(out: &mut String, sv: &ServerReport) {
    let sc = &sv.scrape;
    let _ = writeln!(
        out,
        "{}{} at {}: {} samples every {} ({} of {} scrapes failed)",
        label("Server"),
        sc.engine,
        sc.url,
        sc.samples.len(),
        fmt_ms(sc.interval_ms),
        sc.failures,
        sc.attempts
    );
    if sc.samples.len() < 2 {
        return;
    }
    if let Some(t) = sv.ttft_split.as_ref().filter(|t| t.rest_ms.is_some()) {
        let transfer = t
            .server_kv_transfer_ms
            .map(|v| format!(" + KV transfer {}", fmt_ms(v)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}mean {} = server queue {} + server prefill {}{transfer} + rest (network, client) {}",
            label("TTFT split"),
            fmt_ms(t.client_ms),
            cell(t.server_queue_ms, Unit::Ms),
            cell(t.server_prefill_ms, Unit::Ms),
            cell(t.rest_ms, Unit::Ms)
        );
    }
    if let Some(d) = &sv.decode {
        let _ = writeln!(
            out,
            "{}server {}/token decode, ITL {}; client TPOT {}, ITL {}; tokens: server {}, client {}",
            label("Decode"),
            cell(d.server_decode_per_token_ms, Unit::Ms),
            cell(d.server_itl_ms, Unit::Ms),
            cell(d.client_tpot_ms, Unit::Ms),
            cell(d.client_itl_ms, Unit::Ms),
            opt(d.server_generated_tokens, |v| format!("{v:.0}")),
            d.client_output_tokens
        );
    }
    if let Some(sp) = &sv.speculation {
        let _ = writeln!(out, "{}{}", label("Speculation"), speculation_line(sp));
    }
    for (i, w) in sv.workers.iter().enumerate() {
        let head = if i == 0 { "Workers" } else { "" };
        let _ = writeln!(out, "{}{}", label(head), worker_line(w));
    }
    for (i, c) in sv.causes.iter().take(TOP_CAUSES).enumerate() {
        let head = if i == 0 { "Stall causes" } else { "" };
        let _ = writeln!(
            out,
            "{}{} of {} stalls ({}) {}: {}",
            label(head),
            c.gaps,
            sv.stalls_total,
            fmt_pct(c.share),
            c.cause.name(),
            c.cause.meaning()
        );
    }
}

/// One Dynamo worker type over the level (the most each gauge read), in one line;
/// a gauge it does not export is left out.
pub(crate) fn worker_line(w: &cadence_core::server::dynamo::WorkerRow) -> String {
    let ranks = if w.ranks == 1 { "rank" } else { "ranks" };
    let mut parts = vec![format!("{} ({} {ranks})", w.worker_type, w.ranks)];
    let count = |v: Option<f64>, what: &str| v.map(|v| format!("{v:.0} {what}"));
    parts.extend(
        [
            count(w.prefill_tokens_max, "prompt tokens queued"),
            count(w.decode_blocks_max, "KV blocks decoding"),
            count(w.waiting_max, "waiting"),
            count(w.router_pending_max, "in the router's queue"),
            w.last_ttft_ms_max
                .map(|v| format!("last TTFT {}", fmt_ms(v))),
            w.last_itl_ms_max.map(|v| format!("last ITL {}", fmt_ms(v))),
        ]
        .into_iter()
        .flatten(),
    );
    format!("{} (most over the level)", parts.join(", "))
}

/// The server's speculation counters over the level, in one line.
pub(crate) fn speculation_line(sp: &cadence_core::server::speculation::SpecCounters) -> String {
    let count = |v: Option<f64>| opt(v, |v| format!("{v:.0}"));
    let mut line = format!(
        "{} steps drafted {} tokens, {} accepted; acceptance length {}, {} of drafts accepted",
        count(sp.drafts),
        count(sp.draft_tokens),
        count(sp.accepted),
        opt(sp.acceptance_length, |v| format!("{v:.2}")),
        opt(sp.draft_acceptance_rate, fmt_pct),
    );
    if !sp.accepted_by_position.is_empty() {
        let by: Vec<String> = sp
            .accepted_by_position
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        let _ = write!(line, "; accepted by draft position: {}", by.join(", "));
    }
    line
}

/// One row per distribution (count, mean, percentiles, max), with `--convention`'s
/// ITL and TPOT right under Cadence's own.
fn distribution_table(out: &mut String, l: &LevelReport, convention: Option<&str>, p: Painter) {
    let s = &l.summary;
    let time = |d: &Option<Distribution>| d.map(|d| row(&d, fmt_ms));
    let mut rows: Vec<(&str, Option<Vec<String>>)> = vec![
        ("TTFT", time(&s.ttft)),
        ("TTFT (content)", time(&s.ttft_content)),
    ];
    if s.ttft_response.is_some() {
        rows.push(("TTFT (response)", time(&s.ttft_response)));
    }
    rows.extend([
        ("ITL", time(&s.itl)),
        ("ITL/token", time(&s.itl_per_token)),
        ("TPOT", time(&s.tpot)),
        ("E2E", time(&s.e2e)),
        ("Speed (tok/s)", s.output_speed_tok_s.map(|d| row(&d, sig4))),
    ]);
    let headline = convention
        .filter(|c| *c != "cadence")
        .and_then(|c| l.conventions.iter().find(|v| v.convention == c));
    let (itl_label, tpot_label) = headline.map_or((String::new(), String::new()), |v| {
        (
            format!("ITL ({})", v.convention),
            format!("TPOT ({})", v.convention),
        )
    });
    if let Some(v) = headline {
        let at = rows
            .iter()
            .position(|(k, _)| *k == "E2E")
            .unwrap_or(rows.len());
        rows.insert(at, (itl_label.as_str(), time(&v.itl)));
        if v.tpot_formula.is_some() {
            rows.insert(at + 1, (tpot_label.as_str(), time(&v.tpot)));
        }
    }
    if s.tokens_per_chunk.is_some() {
        rows.push(("Tokens/chunk", s.tokens_per_chunk.map(|d| row(&d, sig4))));
    }
    let mut t = Table::new(0)
        .left("", LABEL_W)
        .right("count", COUNT_W)
        .gap(0);
    for h in ["mean", "p50", "p90", "p95", "p99", "p99.9", "max"] {
        t = t.right(h, VALUE_W).gap(0);
    }
    let (rows, repeats) = drop_repeats(rows);
    for (label, cells) in rows {
        let cells = cells.unwrap_or_else(|| vec![ABSENT.to_string(); 8]);
        t.row(std::iter::once(label.to_string()).chain(cells));
    }
    out.push_str(&t.text_painted(|row, col, cell| match (row, col) {
        (Some(_), 0) => p.bold(&cell),
        _ => cell,
    }));
    if !repeats.is_empty() {
        let _ = writeln!(
            out,
            "{}{}",
            label(""),
            p.dim(&format!(
                "left out, the same in every cell: {}",
                repeats.join(", ")
            ))
        );
    }
}

/// A distribution table's row: its label and its cells (none: no figures).
type Row<'a> = (&'a str, Option<Vec<String>>);

/// The rows whose cells are not all the same as an earlier row's, and the ones left
/// out as `"ITL/token = ITL"`. Rows without figures are kept.
fn drop_repeats(rows: Vec<Row<'_>>) -> (Vec<Row<'_>>, Vec<String>) {
    let mut kept: Vec<Row> = Vec::new();
    let mut repeats = Vec::new();
    for (name, cells) in rows {
        let same = cells.as_ref().and_then(|c| {
            kept.iter()
                .find(|(_, k)| k.as_ref() == Some(c))
                .map(|(k, _)| *k)
        });
        match same {
            Some(first) => repeats.push(format!("{name} = {first}")),
            None => kept.push((name, cells)),
        }
    }
    (kept, repeats)
}

fn pacing(out: &mut String, pc: &Pacing, p: Painter) {
    let _ = writeln!(
        out,
        "{}{} late (> 1 ms behind schedule) of {} sent, {} dropped; lag p50 {}, p99 {}, max {}",
        label("Pacing"),
        pc.late,
        pc.sent,
        pc.dropped,
        fmt_ms(pc.lag_p50_ms),
        fmt_ms(pc.lag_p99_ms),
        fmt_ms(pc.lag_max_ms)
    );
    if let Some(f) = &pc.floor {
        let _ = writeln!(
            out,
            "{}machine floor: {} of {} timer deadlines woke over 1 ms late (p99 {}, max {}); \
             {} late sends allowed",
            label(""),
            f.late,
            f.deadlines,
            fmt_ms(f.lag_p99_ms),
            fmt_ms(f.lag_max_ms),
            sig4(pc.allowed_late),
        );
    }
    if let Some(share) = pc.lag_p99_of_ttft_p50 {
        let _ = writeln!(
            out,
            "{}lag p99 is {} of TTFT p50 (open-loop TTFT counts from the schedule)",
            label(""),
            fmt_pct(share)
        );
    }
    let share = pc.late_share().map_or(ABSENT.to_string(), fmt_pct);
    if pc.invalid {
        let max_late = fmt_pct(pc.max_late_share);
        let bound = match pc.floor {
            Some(_) => {
                format!(
                    "more than --max-late {max_late} and the machine's own timer lateness allow"
                )
            }
            None => format!("over --max-late {max_late}"),
        };
        let _ = writeln!(
            out,
            "{}{}",
            label(""),
            p.red(&format!(
                "INVALID: {share} of sends were late, {bound}: the client fell behind its \
                 schedule and the figures are unreliable"
            ))
        );
    } else if pc.late_explained_by_floor() {
        let _ = writeln!(
            out,
            "{}{share} of sends were late, over --max-late {}, within what the machine's \
             own timer lateness explains: valid",
            label(""),
            fmt_pct(pc.max_late_share)
        );
    }
}

fn slos(out: &mut String, slos: &[SloResult], p: Painter) {
    let w = slos
        .iter()
        .map(|r| r.slo.chars().count())
        .max()
        .unwrap_or(0);
    for r in slos {
        let observed = crate::slo_observed(r);
        let verdict = if r.pass {
            p.green("pass")
        } else {
            p.red("FAIL")
        };
        let _ = writeln!(
            out,
            "{}{:<w$}  observed {observed}  {verdict}",
            label("SLO"),
            r.slo
        );
    }
}

/// count, mean, p50, p90, p95, p99, p99.9, max.
fn row(d: &Distribution, f: impl Fn(f64) -> String) -> Vec<String> {
    let mut v = vec![d.count.to_string()];
    v.extend([d.mean, d.p50, d.p90, d.p95, d.p99, d.p999, d.max].map(f));
    v
}

fn label(s: &str) -> String {
    format!("{s:<LABEL_W$}")
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| ABSENT.to_string(), f)
}

/// The level's facts below its distributions: throughput, tokens, requests, stalls.
fn facts(out: &mut String, s: &LevelSummary, p: Painter) {
    let t = &s.throughput;
    let _ = writeln!(
        out,
        "{}{} output tok/s, {} req/s over a {} window",
        label("Throughput"),
        cell(t.output_tokens_per_s, Unit::Number),
        cell(t.requests_per_s, Unit::Number),
        cell(t.window_s.map(|s| s * 1e3), Unit::Ms)
    );

    let o = &s.output_tokens;
    let source = match o.source {
        Some(src) if o.by_source.len() > 1 => {
            let each: Vec<String> = o
                .by_source
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            format!(
                "source: {} (requests by source: {})",
                src.name(),
                each.join(", ")
            )
        }
        Some(src) => format!("source: {}", src.name()),
        None => format!("source: {ABSENT}"),
    };
    let _ = writeln!(
        out,
        "{}{} from succeeded requests ({source}); {} received incl. failed",
        label("Output tokens"),
        o.total,
        o.received_total
    );
    if let Some(pc) = &s.prompt_cache {
        let _ = writeln!(
            out,
            "{}{} of prompt tokens served from the server's cache ({} of {} tokens, {} \
             reporting)",
            label("Prompt cache"),
            cell(pc.share_pct().map(|p| p / 100.0), Unit::Share),
            pc.cached_tokens,
            pc.prompt_tokens,
            plural(pc.requests, "request")
        );
    }
    token_facts(out, s);
    if let Some(ss) = &s.sessions {
        session_facts(out, ss, s.itl.map(|d| d.p50));
    }
    request_facts(out, s, p);
    stream_facts(out, s);
}

/// How far the other token sources are from the count used, and figures by turn.
fn token_facts(out: &mut String, s: &LevelSummary) {
    if !s.token_agreement.is_empty() {
        let each: Vec<String> = s
            .token_agreement
            .iter()
            .map(|a| {
                let pct = a
                    .diff_pct
                    .map_or_else(|| ABSENT.to_string(), |d| crate::cell::signed_pct(d, 1));
                format!(
                    "{} {pct} (max {} on one request, {} of {} differ)",
                    a.source.name(),
                    a.max_abs_diff,
                    a.requests_differing,
                    a.requests
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{}vs the count used: {}",
            label("Token sources"),
            each.join("; ")
        );
    }
    for t in &s.by_turn {
        let _ = writeln!(
            out,
            "{}{}, TTFT p50 {} p99 {}, ITL p50 {} p99 {}",
            label(&format!("Turn {}", t.turn)),
            plural(t.requests, "request"),
            cell(t.ttft.map(|d| d.p50), Unit::Ms),
            cell(t.ttft.map(|d| d.p99), Unit::Ms),
            cell(t.itl.map(|d| d.p50), Unit::Ms),
            cell(t.itl.map(|d| d.p99), Unit::Ms)
        );
    }
}

/// Tokens of the long reply the session lines price (a coding agent's diff).
pub const LONG_REPLY_TOKENS: u32 = 3000;

/// Whole sessions: their wall time, its split, TTFT by context, the slowest one, the
/// what-ifs, and what a long reply costs at the level's ITL.
fn session_facts(out: &mut String, ss: &SessionSummary, itl_p50: Option<f64>) {
    if ss.tool_use.not_agent_loops() {
        // One-step "sessions" are single requests: their split and what-ifs would read
        // as an agent's. The level's warning says why and what to try.
        let t = &ss.tool_use;
        let _ = writeln!(
            out,
            "{}not agent loops: {} of {} made no tool call and ended at their first reply \
             (session figures left out; see the warning)",
            label("Sessions"),
            t.without_tool_calls,
            t.agent_sessions
        );
        return;
    }
    let mocked = if ss.mocked_tool_calls > 0 {
        format!(
            " ({} injected by the client: the model made no call)",
            ss.mocked_tool_calls
        )
    } else {
        String::new()
    };
    let cut = if ss.cut_tool_calls > 0 {
        format!(
            "; {} replies' tool calls passed the 16 MiB the client keeps: those sessions ended there",
            ss.cut_tool_calls
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{}{} of {} complete, steps p50 {}, {} tool calls{mocked}{cut}",
        label("Sessions"),
        ss.complete,
        ss.sessions,
        cell(ss.steps.map(|d| d.p50), Unit::Number),
        ss.tool_calls,
    );
    if let Some(w) = ss.wall {
        let _ = writeln!(
            out,
            "{}p50 {}, p90 {}, p99 {}, max {}",
            label("Session wall"),
            fmt_ms(w.p50),
            fmt_ms(w.p90),
            fmt_ms(w.p99),
            fmt_ms(w.max)
        );
    }
    if let Some(sp) = ss.split {
        let _ = writeln!(
            out,
            "{}TTFT {}, decode (ITL) {}, tool {}, rest {} of the summed wall time",
            label("Wall split"),
            pct(sp.ttft_pct, 1),
            pct(sp.decode_pct, 1),
            pct(sp.tool_pct, 1),
            pct(sp.rest_pct, 1)
        );
    }
    if let Some(d) = ss.decode_share_pct {
        let _ = writeln!(
            out,
            "{}p50 {}, p90 {} of a session's wall time is decode",
            label("ITL share"),
            pct(d.p50, 1),
            pct(d.p90, 1)
        );
    }
    context_line(out, ss);
    slowest_line(out, ss);
    pricing_lines(out, ss, itl_p50);
}

/// TTFT by context length, first steps against later ones.
fn context_line(out: &mut String, ss: &SessionSummary) {
    let rows: Vec<String> = ss
        .by_context
        .iter()
        .map(|r| {
            let edge = r
                .up_to_tokens
                .map_or_else(|| "more".to_string(), |t| format!("<={t}"));
            let one = |d: Option<Distribution>| {
                d.map_or_else(
                    || ABSENT.to_string(),
                    |d| format!("{} (n={})", fmt_ms(d.p50), d.count),
                )
            };
            format!(
                "{edge}: first {}, later {}",
                one(r.first_steps),
                one(r.later_steps)
            )
        })
        .collect();
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "{}TTFT p50 by prompt tokens, first steps vs later ones: {}",
            label("Context"),
            rows.join("; ")
        );
    }
}

/// The slowest session, step by step.
fn slowest_line(out: &mut String, ss: &SessionSummary) {
    if let Some(w) = &ss.slowest {
        let steps: Vec<String> = w
            .steps
            .iter()
            .map(|st| {
                let tool = if st.tool_ms > 0.0 {
                    format!("tool {} → ", fmt_ms(st.tool_ms))
                } else {
                    String::new()
                };
                format!(
                    "{tool}step {} TTFT {} + decode {}",
                    st.step,
                    fmt_ms(st.ttft_ms),
                    fmt_ms(st.decode_ms)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{}session {}, {}: {}",
            label("Slowest"),
            w.session,
            fmt_ms(w.wall_ms),
            steps.join("; ")
        );
    }
}

/// The what-ifs, and what a long reply costs at the level's ITL and at theirs.
fn pricing_lines(out: &mut String, ss: &SessionSummary, itl_p50: Option<f64>) {
    let measured = ss.wall.map(|d| d.p50);
    for wi in &ss.what_if {
        let _ = writeln!(
            out,
            "{}{}: session wall p50 {} → {}; decode share {} → {}",
            label("What if"),
            wi.label,
            cell(measured, Unit::Ms),
            cell(wi.wall.map(|d| d.p50), Unit::Ms),
            opt(ss.split.map(|s| s.decode_pct), |v| pct(v, 1)),
            opt(wi.decode_share_pct, |v| pct(v, 1)),
        );
    }
    if let Some(itl) = itl_p50 {
        let gaps = f64::from(LONG_REPLY_TOKENS - 1);
        let mut line = format!(
            "a {LONG_REPLY_TOKENS}-token reply decodes in {} at this level's ITL p50 ({})",
            fmt_ms(itl * gaps),
            fmt_ms(itl)
        );
        for wi in &ss.what_if {
            if let Some(cadence_core::sessions::Price::Ms(x)) = wi.what_if.itl {
                line.push_str(&format!(", {} at {}", fmt_ms(x * gaps), fmt_ms(x)));
            }
        }
        let _ = writeln!(out, "{}{line}", label("Long reply"));
    }
}

/// The accounting of the level's requests and its warm-up.
fn request_facts(out: &mut String, s: &LevelSummary, p: Painter) {
    let q = &s.requests;
    let mut parts = vec![
        format!("{} intended", q.intended),
        format!("{} sent", q.sent),
        format!("{} succeeded", q.succeeded),
    ];
    for (name, n) in &q.failed {
        parts.push(p.red(&format!("{n} {name}")));
    }
    parts.push(format!("{} aborted", q.aborted));
    parts.push(format!("{} dropped", q.dropped));
    let _ = writeln!(out, "{}{}", label("Requests"), parts.join(", "));
    if let Err(e) = q.check() {
        let _ = writeln!(out, "{}{}", label(""), p.red(&e.to_string()));
    }
    if s.warmup > 0 {
        let _ = writeln!(
            out,
            "{}{}, excluded from every figure",
            label("Warm-up"),
            plural(s.warmup, "request")
        );
    }
}

/// Stalls, and what the stream decoder met that a clean stream does not have.
fn stream_facts(out: &mut String, s: &LevelSummary) {
    let st = &s.stalls;
    let stalls = if s.itl.is_none() && st.first_token == 0 {
        format!("{ABSENT} (no gaps between chunks to judge)")
    } else if st.total() == 0 {
        format!(
            "no wait over {} (for the first token or between chunks)",
            fmt_ms(st.threshold_ms)
        )
    } else {
        format!(
            "{} (waits over {}) in {}: {} for the first token, {} between chunks",
            plural(st.total(), "stall"),
            fmt_ms(st.threshold_ms),
            plural(st.requests, "request"),
            st.first_token,
            st.gaps
        )
    };
    let _ = writeln!(out, "{}{stalls}", label("Stalls"));

    let c = &s.counters;
    if c.any_unclean() {
        let items: Vec<String> = [
            (c.keepalives, "keep-alives"),
            (c.malformed, "malformed events"),
            (c.coalesced, "coalesced events"),
            (c.bytes_after_done, "bytes after [DONE]"),
            (c.no_done_marker, "streams without [DONE]"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let _ = writeln!(
            out,
            "{}{} (over {} reads)",
            label("Stream"),
            items.join(", "),
            c.reads
        );
    }
    if let Some(k) = &s.clock {
        let _ = writeln!(out, "{}{}", label("Clock"), clock_line(k));
    }
}

/// The two clocks' self-check in a line: which stamped, and how late the client read.
pub(crate) fn clock_line(k: &cadence_core::ClockCheck) -> String {
    let total = k.kernel_requests + k.user_requests;
    let mut line = if k.kernel_requests > 0 {
        format!(
            "kernel receive time ({} of {})",
            k.kernel_requests,
            plural(total, "request")
        )
    } else {
        format!("user clock ({})", plural(total, "request"))
    };
    if let Some(d) = &k.read_delay {
        line.push_str(&format!(
            "; client read delay p50 {}, p99 {}, max {}",
            fmt_ms(d.p50),
            fmt_ms(d.p99),
            fmt_ms(d.max)
        ));
    }
    if k.multi_event_reads > 0 {
        line.push_str(&format!("; {} multi-event reads", k.multi_event_reads));
    }
    line
}

/// The compatibility view: the level's ITL and TPOT as each tool's formula gives them.
fn conventions(out: &mut String, r: &Report, l: &LevelReport, p: Painter) {
    if l.conventions.is_empty() {
        return;
    }
    let mut t = Table::new(0).left("Convention", LABEL_W);
    for h in [
        "ITL mean",
        "ITL p50",
        "ITL p99",
        "TPOT mean",
        "TPOT p50",
        "TPOT p99",
    ] {
        t = t.right(h, VALUE_W).gap(0);
    }
    // Conventions whose six figures agree share a row: `cadence = vllm`.
    let mut rows: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for c in &l.conventions {
        let d = |d: &Option<Distribution>, f: fn(&Distribution) -> f64| {
            cell(d.as_ref().map(f), Unit::Ms)
        };
        let mark = if r.convention.as_deref() == Some(c.convention.as_str()) {
            " *"
        } else {
            ""
        };
        let name = format!("{}{mark}", c.convention);
        let figures = vec![
            d(&c.itl, |d| d.mean),
            d(&c.itl, |d| d.p50),
            d(&c.itl, |d| d.p99),
            d(&c.tpot, |d| d.mean),
            d(&c.tpot, |d| d.p50),
            d(&c.tpot, |d| d.p99),
        ];
        match rows.iter_mut().find(|(_, f)| *f == figures) {
            Some((names, _)) => names.push(name),
            None => rows.push((vec![name], figures)),
        }
    }
    for (names, figures) in rows {
        t.row(std::iter::once(format!("  {}", names.join(" = "))).chain(figures));
    }
    out.push_str(&t.text_painted(|row, col, cell| match (row, col) {
        (None, 0) => p.bold(&cell),
        _ => cell,
    }));
    if let Some(c) = &r.convention {
        let _ = writeln!(
            out,
            "{}* headline: the ITL/TPOT rows marked ({c}) above and the summary by level use {c}'s formulas",
            label("")
        );
    }
}
