//! Hand-built reports shared by the renderer tests: one with every figure present and
//! two levels, one whose distributions are all absent.

#![allow(dead_code)]

use cadence_core::metrics::{Counters, OutputTokens, RequestCounts, Stalls, Throughput};
use cadence_core::{
    level_report, summarize_level, Chunk, Distribution, LevelOptions, LevelSummary, Outcome,
    Report, RequestRecord, RunInfo, SourceAgreement, TokenSource, TurnSummary,
};
use std::collections::BTreeMap;

pub fn run_info() -> RunInfo {
    RunInfo {
        target: "http://127.0.0.1:8080/v1/chat/completions".into(),
        api: "openai-chat".into(),
        model: "llama-3-8b".into(),
        mode: "closed_loop".into(),
        started_at_unix_ms: 1_700_000_000_000,
        duration_s: 12.5,
        command: vec![
            "cadence".into(),
            "bench".into(),
            "--concurrency".into(),
            "64".into(),
        ],
        builtin_sim: false,
        interrupted: false,
        machine: None,
        seed: None,
    }
}

/// `[mean, p50, p90, p95, p99, p99.9, max]`, min = p50 / 2, stddev 1.
pub fn dist(count: u64, v: [f64; 7]) -> Option<Distribution> {
    Some(Distribution {
        count,
        mean: v[0],
        stddev: Some(1.0),
        min: v[1] / 2.0,
        p50: v[1],
        p90: v[2],
        p95: v[3],
        p99: v[4],
        p999: v[5],
        max: v[6],
        bucketed: None,
    })
}

/// A level with every figure present, failures, stalls, counters and a warning.
pub fn full_level() -> LevelSummary {
    LevelSummary {
        requests: RequestCounts {
            intended: 640,
            sent: 640,
            succeeded: 636,
            dropped: 0,
            aborted: 1,
            failed: BTreeMap::from([("stream_error".into(), 2), ("truncated".into(), 1)]),
        },
        warmup: 8,
        ttft: dist(636, [102.34, 98.7, 150.0, 180.0, 240.0, 700.0, 1234.5]),
        ttft_content: dist(600, [110.0, 105.0, 160.0, 190.0, 250.0, 710.0, 1300.0]),
        ttft_response: None,
        itl: dist(80_000, [23.456, 21.0, 30.0, 35.0, 60.0, 520.0, 812.0]),
        itl_per_token: dist(81_000, [11.5, 0.85, 29.0, 34.0, 58.0, 500.0, 800.0]),
        tpot: dist(636, [22.0, 21.5, 25.0, 27.0, 33.0, 40.0, 41.0]),
        e2e: dist(
            636,
            [3100.0, 3000.0, 3500.0, 3700.0, 4200.0, 5000.0, 5100.0],
        ),
        output_speed_tok_s: dist(636, [45.5, 46.5, 52.0, 55.0, 60.0, 62.0, 63.0]),
        tokens_per_chunk: dist(80_000, [1.25, 1.0, 1.0, 1.0, 2.0, 3.0, 4.0]),
        output_tokens: OutputTokens {
            total: 81_408,
            received_total: 81_500,
            source: Some(TokenSource::Tokenizer),
            by_source: BTreeMap::from([("usage".into(), 600), ("tokenizer".into(), 36)]),
        },
        throughput: Throughput {
            output_tokens_per_s: Some(6512.64),
            requests_per_s: Some(50.88),
            window_s: Some(12.5),
        },
        stalls: Stalls {
            threshold_ms: 500.0,
            gaps: 14,
            first_token: 0,
            requests: 9,
        },
        counters: Counters {
            keepalives: 12,
            malformed: 0,
            coalesced: 40,
            bytes_after_done: 0,
            no_done_marker: 3,
            reads: 79_000,
            short_answers: 0,
        },
        warnings: vec![
            "1 request(s) with outcome succeeded have no send time; counted as dropped".into(),
        ],
        token_agreement: vec![SourceAgreement {
            source: TokenSource::Chunks,
            requests: 636,
            total: 80_000,
            used_total: 81_408,
            diff_pct: Some(-1.7295597484276729),
            max_abs_diff: 9,
            requests_differing: 120,
        }],
        by_turn: vec![TurnSummary {
            turn: 1,
            requests: 318,
            ttft: dist(318, [150.0, 140.0, 200.0, 220.0, 300.0, 700.0, 1234.5]),
            itl: None,
        }],
        clock: None,
        prompt_cache: None,
        sessions: None,
    }
}

/// Two levels (a sweep), one computed from hand-built records.
pub fn full_report() -> Report {
    let ms = 1_000_000;
    let mut a = RequestRecord::new(0, Outcome::Succeeded);
    a.sent_ns = Some(0);
    a.chunks = vec![
        Chunk(100 * ms, Some(1)),
        Chunk(110 * ms, Some(2)),
        Chunk(130 * ms, Some(1)),
    ];
    a.first_content_ns = Some(100 * ms);
    a.scheduled_ns = Some(0);
    a.end_ns = Some(135 * ms);
    let computed = summarize_level(std::slice::from_ref(&a), &LevelOptions::default());
    let mut one = level_report("concurrency=1", computed);
    one.concurrency = Some(1);
    one.conventions = cadence_core::convention_views(std::slice::from_ref(&a));
    one.charts = cadence_core::chart_data(&[a]);
    let mut many = level_report("concurrency=64", full_level());
    many.concurrency = Some(64);
    let mut r = Report::new(
        run_info(),
        vec![one, many],
        vec!["the client's event loop lagged (p99 7.0 ms): figures are unreliable".into()],
    );
    r.convention = Some("vllm".into());
    r.run.machine = Some("linux x86_64, 2 cores".into());
    r
}

/// One level where nothing succeeded: every distribution is absent.
pub fn sparse_report() -> Report {
    let mut failed = RequestRecord::new(0, Outcome::Http5xx);
    failed.sent_ns = Some(0);
    failed.end_ns = Some(5_000_000);
    failed.http_status = Some(503);
    let connect = RequestRecord::new(1, Outcome::ConnectError);
    let summary = summarize_level(&[failed, connect], &LevelOptions::default());
    let mut level = level_report("concurrency=2", summary);
    level.concurrency = Some(2);
    let mut run = run_info();
    run.builtin_sim = true;
    run.interrupted = true;
    Report::new(run, vec![level], vec![])
}

/// A request scheduled at `sched` ms, sent at `sent` ms, with chunks at `chunks` ms
/// (one token each) and ending 5 ms after the last.
fn paced(index: u64, sched: u64, sent: u64, chunks: &[u64], outcome: Outcome) -> RequestRecord {
    let ms = 1_000_000;
    let mut r = RequestRecord::new(index, outcome);
    r.scheduled_ns = Some(sched * ms);
    r.sent_ns = Some(sent * ms);
    r.chunks = chunks.iter().map(|&t| Chunk(t * ms, Some(1))).collect();
    r.first_content_ns = r.first_chunk_ns();
    r.end_ns = Some((chunks.last().copied().unwrap_or(sent) + 5) * ms);
    r
}

/// An open-loop rate sweep whose levels carry every optional field, computed from
/// hand-built records: SLO results, goodput, time series, pacing, and (second level)
/// an early stop and invalid pacing.
///
/// Level `rate=2`: two requests sent on time, TTFT 100 ms, gaps 10, 20, 10, 20 ms:
/// `itl.p99<=50ms` passes (20 ms), `ttft.p90<=150ms` passes (100 ms), both requests
/// good over a 0.635 s window (3.150 good req/s).
/// Level `rate=8`: one request sent 3 ms late with TTFT 100 ms and a 60 ms gap, one
/// 5xx sent on time, one arrival dropped: `itl.p99<=50ms` fails (60 ms), no request is
/// good, pacing is invalid (1 of 2 sends late, lags 3 and 0 ms), and it stopped early.
pub fn open_loop_report() -> Report {
    let slos: Vec<cadence_core::Slo> = ["itl.p99<=50ms", "ttft.p90<=150ms"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let level = |name: &str, rate: f64, records: &[RequestRecord], dropped: u64| {
        let opts = LevelOptions {
            dropped,
            ..LevelOptions::default()
        };
        let summary = summarize_level(records, &opts);
        let window = summary.throughput.window_s;
        let mut l = level_report(name, summary);
        l.rate = Some(rate);
        l.slos = slos.iter().map(|s| s.evaluate(&l.summary)).collect();
        l.goodput = Some(cadence_core::goodput(records, &slos, window));
        l.time_series = cadence_core::time_series(records, 100_000_000);
        l.pacing = cadence_core::pacing(records, dropped, 0.001);
        l
    };
    let slow = [
        paced(0, 0, 0, &[100, 110, 130], Outcome::Succeeded),
        paced(1, 500, 500, &[600, 610, 630], Outcome::Succeeded),
    ];
    let mut failed = paced(3, 125, 125, &[], Outcome::Http5xx);
    failed.http_status = Some(503);
    let fast = [paced(2, 0, 3, &[103, 163], Outcome::Succeeded), failed];
    let mut hot = level("rate=8", 8.0, &fast, 1);
    hot.stopped_early = Some("more than half of the requests failed (1 of 2)".into());
    let mut run = run_info();
    run.mode = "open_loop".into();
    Report::new(run, vec![level("rate=2", 2.0, &slow, 0), hot], vec![])
}
