//! CSV for spreadsheets and scripts: one row per level (the summary figures) and one
//! row per request (its own TTFT, ITL, TPOT, E2E and outcome), RFC 4180 quoting.

use cadence_core::per_request::{self, ms};
use cadence_core::{ClockCheck, Distribution, Report, RequestRecord};
use std::fmt::Write;

/// Quotes a field when it holds a comma, quote or line break.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v}"))
}

/// A named figure of a distribution.
type Stat = (&'static str, fn(&Distribution) -> f64);

const STATS: [Stat; 5] = [
    ("mean", |d| d.mean),
    ("p50", |d| d.p50),
    ("p90", |d| d.p90),
    ("p99", |d| d.p99),
    ("max", |d| d.max),
];

/// The clock self-check's columns, present only when some level has one (so the
/// table of a run without it keeps its columns).
const CLOCK_COLUMNS: [&str; 6] = [
    "clock_kernel_requests",
    "clock_user_requests",
    "multi_event_reads",
    "read_delay_p50_ms",
    "read_delay_p99_ms",
    "read_delay_max_ms",
];

/// A level's clock cells: empty when it has no clock check.
fn clock_cells(k: Option<&ClockCheck>) -> [String; 6] {
    let d = k.and_then(|k| k.read_delay.as_ref());
    [
        k.map_or(String::new(), |k| k.kernel_requests.to_string()),
        k.map_or(String::new(), |k| k.user_requests.to_string()),
        k.map_or(String::new(), |k| k.multi_event_reads.to_string()),
        num(d.map(|d| d.p50)),
        num(d.map(|d| d.p99)),
        num(d.map(|d| d.max)),
    ]
}

/// The session columns, present only when some level has sessions.
const SESSION_COLUMNS: [&str; 9] = [
    "sessions",
    "sessions_complete",
    "session_wall_p50_ms",
    "session_wall_p90_ms",
    "session_wall_p99_ms",
    "session_ttft_pct",
    "session_decode_pct",
    "session_tool_pct",
    "session_rest_pct",
];

/// A level's session cells: empty when it has none.
fn session_cells(s: Option<&cadence_core::sessions::SessionSummary>) -> [String; 9] {
    let w = s.and_then(|s| s.wall);
    let sp = s.and_then(|s| s.split);
    [
        s.map_or(String::new(), |s| s.sessions.to_string()),
        s.map_or(String::new(), |s| s.complete.to_string()),
        num(w.map(|d| d.p50)),
        num(w.map(|d| d.p90)),
        num(w.map(|d| d.p99)),
        num(sp.map(|x| x.ttft_pct)),
        num(sp.map(|x| x.decode_pct)),
        num(sp.map(|x| x.tool_pct)),
        num(sp.map(|x| x.rest_pct)),
    ]
}

/// One row per level. Absent figures are empty cells, never 0.
pub fn levels(r: &Report) -> String {
    let mut head = vec![
        "level",
        "concurrency",
        "rate",
        "intended",
        "sent",
        "succeeded",
        "failed",
        "aborted",
        "dropped",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    let metrics = ["ttft", "itl", "tpot", "e2e"];
    for m in metrics {
        for (s, _) in STATS {
            head.push(format!("{m}_{s}_ms"));
        }
    }
    head.extend(
        [
            "output_speed_p50_tok_s",
            "output_tokens_per_s",
            "requests_per_s",
            "goodput_requests_per_s",
            "goodput_share",
            "slos_failed",
        ]
        .map(String::from),
    );
    let clock = r.levels.iter().any(|l| l.summary.clock.is_some());
    if clock {
        head.extend(CLOCK_COLUMNS.map(String::from));
    }
    let sessions = r.levels.iter().any(|l| l.summary.sessions.is_some());
    if sessions {
        head.extend(SESSION_COLUMNS.map(String::from));
    }
    let mut out = head.join(",");
    out.push('\n');
    for l in &r.levels {
        let s = &l.summary;
        let q = &s.requests;
        let mut row = vec![
            field(&l.name),
            l.concurrency.map_or(String::new(), |c| c.to_string()),
            num(l.rate),
            q.intended.to_string(),
            q.sent.to_string(),
            q.succeeded.to_string(),
            q.failed_total().to_string(),
            q.aborted.to_string(),
            q.dropped.to_string(),
        ];
        for d in [s.ttft, s.itl, s.tpot, s.e2e] {
            for (_, f) in STATS {
                row.push(num(d.as_ref().map(f)));
            }
        }
        row.push(num(s.output_speed_tok_s.map(|d| d.p50)));
        row.push(num(s.throughput.output_tokens_per_s));
        row.push(num(s.throughput.requests_per_s));
        row.push(num(l.goodput.and_then(|g| g.requests_per_s)));
        row.push(num(l.goodput.and_then(|g| g.share)));
        row.push(if l.slos.is_empty() {
            String::new()
        } else {
            l.slos.iter().filter(|x| !x.pass).count().to_string()
        });
        if clock {
            row.extend(clock_cells(l.summary.clock.as_ref()));
        }
        if sessions {
            row.extend(session_cells(l.summary.sessions.as_ref()));
        }
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// One row per request; `names` maps a record's level index to its level's name.
/// Times are ms on the run clock (`*_at_ms`) or intervals (`*_ms`); empty when absent.
pub fn requests(records: &[RequestRecord], names: &[(u32, String)]) -> String {
    let mut out = String::from(
        "index,level,worker,warmup,outcome,http_status,scheduled_at_ms,sent_at_ms,ttft_ms,e2e_ms,chunks,output_tokens,token_source,tpot_ms,itl_mean_ms,itl_max_ms,finish_reason,error",
    );
    // Sessions' columns only when some record belongs to one.
    let sessions = records.iter().any(|r| r.session.is_some());
    out.push_str(if sessions {
        ",session,step,tool_calls,tool_wait_ms,tool_call_mocked\n"
    } else {
        "\n"
    });
    for r in records {
        let name = names
            .iter()
            .find(|(i, _)| *i == r.level)
            .map_or_else(|| r.level.to_string(), |(_, n)| n.clone());
        // Core's per-request formulas; intervals that run backwards are left empty.
        let mut bad = 0;
        let ttft = per_request::ttft_ms(r, &mut bad);
        let e2e = per_request::e2e_ms(r, &mut bad);
        let tokens = r.output_token_count();
        let gaps: Vec<f64> = per_request::itl_gaps(r, &mut bad)
            .map(|(g, _)| ms(g))
            .collect();
        let tpot = per_request::tpot_and_speed(r, &mut bad).map(|(t, _)| t);
        let itl_mean = (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64);
        let itl_max = gaps.iter().copied().reduce(f64::max);
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.index,
            field(&name),
            r.worker,
            r.warmup,
            r.outcome.name(),
            r.http_status.map_or(String::new(), |s| s.to_string()),
            num(r.scheduled_ns.map(ms)),
            num(r.sent_ns.map(ms)),
            num(ttft),
            num(e2e),
            r.chunks.len(),
            tokens.count,
            tokens.source.name(),
            num(tpot),
            num(itl_mean),
            num(itl_max),
            field(r.finish_reason.as_deref().unwrap_or("")),
            field(r.error.as_deref().unwrap_or("")),
        );
        if sessions {
            let _ = write!(
                out,
                ",{},{},{},{},{}",
                r.session.map_or(String::new(), |s| s.to_string()),
                r.turn.map_or(String::new(), |s| s.to_string()),
                r.tool_calls.map_or(String::new(), |s| s.to_string()),
                num(r.tool_wait_ns.map(ms)),
                r.tool_call_mocked,
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome, TokenCount, TokenSource};

    #[test]
    fn fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn a_request_row_holds_its_own_figures() {
        let mut r = RequestRecord::new(7, Outcome::Succeeded);
        r.level = 1;
        r.sent_ns = Some(1_000_000);
        r.chunks = vec![
            Chunk(11_000_000, None),
            Chunk(21_000_000, None),
            Chunk(41_000_000, None),
        ];
        r.end_ns = Some(42_000_000);
        r.output_tokens = Some(TokenCount {
            count: 3,
            source: TokenSource::Usage,
        });
        r.error = Some("x, y".into());
        let csv = requests(&[r], &[(1, "concurrency=2".into())]);
        let row = csv.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "7,concurrency=2,0,false,succeeded,,,1,10,41,3,3,usage,15,15,20,,\"x, y\""
        );
        assert_eq!(
            csv.lines().next().unwrap().split(',').count(),
            row.split(',').count() - 1
        );
    }
}
