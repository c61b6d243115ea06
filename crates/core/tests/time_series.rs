//! Time series and pacing on hand-built records: which bucket each event lands in,
//! exact per-bucket percentiles, and the scheduled → sent lag accounting.

mod common;

use cadence_core::{pacing, time_series, Outcome, RequestRecord, TimeBucket};
use common::{close, rec, MS};

const S: u64 = 1_000_000_000;

fn empty_bucket(start_s: f64) -> TimeBucket {
    TimeBucket {
        start_s,
        completed: 0,
        failed: 0,
        output_tokens: 0,
        output_tokens_per_s: 0.0,
        ttft_p50_ms: None,
        ttft_p99_ms: None,
        itl_p50_ms: None,
        itl_p99_ms: None,
    }
}

/// A: ok, sent 0, chunks 100 (1 tok), 150 (2), 1200 (?) ms, end 1250.
///    TTFT 100 → bucket 0; gap 50 → bucket 0; gap 1050 → bucket 1; ends in 1.
/// B: stream_error, sent 500, chunk 700 (4 tok), end 800: tokens and a failure in 0,
///    no latency.
/// C: ok, sent 1000, chunks 1300, 1340, 1400 (1 tok each), end 1410: TTFT 300,
///    gaps 40 and 60, all in bucket 1.
/// D: warm-up, running to 3.5 s: ignored (else there would be a fourth bucket).
/// E: ok, sent 2900, one chunk at 3100 (0 tokens), end 3200: TTFT 200 in bucket 3,
///    bucket 2 stays empty.
/// F: aborted at the deadline, sent 2000, end 2500: neither completed nor failed.
fn run() -> Vec<RequestRecord> {
    let a = rec(
        Outcome::Succeeded,
        0,
        &[(100, Some(1)), (150, Some(2)), (1200, None)],
        1250,
    );
    let b = rec(Outcome::StreamError, 500, &[(700, Some(4))], 800);
    let c = rec(
        Outcome::Succeeded,
        1000,
        &[(1300, Some(1)), (1340, Some(1)), (1400, Some(1))],
        1410,
    );
    let mut d = rec(Outcome::Succeeded, 0, &[(50, None), (60, None)], 4500);
    d.warmup = true;
    let e = rec(Outcome::Succeeded, 2900, &[(3100, Some(0))], 3200);
    let f = rec(Outcome::AbortedAtDeadline, 2000, &[], 2500);
    vec![a, b, c, d, e, f]
}

#[test]
fn events_land_in_their_buckets() {
    let ts = time_series(&run(), S);
    assert_eq!(ts.len(), 4, "0 s to the last event at 3.2 s: {ts:#?}");

    let b0 = &ts[0];
    assert_eq!((b0.start_s, b0.completed, b0.failed), (0.0, 0, 1));
    assert_eq!(b0.output_tokens, 1 + 2 + 4);
    assert_eq!(b0.output_tokens_per_s, 7.0);
    assert_eq!((b0.ttft_p50_ms, b0.ttft_p99_ms), (Some(100.0), Some(100.0)));
    assert_eq!((b0.itl_p50_ms, b0.itl_p99_ms), (Some(50.0), Some(50.0)));

    let b1 = &ts[1];
    assert_eq!((b1.start_s, b1.completed, b1.failed), (1.0, 2, 0));
    assert_eq!(b1.output_tokens, 1 + 3, "A's last chunk has no count: 1");
    assert_eq!((b1.ttft_p50_ms, b1.ttft_p99_ms), (Some(300.0), Some(300.0)));
    // Gaps [40, 60, 1050]: p50 60; p99 h = 1.98 → 60 + 0.98·990 = 1030.2.
    assert_eq!(b1.itl_p50_ms, Some(60.0));
    close(b1.itl_p99_ms.unwrap(), 1030.2);

    assert_eq!(ts[2], empty_bucket(2.0), "F was aborted: not a failure");

    let b3 = &ts[3];
    assert_eq!((b3.start_s, b3.completed, b3.failed), (3.0, 1, 0));
    assert_eq!(b3.output_tokens, 0, "a chunk known to carry 0 tokens");
    assert_eq!(b3.ttft_p50_ms, Some(200.0));
    assert_eq!(b3.itl_p50_ms, None, "one chunk, no gap");
}

#[test]
fn bucket_width_moves_the_boundaries() {
    // 500 ms buckets: A's TTFT (first chunk at 100) and C's (1300) now in 0 and 2;
    // B fails at 800 → bucket 1; tokens/s is per 0.5 s.
    let ts = time_series(&run(), 500 * MS);
    assert_eq!(ts.len(), 7, "up to 3.2 s: buckets 0..=6");
    assert_eq!(ts[0].output_tokens, 3);
    assert_eq!(ts[0].output_tokens_per_s, 6.0);
    assert_eq!(ts[1].failed, 1);
    assert_eq!(ts[1].output_tokens, 4);
    assert_eq!(ts[2].ttft_p50_ms, Some(300.0));
    assert_eq!(ts[2].completed, 2, "A ends at 1250, C at 1410");
    assert_eq!(ts[2].itl_p50_ms, Some(60.0), "gaps 1050, 40, 60");
    assert_eq!(ts[6].start_s, 3.0);
    assert_eq!(ts[6].completed, 1);
}

#[test]
fn percentiles_are_exact_within_a_bucket() {
    // 101 requests in one bucket with TTFT 0..=100 ms: p50 50, p99 99.
    let recs: Vec<RequestRecord> = (0..=100)
        .map(|i| rec(Outcome::Succeeded, 0, &[(i, None)], 200))
        .collect();
    let ts = time_series(&recs, S);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].ttft_p50_ms, Some(50.0));
    assert_eq!(ts[0].ttft_p99_ms, Some(99.0));
    assert_eq!(ts[0].completed, 101);
}

#[test]
fn failed_requests_give_tokens_but_no_latency() {
    let r = rec(Outcome::Truncated, 0, &[(10, None), (20, None)], 30);
    let ts = time_series(&[r], S);
    assert_eq!((ts[0].failed, ts[0].output_tokens), (1, 2));
    assert_eq!((ts[0].ttft_p50_ms, ts[0].itl_p99_ms), (None, None));
}

#[test]
fn no_events_no_buckets() {
    assert!(time_series(&[], S).is_empty());
    let mut warm = rec(Outcome::Succeeded, 0, &[(10, None)], 20);
    warm.warmup = true;
    assert!(time_series(&[warm], S).is_empty());
}

#[test]
fn time_bucket_json_shape() {
    let ts = time_series(&run(), S);
    let v = serde_json::to_value(&ts[2]).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "start_s": 2.0, "completed": 0, "failed": 0, "output_tokens": 0,
            "output_tokens_per_s": 0.0, "ttft_p50_ms": null, "ttft_p99_ms": null,
            "itl_p50_ms": null, "itl_p99_ms": null
        })
    );
}

/// Scheduled at `sched` µs and sent at `sent` µs (if any).
fn scheduled(sched: u64, sent: Option<u64>, outcome: Outcome) -> RequestRecord {
    let mut r = RequestRecord::new(0, outcome);
    r.scheduled_ns = Some(sched * 1000);
    r.sent_ns = sent.map(|s| s * 1000);
    r
}

#[test]
fn pacing_counts_late_and_dropped_sends() {
    let ok = Outcome::Succeeded;
    let mut warm_late = scheduled(0, Some(50_000), ok);
    warm_late.warmup = true;
    let records = [
        scheduled(1000, Some(1000), ok),                   // lag 0
        scheduled(2000, Some(2500), ok),                   // 0.5 ms
        scheduled(3000, Some(5000), ok),                   // 2 ms: late
        scheduled(4000, Some(5000), ok),                   // exactly 1 ms: not late
        scheduled(6000, Some(5900), ok),                   // early: lag 0
        scheduled(7000, None, Outcome::AbortedAtDeadline), // never sent: dropped
        scheduled(8000, None, Outcome::ConnectError),      // an attempt, no lag sample
        warm_late,
        rec(ok, 0, &[], 1), // no schedule: not paced
    ];
    let p = pacing(&records, 2, 0.1).expect("scheduled records");
    assert_eq!((p.sent, p.late, p.dropped), (5, 1, 3));
    // Lags [0, 0, 0.5, 1, 2] ms: p50 0.5; p99 h = 3.96 → 1 + 0.96·1 = 1.96.
    assert_eq!(p.lag_p50_ms, 0.5);
    close(p.lag_p99_ms, 1.96);
    assert_eq!(p.lag_max_ms, 2.0);
    assert_eq!(p.late_share(), Some(0.2));
    assert!(p.invalid, "0.2 late > 0.1 allowed");
    assert_eq!(p.max_late_share, 0.1);
    assert!(
        !pacing(&records, 2, 0.2).unwrap().invalid,
        "0.2 is not over 0.2"
    );
}

#[test]
fn pacing_is_absent_without_a_schedule() {
    let r = rec(Outcome::Succeeded, 0, &[(10, None)], 20);
    assert_eq!(pacing(&[r], 0, 0.001), None);
    let mut warm = scheduled(0, Some(0), Outcome::Succeeded);
    warm.warmup = true;
    assert_eq!(pacing(&[warm], 0, 0.001), None);
    // Scheduled but nothing sent: zero lags, all dropped, not invalid.
    let p = pacing(&[scheduled(0, None, Outcome::AbortedAtDeadline)], 4, 0.001).unwrap();
    assert_eq!((p.sent, p.late, p.dropped, p.lag_max_ms), (0, 0, 5, 0.0));
    assert!(!p.invalid);
    assert_eq!(
        serde_json::to_value(p).unwrap(),
        serde_json::json!({
            "sent": 0, "late": 0, "dropped": 5, "lag_p50_ms": 0.0, "lag_p99_ms": 0.0,
            "lag_max_ms": 0.0, "max_late_share": 0.001, "allowed_late": 0.0, "invalid": false
        })
    );
}

/// A record ending at 10¹⁸ ns (31 years) must not size a 72 GB
/// allocation: past `MAX_BUCKETS` the buckets widen, and every event is still counted.
#[test]
fn a_hostile_end_time_widens_the_buckets_instead_of_allocating() {
    use cadence_core::timeseries::MAX_BUCKETS;
    let mut far = rec(Outcome::Succeeded, 0, &[(10, Some(1)), (20, Some(1))], 30);
    far.end_ns = Some(1_000_000_000_000_000_000);
    let series = time_series(&[far], S);
    assert!(series.len() as u64 <= MAX_BUCKETS + 1, "{}", series.len());
    assert_eq!(series.iter().map(|b| b.completed).sum::<u64>(), 1);
    assert_eq!(series.iter().map(|b| b.output_tokens).sum::<u64>(), 2);
    // Ordinary runs keep the bucket they asked for.
    let ok = rec(
        Outcome::Succeeded,
        0,
        &[(10, Some(1)), (1500, Some(1))],
        2500,
    );
    assert_eq!(time_series(&[ok], S).len(), 3);
}
