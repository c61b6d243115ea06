//! The summary statistics the Python tools compute (numpy's and pandas' defaults), so a
//! rebuild of a tool's figure uses the tool's own rule: mean, median, the linearly
//! interpolated percentile (numpy's default, pandas' `quantile`, R's type 7) and the
//! standard deviation with either divisor. Exact arithmetic over plain slices.

use cadence_core::stats::{quantile_sorted, sorted_total};

/// The arithmetic mean; `None` for no values.
pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The standard deviation with divisor `n - ddof` (numpy's `np.std` has `ddof = 0`,
/// pandas' `Series.std` `ddof = 1`); `None` when `n <= ddof`.
pub fn std(xs: &[f64], ddof: usize) -> Option<f64> {
    if xs.len() <= ddof {
        return None;
    }
    let m = mean(xs)?;
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (xs.len() - ddof) as f64).sqrt())
}

/// The `p`-th percentile (0..=100) by linear interpolation between the closest ranks:
/// rank `p/100 * (n - 1)` of the sorted values, numpy's arithmetic exactly (Cadence's
/// own [`quantile_sorted`]). `None` for no values or `p` outside 0..=100.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if !(0.0..=100.0).contains(&p) {
        return None;
    }
    quantile_sorted(&sorted_total(xs), p / 100.0)
}

/// The median (the 50th percentile).
pub fn median(xs: &[f64]) -> Option<f64> {
    percentile(xs, 50.0)
}

/// A statistic by the name the tools give it: `mean`, `avg`, `median`, `std`
/// (`ddof` as given), `min`, `max`, or `pNN` / `pNN.N`.
pub fn stat(xs: &[f64], name: &str, ddof: usize) -> Option<f64> {
    match name {
        "mean" | "avg" => mean(xs),
        "median" => median(xs),
        "std" | "stddev" => std(xs, ddof),
        "min" => xs.iter().copied().reduce(f64::min),
        "max" => xs.iter().copied().reduce(f64::max),
        p => percentile(xs, p.strip_prefix('p')?.parse().ok()?),
    }
}

/// A weighted distribution as GuideLLM summarizes one: values sorted, equal values
/// merged, zero weights dropped, each value's probability its weight over the total;
/// the mean and the variance weighted by them (population divisor); a percentile the
/// first value whose running sum of probabilities (added one by one) reaches it.
pub struct Pdf {
    values: Vec<f64>,
    probs: Vec<f64>,
}

impl Pdf {
    /// `pairs` are (value, weight); `None` when no weight is positive.
    pub fn new(pairs: &[(f64, f64)]) -> Option<Pdf> {
        let mut s: Vec<(f64, f64)> = pairs.to_vec();
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut values: Vec<f64> = Vec::new();
        let mut weights: Vec<f64> = Vec::new();
        for (v, w) in s {
            match values.last() {
                Some(&last) if last == v => *weights.last_mut().expect("paired") += w,
                _ => {
                    values.push(v);
                    weights.push(w);
                }
            }
        }
        let keep: Vec<usize> = (0..values.len()).filter(|&i| weights[i] > 0.0).collect();
        let values: Vec<f64> = keep.iter().map(|&i| values[i]).collect();
        let weights: Vec<f64> = keep.iter().map(|&i| weights[i]).collect();
        let total: f64 = weights.iter().sum();
        if values.is_empty() || total <= 0.0 {
            return None;
        }
        let probs = weights.iter().map(|w| w / total).collect();
        Some(Pdf { values, probs })
    }

    /// The probability-weighted mean.
    pub fn mean(&self) -> f64 {
        self.values
            .iter()
            .zip(&self.probs)
            .map(|(v, p)| v * p)
            .sum()
    }

    /// The probability-weighted standard deviation (population divisor).
    pub fn std(&self) -> f64 {
        let m = self.mean();
        self.values
            .iter()
            .zip(&self.probs)
            .map(|(v, p)| (v - m) * (v - m) * p)
            .sum::<f64>()
            .sqrt()
    }

    /// The value at probability `q` (0..=1).
    pub fn quantile(&self, q: f64) -> f64 {
        let mut cdf = 0.0;
        for (v, p) in self.values.iter().zip(&self.probs) {
            cdf += p;
            if cdf >= q {
                return *v;
            }
        }
        *self.values.last().expect("not empty")
    }

    /// A statistic by GuideLLM's name: `mean`, `median`, `std_dev`, `p50`, `p999`…
    /// (`p001` is 0.1 %, `p01` 1 %, `p999` 99.9 %).
    pub fn stat(&self, name: &str) -> Option<f64> {
        match name {
            "mean" => Some(self.mean()),
            "median" => Some(self.quantile(0.5)),
            "std_dev" => Some(self.std()),
            p => {
                let digits = p.strip_prefix('p')?;
                let x: f64 = digits.parse().ok()?;
                // "p50" is 50 %, "p999" 99.9 %, "p001" 0.1 %.
                let pct = if digits.len() == 3 { x / 10.0 } else { x };
                Some(self.quantile(pct / 100.0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) {
        let a = a.unwrap();
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn percentiles_interpolate_between_ranks_as_numpy_does() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        // np.percentile([1,2,3,4], 99) = 3 + 0.97 = 3.97; median = 2.5; p25 = 1.75
        close(percentile(&xs, 99.0), 3.97);
        close(median(&xs), 2.5);
        close(percentile(&xs, 25.0), 1.75);
        close(percentile(&xs, 0.0), 1.0);
        close(percentile(&xs, 100.0), 4.0);
        close(percentile(&[7.0], 90.0), 7.0);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&xs, 101.0), None);
        // numpy interpolates from the upper rank past the midpoint (b - (b - a)(1 - t)):
        // np.percentile([0.1, 2.3], 90) is 2.3 - 2.2 * 0.1 = 2.08 and
        // np.percentile([0.1, 0.3], 90) is 0.3 - 0.2 * 0.1 = 0.27999999999999997 in f64,
        // where a + (b - a)t gives 2.0799999999999996 and 0.28.
        assert_eq!(percentile(&[2.3, 0.1], 90.0), Some(2.08));
        assert_eq!(percentile(&[0.1, 0.3], 90.0), Some(0.27999999999999997));
    }

    #[test]
    fn std_takes_the_divisor_each_library_uses() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        // np.std: sqrt(1.25); pandas .std(): sqrt(5/3)
        close(std(&xs, 0), 1.25f64.sqrt());
        close(std(&xs, 1), (5.0f64 / 3.0).sqrt());
        assert_eq!(std(&[1.0], 1), None);
        close(mean(&xs), 2.5);
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn a_weighted_pdf_takes_the_first_value_whose_cdf_reaches_the_percentile() {
        // 1 (weight 1), 2 (weight 2), 3 (weight 1): probabilities 0.25, 0.5, 0.25
        let pdf = Pdf::new(&[(3.0, 1.0), (1.0, 1.0), (2.0, 1.0), (2.0, 1.0)]).unwrap();
        assert_eq!(pdf.stat("p25"), Some(1.0));
        assert_eq!(pdf.stat("p50"), Some(2.0));
        assert_eq!(pdf.stat("p75"), Some(2.0));
        assert_eq!(pdf.stat("p90"), Some(3.0));
        assert_eq!(pdf.stat("p999"), Some(3.0));
        assert_eq!(pdf.stat("p001"), Some(1.0));
        close(pdf.stat("mean"), 2.0);
        // variance 0.25 * 1 + 0.25 * 1 = 0.5
        close(pdf.stat("std_dev"), 0.5f64.sqrt());
        assert!(Pdf::new(&[(1.0, 0.0)]).is_none());
    }

    #[test]
    fn stats_by_name() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        close(stat(&xs, "p50", 0), 2.5);
        close(stat(&xs, "p99.9", 0), 3.997);
        close(stat(&xs, "avg", 0), 2.5);
        close(stat(&xs, "min", 0), 1.0);
        close(stat(&xs, "max", 0), 4.0);
        assert_eq!(stat(&xs, "q", 0), None);
    }
}
