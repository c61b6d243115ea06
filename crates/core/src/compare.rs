//! Two runs side by side: per level and metric, the change from A to B and whether it
//! is beyond noise, judged by a seeded moving-block bootstrap over time windows of each
//! run (deterministic), plus `--fail-on` rules such as `itl.p99:+10%` for CI. Noise
//! of a client machine is correlated in time (a stall hits every stream in flight at
//! once), so requests are resampled with their neighbours in time, not one by one.

use crate::metrics::{self, LevelSummary};
use crate::slo::{SloMetric, SloStat};
use crate::stats::quantile_sorted;
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

/// Bootstrap resamples per metric.
pub const BOOTSTRAP_ITERATIONS: usize = 1000;
/// Requests of one level the bootstrap draws from: a level with more is represented by
/// a seeded uniform sample of this many (its interval is then a little wider, never
/// narrower), so comparing runs of any length holds a bounded number of records.
pub const BOOTSTRAP_MAX_REQUESTS: usize = 20_000;
/// Two-sided confidence of the interval of the change.
pub const CONFIDENCE: f64 = 0.95;

/// Changes smaller than this are called unchanged even when the bootstrap says they
/// are real: two runs of one configuration on one machine differ by about this much
/// (timer overshoot, CPU frequency, neighbours), which no resampling of one run sees.
pub const DEFAULT_MIN_CHANGE: f64 = 0.05;

/// The method in words, for the output.
pub const METHOD: &str = "change = B / A - 1. Better or worse when the 95 % bootstrap interval \
of the change excludes 0 and the change is at least the floor (--min-change, default 5 %): \
1000 resamples of each run, seeded and deterministic, the statistic recomputed on each. A \
resample is a moving-block bootstrap over time: each run's requests are grouped by start \
time into windows as wide as their median duration (at least 1/100 of the run), and runs of \
two adjacent windows are drawn with replacement, so the requests one stall of the client \
machine hit (and all of a stream's ITL gaps) stay together. It assumes effects further apart \
than two windows are independent; a run of few windows gets a wide interval, one of a single \
window none";

/// Adjacent time windows drawn together in a resample.
pub const BLOCK_WINDOWS: usize = 2;

/// A run spans at most this many windows: windows are at least 1/100 of the run.
pub const MAX_WINDOWS: u64 = 100;

/// The metrics compared.
pub const METRICS: [SloMetric; 5] = [
    SloMetric::Ttft,
    SloMetric::Itl,
    SloMetric::Tpot,
    SloMetric::E2e,
    SloMetric::OutputSpeed,
];
/// The statistics compared of each metric.
pub const STATS: [SloStat; 4] = [SloStat::Mean, SloStat::P50, SloStat::P90, SloStat::P99];

/// The bootstrap's generator: the same answer for the same inputs on every machine.
pub use crate::rng::SplitMix64;

/// Per-request samples of `metric` over the succeeded, non-warm-up `records`: one value
/// per request (TTFT, TPOT, E2E, output speed), or all of a request's gaps for ITL.
/// Requests without a value are left out.
pub fn request_groups(records: &[RequestRecord], metric: SloMetric) -> Vec<Vec<f64>> {
    records
        .iter()
        .filter_map(|r| request_values(r, metric))
        .collect()
}

/// [`request_groups`] gathered into time windows, the bootstrap's unit: requests by
/// start time (`sent_ns`, else `scheduled_ns`) into windows as wide as the median
/// request's duration (start to end), and at least 1/[`MAX_WINDOWS`] of the span of
/// starts. Windows with no request stay, empty, so adjacency is time's.
pub fn time_windows(records: &[RequestRecord], metric: SloMetric) -> Vec<Vec<f64>> {
    let mut timed: Vec<(u64, u64, Vec<f64>)> = records
        .iter()
        .filter_map(|r| {
            let start = r.sent_ns.or(r.scheduled_ns)?;
            let end = r.end_ns.unwrap_or(start).max(start);
            Some((start, end - start, request_values(r, metric)?))
        })
        .collect();
    if timed.is_empty() {
        return Vec::new();
    }
    let first = timed.iter().map(|t| t.0).min().unwrap_or(0);
    let span = timed.iter().map(|t| t.0).max().unwrap_or(0) - first;
    let mut durations: Vec<u64> = timed.iter().map(|t| t.1).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    let width = median.max(span / MAX_WINDOWS).max(1);
    let mut windows = vec![Vec::new(); (span / width + 1) as usize];
    timed.sort_by_key(|t| t.0);
    for (start, _, values) in timed {
        windows[((start - first) / width) as usize].extend(values);
    }
    windows
}

/// The values of `metric` one succeeded, non-warm-up request gives; `None` when none.
fn request_values(r: &RequestRecord, metric: SloMetric) -> Option<Vec<f64>> {
    let bad = &mut 0u64;
    Some(r)
        .filter(|r| r.outcome == Outcome::Succeeded && !r.warmup)
        .and_then(|r| {
            let v: Vec<f64> = match metric {
                SloMetric::Ttft => metrics::ttft_ms(r, bad).into_iter().collect(),
                SloMetric::TtftContent => metrics::ttft_content_ms(r, bad).into_iter().collect(),
                SloMetric::TtftResponse => metrics::ttft_response_ms(r, bad).into_iter().collect(),
                SloMetric::E2e => metrics::e2e_ms(r, bad).into_iter().collect(),
                SloMetric::Tpot => metrics::tpot_and_speed(r, bad)
                    .map(|(t, _)| t)
                    .into_iter()
                    .collect(),
                SloMetric::OutputSpeed => metrics::tpot_and_speed(r, bad)
                    .and_then(|(_, s)| s)
                    .into_iter()
                    .collect(),
                SloMetric::Itl => metrics::itl_gaps(r, bad)
                    .map(|(g, _)| metrics::ms(g))
                    .collect(),
                SloMetric::ItlPerToken => metrics::itl_gaps(r, bad)
                    .map(|(g, later)| metrics::ms(g) / metrics::per_token_weight(later) as f64)
                    .collect(),
                // A level's share, or a whole session's: not a per-request sample.
                SloMetric::ErrorRate(_) | SloMetric::Session => Vec::new(),
            };
            (!v.is_empty()).then_some(v)
        })
}

/// `stat` of ascending `sorted` values (non-empty), as the report computes it.
pub fn stat_of_sorted(sorted: &[f64], stat: SloStat) -> f64 {
    let q = |p| quantile_sorted(sorted, p).expect("non-empty");
    match stat {
        SloStat::Mean => sorted.iter().sum::<f64>() / sorted.len() as f64,
        SloStat::Min => sorted[0],
        SloStat::Max => sorted[sorted.len() - 1],
        SloStat::P50 => q(0.50),
        SloStat::P90 => q(0.90),
        SloStat::P95 => q(0.95),
        SloStat::P99 => q(0.99),
        SloStat::P999 => q(0.999),
    }
}

/// One run's samples, pooled and sorted once, each remembering its request, so a
/// bootstrap replicate is a multiplicity per request and its statistics a weighted
/// pass over the sorted values (no copy, no sort per replicate).
struct Pooled {
    values: Vec<f64>,
    owner: Vec<u32>,
    group_sums: Vec<f64>,
    group_lens: Vec<u64>,
}

impl Pooled {
    fn new(groups: &[Vec<f64>]) -> Pooled {
        let mut pairs: Vec<(f64, u32)> = groups
            .iter()
            .enumerate()
            .flat_map(|(g, v)| v.iter().map(move |&x| (x, g as u32)))
            .collect();
        pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        Pooled {
            values: pairs.iter().map(|p| p.0).collect(),
            owner: pairs.iter().map(|p| p.1).collect(),
            group_sums: groups.iter().map(|v| v.iter().sum()).collect(),
            group_lens: groups.iter().map(|v| v.len() as u64).collect(),
        }
    }

    /// Draws runs of `block` adjacent groups (uniform starts, with replacement) until
    /// `groups.len()` groups are drawn, into `mult`; `block` 1 draws groups one by one.
    fn draw(&self, rng: &mut SplitMix64, mult: &mut [u32], block: usize) {
        mult.fill(0);
        let n = mult.len();
        let block = block.clamp(1, n.max(1));
        let starts = n - block + 1;
        for _ in 0..n.div_ceil(block) {
            let s = rng.below(starts);
            mult[s..s + block].iter_mut().for_each(|m| *m += 1);
        }
    }

    /// `stats` of the replicate holding request `g` `mult[g]` times, exactly as
    /// [`stat_of_sorted`] over the pooled, sorted replicate would give them.
    fn stats(&self, mult: &[u32], cum: &mut Vec<u64>, stats: &[SloStat], out: &mut Vec<f64>) {
        cum.clear();
        let mut acc = 0u64;
        for &g in &self.owner {
            acc += u64::from(mult[g as usize]);
            cum.push(acc);
        }
        let n = acc;
        out.clear();
        if n == 0 {
            out.extend(stats.iter().map(|_| f64::NAN));
            return;
        }
        // The value at 0-based rank k of the replicate.
        let at = |k: u64| self.values[cum.partition_point(|&c| c <= k)];
        for &s in stats {
            let v = match s {
                SloStat::Mean => {
                    let sum: f64 = mult
                        .iter()
                        .zip(&self.group_sums)
                        .map(|(&m, &t)| f64::from(m) * t)
                        .sum();
                    let len: u64 = mult
                        .iter()
                        .zip(&self.group_lens)
                        .map(|(&m, &l)| u64::from(m) * l)
                        .sum();
                    sum / len as f64
                }
                SloStat::Min => at(0),
                SloStat::Max => at(n - 1),
                SloStat::P50 => crate::stats::type7(n, 0.50, at),
                SloStat::P90 => crate::stats::type7(n, 0.90, at),
                SloStat::P95 => crate::stats::type7(n, 0.95, at),
                SloStat::P99 => crate::stats::type7(n, 0.99, at),
                SloStat::P999 => crate::stats::type7(n, 0.999, at),
            };
            out.push(v);
        }
    }
}

/// The [`CONFIDENCE`] bootstrap interval `(lo, hi)` of the relative change
/// `stat(B) / stat(A) - 1` for each of `stats`, resampling `groups` of each run in runs
/// of `block` adjacent ones (1: one by one). `None` for a statistic when a run has fewer
/// than 2 groups or A's value is 0.
pub fn bootstrap_change(
    a: &[Vec<f64>],
    b: &[Vec<f64>],
    stats: &[SloStat],
    iterations: usize,
    seed: u64,
    block: usize,
) -> Vec<Option<(f64, f64)>> {
    if a.len() < 2 || b.len() < 2 || iterations == 0 {
        return vec![None; stats.len()];
    }
    let mut rng = SplitMix64::new(seed);
    let mut changes: Vec<Vec<f64>> = vec![Vec::with_capacity(iterations); stats.len()];
    let (pa, pb) = (Pooled::new(a), Pooled::new(b));
    let (mut ma, mut mb) = (vec![0u32; a.len()], vec![0u32; b.len()]);
    let (mut cum, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iterations {
        pa.draw(&mut rng, &mut ma, block);
        pb.draw(&mut rng, &mut mb, block);
        pa.stats(&ma, &mut cum, stats, &mut sa);
        pb.stats(&mb, &mut cum, stats, &mut sb);
        for (i, (&va, &vb)) in sa.iter().zip(&sb).enumerate() {
            if va != 0.0 && va.is_finite() && vb.is_finite() {
                changes[i].push(vb / va - 1.0);
            }
        }
    }
    let tail = (1.0 - CONFIDENCE) / 2.0;
    changes
        .into_iter()
        .map(|mut c| {
            if c.len() < iterations / 2 {
                return None;
            }
            c.sort_unstable_by(f64::total_cmp);
            Some((quantile_sorted(&c, tail)?, quantile_sorted(&c, 1.0 - tail)?))
        })
        .collect()
}

/// How a metric moved from A to B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Beyond noise, in the good direction (lower latency, higher speed).
    Better,
    /// Beyond noise, in the bad direction.
    Worse,
    /// Within noise.
    Unchanged,
    /// No samples to judge noise by (JSON reports) or a figure is missing.
    Unknown,
}

/// One metric of one level, A against B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricChange {
    /// `metric.stat`, e.g. `itl.p99`.
    pub metric: String,
    /// The figures' unit: `ms`, `tok/s` or `%`.
    pub unit: String,
    /// Run A's figure; `None` when its level has no such distribution.
    pub a: Option<f64>,
    /// Run B's figure; `None` when its level has no such distribution.
    pub b: Option<f64>,
    /// `b / a - 1`.
    pub change: Option<f64>,
    /// The bootstrap interval of `change`, when both runs' records were given.
    pub interval: Option<(f64, f64)>,
    /// Better, worse or unchanged beyond noise; unknown without both runs' records.
    pub verdict: Verdict,
}

impl MetricChange {
    /// Whether the interval excludes 0 (`None` without an interval).
    pub fn beyond_noise(&self) -> Option<bool> {
        self.interval.map(|(lo, hi)| lo > 0.0 || hi < 0.0)
    }
}

/// Compares two levels metric by metric. With both runs' records, each change gets a
/// bootstrap interval (seeded by `seed` and the metric) and a verdict: better or worse
/// when the interval excludes 0 and |change| ≥ `min_change`, else unchanged; without
/// records the verdict is `unknown`.
pub fn compare_level(
    a: &LevelSummary,
    b: &LevelSummary,
    records: Option<(&[RequestRecord], &[RequestRecord])>,
    seed: u64,
    min_change: f64,
) -> Vec<MetricChange> {
    let mut out = Vec::new();
    for (mi, &m) in METRICS.iter().enumerate() {
        let da = m.distribution(a);
        let db = m.distribution(b);
        let intervals = match records {
            Some((ra, rb)) => bootstrap_change(
                &time_windows(ra, m),
                &time_windows(rb, m),
                &STATS,
                BOOTSTRAP_ITERATIONS,
                seed ^ (mi as u64 + 1).wrapping_mul(0x9E37_79B9),
                BLOCK_WINDOWS,
            ),
            None => vec![None; STATS.len()],
        };
        for (si, &s) in STATS.iter().enumerate() {
            let va = da.as_ref().map(|d| s.of(d));
            let vb = db.as_ref().map(|d| s.of(d));
            let change = match (va, vb) {
                (Some(x), Some(y)) if x != 0.0 => Some(y / x - 1.0),
                _ => None,
            };
            let interval = intervals[si];
            let higher_is_better = !m.is_time();
            let verdict = match (change, interval) {
                (Some(c), Some((lo, hi))) if (lo > 0.0 || hi < 0.0) && c.abs() >= min_change => {
                    if (lo > 0.0) == higher_is_better {
                        Verdict::Better
                    } else {
                        Verdict::Worse
                    }
                }
                (Some(_), Some(_)) => Verdict::Unchanged,
                _ => Verdict::Unknown,
            };
            out.push(MetricChange {
                metric: format!("{}.{}", m.name(), s.name()),
                unit: m.unit().to_string(),
                a: va,
                b: vb,
                change,
                interval,
                verdict,
            });
        }
    }
    out
}

/// A `--fail-on` rule: `itl.p99:+10%` fails when B's itl.p99 is more than 10 % above
/// A's; `output_speed.p50:-5%` when more than 5 % below.
#[derive(Debug, Clone, PartialEq)]
pub struct FailOn {
    /// The metric watched.
    pub metric: SloMetric,
    /// Which statistic of it.
    pub stat: SloStat,
    /// Signed fraction: +0.10 is "an increase of more than 10 %".
    pub threshold: f64,
    /// The rule normalized (`itl.p99:+10%`), for messages.
    pub text: String,
}

impl std::str::FromStr for FailOn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let help = "write METRIC.STAT:+N% or METRIC.STAT:-N%, e.g. itl.p99:+10%";
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let (name, pct) = t.split_once(':').ok_or_else(|| format!("'{s}': {help}"))?;
        let (m, st) = name
            .split_once('.')
            .ok_or_else(|| format!("'{s}': {help}"))?;
        let metric: SloMetric = m.parse().map_err(|_| {
            format!("'{s}': unknown metric '{m}' (ttft, itl, tpot, e2e, output_speed, …)")
        })?;
        let stat: SloStat = st
            .parse()
            .map_err(|_| format!("'{s}': unknown statistic '{st}' (mean, p50, p90, p99, …)"))?;
        let sign = match pct.chars().next() {
            Some('+') => 1.0,
            Some('-') => -1.0,
            _ => {
                return Err(format!(
                    "'{s}': the change needs a sign (+ for an increase, - for a decrease); {help}"
                ))
            }
        };
        let v: f64 = pct[1..]
            .strip_suffix('%')
            .ok_or_else(|| format!("'{s}': the change is a percentage; {help}"))?
            .parse()
            .map_err(|_| format!("'{s}': {help}"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("'{s}': {help}"));
        }
        Ok(FailOn {
            metric,
            stat,
            threshold: sign * v / 100.0,
            text: format!("{}.{}:{pct}", metric.name(), stat.name()),
        })
    }
}

impl FailOn {
    /// `metric.stat`, as [`MetricChange::metric`] names it.
    pub fn key(&self) -> String {
        format!("{}.{}", self.metric.name(), self.stat.name())
    }

    /// Whether the rule fails on `row`: the change passes the threshold in the rule's
    /// direction and, when the row has a bootstrap interval, that interval excludes 0.
    pub fn fails(&self, row: &MetricChange) -> bool {
        let Some(c) = row.change else { return false };
        let past = if self.threshold >= 0.0 {
            c > self.threshold
        } else {
            c < self.threshold
        };
        past && row.beyond_noise().unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{summarize_level, Chunk, LevelOptions};

    #[test]
    fn stats_match_the_report_rules() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(stat_of_sorted(&v, SloStat::Mean), 2.5);
        assert_eq!(stat_of_sorted(&v, SloStat::P50), 2.5);
        assert!((stat_of_sorted(&v, SloStat::P90) - 3.7).abs() < 1e-12);
        assert_eq!(stat_of_sorted(&v, SloStat::Max), 4.0);
    }

    #[test]
    fn weighted_replicates_equal_pooling_and_sorting_the_drawn_requests() {
        let groups: Vec<Vec<f64>> = (0..9)
            .map(|g| {
                (0..(g % 4 + 1))
                    .map(|k| ((g * 7 + k * 3) % 11) as f64 + 0.5)
                    .collect()
            })
            .collect();
        let p = Pooled::new(&groups);
        let mut rng = SplitMix64::new(42);
        let mut mult = vec![0u32; groups.len()];
        let (mut cum, mut out) = (Vec::new(), Vec::new());
        for _ in 0..50 {
            p.draw(&mut rng, &mut mult, 1);
            let mut naive: Vec<f64> = groups
                .iter()
                .zip(&mult)
                .flat_map(|(v, &m)| std::iter::repeat_n(v, m as usize).flatten().copied())
                .collect();
            naive.sort_unstable_by(f64::total_cmp);
            p.stats(&mult, &mut cum, &SloStat::ALL, &mut out);
            for (s, v) in SloStat::ALL.iter().zip(&out) {
                let want = stat_of_sorted(&naive, *s);
                assert!(
                    (v - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "{s:?}: {v} vs {want}"
                );
            }
        }
    }

    #[test]
    fn identical_runs_have_an_interval_around_zero() {
        let g: Vec<Vec<f64>> = (0..50).map(|i| vec![10.0 + (i % 7) as f64]).collect();
        for iv in bootstrap_change(&g, &g, &STATS, 500, 1, 1) {
            let (lo, hi) = iv.unwrap();
            assert!(lo <= 0.0 && hi >= 0.0, "{lo}..{hi}");
        }
    }

    #[test]
    fn a_constant_twenty_percent_shift_is_beyond_noise_and_exact_without_spread() {
        let a: Vec<Vec<f64>> = (0..20).map(|_| vec![10.0, 10.0]).collect();
        let b: Vec<Vec<f64>> = (0..20).map(|_| vec![12.0, 12.0]).collect();
        for iv in bootstrap_change(&a, &b, &STATS, 200, 3, 2) {
            let (lo, hi) = iv.unwrap();
            assert!((lo - 0.2).abs() < 1e-12 && (hi - 0.2).abs() < 1e-12);
        }
    }

    #[test]
    fn bootstrap_is_deterministic_per_seed_and_needs_two_requests() {
        let a: Vec<Vec<f64>> = (0..30).map(|i| vec![i as f64 + 1.0]).collect();
        let b: Vec<Vec<f64>> = (0..30).map(|i| vec![i as f64 * 1.1 + 1.0]).collect();
        let x = bootstrap_change(&a, &b, &STATS, 300, 9, 1);
        assert_eq!(x, bootstrap_change(&a, &b, &STATS, 300, 9, 1));
        assert_ne!(x, bootstrap_change(&a, &b, &STATS, 300, 10, 1));
        assert_eq!(
            bootstrap_change(&a[..1], &b, &STATS, 300, 9, 1),
            vec![None; 4]
        );
    }

    /// `n` requests, one started every 100 ms, with chunks every `itl_ms` (± a small
    /// spread by index) after a 50 ms TTFT.
    fn run(n: u64, itl_ms: f64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                let sent = i * 100_000_000;
                r.sent_ns = Some(sent);
                let jitter = 1.0 + (i % 5) as f64 * 0.01;
                let step = (itl_ms * jitter * 1e6) as u64;
                r.chunks = (0..8)
                    .map(|k| Chunk(sent + 50_000_000 + k * step, None))
                    .collect();
                r.end_ns = r.last_chunk_ns();
                r
            })
            .collect()
    }

    #[test]
    fn requests_are_grouped_into_windows_of_their_median_duration() {
        // Starts every 100 ms, each 50 + 7 x 10 ms long (120 ms, the spread aside):
        // windows of the median duration, requests in order of start.
        let recs = run(10, 10.0);
        let w = time_windows(&recs, SloMetric::Ttft);
        let median = recs[5].end_ns.unwrap() - recs[5].sent_ns.unwrap();
        assert_eq!(w.len() as u64, 900_000_000 / median + 1, "{w:?}");
        assert_eq!(w.iter().map(Vec::len).sum::<usize>(), 10);
        assert_eq!(w[0], vec![50.0, 50.0], "the requests sent at 0 and 100 ms");
        // ITL brings every gap of a request into its window.
        let gaps = time_windows(&recs, SloMetric::Itl);
        assert_eq!(gaps.iter().map(Vec::len).sum::<usize>(), 70);
        // Windows are at least 1/100 of the span: 1,000 starts 1 ms apart, each 1 µs long.
        let short: Vec<RequestRecord> = (0..1_000u64)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(i * 1_000_000);
                r.chunks = vec![Chunk(i * 1_000_000 + 1_000, None)];
                r.end_ns = r.last_chunk_ns();
                r
            })
            .collect();
        assert_eq!(time_windows(&short, SloMetric::Ttft).len(), 101);
        assert!(time_windows(&[], SloMetric::Ttft).is_empty());
    }

    #[test]
    fn a_stall_that_hits_every_stream_at_once_is_noise_not_a_regression() {
        // 8 streams, 40 requests of 8 chunks 10 ms apart in both runs; in B one stall of
        // the client machine puts a 60 ms gap into every stream in flight at 2 s.
        let streams = |stall: bool| -> Vec<RequestRecord> {
            (0..40u64)
                .map(|i| {
                    let mut r = RequestRecord::new(i, Outcome::Succeeded);
                    let sent = (i / 8) * 1_000_000_000 + (i % 8) * 1_000_000;
                    r.sent_ns = Some(sent);
                    let jitter = (i % 3) * 200_000;
                    let mut t = sent + 20_000_000;
                    r.chunks = (0..8)
                        .map(|k| {
                            let hit = stall && i / 8 == 2 && k == 4;
                            t += if k == 0 { 0 } else { 10_000_000 + jitter };
                            t += if hit { 50_000_000 } else { 0 };
                            Chunk(t, None)
                        })
                        .collect();
                    r.end_ns = r.last_chunk_ns();
                    r
                })
                .collect()
        };
        let (a, b) = (streams(false), streams(true));
        let stats = [SloStat::P99];
        let by_request = bootstrap_change(
            &request_groups(&a, SloMetric::Itl),
            &request_groups(&b, SloMetric::Itl),
            &stats,
            1000,
            7,
            1,
        )[0]
        .unwrap();
        assert!(
            by_request.0 > 0.0,
            "one by one, the stall looks real: {by_request:?}"
        );
        let by_time = bootstrap_change(
            &time_windows(&a, SloMetric::Itl),
            &time_windows(&b, SloMetric::Itl),
            &stats,
            1000,
            7,
            BLOCK_WINDOWS,
        )[0]
        .unwrap();
        assert!(
            by_time.0 <= 0.0,
            "together in time, it is noise: {by_time:?}"
        );
    }

    #[test]
    fn a_planted_regression_is_worse_and_fails_the_rule_the_same_run_is_unchanged() {
        let (a, b) = (run(40, 10.0), run(40, 12.0));
        let sa = summarize_level(&a, &LevelOptions::default());
        let sb = summarize_level(&b, &LevelOptions::default());
        let rows = compare_level(&sa, &sb, Some((&a, &b)), 0, DEFAULT_MIN_CHANGE);
        let itl99 = rows.iter().find(|r| r.metric == "itl.p99").unwrap();
        assert!((itl99.change.unwrap() - 0.2).abs() < 0.01, "{itl99:?}");
        assert_eq!(itl99.verdict, Verdict::Worse);
        let speed = rows
            .iter()
            .find(|r| r.metric == "output_speed.p50")
            .unwrap();
        assert_eq!(speed.verdict, Verdict::Worse, "slower is worse: {speed:?}");
        let ttft = rows.iter().find(|r| r.metric == "ttft.p50").unwrap();
        assert_eq!(ttft.change, Some(0.0));
        assert_eq!(ttft.verdict, Verdict::Unchanged);
        let rule: FailOn = "itl.p99:+10%".parse().unwrap();
        assert!(rule.fails(itl99));
        assert!(!"itl.p99:+25%".parse::<FailOn>().unwrap().fails(itl99));

        let same = compare_level(&sa, &sa, Some((&a, &a)), 0, DEFAULT_MIN_CHANGE);
        assert!(
            same.iter().all(|r| r.verdict == Verdict::Unchanged),
            "{same:?}"
        );
        assert!(!same.iter().any(|r| rule.fails(r)));

        // A real but small shift (2 %, no spread) is beyond noise yet under the floor.
        let flat = |itl: f64| -> Vec<RequestRecord> {
            run(40, itl)
                .into_iter()
                .map(|mut r| {
                    let step = (itl * 1e6) as u64;
                    r.chunks = (0..8).map(|k| Chunk(50_000_000 + k * step, None)).collect();
                    r
                })
                .collect()
        };
        let (a, c) = (flat(10.0), flat(10.2));
        let sa = summarize_level(&a, &LevelOptions::default());
        let sc = summarize_level(&c, &LevelOptions::default());
        let small = compare_level(&sa, &sc, Some((&a, &c)), 0, DEFAULT_MIN_CHANGE);
        let itl50 = small.iter().find(|r| r.metric == "itl.p50").unwrap();
        assert_eq!(itl50.beyond_noise(), Some(true), "{itl50:?}");
        assert_eq!(itl50.verdict, Verdict::Unchanged);
        assert_eq!(
            compare_level(&sa, &sc, Some((&a, &c)), 0, 0.0)
                .iter()
                .find(|r| r.metric == "itl.p50")
                .unwrap()
                .verdict,
            Verdict::Worse,
            "with no floor the bootstrap alone decides"
        );

        let a = run(40, 10.0);
        let sa = summarize_level(&a, &LevelOptions::default());
        let blind = compare_level(&sa, &sb, None, 0, DEFAULT_MIN_CHANGE);
        assert!(blind.iter().all(|r| r.verdict == Verdict::Unknown));
        let itl99 = blind.iter().find(|r| r.metric == "itl.p99").unwrap();
        assert!(
            rule.fails(itl99),
            "without samples the threshold alone decides"
        );
    }

    #[test]
    fn fail_on_rules_parse_with_sign_and_percent() {
        let r: FailOn = "itl.p99:+10%".parse().unwrap();
        assert_eq!((r.metric, r.stat), (SloMetric::Itl, SloStat::P99));
        assert!((r.threshold - 0.10).abs() < 1e-12);
        assert_eq!(r.key(), "itl.p99");
        let r: FailOn = "output_speed.p50 : -5%".parse().unwrap();
        assert!((r.threshold + 0.05).abs() < 1e-12);
        assert!("itl.p99:10%"
            .parse::<FailOn>()
            .unwrap_err()
            .contains("sign"));
        assert!("itl.p99:+10"
            .parse::<FailOn>()
            .unwrap_err()
            .contains("percentage"));
        assert!("foo.p99:+10%"
            .parse::<FailOn>()
            .unwrap_err()
            .contains("metric"));
        assert!("itl.p42:+10%"
            .parse::<FailOn>()
            .unwrap_err()
            .contains("statistic"));
        assert!("itl.p99".parse::<FailOn>().is_err());
        let row = MetricChange {
            metric: "output_speed.p50".into(),
            unit: "tok/s".into(),
            a: Some(100.0),
            b: Some(90.0),
            change: Some(-0.1),
            interval: Some((-0.12, -0.08)),
            verdict: Verdict::Worse,
        };
        assert!("output_speed.p50:-5%"
            .parse::<FailOn>()
            .unwrap()
            .fails(&row));
        let noisy = MetricChange {
            interval: Some((-0.2, 0.01)),
            ..row
        };
        assert!(
            !"output_speed.p50:-5%"
                .parse::<FailOn>()
                .unwrap()
                .fails(&noisy),
            "within noise"
        );
    }
}
