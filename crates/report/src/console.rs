//! The human summary printed at the end of a run, in the spirit of hyperfine and oha:
//! a header, one latency table per level with readable units, the counts that say
//! whether the figures can be trusted, and one line naming the formulas.

use cadence_core::metrics::{formula, LevelSummary};
use cadence_core::{Distribution, LevelReport, Report};
use std::fmt::Write;

/// Shown wherever a value is absent (no samples): never a 0.
pub const ABSENT: &str = "–";

const LABEL_W: usize = 16;
const COUNT_W: usize = 7;
const VALUE_W: usize = 11;

/// Renders the report for a terminal; `color` adds ANSI styling.
pub fn render(report: &Report, color: bool) -> String {
    let p = Painter(color);
    let mut out = String::new();
    header(&mut out, report, p);
    for level in &report.levels {
        out.push('\n');
        level_block(&mut out, level, p);
    }
    if report.levels.len() > 1 {
        out.push('\n');
        sweep_table(&mut out, &report.levels, p);
    }
    if !report.warnings.is_empty() {
        out.push('\n');
        for w in &report.warnings {
            let _ = writeln!(out, "{} {w}", p.yellow("Warning:"));
        }
    }
    out.push('\n');
    let _ = writeln!(out, "{}", p.dim(&format!("Formulas: {}.", formula::SHORT)));
    out
}

#[derive(Clone, Copy)]
struct Painter(bool);

impl Painter {
    fn paint(self, s: &str, code: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn bold(self, s: &str) -> String {
        self.paint(s, "1")
    }
    fn dim(self, s: &str) -> String {
        self.paint(s, "2")
    }
    fn red(self, s: &str) -> String {
        self.paint(s, "31")
    }
    fn yellow(self, s: &str) -> String {
        self.paint(s, "33")
    }
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
        "  api {}, model {}, {}, {load}, {sent} requests sent, {}",
        run.api,
        run.model,
        run.mode,
        fmt_seconds(run.duration_s)
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
        (None, Some(r)) => format!("rate {} req/s", sig4(r)),
        (None, None) => l.name.clone(),
    }
}

fn level_block(out: &mut String, l: &LevelReport, p: Painter) {
    let s = &l.summary;
    let q = &s.requests;
    let _ = writeln!(
        out,
        "{} {} sent, {} succeeded",
        p.bold(&format!("── {} ──", l.name)),
        q.sent,
        q.succeeded
    );
    let _ = writeln!(
        out,
        "{:<LABEL_W$}{:>COUNT_W$}{:>VALUE_W$}{:>VALUE_W$}{:>VALUE_W$}{:>VALUE_W$}{:>VALUE_W$}{:>VALUE_W$}{:>VALUE_W$}",
        "", "count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"
    );
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
    if s.tokens_per_chunk.is_some() {
        rows.push(("Tokens/chunk", s.tokens_per_chunk.map(|d| row(&d, sig4))));
    }
    for (label, cells) in rows {
        let cells = cells.unwrap_or_else(|| vec![ABSENT.to_string(); 8]);
        let _ = write!(out, "{}", p.bold(&format!("{label:<LABEL_W$}")));
        let _ = write!(out, "{:>COUNT_W$}", cells[0]);
        for c in &cells[1..] {
            let _ = write!(out, "{c:>VALUE_W$}");
        }
        out.push('\n');
    }
    facts(out, s, p);
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

fn facts(out: &mut String, s: &LevelSummary, p: Painter) {
    let t = &s.throughput;
    let _ = writeln!(
        out,
        "{}{} output tok/s, {} req/s over a {} window",
        label("Throughput"),
        opt(t.output_tokens_per_s, sig4),
        opt(t.requests_per_s, sig4),
        opt(t.window_s, fmt_seconds)
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
            "{}{} requests, excluded from every figure",
            label("Warm-up"),
            s.warmup
        );
    }

    let st = &s.stalls;
    let stalls = if st.gaps == 0 {
        format!("no gap over {}", fmt_ms(st.threshold_ms))
    } else {
        format!(
            "{} gaps over {} in {} requests",
            st.gaps,
            fmt_ms(st.threshold_ms),
            st.requests
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
    for w in &s.warnings {
        let _ = writeln!(out, "{}{}", p.yellow(&label("Warning")), w);
    }
}

fn sweep_table(out: &mut String, levels: &[LevelReport], p: Painter) {
    let name_w = levels
        .iter()
        .map(|l| l.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(5)
        + 2;
    let heads = [
        "sent", "ok", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p99", "tok/s",
        "req/s",
    ];
    let _ = writeln!(out, "{}", p.bold("Summary by level"));
    let _ = write!(out, "{:<name_w$}", "level");
    for h in heads {
        let _ = write!(out, "{h:>10}");
    }
    out.push('\n');
    for l in levels {
        let s = &l.summary;
        let t =
            |d: &Option<Distribution>, f: fn(&Distribution) -> f64| opt(d.as_ref().map(f), fmt_ms);
        let cells = [
            s.requests.sent.to_string(),
            s.requests.succeeded.to_string(),
            t(&s.ttft, |d| d.p50),
            t(&s.ttft, |d| d.p99),
            t(&s.itl, |d| d.p50),
            t(&s.itl, |d| d.p99),
            t(&s.tpot, |d| d.p50),
            t(&s.e2e, |d| d.p99),
            opt(s.throughput.output_tokens_per_s, sig4),
            opt(s.throughput.requests_per_s, sig4),
        ];
        let _ = write!(out, "{:<name_w$}", l.name);
        for c in cells {
            let _ = write!(out, "{c:>10}");
        }
        out.push('\n');
    }
}

/// A number with about four significant digits (at most three decimals).
fn sig4(v: f64) -> String {
    let decimals = if v == 0.0 || !v.is_finite() {
        0
    } else {
        (3 - v.abs().log10().floor() as i32).clamp(0, 3) as usize
    };
    format!("{v:.decimals$}")
}

/// A duration given in milliseconds, in µs, ms or s, whichever reads best.
pub fn fmt_ms(ms: f64) -> String {
    if ms == 0.0 {
        return "0 ms".into();
    }
    // Try each unit from the smallest that keeps the figure under 1000 after rounding.
    for (scale, unit, max_dec) in [(1e3, "µs", 1usize), (1.0, "ms", 3), (1e-3, "s", 3)] {
        let v = ms * scale;
        let dec = if v.abs() >= 1.0 {
            (3 - v.abs().log10().floor() as i32).clamp(0, max_dec as i32) as usize
        } else {
            max_dec
        };
        let s = format!("{v:.dec$}");
        let rounded: f64 = s.parse().unwrap_or(v);
        if rounded.abs() < 1000.0 || unit == "s" {
            return format!("{s} {unit}");
        }
    }
    unreachable!("the seconds branch always returns")
}

/// A duration given in seconds.
pub fn fmt_seconds(s: f64) -> String {
    fmt_ms(s * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sig4_keeps_four_digits() {
        assert_eq!(sig4(0.0), "0");
        assert_eq!(sig4(1.3333333), "1.333");
        assert_eq!(sig4(53.21), "53.21");
        assert_eq!(sig4(5321.44), "5321");
        assert_eq!(sig4(0.05), "0.050");
    }
}
