//! Figures per time bucket of the run (completions, failures, output tokens/s, TTFT and
//! ITL p50/p99), so degradation during a run shows up instead of being averaged away.

use crate::dist::DistAcc;
use crate::metrics::{self, NS_PER_S};
use crate::stats::QUANTILES;
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
    /// TTFT p50 (ms) of the succeeded requests whose first chunk arrived in the bucket;
    /// `None` when none did.
    pub ttft_p50_ms: Option<f64>,
    /// Their TTFT p99, ms; `None` when none did.
    pub ttft_p99_ms: Option<f64>,
    /// ITL p50 (ms) of the gaps of succeeded requests whose later chunk arrived in the
    /// bucket; `None` when none did.
    pub itl_p50_ms: Option<f64>,
    /// Their ITL p99, ms; `None` when none did.
    pub itl_p99_ms: Option<f64>,
}

/// The formula in words, for the report's definitions.
pub const FORMULA: &str = "per bucket of the run clock (non-warm-up requests): completed = \
succeeded requests ending in it, failed = failed requests ending in it, output tokens = \
tokens of the chunks arriving in it (a chunk's count when known, else 1; every request), \
TTFT p50/p99 over succeeded requests whose first chunk arrived in it, ITL p50/p99 over gaps \
of succeeded requests whose later chunk arrived in it; buckets run from 0 to the last event, \
empty ones included, at most 4,096 (buckets twice as wide past that, as often as needed)";

/// At most this many buckets: a run whose last event lies further along the run clock
/// (a long run at fine buckets, or a record with an absurd timestamp) gets buckets of
/// twice the width, as often as needed, and the level says so. Memory stays bounded
/// whatever the timestamps.
pub const MAX_BUCKETS: u64 = 4096;

/// Once its distributions are histograms (the level's budget is spent), the series
/// holds at most about this many bytes of them: a bucket's histogram grows with how
/// spread its gaps are, not with its count, so a long run at a noisy load would
/// otherwise grow by a histogram per bucket for as long as it runs. Past it the width
/// doubles (neighbours merge losslessly, so pooled ITL keeps every gap) and the level
/// says so.
pub const MAX_HISTOGRAM_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Default)]
struct Acc {
    completed: u64,
    failed: u64,
    tokens: u64,
    ttft: DistAcc,
    itl: DistAcc,
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.tokens += o.tokens;
        self.ttft.merge(&o.ttft);
        self.itl.merge(&o.itl);
    }
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
/// empty buckets for the time earlier levels ran. A fold of [`TimeSeriesAcc`]: past
/// [`MAX_BUCKETS`] buckets the width doubles.
///
/// # Panics
/// When `bucket_ns` is 0.
pub fn time_series(records: &[RequestRecord], bucket_ns: u64) -> Vec<TimeBucket> {
    assert!(bucket_ns > 0, "time series bucket must be longer than 0 ns");
    let mut acc = TimeSeriesAcc::new(bucket_ns);
    for r in records {
        acc.push(r);
    }
    acc.finish()
}

/// [`time_series`] one record at a time, in at most [`MAX_BUCKETS`] buckets.
#[derive(Debug, Clone)]
pub struct TimeSeriesAcc {
    /// The width asked for.
    base_ns: u64,
    /// The width in use: `base_ns` doubled as often as the cap needed.
    width_ns: u64,
    buckets: Vec<Acc>,
    /// The latest event (send, chunk or end) of a non-warm-up record.
    last: Option<u64>,
    /// The level's budget was spent: new buckets' distributions start bucketed.
    bucketed: bool,
    /// Bytes of histograms held before the width doubles ([`MAX_HISTOGRAM_BYTES`]).
    max_bytes: usize,
    /// The width doubled to keep the histograms under `max_bytes`.
    widened_for_memory: bool,
}

impl TimeSeriesAcc {
    /// Buckets of `bucket_ns` (0 is taken as 1 ns).
    pub fn new(bucket_ns: u64) -> TimeSeriesAcc {
        let base_ns = bucket_ns.max(1);
        TimeSeriesAcc {
            base_ns,
            width_ns: base_ns,
            buckets: Vec::new(),
            last: None,
            bucketed: false,
            max_bytes: MAX_HISTOGRAM_BYTES,
            widened_for_memory: false,
        }
    }

    /// The same, holding at most about `bytes` of histograms once bucketed.
    pub fn with_max_bytes(mut self, bytes: usize) -> TimeSeriesAcc {
        self.max_bytes = bytes;
        self
    }

    /// Whether the width doubled to keep the histograms within [`MAX_HISTOGRAM_BYTES`]
    /// (rather than, or as well as, for [`MAX_BUCKETS`]).
    pub fn widened_for_memory(&self) -> bool {
        self.widened_for_memory
    }

    /// The width of the buckets [`Self::finish`] returns, when it differs from the one
    /// asked for (the run outgrew [`MAX_BUCKETS`]).
    pub fn widened_ns(&self) -> Option<u64> {
        let w = self.final_width();
        (w != self.base_ns).then_some(w)
    }

    fn final_width(&self) -> u64 {
        let mut w = self.width_ns;
        while self.last.is_some_and(|l| l / w >= MAX_BUCKETS) {
            w = w.saturating_mul(2);
        }
        w
    }

    /// Doubles the bucket width, merging neighbours.
    fn widen(&mut self) {
        self.width_ns = self.width_ns.saturating_mul(2);
        let old = std::mem::take(&mut self.buckets);
        let mut it = old.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(b) = it.next() {
                a.merge(&b);
            }
            self.buckets.push(a);
        }
    }

    fn slot(&mut self, t: u64) -> &mut Acc {
        while t / self.width_ns >= MAX_BUCKETS {
            self.widen();
        }
        let mut i = (t / self.width_ns) as usize;
        if self.buckets.len() <= i {
            // A new bucket: the moment to check the histograms' bytes (between new
            // buckets only the current one grows, by at most one histogram).
            if self.bucketed && self.bucketed_bytes() > self.max_bytes {
                while self.buckets.len() > 1 && self.bucketed_bytes() > self.max_bytes / 2 {
                    self.widen();
                }
                self.widened_for_memory = true;
                i = (t / self.width_ns) as usize;
            }
            if self.buckets.len() <= i {
                self.buckets.resize_with(i + 1, Acc::default);
            }
        }
        &mut self.buckets[i]
    }

    /// Takes one record; returns the values it kept exactly (for the level's budget).
    pub fn push(&mut self, r: &RequestRecord) -> u64 {
        if r.warmup {
            return 0;
        }
        let latest = r
            .sent_ns
            .into_iter()
            .chain(r.end_ns)
            .chain(r.last_chunk_ns())
            .max();
        self.last = self.last.max(latest);
        for c in &r.chunks {
            self.slot(c.t_ns()).tokens += c.tokens().map_or(1, u64::from);
        }
        if !r.was_sent() {
            return 0;
        }
        let succeeded = r.outcome == Outcome::Succeeded;
        if let Some(end) = r.end_ns {
            if succeeded {
                self.slot(end).completed += 1;
            } else if r.outcome.is_failure() {
                self.slot(end).failed += 1;
            }
        }
        if !succeeded {
            return 0;
        }
        let mut kept = 0;
        let bad = &mut 0u64;
        if let (Some(v), Some(first)) = (metrics::ttft_ms(r, bad), r.first_chunk_ns()) {
            let b = self.bucketed;
            kept += self.slot(first).ttft.push_in(v, b);
        }
        for (g, later) in metrics::itl_gaps(r, bad) {
            let b = self.bucketed;
            kept += self.slot(later.t_ns()).itl.push_in(metrics::ms(g), b);
        }
        kept
    }

    /// Adds another part of the same level (same bucket width asked for).
    pub fn merge(&mut self, o: &TimeSeriesAcc) {
        while self.width_ns < o.width_ns {
            self.widen();
        }
        let mut o = o.clone();
        while o.width_ns < self.width_ns {
            o.widen();
        }
        if self.buckets.len() < o.buckets.len() {
            self.buckets.resize_with(o.buckets.len(), Acc::default);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            a.merge(b);
        }
        self.last = self.last.max(o.last);
        self.widened_for_memory |= o.widened_for_memory;
        if o.bucketed {
            self.bucketize();
        }
    }

    /// Every ITL gap of the series' buckets in one distribution: the level's pooled ITL
    /// (the same gaps [`crate::summarize_level`] pools, by bucket).
    pub fn pooled_itl(&self) -> DistAcc {
        let mut all = DistAcc::new();
        self.buckets.iter().for_each(|a| all.merge(&a.itl));
        all
    }

    /// Folds every bucket's distributions into histograms, and starts new ones so.
    pub fn bucketize(&mut self) {
        self.bucketed = true;
        self.dists_mut().for_each(DistAcc::to_bucketed);
    }

    /// Every bucket's distributions, for the level's budget.
    pub fn dists_mut(&mut self) -> impl Iterator<Item = &mut DistAcc> {
        self.buckets
            .iter_mut()
            .flat_map(|a| [&mut a.ttft, &mut a.itl])
    }

    /// Heap bytes held by the buckets and their distributions.
    pub fn approx_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Acc>() + self.bucketed_bytes()
    }

    /// Heap bytes of the buckets' distributions.
    fn bucketed_bytes(&self) -> usize {
        self.buckets
            .iter()
            .map(|a| a.ttft.approx_bytes() + a.itl.approx_bytes())
            .sum()
    }

    /// The buckets from 0 to the one holding the last event.
    pub fn finish(&self) -> Vec<TimeBucket> {
        let Some(last) = self.last else {
            return Vec::new();
        };
        let width = self.final_width();
        let mut me = std::borrow::Cow::Borrowed(self);
        while me.width_ns < width {
            me.to_mut().widen();
        }
        let n = (last / width + 1) as usize;
        let empty = Acc::default();
        let bucket_s = width as f64 / NS_PER_S;
        (0..n)
            .map(|i| {
                let a = me.buckets.get(i).unwrap_or(&empty);
                let (t50, t99) = p50_p99(&a.ttft);
                let (i50, i99) = p50_p99(&a.itl);
                TimeBucket {
                    start_s: (i as u64 * width) as f64 / NS_PER_S,
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
}

/// p50 and p99 of a bucket's samples, as its summary has them (read by selection, with
/// no sort and no mean).
fn p50_p99(samples: &DistAcc) -> (Option<f64>, Option<f64>) {
    match samples.quantiles(&[QUANTILES[0], QUANTILES[3]]) {
        Some(q) => (Some(q[0]), Some(q[1])),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Chunk;

    const MS: u64 = 1_000_000;

    /// Succeeded streams of 1..30 chunks with ties in their gaps, sent 40 ms apart.
    fn records(n: u64) -> Vec<RequestRecord> {
        let mut next = crate::testrng::lcg(7);
        (0..n)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(i * 40 * MS);
                let mut t = i * 40 * MS + 20 * MS + next(50 * MS);
                r.chunks = (0..1 + next(30))
                    .map(|_| {
                        t += 5 * MS * next(4) + next(2) * next(9 * MS);
                        Chunk(t, Some(1))
                    })
                    .collect();
                r.end_ns = Some(t);
                r
            })
            .collect()
    }

    #[test]
    fn bucket_percentiles_are_their_summaries_bit_for_bit() {
        let recs = records(300);
        // 1 ms: more than MAX_BUCKETS buckets, so the series widens before it reports.
        for width in [250 * MS, 1_000 * MS, MS] {
            let mut acc = TimeSeriesAcc::new(width);
            recs.iter().for_each(|r| {
                acc.push(r);
            });
            assert_eq!(acc.widened_ns().is_some(), width == MS);
            for bucketed in [false, true] {
                if bucketed {
                    acc.bucketize();
                }
                let mut me = acc.clone();
                while me.width_ns < me.final_width() {
                    me.widen();
                }
                let got = acc.finish();
                assert_eq!(got.len(), me.buckets.len());
                for (b, a) in got.iter().zip(&me.buckets) {
                    // What the bucket's p50 and p99 were: its summary's, from a sort.
                    let p = |d: &DistAcc| d.summary().map(|d| (d.p50, d.p99));
                    let want = format!("{:?} {:?}", p(&a.ttft), p(&a.itl));
                    let pair = |x: Option<f64>, y: Option<f64>| x.zip(y);
                    let have = format!(
                        "{:?} {:?}",
                        pair(b.ttft_p50_ms, b.ttft_p99_ms),
                        pair(b.itl_p50_ms, b.itl_p99_ms)
                    );
                    assert_eq!(have, want, "width {width}, bucketed {bucketed}");
                }
            }
        }
    }
}
