//! Exact distribution summaries (count, mean, stddev, min, percentiles, max) over
//! samples that fit in memory. One estimator, stated in code and in every report, so
//! Cadence's percentiles can be reproduced with numpy's defaults.

use serde::{Deserialize, Serialize};

/// The percentile rule, in the words reports and `--help` print.
pub const PERCENTILE_RULE: &str = "percentiles use linear interpolation between closest \
ranks (Hyndman-Fan type 7, numpy's default): over the n sorted samples x[0..n-1], \
h = (n-1)*p and the p-quantile is x[floor(h)] + (h - floor(h)) * (x[ceil(h)] - x[floor(h)]); \
stddev is the sample standard deviation (divisor n-1), absent when n < 2";

/// The quantiles every distribution reports, as fractions.
pub const QUANTILES: [f64; 5] = [0.50, 0.90, 0.95, 0.99, 0.999];

/// A summary of a non-empty set of samples, in the unit the caller chose
/// (milliseconds for times, tokens/s for speeds, tokens for chunk sizes).
///
/// A set with no samples has no `Distribution` at all (`Option::None`): a missing value
/// is absent, never zero.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    /// Number of samples (at least 1).
    pub count: u64,
    /// Arithmetic mean of the samples.
    pub mean: f64,
    /// Sample standard deviation (n − 1 divisor); `None` when `count < 2`.
    pub stddev: Option<f64>,
    /// Smallest sample.
    pub min: f64,
    /// Median (type-7 quantile 0.5).
    pub p50: f64,
    /// 90th percentile (type-7).
    pub p90: f64,
    /// 95th percentile (type-7).
    pub p95: f64,
    /// 99th percentile (type-7).
    pub p99: f64,
    /// 99.9th percentile (type-7).
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
    /// Present when the percentiles come from a log-bucketed histogram (the level's
    /// samples outgrew `--exact-samples`), with their error bound; absent when exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucketed: Option<Bucketing>,
}

/// How far a bucketed distribution's percentiles may be from the exact ones: within
/// `relative_error` of the value, plus half of `resolution` (in the distribution's
/// unit). Count, mean, min and max stay exact.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucketing {
    /// Relative bound on a percentile's error, as a fraction of the value.
    pub relative_error: f64,
    /// The histogram's recording unit, in the distribution's unit (values are rounded to
    /// it); half of it is the absolute error added to the relative bound.
    pub resolution: f64,
}

impl Distribution {
    /// Summarizes `samples`, sorting them in place. `None` when there are no samples.
    ///
    /// Percentiles follow [`PERCENTILE_RULE`] (Hyndman–Fan type 7): with the samples
    /// sorted ascending as `x[0..n]`, `h = (n − 1)·p`, and the p-quantile is
    /// `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌈h⌉] − x[⌊h⌋])`. So `[1, 2, 3, 4]` has p50 = 2.5 and
    /// p90 = 3.7. The mean is the arithmetic mean; `stddev` is the sample standard
    /// deviation `sqrt(Σ(x − mean)² / (n − 1))`, computed in two passes for accuracy.
    ///
    /// Sorting uses `f64::total_cmp`, so it never panics. NaN is not a measurement:
    /// NaN samples are ignored (they sort to the ends and are sliced off), and a set of
    /// only NaNs gives `None`.
    pub fn from_samples(samples: &mut [f64]) -> Option<Distribution> {
        sort_total(samples);
        // total_cmp puts negative NaNs first and positive NaNs last.
        let start = samples.iter().position(|x| !x.is_nan())?;
        let end = samples.iter().rposition(|x| !x.is_nan())? + 1;
        Self::from_sorted(&samples[start..end])
    }

    /// Summarizes samples that are already sorted ascending and contain no NaN.
    /// `None` when empty.
    pub fn from_sorted(sorted: &[f64]) -> Option<Distribution> {
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        debug_assert!(
            sorted.windows(2).all(|w| w[0] <= w[1]),
            "samples not sorted"
        );
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let stddev = (n >= 2).then(|| {
            let ss: f64 = sorted.iter().map(|x| (x - mean) * (x - mean)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        let q = |p: f64| type7(n as u64, p, |i| sorted[i as usize]);
        Some(Distribution {
            count: n as u64,
            mean,
            stddev,
            min: sorted[0],
            p50: q(QUANTILES[0]),
            p90: q(QUANTILES[1]),
            p95: q(QUANTILES[2]),
            p99: q(QUANTILES[3]),
            p999: q(QUANTILES[4]),
            max: sorted[n - 1],
            bucketed: None,
        })
    }

    /// Summarizes `(value, weight)` pairs exactly as [`Distribution::from_samples`]
    /// would summarize a list holding each value `weight` times, without building
    /// that list (per-token ITL enters one gap once per token). Sorts in place by
    /// value; NaN values and zero weights are ignored. `None` when nothing remains.
    pub fn from_weighted(samples: &mut [(f64, u64)]) -> Option<Distribution> {
        sort_weighted(samples);
        Self::from_sorted_weighted(samples)
    }

    /// [`Distribution::from_weighted`] of pairs already sorted by value: the figures
    /// of a sort done once and shared. The sum behind the mean runs in the pairs'
    /// order, so equal values of different weights must be in the order the caller's
    /// sort left them for the result to match that sort's bit for bit. NaN values and
    /// zero weights are ignored; `None` when nothing remains.
    pub fn from_sorted_weighted(sorted: &[(f64, u64)]) -> Option<Distribution> {
        debug_assert!(
            sorted.windows(2).all(|w| w[0].0.total_cmp(&w[1].0).is_le()),
            "pairs not sorted"
        );
        let kept: Vec<(f64, u64)> = sorted
            .iter()
            .copied()
            .filter(|&(x, w)| w > 0 && !x.is_nan())
            .collect();
        if kept.is_empty() {
            return None;
        }
        // cum[i] = total weight of kept[..=i]; weights can be token counts from a
        // server (usage 2^64 − 1), so the total saturates rather than wraps.
        let cum: Vec<u64> = kept
            .iter()
            .scan(0u64, |acc, &(_, w)| {
                *acc = acc.saturating_add(w);
                Some(*acc)
            })
            .collect();
        let n = *cum.last().expect("non-empty");
        // The value at 0-based rank k of the expanded list.
        let at = |k: u64| kept[cum.partition_point(|&c| c <= k)].0;
        let nf = n as f64;
        let mean = kept.iter().map(|&(x, w)| x * w as f64).sum::<f64>() / nf;
        let stddev = (n >= 2).then(|| {
            let ss: f64 = kept
                .iter()
                .map(|&(x, w)| w as f64 * (x - mean) * (x - mean))
                .sum();
            (ss / (nf - 1.0)).sqrt()
        });
        let q = |p: f64| type7(n, p, at);
        Some(Distribution {
            count: n,
            mean,
            stddev,
            min: kept[0].0,
            p50: q(QUANTILES[0]),
            p90: q(QUANTILES[1]),
            p95: q(QUANTILES[2]),
            p99: q(QUANTILES[3]),
            p999: q(QUANTILES[4]),
            max: kept[kept.len() - 1].0,
            bucketed: None,
        })
    }

    /// The same distribution with every value multiplied by `factor` (a unit change,
    /// e.g. `1e-3` for ms → s). `count` is unchanged; `factor` must be positive.
    pub fn scaled(&self, factor: f64) -> Distribution {
        Distribution {
            count: self.count,
            mean: self.mean * factor,
            stddev: self.stddev.map(|s| s * factor),
            min: self.min * factor,
            p50: self.p50 * factor,
            p90: self.p90 * factor,
            p95: self.p95 * factor,
            p99: self.p99 * factor,
            p999: self.p999 * factor,
            max: self.max * factor,
            bucketed: self.bucketed.map(|b| Bucketing {
                relative_error: b.relative_error,
                resolution: b.resolution * factor,
            }),
        }
    }
}

/// Sorts `v` ascending by `f64::total_cmp`, by sorting the integer keys that order the
/// same way ([`total_key`]): one integer comparison instead of two bit twiddles and a
/// comparison each time. Under `total_cmp` equal values have the same bits, so the
/// result is the one `v.sort_unstable_by(f64::total_cmp)` gives, bit for bit.
pub fn sort_total(v: &mut [f64]) {
    let keys = sorted_keys(v);
    for (x, k) in v.iter_mut().zip(keys) {
        *x = from_total_key(k);
    }
}

/// A copy of `v` sorted as [`sort_total`] sorts it, without touching `v`.
pub fn sorted_total(v: &[f64]) -> Vec<f64> {
    sorted_keys(v).into_iter().map(from_total_key).collect()
}

/// The [`total_key`]s of `v`, ascending.
fn sorted_keys(v: &[f64]) -> Vec<u64> {
    let mut keys: Vec<u64> = v.iter().map(|&x| total_key(x)).collect();
    keys.sort_unstable();
    keys
}

/// Sorts weighted samples ascending by value, the sort [`Distribution::from_weighted`]
/// summarizes after: equal values of different weights end in the order it leaves
/// them, which the mean's sum depends on, so every caller that must agree with it bit
/// for bit sorts with this.
pub fn sort_weighted(v: &mut [(f64, u64)]) {
    v.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
}

/// `x`'s place in the order of `f64::total_cmp` as an unsigned integer: `a.total_cmp(&b)`
/// is `total_key(a).cmp(&total_key(b))` (negative values have their magnitude bits
/// flipped, as `total_cmp` does, and the sign bit is flipped to order signed as unsigned).
pub fn total_key(x: f64) -> u64 {
    let b = x.to_bits();
    b ^ ((((b as i64) >> 63) as u64) >> 1) ^ (1 << 63)
}

/// The value whose [`total_key`] is `k`.
pub fn from_total_key(k: u64) -> f64 {
    let b = k ^ (1 << 63);
    f64::from_bits(b ^ ((((b as i64) >> 63) as u64) >> 1))
}

/// The p-quantile (`0 ≤ p ≤ 1`) of ascending `sorted` samples by the type-7 rule of
/// [`PERCENTILE_RULE`]; `None` when empty. `p` outside `[0, 1]` is clamped.
///
/// The interpolation is written as numpy writes it (from the nearer rank), so p = 1
/// returns the maximum exactly and results are monotone in `p`.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    Some(type7(sorted.len() as u64, p, |i| sorted[i as usize]))
}

/// The median of `v` (the mean of the two middle values when their count is even);
/// `None` when empty. Sorts `v` in place.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, 0.5)
}

/// Type-7 quantile of `n ≥ 1` ascending values, `at(k)` being the value of rank `k`.
pub fn type7(n: u64, p: f64, at: impl Fn(u64) -> f64) -> f64 {
    let p = p.clamp(0.0, 1.0);
    let h = (n - 1) as f64 * p;
    let lo = h.floor();
    let lo_i = lo as u64;
    let hi_i = (h.ceil() as u64).min(n - 1);
    let (a, b) = (at(lo_i), at(hi_i));
    let t = h - lo;
    if lo_i == hi_i || a == b {
        return a;
    }
    let d = b - a;
    if t < 0.5 {
        a + d * t
    } else {
        b - d * (1.0 - t)
    }
}

/// Serde adapter for `Option<Distribution>` holding milliseconds: the report's time
/// object `{count, mean_ms, stddev_ms, min_ms, p50_ms, p90_ms, p95_ms, p99_ms,
/// p999_ms, max_ms}` (`stddev_ms` may be `null`), or `null` when there were no samples.
/// Use with `#[serde(with = "cadence_core::stats::as_ms")]`.
pub mod as_ms {
    use super::{Bucketing, Distribution};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ms {
        count: u64,
        mean_ms: f64,
        stddev_ms: Option<f64>,
        min_ms: f64,
        p50_ms: f64,
        p90_ms: f64,
        p95_ms: f64,
        p99_ms: f64,
        p999_ms: f64,
        max_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bucketed: Option<Bucketing>,
    }

    /// Writes `v` as the report's millisecond time object, or `null` for `None`.
    pub fn serialize<S: Serializer>(v: &Option<Distribution>, s: S) -> Result<S::Ok, S::Error> {
        v.map(|d| Ms {
            count: d.count,
            mean_ms: d.mean,
            stddev_ms: d.stddev,
            min_ms: d.min,
            p50_ms: d.p50,
            p90_ms: d.p90,
            p95_ms: d.p95,
            p99_ms: d.p99,
            p999_ms: d.p999,
            max_ms: d.max,
            bucketed: d.bucketed,
        })
        .serialize(s)
    }

    /// Reads the report's millisecond time object back, `null` as `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Distribution>, D::Error> {
        Ok(Option::<Ms>::deserialize(d)?.map(|m| Distribution {
            count: m.count,
            mean: m.mean_ms,
            stddev: m.stddev_ms,
            min: m.min_ms,
            p50: m.p50_ms,
            p90: m.p90_ms,
            p95: m.p95_ms,
            p99: m.p99_ms,
            p999: m.p999_ms,
            max: m.max_ms,
            bucketed: m.bucketed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn sort_total_is_the_total_cmp_sort_bit_for_bit() {
        let odd = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff8_0000_0000_0001),
            3.0,
            3.0,
            -0.0,
        ];
        let mut s = 17u64;
        let mut v: Vec<f64> = (0..5_000)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Random bit patterns (every kind of f64) and a few repeats.
                if i % 7 == 0 {
                    odd[i % odd.len()]
                } else {
                    f64::from_bits(s)
                }
            })
            .collect();
        v.extend(odd);
        let mut want = v.clone();
        want.sort_unstable_by(f64::total_cmp);
        sort_total(&mut v);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&v), bits(&want));
        for w in want.windows(2) {
            assert_eq!(total_key(w[0]).cmp(&total_key(w[1])), w[0].total_cmp(&w[1]));
            assert_eq!(from_total_key(total_key(w[0])).to_bits(), w[0].to_bits());
        }
    }

    #[track_caller]
    fn assert_close(a: f64, b: f64) {
        assert!(close(a, b), "{a} != {b}");
    }

    #[test]
    fn empty_is_none() {
        assert_eq!(Distribution::from_samples(&mut []), None);
        assert_eq!(quantile_sorted(&[], 0.5), None);
    }

    #[test]
    fn four_values_type7() {
        let d = Distribution::from_samples(&mut [1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(d.count, 4);
        assert_eq!(d.mean, 2.5);
        assert_eq!(d.min, 1.0);
        assert_eq!(d.max, 4.0);
        assert_eq!(d.p50, 2.5);
        assert_close(d.p90, 3.7);
        assert_close(d.p95, 3.85);
        assert_close(d.p99, 3.97);
        assert_close(d.p999, 3.997);
        // sample variance: (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3
        assert_close(d.stddev.unwrap(), (5.0f64 / 3.0).sqrt());
    }

    #[test]
    fn single_sample_has_no_stddev() {
        let d = Distribution::from_samples(&mut [7.5]).unwrap();
        assert_eq!(d.count, 1);
        assert_eq!(d.stddev, None);
        for v in [d.mean, d.min, d.p50, d.p90, d.p95, d.p99, d.p999, d.max] {
            assert_eq!(v, 7.5);
        }
    }

    #[test]
    fn two_samples() {
        let d = Distribution::from_samples(&mut [10.0, 20.0]).unwrap();
        assert_eq!(d.count, 2);
        assert_eq!(d.mean, 15.0);
        assert_eq!(d.p50, 15.0);
        assert_close(d.p90, 19.0);
        assert_close(d.p95, 19.5);
        assert_close(d.p99, 19.9);
        assert_close(d.p999, 19.99);
        // sqrt(((-5)^2 + 5^2) / 1) = sqrt(50)
        assert_close(d.stddev.unwrap(), 50f64.sqrt());
    }

    #[test]
    fn unsorted_input_is_sorted() {
        let mut s = [4.0, 1.0, 3.0, 2.0];
        let d = Distribution::from_samples(&mut s).unwrap();
        assert_eq!(s, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!((d.min, d.p50, d.max), (1.0, 2.5, 4.0));
        assert_close(d.p90, 3.7);
    }

    #[test]
    fn large_n_hits_ranks_exactly() {
        // 1..=1001 shuffled deterministically: h = 1000·p lands on integer ranks.
        let mut s: Vec<f64> = (0..1001u64)
            .map(|i| ((i * 389) % 1001 + 1) as f64)
            .collect();
        let d = Distribution::from_samples(&mut s).unwrap();
        assert_eq!(d.count, 1001);
        assert_eq!(d.min, 1.0);
        assert_eq!(d.max, 1001.0);
        assert_eq!(d.mean, 501.0);
        assert_eq!(d.p50, 501.0);
        assert_close(d.p90, 901.0);
        assert_close(d.p95, 951.0);
        assert_close(d.p99, 991.0);
        assert_close(d.p999, 1000.0);
        // population of 1..=N: sample variance = N(N+1)/12
        assert_close(d.stddev.unwrap(), (1001.0f64 * 1002.0 / 12.0).sqrt());
    }

    #[test]
    fn large_n_interpolates() {
        // 0, 10, 20, ..., 990 (n = 100): p99 has h = 98.01 → 980 + 0.01·10 = 980.1.
        let mut s: Vec<f64> = (0..100).rev().map(|i| (i * 10) as f64).collect();
        let d = Distribution::from_samples(&mut s).unwrap();
        assert_close(d.p50, 495.0);
        assert_close(d.p90, 891.0);
        assert_close(d.p99, 980.1);
        assert_close(d.p999, 989.01);
    }

    #[test]
    fn nan_samples_are_ignored_without_panic() {
        let mut s = [3.0, f64::NAN, 1.0, -f64::NAN, 2.0];
        let d = Distribution::from_samples(&mut s).unwrap();
        assert_eq!((d.count, d.min, d.p50, d.max), (3, 1.0, 2.0, 3.0));
        assert_eq!(Distribution::from_samples(&mut [f64::NAN]), None);
    }

    #[test]
    fn equal_values_have_zero_stddev() {
        let d = Distribution::from_samples(&mut [5.0; 10]).unwrap();
        assert_eq!(d.stddev, Some(0.0));
        assert_eq!(d.p999, 5.0);
    }

    #[test]
    fn median_is_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![7.0]), Some(7.0));
    }

    #[test]
    fn quantile_monotone_and_clamped() {
        let s = [1.0, 2.0, 4.0, 8.0, 16.0];
        let mut prev = f64::MIN;
        for i in 0..=1000 {
            let q = quantile_sorted(&s, i as f64 / 1000.0).unwrap();
            assert!(q >= prev);
            prev = q;
        }
        assert_eq!(quantile_sorted(&s, 1.0), Some(16.0));
        assert_eq!(quantile_sorted(&s, 2.0), Some(16.0));
        assert_eq!(quantile_sorted(&s, -1.0), Some(1.0));
    }

    #[test]
    fn weighted_equals_repeated() {
        let mut w = [(30.0, 1), (5.0, 4), (10.0, 2), (f64::NAN, 3), (99.0, 0)];
        let mut rep = vec![30.0, 5.0, 5.0, 5.0, 5.0, 10.0, 10.0];
        let a = Distribution::from_weighted(&mut w).unwrap();
        let b = Distribution::from_samples(&mut rep).unwrap();
        assert_eq!(a.count, 7);
        for (x, y) in [
            (a.mean, b.mean),
            (a.stddev.unwrap(), b.stddev.unwrap()),
            (a.min, b.min),
            (a.p50, b.p50),
            (a.p90, b.p90),
            (a.p95, b.p95),
            (a.p99, b.p99),
            (a.p999, b.p999),
            (a.max, b.max),
        ] {
            assert_close(x, y);
        }
        assert_eq!(Distribution::from_weighted(&mut [(1.0, 0)]), None);
        assert_eq!(Distribution::from_weighted(&mut []), None);
    }

    #[test]
    fn scaled_changes_units_only() {
        let d = Distribution::from_samples(&mut [1000.0, 3000.0]).unwrap();
        let s = d.scaled(1e-3);
        assert_eq!((s.count, s.min, s.mean, s.max), (2, 1.0, 2.0, 3.0));
    }
}
