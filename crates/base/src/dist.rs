//! A bounded, mergeable distribution accumulator: exact (every sample kept, the report's
//! type-7 figures bit for bit) until its owner says the level's budget is spent, then a
//! log-bucketed HDR histogram of fixed relative error and bounded size, its counts kept
//! sparsely (only the buckets that hold samples), so a narrow distribution stays small.
//! See docs/src/DESIGN.md, "Distributions under a memory bound".

use crate::stats::{
    from_total_key, sort_weighted, sorted_total, total_key, type7, Bucketing, Distribution,
};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Values are recorded in the histogram in units of this fraction of the caller's unit
/// (1 µs for milliseconds, 0.001 token/s, 0.001 token).
pub const RESOLUTION: f64 = 1e-3;
/// Significant decimal digits of the histogram: 256 sub-buckets per power of two.
const SIGFIG: u8 = 2;
/// A bucketed percentile reports the middle of its bucket; a bucket is at most 1/128
/// of its lower edge wide, so the middle is within 1/256 of any value in it.
pub const RELATIVE_ERROR: f64 = 1.0 / 256.0;
/// Values above this many [`RESOLUTION`] units (2^40, about 1.1e9 of the unit: 12 days
/// in ms) saturate in the histogram; `max` stays exact. This caps a histogram's size.
const HIGHEST_UNITS: u64 = 1 << 40;

/// The HDR histogram whose bucket boundaries every bucketed distribution uses; its own
/// counts stay empty (one ~38 KB array for the process). Each distribution counts
/// samples per bucket sparsely, keyed by the bucket's lowest equivalent value.
fn buckets() -> &'static Histogram<u64> {
    static LAYOUT: OnceLock<Histogram<u64>> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        Histogram::new_with_bounds(1, HIGHEST_UNITS, SIGFIG).expect("valid histogram bounds")
    })
}

/// Heap bytes of one sparse bucket count (a B-tree entry and its share of a node).
const BYTES_PER_BUCKET: usize = 32;

/// The error statement every bucketed [`Distribution`] carries.
pub const BUCKETING: Bucketing = Bucketing {
    relative_error: RELATIVE_ERROR,
    resolution: RESOLUTION,
};

/// Samples of one distribution: kept exactly, or folded into a histogram.
///
/// Count, mean, min and max are exact in both states; stddev is exact while exact and
/// from running moments (Welford/Chan) once bucketed; percentiles once bucketed are
/// within [`RELATIVE_ERROR`] of the value (plus [`RESOLUTION`] / 2 absolute).
#[derive(Debug, Clone, Default)]
pub struct DistAcc {
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// Unit-weight samples, in the order pushed (NaN left out).
    Plain(Vec<f64>),
    /// Weighted samples, in the order pushed (NaN and zero weights left out).
    Weighted(Vec<(f64, u64)>),
    Bucketed(Box<Bucketed>),
}

impl Default for State {
    fn default() -> Self {
        State::Plain(Vec::new())
    }
}

#[derive(Debug, Clone)]
struct Bucketed {
    /// Samples per HDR bucket, keyed by the bucket's lowest equivalent value (units).
    hist: BTreeMap<u64, u64>,
    count: u64,
    mean: f64,
    /// Σ w·(x − mean)², for the sample standard deviation.
    m2: f64,
    min: f64,
    max: f64,
}

impl Bucketed {
    fn new() -> Bucketed {
        Bucketed {
            hist: BTreeMap::new(),
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn units(x: f64) -> u64 {
        // `as` saturates: negative values record as 0 (min stays exact), huge ones as the cap.
        ((x / RESOLUTION).round() as u64).min(HIGHEST_UNITS)
    }

    fn add(&mut self, x: f64, w: u64) {
        let n = self
            .hist
            .entry(buckets().lowest_equivalent(Self::units(x)))
            .or_default();
        *n = n.saturating_add(w);
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        // Weighted Welford update.
        // Weights can be token counts from a server: saturate rather than wrap.
        self.count = self.count.saturating_add(w);
        let d = x - self.mean;
        self.mean += d * w as f64 / self.count as f64;
        self.m2 += w as f64 * d * (x - self.mean);
    }

    fn merge(&mut self, o: &Bucketed) {
        if o.count == 0 {
            return;
        }
        for (k, n) in &o.hist {
            let mine = self.hist.entry(*k).or_default();
            *mine = mine.saturating_add(*n);
        }
        let n = self.count.saturating_add(o.count);
        let d = o.mean - self.mean;
        // Chan et al.'s parallel combination of moments.
        self.m2 += o.m2 + d * d * self.count as f64 * o.count as f64 / n as f64;
        self.mean += d * o.count as f64 / n as f64;
        self.count = n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The values at 0-based ranks `ks` (ascending) of the expanded samples, in one
    /// pass over the histogram: the middle of the bucket holding each rank, kept within
    /// the exact min and max (rank 0 is the min, rank n − 1 the max).
    fn at_ranks(&self, ks: &[u64]) -> Vec<f64> {
        let mut out = Vec::with_capacity(ks.len());
        let mut it = self.hist.iter();
        let (mut seen, mut mid) = (0u64, self.min);
        for &k in ks {
            if k == 0 {
                out.push(self.min);
                continue;
            }
            if k + 1 >= self.count {
                out.push(self.max);
                continue;
            }
            while seen <= k {
                let Some((&key, &n)) = it.next() else { break };
                seen += n;
                mid = Self::middle(key).clamp(self.min, self.max);
            }
            out.push(mid);
        }
        out
    }

    /// The middle of the bucket whose lowest equivalent value is `key`, in the unit.
    fn middle(key: u64) -> f64 {
        buckets().median_equivalent(key) as f64 * RESOLUTION
    }

    /// Type-7 quantiles over the ranks, each rank's value from [`Self::at_ranks`].
    fn quantiles(&self, ps: &[f64]) -> Vec<f64> {
        type7_at_ranks(self.count, ps, |ks| self.at_ranks(ks))
    }

    fn summary(&self) -> Option<Distribution> {
        if self.count == 0 {
            return None;
        }
        let q = self.quantiles(&crate::stats::QUANTILES);
        Some(Distribution {
            count: self.count,
            mean: self.mean,
            stddev: (self.count >= 2).then(|| (self.m2.max(0.0) / (self.count - 1) as f64).sqrt()),
            min: self.min,
            p50: q[0],
            p90: q[1],
            p95: q[2],
            p99: q[3],
            p999: q[4],
            max: self.max,
            bucketed: Some(BUCKETING),
        })
    }
}

/// Type-7 quantiles (fractions `ps`) of `n ≥ 1` values, read at the ranks the rule
/// needs: first learn which ranks those are, then `read` gets them (ascending, each
/// once) and returns their values in that order, all in one go.
fn type7_at_ranks(n: u64, ps: &[f64], read: impl FnOnce(&[u64]) -> Vec<f64>) -> Vec<f64> {
    let wanted = std::cell::RefCell::new(Vec::new());
    for &p in ps {
        type7(n, p, |k| {
            wanted.borrow_mut().push(k);
            0.0
        });
    }
    let mut ks = wanted.into_inner();
    ks.sort_unstable();
    ks.dedup();
    let vals = read(&ks);
    let at = |k: u64| vals[ks.binary_search(&k).expect("rank read above")];
    ps.iter().map(|&p| type7(n, p, at)).collect()
}

/// The values of unit-weight samples at 0-based ranks `ks` (ascending, each once), as
/// their ascending sort (by `f64::total_cmp`) has them, without sorting: a selection
/// for the middle rank splits the samples, and the ranks below and above it are found
/// in their own parts, so about log2(ranks) passes over the samples.
fn plain_at_ranks(v: &[f64], ks: &[u64]) -> Vec<f64> {
    let mut keys: Vec<u64> = v.iter().map(|&x| total_key(x)).collect();
    let mut out = vec![0; ks.len()];
    select_ranks(&mut keys, 0, ks, &mut out);
    out.into_iter().map(from_total_key).collect()
}

/// Writes the keys of ranks `ks` (ascending, each once; `base` is the rank of
/// `keys[0]` among all) to `out`, reordering `keys`.
fn select_ranks(keys: &mut [u64], base: u64, ks: &[u64], out: &mut [u64]) {
    if ks.is_empty() {
        return;
    }
    let mid = ks.len() / 2;
    let k = ks[mid] - base;
    let (below, at, above) = keys.select_nth_unstable(k as usize);
    let (out_below, out_rest) = out.split_at_mut(mid);
    out_rest[0] = *at;
    select_ranks(below, base, &ks[..mid], out_below);
    select_ranks(above, base + k + 1, &ks[mid + 1..], &mut out_rest[1..]);
}

impl DistAcc {
    /// An empty accumulator, in the exact state.
    pub fn new() -> DistAcc {
        DistAcc::default()
    }

    /// Adds one sample; NaN is ignored (it is not a measurement). Returns how many
    /// values this kept exactly (1, or 0 when ignored or bucketed), for the owner's budget.
    pub fn push(&mut self, x: f64) -> u64 {
        if x.is_nan() {
            return 0;
        }
        match &mut self.state {
            State::Plain(v) => v.push(x),
            State::Weighted(v) => v.push((x, 1)),
            State::Bucketed(b) => {
                b.add(x, 1);
                return 0;
            }
        }
        1
    }

    /// [`Self::push`], first going over to the histogram when `bucketed` (an owner whose
    /// budget is spent starts its new distributions bucketed).
    pub fn push_in(&mut self, x: f64, bucketed: bool) -> u64 {
        if bucketed {
            self.to_bucketed();
        }
        self.push(x)
    }

    /// Adds `x` standing for `w` samples (per-token ITL enters a gap once per token);
    /// NaN and `w == 0` are ignored. Returns the values kept exactly, as [`Self::push`].
    pub fn push_weighted(&mut self, x: f64, w: u64) -> u64 {
        if w == 1 {
            return self.push(x);
        }
        if x.is_nan() || w == 0 {
            return 0;
        }
        match &mut self.state {
            State::Plain(v) => {
                let mut ws: Vec<(f64, u64)> = v.iter().map(|&x| (x, 1)).collect();
                ws.push((x, w));
                self.state = State::Weighted(ws);
            }
            State::Weighted(v) => v.push((x, w)),
            State::Bucketed(b) => {
                b.add(x, w);
                return 0;
            }
        }
        1
    }

    /// Whether both hold the same exact samples in the same order, bit for bit: every
    /// figure of one is then the other's, and a report can summarize the two once.
    /// Cheap when they differ (the first differing sample ends the comparison).
    pub fn same_samples(&self, other: &DistAcc) -> bool {
        match (&self.state, &other.state) {
            (State::Plain(a), State::Plain(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (State::Weighted(a), State::Weighted(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| x.0.to_bits() == y.0.to_bits() && x.1 == y.1)
            }
            _ => false,
        }
    }

    /// Whether the samples are kept exactly.
    pub fn is_exact(&self) -> bool {
        !matches!(self.state, State::Bucketed(_))
    }

    /// Values held exactly (0 once bucketed): what counts against a level's budget.
    pub fn stored(&self) -> u64 {
        match &self.state {
            State::Plain(v) => v.len() as u64,
            State::Weighted(v) => v.len() as u64,
            State::Bucketed(_) => 0,
        }
    }

    /// Whether every sample is held exactly with weight one.
    pub fn is_exact_unit(&self) -> bool {
        matches!(self.state, State::Plain(_))
    }

    /// Total weight of the samples (the `count` a summary would report).
    pub fn count(&self) -> u64 {
        match &self.state {
            State::Plain(v) => v.len() as u64,
            State::Weighted(v) => v.iter().fold(0, |n, &(_, w)| n.saturating_add(w)),
            State::Bucketed(b) => b.count,
        }
    }

    /// Heap bytes this accumulator holds (vector capacity, or histogram counts).
    pub fn approx_bytes(&self) -> usize {
        match &self.state {
            State::Plain(v) => v.capacity() * std::mem::size_of::<f64>(),
            State::Weighted(v) => v.capacity() * std::mem::size_of::<(f64, u64)>(),
            State::Bucketed(b) => std::mem::size_of::<Bucketed>() + b.hist.len() * BYTES_PER_BUCKET,
        }
    }

    /// Folds the exact samples into a histogram (no-op when already bucketed). Count,
    /// mean, min, max and the moments stay exact across the change.
    pub fn to_bucketed(&mut self) {
        if !self.is_exact() {
            return;
        }
        let mut b = Bucketed::new();
        match &self.state {
            State::Bucketed(_) => return,
            State::Plain(v) => v.iter().for_each(|&x| b.add(x, 1)),
            State::Weighted(v) => v.iter().for_each(|&(x, w)| b.add(x, w)),
        }
        // Exact moments from the samples, so the switch costs no accuracy there.
        if let Some(d) = self.exact_summary() {
            b.mean = d.mean;
            b.m2 = d.stddev.map_or(0.0, |s| s * s * (d.count - 1) as f64);
        }
        self.state = State::Bucketed(Box::new(b));
    }

    /// Adds `other`'s samples. Exact + exact stays exact (the samples appended in
    /// order, so the result equals pushing both in turn); otherwise both are bucketed.
    pub fn merge(&mut self, other: &DistAcc) {
        if let (State::Plain(mine), State::Plain(o)) = (&mut self.state, &other.state) {
            // Neither holds NaN: pushing each in turn would append them all, as this does.
            mine.extend_from_slice(o);
            return;
        }
        if self.is_exact() {
            match &other.state {
                State::Plain(o) => {
                    o.iter().for_each(|&x| {
                        self.push(x);
                    });
                    return;
                }
                State::Weighted(o) => {
                    o.iter().for_each(|&(x, w)| {
                        self.push_weighted(x, w);
                    });
                    return;
                }
                State::Bucketed(_) => self.to_bucketed(),
            }
        }
        let State::Bucketed(a) = &mut self.state else {
            unreachable!("bucketed above")
        };
        match &other.state {
            State::Plain(o) => o.iter().for_each(|&x| a.add(x, 1)),
            State::Weighted(o) => o.iter().for_each(|&(x, w)| a.add(x, w)),
            State::Bucketed(b) => a.merge(b),
        }
    }

    fn exact_summary(&self) -> Option<Distribution> {
        match &self.state {
            State::Bucketed(_) => None,
            _ => self.sorted().summary(),
        }
    }

    /// The samples sorted once, for every figure a caller reads of this distribution
    /// ([`Sorted::summary`], [`Sorted::quantiles`], [`Sorted::sorted_values`]). The
    /// view borrows the accumulator, so nothing can be pushed while it lives: a view is
    /// always of the current samples (take a new one after a push).
    pub fn sorted(&self) -> Sorted<'_> {
        let state = match &self.state {
            State::Plain(v) => SortedState::Plain(sorted_total(v)),
            State::Weighted(v) => {
                let mut v = v.clone();
                sort_weighted(&mut v);
                SortedState::Weighted(v)
            }
            State::Bucketed(b) => SortedState::Bucketed(b),
        };
        Sorted { state }
    }

    /// The summary the report prints: exactly [`Distribution::from_samples`] (or
    /// `from_weighted`) of the samples while exact; the bucketed estimate after.
    /// Sorts a copy of the samples (the mean is summed in ascending order): a caller
    /// that reads more figures of the same samples takes [`Self::sorted`] once instead.
    pub fn summary(&self) -> Option<Distribution> {
        self.sorted().summary()
    }

    /// The given type-7 quantiles (fractions), `None` when empty. Unit-weight samples
    /// are not sorted: the values at the ranks the rule reads are selected, about
    /// log2(ranks) passes over a copy (equal under `f64::total_cmp` means equal bits, so
    /// they are the sorted samples' values). For a few fractions; for many (a CDF), one
    /// [`Self::sorted`] is cheaper. Weighted samples sort a copy, as [`Self::summary`].
    pub fn quantiles(&self, ps: &[f64]) -> Option<Vec<f64>> {
        match &self.state {
            State::Plain(v) => (!v.is_empty())
                .then(|| type7_at_ranks(v.len() as u64, ps, |ks| plain_at_ranks(v, ks))),
            _ => self.sorted().quantiles(ps),
        }
    }

    /// Every sample as `(value, weight)`, ascending: the samples themselves while exact,
    /// the middle of each non-empty bucket (within min and max) once bucketed. Sorts a
    /// copy, as [`Self::summary`].
    pub fn sorted_values(&self) -> Vec<(f64, u64)> {
        self.sorted().sorted_values()
    }
}

/// A [`DistAcc`]'s samples sorted once ([`DistAcc::sorted`]): a caller that reads
/// several figures of one distribution (a summary and a CDF, many quantiles and the
/// sorted values) reads them all from this one sort instead of sorting a copy for
/// each, and every figure is bit for bit what sorting a fresh copy for it gives.
#[derive(Debug, Clone)]
pub struct Sorted<'a> {
    state: SortedState<'a>,
}

#[derive(Debug, Clone)]
enum SortedState<'a> {
    /// Unit-weight samples, ascending by `f64::total_cmp` (no NaN).
    Plain(Vec<f64>),
    /// Weighted samples as [`sort_weighted`] leaves them (no NaN, no zero weight).
    Weighted(Vec<(f64, u64)>),
    Bucketed(&'a Bucketed),
}

impl Sorted<'_> {
    /// Whether these are exact unit-weight samples (not weighted, not bucketed).
    pub fn is_exact_unit(&self) -> bool {
        matches!(self.state, SortedState::Plain(_))
    }

    /// Total weight of the samples, as [`DistAcc::count`].
    pub fn count(&self) -> u64 {
        match &self.state {
            SortedState::Plain(v) => v.len() as u64,
            SortedState::Weighted(v) => v.iter().fold(0, |n, &(_, w)| n.saturating_add(w)),
            SortedState::Bucketed(b) => b.count,
        }
    }

    /// As [`DistAcc::summary`].
    pub fn summary(&self) -> Option<Distribution> {
        match &self.state {
            SortedState::Plain(v) => Distribution::from_sorted(v),
            SortedState::Weighted(v) => Distribution::from_sorted_weighted(v),
            SortedState::Bucketed(b) => b.summary(),
        }
    }

    /// As [`DistAcc::quantiles`].
    pub fn quantiles(&self, ps: &[f64]) -> Option<Vec<f64>> {
        match &self.state {
            SortedState::Bucketed(b) => (b.count > 0).then(|| b.quantiles(ps)),
            SortedState::Plain(s) => (!s.is_empty()).then(|| {
                ps.iter()
                    .map(|&p| type7(s.len() as u64, p, |i| s[i as usize]))
                    .collect()
            }),
            SortedState::Weighted(s) => {
                let cum: Vec<u64> = s
                    .iter()
                    .scan(0u64, |acc, &(_, w)| {
                        *acc = acc.saturating_add(w);
                        Some(*acc)
                    })
                    .collect();
                let n = *cum.last()?;
                let at = |k: u64| s[cum.partition_point(|&c| c <= k)].0;
                Some(ps.iter().map(|&p| type7(n, p, at)).collect())
            }
        }
    }

    /// As [`DistAcc::sorted_values`].
    pub fn sorted_values(&self) -> Vec<(f64, u64)> {
        match &self.state {
            SortedState::Plain(v) => v.iter().map(|&x| (x, 1)).collect(),
            SortedState::Weighted(v) => v.clone(),
            SortedState::Bucketed(b) => b
                .hist
                .iter()
                .map(|(&key, &n)| (Bucketed::middle(key).clamp(b.min, b.max), n))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic samples with a heavy tail: 1 ms .. ~1 s, log-uniform-ish.
    fn samples(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                (u * 3.0 * std::f64::consts::LN_10).exp()
            })
            .collect()
    }

    fn within(bucketed: f64, exact: f64) -> bool {
        (bucketed - exact).abs() <= RELATIVE_ERROR * exact.abs() + RESOLUTION / 2.0 + 1e-12
    }

    #[test]
    fn exact_equals_from_samples_bit_for_bit() {
        let xs = samples(10_001, 1);
        let mut a = DistAcc::new();
        xs.iter().for_each(|&x| {
            a.push(x);
        });
        a.push(f64::NAN);
        assert_eq!(a.summary(), Distribution::from_samples(&mut xs.clone()));
        assert!(a.summary().unwrap().bucketed.is_none());
        let mut w = DistAcc::new();
        let ws: Vec<(f64, u64)> = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, i as u64 % 4))
            .collect();
        ws.iter().for_each(|&(x, k)| {
            w.push_weighted(x, k);
        });
        assert_eq!(w.summary(), Distribution::from_weighted(&mut ws.clone()));
    }

    #[test]
    fn bucketed_percentiles_are_within_the_stated_bound() {
        let xs = samples(200_000, 7);
        let exact = Distribution::from_samples(&mut xs.clone()).unwrap();
        let mut a = DistAcc::new();
        xs.iter().for_each(|&x| {
            a.push(x);
        });
        a.to_bucketed();
        let b = a.summary().unwrap();
        assert_eq!(b.bucketed, Some(BUCKETING));
        assert_eq!((b.count, b.min, b.max), (exact.count, exact.min, exact.max));
        assert!((b.mean - exact.mean).abs() <= 1e-9 * exact.mean);
        for (x, e) in [
            (b.p50, exact.p50),
            (b.p90, exact.p90),
            (b.p95, exact.p95),
            (b.p99, exact.p99),
            (b.p999, exact.p999),
        ] {
            assert!(within(x, e), "bucketed {x} vs exact {e}");
        }
        // Pushing past the switch stays within the bound too.
        let more = samples(50_000, 8);
        more.iter().for_each(|&x| {
            a.push(x);
        });
        let all = Distribution::from_samples(&mut [xs, more].concat()).unwrap();
        let b = a.summary().unwrap();
        assert!(within(b.p999, all.p999) && within(b.p50, all.p50));
        assert!((b.stddev.unwrap() - all.stddev.unwrap()).abs() <= 1e-9 * all.stddev.unwrap());
    }

    #[test]
    fn weighted_bucketed_is_within_the_bound() {
        let xs = samples(20_000, 3);
        let ws: Vec<(f64, u64)> = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| (x / 3.0, 1 + i as u64 % 5))
            .collect();
        let exact = Distribution::from_weighted(&mut ws.clone()).unwrap();
        let mut a = DistAcc::new();
        a.to_bucketed();
        ws.iter().for_each(|&(x, w)| {
            a.push_weighted(x, w);
        });
        let b = a.summary().unwrap();
        assert_eq!(b.count, exact.count);
        for (x, e) in [
            (b.p50, exact.p50),
            (b.p99, exact.p99),
            (b.p999, exact.p999),
            (b.max, exact.max),
        ] {
            assert!(within(x, e), "bucketed {x} vs exact {e}");
        }
    }

    #[test]
    fn bucketed_size_stays_flat_as_samples_grow() {
        let mut a = DistAcc::new();
        a.to_bucketed();
        let mut sizes = Vec::new();
        let mut seed = 11;
        for n in [10_000usize, 100_000, 1_000_000] {
            while a.count() < n as u64 {
                seed += 1;
                samples(10_000, seed).iter().for_each(|&x| {
                    a.push(x);
                });
            }
            sizes.push(a.approx_bytes());
        }
        assert!(
            sizes.windows(2).all(|w| w[1] <= w[0] + w[0] / 10),
            "{sizes:?}"
        );
        // By construction: at most one count per bucket of the fixed layout (2^40 units
        // at 2 significant digits), whatever the number of samples.
        let ceiling =
            std::mem::size_of::<Bucketed>() + buckets().distinct_values() * BYTES_PER_BUCKET;
        assert!(
            sizes[2] <= ceiling && ceiling < 200 * 1024,
            "{sizes:?} {ceiling}"
        );
        let mut top = DistAcc::new();
        top.to_bucketed();
        top.push(1e300);
        top.push(0.0);
        assert_eq!(top.summary().unwrap().max, 1e300);
    }

    #[test]
    fn merging_halves_equals_the_whole() {
        let xs = samples(4_001, 5);
        let (l, r) = xs.split_at(1_700);
        let fill = |v: &[f64]| {
            let mut a = DistAcc::new();
            v.iter().for_each(|&x| {
                a.push(x);
            });
            a
        };
        let mut a = fill(l);
        a.merge(&fill(r));
        assert!(a.is_exact());
        assert_eq!(a.summary(), fill(&xs).summary());
        // Bucketed halves: the same histogram as the bucketed whole.
        let (mut bl, mut br, mut whole) = (fill(l), fill(r), fill(&xs));
        bl.to_bucketed();
        br.to_bucketed();
        whole.to_bucketed();
        bl.merge(&br);
        let (m, w) = (bl.summary().unwrap(), whole.summary().unwrap());
        assert_eq!(
            (m.count, m.min, m.max, m.p50, m.p99, m.p999),
            (w.count, w.min, w.max, w.p50, w.p99, w.p999)
        );
        assert!((m.mean - w.mean).abs() <= 1e-12 * w.mean);
        // Exact merged into bucketed is bucketed.
        let mut e = fill(l);
        e.merge(&br);
        assert!(!e.is_exact());
        assert_eq!(e.count(), xs.len() as u64);
    }

    /// Exact, bit for bit (`{:?}` of an `f64` round-trips, and tells -0.0 from 0.0).
    fn same<T: std::fmt::Debug>(a: T, b: T) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    /// What the report did before it sorted once: a fresh clone sorted per figure.
    fn naive_quantiles(v: &[f64], ps: &[f64]) -> Option<Vec<f64>> {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        (!s.is_empty()).then(|| {
            ps.iter()
                .map(|&p| crate::stats::quantile_sorted(&s, p).unwrap())
                .collect()
        })
    }

    fn naive_sorted_values(v: &[f64]) -> Vec<(f64, u64)> {
        let mut s: Vec<(f64, u64)> = v.iter().map(|&x| (x, 1)).collect();
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        s
    }

    fn fill(v: &[f64]) -> DistAcc {
        let mut a = DistAcc::new();
        v.iter().for_each(|&x| {
            a.push(x);
        });
        a
    }

    /// Ties, a zero of each sign, a lone extreme: what a hand-built sample set can hold.
    const TIES: [f64; 14] = [
        3.0, 1.5, 3.0, 0.0, 7.25, 1.5, 3.0, -0.0, 1e-9, 42.0, 3.0, 1.5, 0.125, 3.0,
    ];
    const PS: [f64; 8] = [0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

    #[test]
    fn one_sorted_view_gives_what_a_clone_and_sort_per_figure_gave() {
        for xs in [TIES.to_vec(), samples(5_003, 9), vec![2.5], Vec::new()] {
            let a = fill(&xs);
            let view = a.sorted();
            same(view.summary(), Distribution::from_samples(&mut xs.clone()));
            same(view.quantiles(&PS), naive_quantiles(&xs, &PS));
            same(view.sorted_values(), naive_sorted_values(&xs));
            assert_eq!(view.count(), a.count());
            // The accumulator's own figures are the same.
            same(a.summary(), view.summary());
            same(a.sorted_values(), view.sorted_values());
        }
    }

    #[test]
    fn quantiles_by_selection_are_the_sorted_samples_quantiles() {
        let cdf: Vec<f64> = (0..=1000).map(|i| f64::from(i) / 1000.0).collect();
        let fractions: [&[f64]; 7] = [
            &PS,
            &crate::stats::QUANTILES,
            &cdf,
            &[0.5],
            &[],
            // Unsorted and repeated fractions, and ones outside [0, 1] (clamped).
            &[0.99, 0.5, 0.99, 0.0, 1.0, 0.5, -1.0, 2.0],
            &[0.5, 0.99],
        ];
        let sets = [
            TIES.to_vec(),
            samples(4_097, 12),
            vec![2.5],
            vec![1.0, 3.0],
            vec![3.0, 1.0, 2.0],
            vec![5.0; 100],
            // Many ties: 0..9 over and over.
            (0..2_000).map(|i| f64::from(i * 7 % 10)).collect(),
        ];
        for xs in &sets {
            for ps in fractions {
                same(fill(xs).quantiles(ps), naive_quantiles(xs, ps));
            }
        }
        assert_eq!(DistAcc::new().quantiles(&PS), None);
    }

    #[test]
    fn weighted_ties_keep_the_order_from_weighted_sums_in() {
        // Equal values of different weights: the mean's sum runs in the sort's order.
        let ws: Vec<(f64, u64)> = TIES
            .iter()
            .enumerate()
            .map(|(i, &x)| (x / 3.0, 1 + i as u64 % 4))
            .chain(samples(3_001, 4).into_iter().map(|x| (x.round(), 3)))
            .collect();
        let mut a = DistAcc::new();
        ws.iter().for_each(|&(x, w)| {
            a.push_weighted(x, w);
        });
        let view = a.sorted();
        same(view.summary(), Distribution::from_weighted(&mut ws.clone()));
        // The expanded list, each value `w` times, read by the plain rule.
        let expanded: Vec<f64> = ws
            .iter()
            .flat_map(|&(x, w)| std::iter::repeat_n(x, w as usize))
            .collect();
        same(view.quantiles(&PS), naive_quantiles(&expanded, &PS));
        same(a.quantiles(&PS), naive_quantiles(&expanded, &PS));
        let mut sorted = ws.clone();
        sorted.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        same(view.sorted_values(), sorted);
        assert_eq!(view.count(), expanded.len() as u64);
    }

    #[test]
    fn a_bucketed_view_reads_the_histogram() {
        let mut b = fill(&samples(3_000, 31));
        b.to_bucketed();
        let State::Bucketed(h) = &b.state else {
            unreachable!("bucketed")
        };
        let view = b.sorted();
        same(view.summary(), h.summary());
        same(view.quantiles(&PS), Some(h.quantiles(&PS)));
        same(b.quantiles(&PS), Some(h.quantiles(&PS)));
        let middles: Vec<(f64, u64)> = h
            .hist
            .iter()
            .map(|(&k, &n)| (Bucketed::middle(k).clamp(h.min, h.max), n))
            .collect();
        same(view.sorted_values(), middles);
        assert_eq!(view.count(), 3_000);
    }

    #[test]
    fn merging_unit_weight_samples_appends_them_in_order() {
        let (l, r) = (samples(700, 41), TIES.to_vec());
        let mut a = fill(&l);
        a.merge(&fill(&r));
        let State::Plain(v) = &a.state else {
            unreachable!("exact")
        };
        same(v, &[l.clone(), r.clone()].concat());
        // Into weighted samples: appended with weight 1, as pushing them would.
        let mut w = DistAcc::new();
        w.push_weighted(2.0, 3);
        w.merge(&fill(&r));
        let mut pushed = DistAcc::new();
        pushed.push_weighted(2.0, 3);
        r.iter().for_each(|&x| {
            pushed.push(x);
        });
        let (State::Weighted(w), State::Weighted(pushed)) = (&w.state, &pushed.state) else {
            unreachable!("weighted")
        };
        same(w, pushed);
    }

    #[test]
    fn a_sample_pushed_after_a_view_is_in_the_next_view() {
        // A view borrows the accumulator, so a push ends it; the next view sorts again.
        let mut a = fill(&TIES);
        let before = a.sorted().summary().unwrap();
        a.push(1000.0);
        a.push(f64::NAN);
        let after = a.sorted();
        let mut all = TIES.to_vec();
        all.push(1000.0);
        assert_eq!(after.count(), before.count + 1);
        same(
            after.summary(),
            Distribution::from_samples(&mut all.clone()),
        );
        same(after.quantiles(&PS), naive_quantiles(&all, &PS));
        same(a.quantiles(&PS), naive_quantiles(&all, &PS));
        // A weighted push after a view turns the samples weighted, and the view follows.
        a.push_weighted(0.5, 4);
        all.extend([0.5; 4]);
        same(a.sorted().quantiles(&PS), naive_quantiles(&all, &PS));
        same(a.quantiles(&PS), naive_quantiles(&all, &PS));
        assert_eq!(a.sorted().count(), all.len() as u64);
    }

    #[test]
    fn same_samples_means_the_same_values_in_the_same_order() {
        let a = fill(&TIES);
        assert!(a.same_samples(&fill(&TIES)) && DistAcc::new().same_samples(&DistAcc::new()));
        let mut swapped = TIES;
        swapped.swap(0, 1);
        let mut zero = TIES;
        zero[3] = -0.0;
        for other in [fill(&swapped), fill(&zero), fill(&TIES[1..])] {
            assert!(!a.same_samples(&other));
        }
        let mut w = fill(&TIES);
        w.push_weighted(2.0, 3);
        let mut w2 = fill(&TIES);
        w2.push_weighted(2.0, 3);
        assert!(w.same_samples(&w2) && !w.same_samples(&a));
        w2.push_weighted(2.0, 2);
        assert!(!w.same_samples(&w2));
        let mut b = fill(&TIES);
        b.to_bucketed();
        assert!(!b.same_samples(&b.clone()));
    }
}
