//! Figures per time bucket of the run (completions, failures, output tokens/s, TTFT and
//! ITL p50/p99), so degradation during a run shows up instead of being averaged away.

use crate::metrics::{self, NS_PER_S};
use crate::stats::Distribution;
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

/// What happened in one bucket `[start_s, start_s + bucket)` of the run clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeBucket {
    /// Start of the bucket, seconds since the run's start.
    pub start_s: f64,
    /// Succeeded requests that ended in the bucket.
    pub completed: u64,
    /// Sent requests that ended in the bucket with a failure outcome (aborted ones are
    /// neither completed nor failed).
    pub failed: u64,
    /// Output tokens of content-bearing chunks that arrived in the bucket, from every
    /// request (failed ones too): the chunk's token count when known, else 1.
    pub output_tokens: u64,
    /// `output_tokens` per second of the bucket's length.
    pub output_tokens_per_s: f64,
    /// TTFT of succeeded requests whose first chunk arrived in the bucket.
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// ITL gaps of succeeded requests whose later chunk arrived in the bucket.
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// The formula in words, for the report's definitions.
pub const FORMULA: &str = "per bucket of the run clock (non-warm-up requests): completed = \
succeeded requests ending in it, failed = failed requests ending in it, output tokens = \
tokens of the chunks arriving in it (a chunk's count when known, else 1; every request), \
TTFT p50/p99 over succeeded requests whose first chunk arrived in it, ITL p50/p99 over gaps \
of succeeded requests whose later chunk arrived in it; buckets run from 0 to the last event, \
empty ones included, at most 100,000 (wider buckets past that)";

/// Most buckets a time series has: a longer run (or a record with an absurd time) gets
/// buckets wider than asked, so a hostile `end_ns` cannot size an allocation.
pub const MAX_BUCKETS: u64 = 100_000;

#[derive(Default)]
struct Acc {
    completed: u64,
    failed: u64,
    tokens: u64,
    ttft: Vec<f64>,
    itl: Vec<f64>,
}

/// Buckets `records` (non-warm-up only) by `bucket_ns` of the run clock: bucket `i`
/// covers `[i·bucket_ns, (i+1)·bucket_ns)` of the times in the records (ns since run
/// start). Buckets run from 0 to the one holding the last event (send, chunk or end),
/// empty ones included with zero counts and absent percentiles; no events, no buckets.
///
/// A request's end goes to the bucket it ended in; a TTFT to the bucket of the first
/// chunk; an ITL gap to the bucket of the later chunk. Latencies come from succeeded
/// requests only, as in [`crate::summarize_level`]; percentiles are exact (type 7).
///
/// The run clock starts at 0 for every level, so a sweep's later level starts with
/// empty buckets for the time earlier levels ran.
///
/// # Panics
/// When `bucket_ns` is 0.
pub fn time_series(records: &[RequestRecord], bucket_ns: u64) -> Vec<TimeBucket> {
    assert!(bucket_ns > 0, "time series bucket must be longer than 0 ns");
    let recs: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
    let last = recs
        .iter()
        .flat_map(|r| {
            r.sent_ns
                .into_iter()
                .chain(r.end_ns)
                .chain(r.last_chunk_ns())
        })
        .max();
    let Some(last) = last else {
        return Vec::new();
    };
    // Input decides how many buckets there are: a record's times are bounded by nothing,
    // so past MAX_BUCKETS the buckets widen instead of the allocation growing.
    let bucket_ns = bucket_ns.max(last / MAX_BUCKETS + 1);
    let n = usize::try_from(last / bucket_ns + 1).expect("at most MAX_BUCKETS + 1");
    let mut acc: Vec<Acc> = (0..n).map(|_| Acc::default()).collect();
    let at = |t: u64| (t / bucket_ns) as usize;

    for r in recs {
        for c in &r.chunks {
            acc[at(c.t_ns())].tokens += c.tokens().map_or(1, u64::from);
        }
        if !r.was_sent() {
            continue;
        }
        let succeeded = r.outcome == Outcome::Succeeded;
        if let Some(end) = r.end_ns {
            if succeeded {
                acc[at(end)].completed += 1;
            } else if r.outcome.is_failure() {
                acc[at(end)].failed += 1;
            }
        }
        if !succeeded {
            continue;
        }
        let bad = &mut 0u64;
        if let (Some(v), Some(first)) = (metrics::ttft_ms(r, bad), r.first_chunk_ns()) {
            acc[at(first)].ttft.push(v);
        }
        for (g, later) in metrics::itl_gaps(r, bad) {
            acc[at(later.t_ns())].itl.push(metrics::ms(g));
        }
    }

    let bucket_s = bucket_ns as f64 / NS_PER_S;
    acc.into_iter()
        .enumerate()
        .map(|(i, mut a)| {
            let (t50, t99) = p50_p99(&mut a.ttft);
            let (i50, i99) = p50_p99(&mut a.itl);
            TimeBucket {
                start_s: (i as u64 * bucket_ns) as f64 / NS_PER_S,
                completed: a.completed,
                failed: a.failed,
                output_tokens: a.tokens,
                output_tokens_per_s: a.tokens as f64 / bucket_s,
                ttft_p50_ms: t50,
                ttft_p99_ms: t99,
                itl_p50_ms: i50,
                itl_p99_ms: i99,
            }
        })
        .collect()
}

fn p50_p99(samples: &mut [f64]) -> (Option<f64>, Option<f64>) {
    match Distribution::from_samples(samples) {
        Some(d) => (Some(d.p50), Some(d.p99)),
        None => (None, None),
    }
}
