//! Level metrics checked with exact arithmetic on hand-built records: every expected
//! value below is worked out by hand from the record's timestamps.

mod common;

use cadence_core::{
    summarize_level, AccountingError, Chunk, Distribution, LevelOptions, Outcome, RequestCounts,
    RequestRecord, TokenCount, TokenSource,
};
use common::{close, record, MS};
use std::collections::BTreeMap;

fn usage(r: &mut RequestRecord, count: u64, source: TokenSource) {
    r.output_tokens = Some(TokenCount { count, source });
}

/// The reference request: sent 0, chunks at 100, 110, 130 ms carrying 1, 2, 1 tokens,
/// first visible content at 110 ms, end 135 ms, usage says 4 tokens.
fn reference() -> RequestRecord {
    let mut r = record(
        0,
        Outcome::Succeeded,
        0,
        &[(100, Some(1)), (110, Some(2)), (130, Some(1))],
        135,
    );
    r.first_content_ns = Some(110 * MS);
    usage(&mut r, 4, TokenSource::Usage);
    r
}

#[test]
fn reference_request_every_metric_exact() {
    let opts = LevelOptions {
        window: Some((0, 200 * MS)),
        ..LevelOptions::default()
    };
    let s = summarize_level(&[reference()], &opts);

    let ttft = s.ttft.unwrap();
    assert_eq!(
        (ttft.count, ttft.min, ttft.max, ttft.stddev),
        (1, 100.0, 100.0, None)
    );
    assert_eq!(s.ttft_content.unwrap().p50, 110.0);
    assert_eq!(s.ttft_response, None, "no schedule, no response-time TTFT");

    // ITL: gaps 10 and 20 ms.
    let itl = s.itl.unwrap();
    assert_eq!(
        (itl.count, itl.min, itl.mean, itl.p50, itl.max),
        (2, 10.0, 15.0, 15.0, 20.0)
    );
    close(itl.p90, 19.0);

    // Per-token ITL: 10 ms over 2 tokens → 5, 5; 20 ms over 1 token → 20.
    let pt = s.itl_per_token.unwrap();
    assert_eq!(
        (pt.count, pt.min, pt.mean, pt.p50, pt.max),
        (3, 5.0, 10.0, 5.0, 20.0)
    );
    close(pt.p90, 17.0); // h = 1.8: 5 + 0.8 * 15

    // TPOT = (130 − 100) / (4 − 1) = 10 ms; output speed = 3 / 0.030 s = 100 tok/s.
    assert_eq!(s.tpot.unwrap().p50, 10.0);
    assert_eq!(s.output_speed_tok_s.unwrap().p50, 100.0);
    assert_eq!(s.e2e.unwrap().p50, 135.0);

    let tpc = s.tokens_per_chunk.unwrap();
    assert_eq!((tpc.count, tpc.min, tpc.p50, tpc.max), (3, 1.0, 1.0, 2.0));
    close(tpc.mean, 4.0 / 3.0);

    // Throughput over the given 200 ms window: 4 tokens → 20 tok/s, 1 request → 5 req/s.
    assert_eq!(s.throughput.window_s, Some(0.2));
    assert_eq!(s.throughput.output_tokens_per_s, Some(20.0));
    assert_eq!(s.throughput.requests_per_s, Some(5.0));

    assert_eq!(s.output_tokens.total, 4);
    assert_eq!(s.output_tokens.received_total, 4);
    assert_eq!(s.output_tokens.source, Some(TokenSource::Usage));
    assert_eq!(s.stalls.gaps, 0);
    assert_eq!(s.stalls.threshold_ms, 500.0);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    s.requests.check().unwrap();
}

#[test]
fn window_derived_from_first_send_to_last_end() {
    let late = record(1, Outcome::Truncated, 50, &[(60, None)], 400);
    let s = summarize_level(&[reference(), late], &LevelOptions::default());
    // First send 0 ms, last end 400 ms (a failed request still bounds the window).
    assert_eq!(s.throughput.window_s, Some(0.4));
    assert_eq!(s.throughput.output_tokens_per_s, Some(10.0)); // 4 succeeded tokens
    assert_eq!(s.throughput.requests_per_s, Some(2.5)); // 1 succeeded request
}

#[test]
fn itl_is_pooled_over_gaps_not_averaged_per_request() {
    let a = record(
        0,
        Outcome::Succeeded,
        0,
        &[(100, None), (110, None), (130, None)],
        130,
    );
    let b = record(1, Outcome::Succeeded, 50, &[(200, None), (240, None)], 240);
    let s = summarize_level(&[a, b], &LevelOptions::default());
    let itl = s.itl.unwrap();
    // Gaps 10, 20, 40: mean 70/3, not the mean of per-request means (15 + 40)/2.
    assert_eq!(itl.count, 3);
    close(itl.mean, 70.0 / 3.0);
    assert_eq!((itl.min, itl.p50, itl.max), (10.0, 20.0, 40.0));
    // Unknown chunk token counts: per-token ITL equals ITL, one entry per chunk.
    assert_eq!(s.itl_per_token.unwrap(), itl);
    // TTFT 100 and 150; TPOT (chunk-counted tokens) 30/2 = 15 and 40/1 = 40.
    let ttft = s.ttft.unwrap();
    assert_eq!((ttft.min, ttft.max, ttft.mean), (100.0, 150.0, 125.0));
    let tpot = s.tpot.unwrap();
    assert_eq!((tpot.count, tpot.min, tpot.max), (2, 15.0, 40.0));
    assert_eq!(s.output_tokens.source, Some(TokenSource::Chunks));
}

#[test]
fn f08_failed_request_tokens_received_but_not_in_success_latency() {
    let mut failed = record(
        1,
        Outcome::StreamError,
        0,
        &[(5, Some(3)), (900, Some(3))],
        950,
    );
    usage(&mut failed, 6, TokenSource::Usage);
    let s = summarize_level(&[reference(), failed], &LevelOptions::default());
    assert_eq!(s.ttft.unwrap().count, 1);
    assert_eq!(
        s.ttft.unwrap().p50,
        100.0,
        "the failed request's 5 ms TTFT is excluded"
    );
    assert_eq!(s.itl.unwrap().count, 2);
    assert_eq!(
        s.itl.unwrap().max,
        20.0,
        "the failed request's 895 ms gap is excluded"
    );
    assert_eq!(s.e2e.unwrap().count, 1);
    assert_eq!(
        s.stalls.gaps, 0,
        "stalls are counted over succeeded requests"
    );
    assert_eq!(s.output_tokens.total, 4);
    assert_eq!(s.output_tokens.received_total, 10);
    assert_eq!(
        s.requests.failed,
        BTreeMap::from([("stream_error".to_string(), 1)])
    );
    assert_eq!((s.requests.sent, s.requests.succeeded), (2, 1));
    s.requests.check().unwrap();
}

#[test]
fn warmup_requests_are_counted_apart_and_excluded() {
    let mut w = record(
        9,
        Outcome::Succeeded,
        0,
        &[(5000, None), (9000, None)],
        9000,
    );
    w.warmup = true;
    w.counters.keepalives = 7;
    let mut wf = record(10, Outcome::Http5xx, 0, &[], 10);
    wf.warmup = true;
    let s = summarize_level(&[w, reference(), wf], &LevelOptions::default());
    assert_eq!(s.warmup, 2);
    assert_eq!(
        (s.requests.intended, s.requests.sent, s.requests.succeeded),
        (1, 1, 1)
    );
    assert!(s.requests.failed.is_empty());
    assert_eq!(s.ttft.unwrap().max, 100.0);
    assert_eq!(s.counters.keepalives, 0);
    assert_eq!(
        s.throughput.window_s,
        Some(0.135),
        "window from non-warm-up records"
    );
    assert_eq!(s.output_tokens.received_total, 4);
}

#[test]
fn one_chunk_request_has_no_itl_tpot_or_speed() {
    let mut r = record(0, Outcome::Succeeded, 0, &[(80, Some(5))], 90);
    usage(&mut r, 5, TokenSource::Usage);
    let s = summarize_level(&[r], &LevelOptions::default());
    assert_eq!(s.ttft.unwrap().p50, 80.0);
    assert_eq!(s.e2e.unwrap().p50, 90.0);
    assert_eq!(s.itl, None);
    assert_eq!(s.itl_per_token, None);
    assert_eq!(
        s.tpot, None,
        "5 tokens in one chunk: no inter-token time to divide"
    );
    assert_eq!(s.output_speed_tok_s, None);
    assert_eq!(s.tokens_per_chunk.unwrap().p50, 5.0);
    let json = serde_json::to_value(&s).unwrap();
    assert!(
        json["itl"].is_null() && json["tpot"].is_null() && json["output_speed_tok_s"].is_null()
    );
}

#[test]
fn coalesced_chunks_give_zero_tpot_and_no_infinite_speed() {
    // Two chunks stamped with the same read time (FAULTS 2).
    let r = record(0, Outcome::Succeeded, 0, &[(50, None), (50, None)], 60);
    let s = summarize_level(&[r], &LevelOptions::default());
    assert_eq!(s.itl.unwrap().p50, 0.0);
    assert_eq!(s.tpot.unwrap().p50, 0.0);
    assert_eq!(s.output_speed_tok_s, None);
}

#[test]
fn per_token_itl_unknown_or_zero_counts_as_one_token() {
    let r = record(
        0,
        Outcome::Succeeded,
        0,
        &[(10, Some(1)), (20, None), (50, Some(0)), (90, Some(4))],
        90,
    );
    let s = summarize_level(&[r], &LevelOptions::default());
    // Gaps 10 (unknown → 1 token), 30 (0 → 1 token), 40 over 4 tokens → 10 × 4.
    let pt = s.itl_per_token.unwrap();
    assert_eq!(pt.count, 6);
    assert_eq!((pt.min, pt.p50, pt.max), (10.0, 10.0, 30.0));
    close(pt.mean, 80.0 / 6.0);
    // Tokens per chunk only where known: 1, 0, 4.
    assert_eq!(s.tokens_per_chunk.unwrap().count, 3);
}

#[test]
fn stalls_count_gaps_strictly_over_threshold() {
    let a = record(
        0,
        Outcome::Succeeded,
        0,
        &[(0, None), (600, None), (700, None), (1300, None)],
        1300,
    );
    let b = record(1, Outcome::Succeeded, 0, &[(0, None), (500, None)], 500);
    let c = record(2, Outcome::Succeeded, 0, &[(0, None), (501, None)], 501);
    let s = summarize_level(&[a, b, c], &LevelOptions::default());
    assert_eq!((s.stalls.gaps, s.stalls.requests), (3, 2));
    // A stall is still one large ITL sample, never dropped (FAULTS 31).
    assert_eq!(s.itl.unwrap().max, 600.0);

    let strict = LevelOptions {
        stall_threshold_ns: 100 * MS,
        ..LevelOptions::default()
    };
    let b2 = record(1, Outcome::Succeeded, 0, &[(0, None), (500, None)], 500);
    let s = summarize_level(&[b2], &strict);
    assert_eq!(
        (s.stalls.threshold_ms, s.stalls.gaps, s.stalls.requests),
        (100.0, 1, 1)
    );
}

#[test]
fn a_stall_is_one_wait_over_the_threshold_first_token_or_between_chunks() {
    // a waits 600 ms for its first token; b has a 600 ms gap between chunks; c neither.
    let a = record(0, Outcome::Succeeded, 0, &[(600, None), (700, None)], 700);
    let b = record(1, Outcome::Succeeded, 0, &[(0, None), (600, None)], 600);
    let c = record(2, Outcome::Succeeded, 0, &[(100, None), (200, None)], 200);
    let records = [a, b, c];
    let s = summarize_level(&records, &LevelOptions::default());
    assert_eq!(
        (s.stalls.first_token, s.stalls.gaps, s.stalls.requests),
        (1, 1, 2)
    );
    assert_eq!(s.stalls.total(), 2);
    // The server attribution's stalls are the same waits: its count agrees.
    let mut gaps = cadence_core::attribution::GapsAcc::new(500 * MS);
    for r in &records {
        gaps.push(r);
    }
    assert_eq!(gaps.gaps().len() as u64, s.stalls.total());
}

#[test]
fn token_source_is_the_weakest_used_by_succeeded_requests() {
    let mut a = record(0, Outcome::Succeeded, 0, &[(1, None), (2, None)], 3);
    usage(&mut a, 10, TokenSource::Usage);
    let mut b = record(1, Outcome::Succeeded, 0, &[(1, None), (2, None)], 3);
    usage(&mut b, 12, TokenSource::TokenIds);
    let mut failed = record(2, Outcome::Truncated, 0, &[(1, None)], 3);
    usage(&mut failed, 1, TokenSource::Tokenizer);

    let s = summarize_level(
        &[a.clone(), b.clone(), failed.clone()],
        &LevelOptions::default(),
    );
    assert_eq!(
        s.output_tokens.source,
        Some(TokenSource::TokenIds),
        "failed requests do not weaken it"
    );
    assert_eq!(
        s.output_tokens.by_source,
        BTreeMap::from([("usage".into(), 1), ("token_ids".into(), 1)])
    );
    assert_eq!(
        (s.output_tokens.total, s.output_tokens.received_total),
        (22, 23)
    );

    let mut c = record(
        3,
        Outcome::Succeeded,
        0,
        &[(1, None), (2, None), (3, None)],
        3,
    );
    c.output_tokens = None; // falls back to one token per chunk
    let s = summarize_level(&[a, b, c], &LevelOptions::default());
    assert_eq!(s.output_tokens.source, Some(TokenSource::Chunks));
    assert_eq!(s.output_tokens.by_source["chunks"], 1);
    assert_eq!(s.output_tokens.total, 25);

    let s = summarize_level(&[failed], &LevelOptions::default());
    assert_eq!(
        s.output_tokens.source, None,
        "no succeeded request, no source"
    );
    assert_eq!(s.output_tokens.total, 0);
}

#[test]
fn accounting_sent_dropped_and_outcomes() {
    let mut connect = RequestRecord::new(1, Outcome::ConnectError); // never reached a socket
    connect.end_ns = Some(3 * MS);
    let unsent_abort = RequestRecord::new(2, Outcome::AbortedAtDeadline);
    let sent_abort = record(3, Outcome::AbortedAtDeadline, 10, &[(20, None)], 30);
    let h429 = record(4, Outcome::Http429, 0, &[], 1);
    let h429b = record(5, Outcome::Http429, 0, &[], 1);
    let opts = LevelOptions {
        dropped: 3,
        ..LevelOptions::default()
    };
    let s = summarize_level(
        &[reference(), connect, unsent_abort, sent_abort, h429, h429b],
        &opts,
    );
    let c = &s.requests;
    assert_eq!(c.sent, 5);
    assert_eq!(c.dropped, 4, "3 from the runner + 1 aborted before sending");
    assert_eq!(c.intended, 9);
    assert_eq!((c.succeeded, c.aborted), (1, 1));
    assert_eq!(
        c.failed,
        BTreeMap::from([("connect_error".into(), 1), ("http_429".into(), 2)])
    );
    c.check().unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn dropped_arrivals_and_client_hang_ups_have_their_own_buckets() {
    let mut dropped = RequestRecord::new(1, Outcome::Dropped);
    dropped.scheduled_ns = Some(5 * MS);
    let hung_up = record(2, Outcome::ClientDisconnected, 10, &[(20, None)], 30);
    let deadline = record(3, Outcome::AbortedAtDeadline, 10, &[(20, None)], 30);
    let s = summarize_level(
        &[reference(), dropped, hung_up, deadline],
        &LevelOptions::default(),
    );
    let c = &s.requests;
    assert_eq!((c.intended, c.sent, c.dropped), (4, 3, 1));
    assert_eq!((c.succeeded, c.aborted, c.failed_total()), (1, 2, 0));
    c.check().unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn accounting_check_names_the_failed_equation_and_the_gap() {
    let s = summarize_level(
        &[reference()],
        &LevelOptions {
            intended: Some(10),
            dropped: 2,
            ..LevelOptions::default()
        },
    );
    let err = s.requests.check().unwrap_err();
    assert_eq!(
        err,
        AccountingError::Intended {
            intended: 10,
            sent: 1,
            dropped: 2
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("intended = sent + dropped"), "{msg}");
    assert!(msg.contains("intended 10, sent 1 + dropped 2 = 3"), "{msg}");
    assert!(
        msg.contains("off by 7: 7 intended request(s) unaccounted for"),
        "{msg}"
    );

    let counts = RequestCounts {
        intended: 5,
        sent: 5,
        succeeded: 3,
        dropped: 0,
        aborted: 1,
        failed: BTreeMap::from([("truncated".into(), 2)]),
    };
    let msg = counts.check().unwrap_err().to_string();
    assert!(msg.contains("sent = succeeded + failed + aborted"), "{msg}");
    assert!(
        msg.contains("sent 5, succeeded 3 + failed 2 + aborted 1 = 6"),
        "{msg}"
    );
    assert!(
        msg.contains("off by 1: 1 more request(s) accounted for than sent"),
        "{msg}"
    );
}

#[test]
fn record_without_send_time_but_an_ending_is_dropped_with_a_warning() {
    let mut odd = RequestRecord::new(1, Outcome::Succeeded);
    odd.chunks = vec![Chunk(5 * MS, None)];
    let s = summarize_level(&[reference(), odd], &LevelOptions::default());
    assert_eq!(
        (s.requests.sent, s.requests.dropped, s.requests.succeeded),
        (1, 1, 1)
    );
    s.requests.check().unwrap();
    assert_eq!(
        s.warnings,
        vec!["1 request(s) with outcome succeeded have no send time; counted as dropped"]
    );
}

#[test]
fn out_of_order_timestamps_are_skipped_and_reported() {
    let r = record(0, Outcome::Succeeded, 200, &[(100, None), (90, None)], 300);
    let s = summarize_level(&[r], &LevelOptions::default());
    assert_eq!(s.ttft, None);
    assert_eq!(s.itl, None);
    assert_eq!(s.e2e.unwrap().p50, 100.0);
    assert!(
        s.warnings[0].starts_with("3 interval(s) end before they start"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn zero_length_window_leaves_throughput_absent() {
    let opts = LevelOptions {
        window: Some((5 * MS, 5 * MS)),
        ..LevelOptions::default()
    };
    let s = summarize_level(&[reference()], &opts);
    assert_eq!(s.throughput.window_s, Some(0.0));
    assert_eq!(s.throughput.output_tokens_per_s, None);
    assert_eq!(s.throughput.requests_per_s, None);
    assert!(s.warnings.iter().any(|w| w.contains("zero length")));
    let json = serde_json::to_value(s.throughput).unwrap();
    assert!(json["output_tokens_per_s"].is_null());
}

#[test]
fn empty_level_is_absent_not_zero() {
    let s = summarize_level(&[], &LevelOptions::default());
    assert_eq!(s.requests, RequestCounts::default());
    s.requests.check().unwrap();
    for d in [
        s.ttft,
        s.ttft_content,
        s.itl,
        s.itl_per_token,
        s.tpot,
        s.e2e,
        s.output_speed_tok_s,
    ] {
        assert_eq!(d, None);
    }
    assert_eq!(s.throughput.window_s, None);
    assert_eq!(s.throughput.output_tokens_per_s, None);
}

#[test]
fn ttft_response_measures_from_the_schedule() {
    let mut r = reference();
    r.scheduled_ns = Some(0);
    r.sent_ns = Some(40 * MS); // the client sent it 40 ms late
    let s = summarize_level(&[r], &LevelOptions::default());
    assert_eq!(s.ttft.unwrap().p50, 60.0);
    assert_eq!(s.ttft_response.unwrap().p50, 100.0);
}

#[test]
fn stream_counters_are_summed_over_all_requests() {
    let mut a = reference();
    a.counters.keepalives = 2;
    a.counters.coalesced = 1;
    a.counters.reads = 3;
    let mut b = record(1, Outcome::StreamError, 0, &[], 5);
    b.counters.malformed = 4;
    b.counters.bytes_after_done = 10;
    b.counters.no_done_marker = true;
    b.counters.reads = 1;
    let s = summarize_level(&[a, b], &LevelOptions::default());
    let c = s.counters;
    assert_eq!(
        (
            c.keepalives,
            c.malformed,
            c.coalesced,
            c.bytes_after_done,
            c.no_done_marker,
            c.reads
        ),
        (2, 4, 1, 10, 1, 4)
    );
    assert!(c.any_unclean());
}

#[test]
fn summary_json_uses_ms_keys_and_plain_keys_for_other_units() {
    let s = summarize_level(&[reference()], &LevelOptions::default());
    let v = serde_json::to_value(&s).unwrap();
    let keys: Vec<&str> = v["ttft"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec![
        "count",
        "mean_ms",
        "stddev_ms",
        "min_ms",
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "p999_ms",
        "max_ms",
    ];
    let mut got = keys.clone();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(v["ttft"]["p50_ms"], 100.0);
    assert!(
        v["ttft"]["stddev_ms"].is_null(),
        "stddev of one sample is absent"
    );
    assert_eq!(v["output_speed_tok_s"]["p50"], 100.0);
    assert_eq!(v["output_tokens"]["source"], "usage");
    let back: cadence_core::LevelSummary = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}

#[test]
fn distribution_is_reexported_for_callers() {
    let d: Option<Distribution> = Distribution::from_samples(&mut [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(d.unwrap().p50, 2.5);
}

#[test]
fn token_agreement_compares_every_other_source_with_the_count_used() {
    // a: usage 4 (used), tokenizer 5, 3 chunks. b: usage 10 (used), token ids 10,
    // tokenizer 9, 2 chunks. c: no usage, tokenizer 6 used, 6 chunks.
    let mut a = reference();
    a.token_sources.usage = Some(4);
    a.token_sources.tokenizer = Some(5);
    let mut b = record(1, Outcome::Succeeded, 0, &[(50, None), (60, None)], 70);
    usage(&mut b, 10, TokenSource::Usage);
    b.token_sources.usage = Some(10);
    b.token_sources.token_ids = Some(10);
    b.token_sources.tokenizer = Some(9);
    let chunks: Vec<(u64, Option<u32>)> = (0..6).map(|i| (10 + i, None)).collect();
    let mut c = record(2, Outcome::Succeeded, 0, &chunks, 20);
    usage(&mut c, 6, TokenSource::Tokenizer);
    c.token_sources.tokenizer = Some(6);
    let s = summarize_level(&[a, b, c], &LevelOptions::default());
    let by: BTreeMap<TokenSource, _> = s
        .token_agreement
        .iter()
        .map(|x| (x.source, x.clone()))
        .collect();
    assert_eq!(
        by.keys().copied().collect::<Vec<_>>(),
        vec![
            TokenSource::TokenIds,
            TokenSource::Tokenizer,
            TokenSource::Chunks
        ],
        "usage was the used count wherever it was known, so it is not compared"
    );
    let tok = &by[&TokenSource::Tokenizer];
    // a: 5 vs 4, b: 9 vs 10 (c used the tokenizer itself).
    assert_eq!((tok.requests, tok.total, tok.used_total), (2, 14, 14));
    assert_eq!((tok.max_abs_diff, tok.requests_differing), (1, 2));
    close(tok.diff_pct.unwrap(), 0.0);
    let ch = &by[&TokenSource::Chunks];
    // 3 + 2 + 6 chunks against 4 + 10 + 6 tokens.
    assert_eq!((ch.requests, ch.total, ch.used_total), (3, 11, 20));
    assert_eq!((ch.max_abs_diff, ch.requests_differing), (8, 2));
    close(ch.diff_pct.unwrap(), -45.0);
    let ids = &by[&TokenSource::TokenIds];
    assert_eq!((ids.requests, ids.requests_differing), (1, 0));
}

#[test]
fn by_turn_splits_ttft_and_itl_by_turn_index() {
    let mut t0 = record(0, Outcome::Succeeded, 0, &[(100, None), (110, None)], 120);
    t0.turn = Some(0);
    let mut t1 = record(1, Outcome::Succeeded, 200, &[(500, None), (530, None)], 540);
    t1.turn = Some(1);
    let mut failed = record(2, Outcome::Truncated, 0, &[(900, None)], 950);
    failed.turn = Some(1);
    let no_turn = record(3, Outcome::Succeeded, 0, &[(5, None)], 6);
    let s = summarize_level(&[t0, t1, failed, no_turn], &LevelOptions::default());
    assert_eq!(s.by_turn.len(), 2);
    assert_eq!((s.by_turn[0].turn, s.by_turn[0].requests), (0, 1));
    close(s.by_turn[0].ttft.unwrap().mean, 100.0);
    close(s.by_turn[0].itl.unwrap().mean, 10.0);
    assert_eq!((s.by_turn[1].turn, s.by_turn[1].requests), (1, 1));
    close(s.by_turn[1].ttft.unwrap().mean, 300.0);
    close(s.by_turn[1].itl.unwrap().mean, 30.0);
    let plain = summarize_level(&[reference()], &LevelOptions::default());
    assert!(plain.by_turn.is_empty(), "no sessions, no per-turn summary");
}

/// A request that demanded 8 tokens (ignore_eos) and got 3 is a short
/// answer; one that got all 8, one with no demand and a failure are not.
#[test]
fn short_answers_are_counted_per_level() {
    let with = |expected: Option<u64>, got: u64, outcome: Outcome| {
        let mut r = common::rec(outcome, 0, &[(10, None), (20, None)], 30);
        r.expected_output_tokens = expected;
        r.output_tokens = Some(TokenCount {
            count: got,
            source: TokenSource::Usage,
        });
        r
    };
    let recs = [
        with(Some(8), 3, Outcome::Succeeded),
        with(Some(8), 8, Outcome::Succeeded),
        with(None, 3, Outcome::Succeeded),
        with(Some(8), 3, Outcome::Truncated),
    ];
    let short: Vec<bool> = recs.iter().map(|r| r.is_short_answer()).collect();
    assert_eq!(short, [true, false, false, false]);
    let level = summarize_level(&recs, &LevelOptions::default());
    assert_eq!(level.counters.short_answers, 1);
    let w = level
        .counters
        .short_answer_warning(level.requests.succeeded)
        .unwrap();
    assert!(
        w.starts_with("1 of 3 succeeded requests ended with fewer output tokens"),
        "{w}"
    );
    let none = summarize_level(&recs[1..3], &LevelOptions::default());
    assert_eq!(none.counters.short_answer_warning(2), None);
    assert!(
        !serde_json::to_string(&none.counters)
            .unwrap()
            .contains("short_answers"),
        "absent from ordinary reports"
    );
}

#[test]
fn the_clock_check_counts_clocks_and_pools_read_delays_of_succeeded_requests() {
    use cadence_core::StampClock;
    let mut a = record(
        0,
        Outcome::Succeeded,
        0,
        &[(10, None), (20, None), (30, None)],
        40,
    );
    a.clock = Some(StampClock::Kernel);
    a.read_delays_us = vec![100, 2_000, 300];
    a.counters.multi_event_reads = 1;
    let mut b = record(1, Outcome::Truncated, 0, &[(10, None)], 40);
    b.clock = Some(StampClock::Kernel);
    b.read_delays_us = vec![50_000];
    let mut c = record(2, Outcome::Succeeded, 0, &[(10, None), (20, None)], 40);
    c.clock = Some(StampClock::User);
    c.counters.multi_event_reads = 2;
    let old = record(3, Outcome::Succeeded, 0, &[(10, None), (20, None)], 40);
    let s = summarize_level(&[a, b, c, old.clone()], &LevelOptions::default());
    let k = s.clock.expect("records say their clock");
    assert_eq!((k.kernel_requests, k.user_requests), (2, 1));
    assert_eq!(k.multi_event_reads, 3);
    // The failed request's delay is left out, like its gaps.
    let d = k.read_delay.unwrap();
    assert_eq!(d.count, 3);
    assert_eq!((d.min, d.p50, d.max), (0.1, 0.3, 2.0));
    // Records that say no clock (older files) give no check at all.
    assert!(summarize_level(&[old], &LevelOptions::default())
        .clock
        .is_none());
}

/// The prompt-cache share: cached tokens over the prompt tokens of the succeeded
/// requests that reported both; a material share is warned about once per level.
#[test]
fn the_prompt_cache_share_counts_succeeded_requests_that_reported_it() {
    let with = |index, outcome, prompt: Option<u64>, cached: Option<u64>| {
        let mut r = record(index, outcome, 0, &[(10, None), (20, None)], 30);
        r.input_tokens = prompt;
        r.cached_input_tokens = cached;
        r
    };
    let records = [
        with(0, Outcome::Succeeded, Some(100), Some(90)),
        with(1, Outcome::Succeeded, Some(100), Some(0)),
        // No cache figure, a failed request, or a figure without the prompt: left out.
        with(2, Outcome::Succeeded, Some(100), None),
        with(3, Outcome::Truncated, Some(100), Some(100)),
        with(4, Outcome::Succeeded, None, Some(50)),
        // More cached than the prompt had counts as all of it.
        with(5, Outcome::Succeeded, Some(40), Some(60)),
    ];
    let s = summarize_level(&records, &LevelOptions::default());
    let pc = s.prompt_cache.expect("usage said");
    assert_eq!(
        (pc.requests, pc.prompt_tokens, pc.cached_tokens),
        (3, 240, 130)
    );
    close(pc.share_pct().unwrap(), 130.0 / 240.0 * 100.0);
    let warned: Vec<_> = s
        .warnings
        .iter()
        .filter(|w| w.contains("prompt cache"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", s.warnings);
    assert!(
        warned[0].starts_with("the server took 130 of 240 prompt tokens"),
        "{}",
        warned[0]
    );
    // Below the material share: the figure, no warning; no figure at all: none.
    let cold = [
        with(0, Outcome::Succeeded, Some(100), Some(9)),
        with(1, Outcome::Succeeded, Some(100), Some(0)),
    ];
    let s = summarize_level(&cold, &LevelOptions::default());
    assert_eq!(s.prompt_cache.map(|p| p.cached_tokens), Some(9));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let s = summarize_level(&records[2..3], &LevelOptions::default());
    assert!(s.prompt_cache.is_none());
    // Two halves merged are the whole.
    let (mut a, mut b) = (
        cadence_core::SummaryAcc::new(u64::MAX),
        cadence_core::SummaryAcc::new(u64::MAX),
    );
    records[..3].iter().for_each(|r| {
        a.push(r);
    });
    records[3..].iter().for_each(|r| {
        b.push(r);
    });
    a.merge(&b);
    assert_eq!(
        a.finish(&LevelOptions::default()).prompt_cache,
        summarize_level(&records, &LevelOptions::default()).prompt_cache
    );
}
