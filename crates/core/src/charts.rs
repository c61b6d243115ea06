//! Compact shapes of a level's distributions for charts: ITL quantiles (a CDF), a
//! log-spaced ITL histogram, ITL by output-token position and tokens per chunk. They
//! ride in the report so an HTML page can be rebuilt from the JSON alone, without the
//! per-request records.

use crate::dist::{DistAcc, Sorted};
use crate::metrics::ms;
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The chart data in words, for the report's definitions.
pub const FORMULA: &str = "per level, from succeeded non-warm-up requests: itl_cdf = pooled \
ITL at percentiles 0..100 (type 7); itl_histogram = pooled ITL in 40 log-spaced bins from the \
smallest positive gap to the largest (smaller gaps in the first bin); itl_by_position = ITL \
p50/p90/p99 by the position of the gap's later chunk in its stream, in at most 48 equal bins; \
tokens_per_chunk = chunks by their known token count, or when no chunk's count is known \
by their request's output tokens / chunks, rounded (tokens_per_chunk_basis says which)";

/// The percentiles the ITL CDF is sampled at: 0, 1, …, 99, 99.5, 99.9, 100.
pub fn cdf_percents() -> Vec<f64> {
    let mut p: Vec<f64> = (0..100).map(f64::from).collect();
    p.extend([99.5, 99.9, 100.0]);
    p
}

/// Log-spaced bins of the ITL histogram.
pub const HISTOGRAM_BINS: usize = 40;
/// At most this many position bins in ITL by position.
pub const POSITION_BINS: u64 = 48;

/// The chart data of one level, from its succeeded non-warm-up requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartData {
    /// ITL (ms) at each of [`cdf_percents`] (type-7 quantiles of the pooled gaps).
    pub itl_cdf: Vec<CdfPoint>,
    /// Pooled ITL gaps in log-spaced bins from the smallest positive gap to the largest;
    /// gaps at or below the first edge (including 0 ms) are counted in the first bin.
    pub itl_histogram: Vec<HistogramBin>,
    /// ITL by the position of the gap's later chunk in its stream (1 = the gap after
    /// the first chunk), in bins of equal width.
    pub itl_by_position: Vec<PositionBin>,
    /// Chunks by the tokens they carried (see `tokens_per_chunk_basis`).
    pub tokens_per_chunk: Vec<TokensBin>,
    /// `chunk_counts` when the server said how many tokens each chunk carried;
    /// `request_average` when it did not, and each chunk of a request counts as the
    /// request's output tokens / chunks, rounded.
    pub tokens_per_chunk_basis: String,
}

/// One point of the ITL CDF.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdfPoint {
    /// The percentile, 0 to 100.
    pub percent: f64,
    /// The pooled ITL at that percentile, ms.
    pub ms: f64,
}

/// One bin of a log-spaced histogram (the ITL's, in ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramBin {
    /// The bin's lower edge, ms; the first bin also holds every smaller value.
    pub lo_ms: f64,
    /// The bin's upper edge, ms.
    pub hi_ms: f64,
    /// Values in the bin.
    pub count: u64,
}

/// ITL percentiles over a run of chunk positions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PositionBin {
    /// The first chunk position in the bin (1 = the gap after the first chunk).
    pub from: u64,
    /// The last chunk position in the bin (inclusive).
    pub to: u64,
    /// ITL gaps whose later chunk sits at these positions.
    pub count: u64,
    /// Their median, ms.
    pub p50_ms: f64,
    /// Their 90th percentile, ms.
    pub p90_ms: f64,
    /// Their 99th percentile, ms.
    pub p99_ms: f64,
}

/// How many chunks carried one token count (see [`ChartData::tokens_per_chunk_basis`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensBin {
    /// Tokens in a chunk.
    pub tokens: u32,
    /// Chunks that carried that many.
    pub chunks: u64,
}

/// The chart data of a level; `None` when no succeeded request has an ITL gap or a
/// chunk with a known token count. A fold of [`ChartsAcc`].
pub fn chart_data(records: &[RequestRecord]) -> Option<ChartData> {
    let mut acc = ChartsAcc::default();
    for r in records {
        acc.push(r);
    }
    acc.finish()
}

/// [`chart_data`] one record at a time. ITL by position keeps one distribution per
/// chunk position while exact; once bucketed, positions are grouped `group` at a time
/// (a power of two) into at most `2 × POSITION_BINS` groups.
#[derive(Debug, Clone)]
pub struct ChartsAcc {
    /// The smallest positive gap (the histogram's first edge), exact.
    min_pos: Option<f64>,
    /// Indexed by `(position - 1) / group`; a group no gap reached is empty and read
    /// as absent ([`ChartsAcc::groups`]). Together they hold every pooled gap once. A
    /// vector, not a map: every gap of every record lands here, and an index is a few
    /// instructions where a tree's search was a hundred.
    by_pos: Vec<DistAcc>,
    group: u64,
    coarse: bool,
    last_pos: u64,
    per_chunk: BTreeMap<u32, u64>,
    per_chunk_avg: BTreeMap<u32, u64>,
}

impl Default for ChartsAcc {
    fn default() -> Self {
        ChartsAcc {
            min_pos: None,
            by_pos: Vec::new(),
            group: 1,
            coarse: false,
            last_pos: 0,
            per_chunk: BTreeMap::new(),
            per_chunk_avg: BTreeMap::new(),
        }
    }
}

impl ChartsAcc {
    /// Takes one record; returns the values it kept exactly (for the level's budget).
    pub fn push(&mut self, r: &RequestRecord) -> u64 {
        if r.outcome != Outcome::Succeeded || r.warmup {
            return 0;
        }
        let mut kept = 0;
        for (i, w) in r.chunks.windows(2).enumerate() {
            if let Some(g) = w[1].t_ns().checked_sub(w[0].t_ns()) {
                let (v, pos) = (ms(g), i as u64 + 1);
                if v > 0.0 {
                    self.min_pos = Some(self.min_pos.map_or(v, |m| m.min(v)));
                }
                self.last_pos = self.last_pos.max(pos);
                while self.coarse && (pos - 1) / self.group >= 2 * POSITION_BINS {
                    self.regroup(self.group * 2);
                }
                let coarse = self.coarse;
                kept += self.group_mut((pos - 1) / self.group).push_in(v, coarse);
            }
        }
        for c in &r.chunks {
            if let Some(k) = c.tokens() {
                *self.per_chunk.entry(k).or_default() += 1;
            }
        }
        let c = r.chunks.len() as u64;
        if c > 0 {
            let avg = (r.output_token_count().count as f64 / c as f64).round() as u32;
            *self.per_chunk_avg.entry(avg).or_default() += c;
        }
        kept
    }

    /// Groups positions `group` at a time (a multiple of the current group).
    fn regroup(&mut self, group: u64) {
        if group == self.group {
            return;
        }
        let ratio = group / self.group;
        let old = std::mem::take(&mut self.by_pos);
        for (k, d) in old.iter().enumerate().filter(|(_, d)| d.count() > 0) {
            self.group_mut(k as u64 / ratio).merge(d);
        }
        self.group = group;
    }

    /// The position groups that hold gaps, by key, in key order (what a map of the
    /// groups would hold).
    fn groups(&self) -> impl Iterator<Item = (u64, &DistAcc)> {
        self.by_pos
            .iter()
            .enumerate()
            .filter(|(_, d)| d.count() > 0)
            .map(|(k, d)| (k as u64, d))
    }

    /// The group with key `k`, made (empty) when new.
    fn group_mut(&mut self, k: u64) -> &mut DistAcc {
        let k = usize::try_from(k).expect("a position group fits in memory");
        if k >= self.by_pos.len() {
            self.by_pos.resize_with(k + 1, DistAcc::new);
        }
        &mut self.by_pos[k]
    }

    /// Folds every distribution into its histogram and bounds the position groups.
    pub fn bucketize(&mut self) {
        self.coarse = true;
        let mut g = self.group;
        while self.last_pos.saturating_sub(1) / g >= 2 * POSITION_BINS {
            g *= 2;
        }
        self.regroup(g);
        self.by_pos
            .iter_mut()
            .filter(|d| d.count() > 0)
            .for_each(DistAcc::to_bucketed);
    }

    /// Heap bytes held by the position groups and the token counts.
    pub fn approx_bytes(&self) -> usize {
        self.groups()
            .map(|(_, d)| d.approx_bytes() + std::mem::size_of::<(u64, DistAcc)>())
            .sum::<usize>()
            + (self.per_chunk.len() + self.per_chunk_avg.len()) * std::mem::size_of::<(u32, u64)>()
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &ChartsAcc) {
        let mut o = std::borrow::Cow::Borrowed(o);
        if o.coarse && !self.coarse {
            self.bucketize();
        }
        if self.coarse && !o.coarse {
            o.to_mut().bucketize();
        }
        let g = self.group.max(o.group);
        self.regroup(g);
        o.to_mut().regroup(g);
        self.min_pos = match (self.min_pos, o.min_pos) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (k, d) in o.groups() {
            self.group_mut(k).merge(d);
        }
        self.last_pos = self.last_pos.max(o.last_pos);
        for (k, n) in &o.per_chunk {
            *self.per_chunk.entry(*k).or_default() += n;
        }
        for (k, n) in &o.per_chunk_avg {
            *self.per_chunk_avg.entry(*k).or_default() += n;
        }
        if self.coarse {
            self.bucketize();
        }
    }

    /// The level's chart data ([`chart_data`]'s answer); `None` when no succeeded request
    /// has an ITL gap or a chunk with a known token count.
    pub fn finish(&self) -> Option<ChartData> {
        self.finish_with(None)
    }

    /// [`ChartsAcc::finish`], given the level's pooled ITL already sorted (`pooled`, the
    /// [`crate::timeseries::TimeSeriesAcc::pooled_itl`] of the same records): while the
    /// position groups hold exactly its samples, its sort is read instead of sorting
    /// them again. A sorted view depends only on the samples, not their order, so the
    /// figures are the same either way.
    pub fn finish_with(&self, pooled: Option<&Sorted<'_>>) -> Option<ChartData> {
        let (per_chunk, basis) = if self.per_chunk.is_empty() {
            (&self.per_chunk_avg, "request_average")
        } else {
            (&self.per_chunk, "chunk_counts")
        };
        let percents = cdf_percents();
        let fractions: Vec<f64> = percents.iter().map(|p| p / 100.0).collect();
        let same = pooled.filter(|p| self.holds_exactly(p));
        // Every pooled gap, from the position groups (merged in position order), sorted
        // once for the CDF's 103 quantiles and the histogram's values.
        let (merged, own);
        let gaps: &Sorted<'_> = match same {
            Some(p) => p,
            None => {
                let mut all = DistAcc::new();
                self.groups().for_each(|(_, d)| all.merge(d));
                merged = all;
                own = merged.sorted();
                &own
            }
        };
        let cdf = gaps.quantiles(&fractions);
        if cdf.is_none() && per_chunk.is_empty() {
            return None;
        }
        let itl_cdf = cdf.map_or_else(Vec::new, |qs| {
            percents
                .into_iter()
                .zip(qs)
                .map(|(percent, ms)| CdfPoint { percent, ms })
                .collect()
        });
        Some(ChartData {
            itl_cdf,
            itl_histogram: weighted_log_histogram(
                &gaps.sorted_values(),
                self.min_pos,
                HISTOGRAM_BINS,
            ),
            itl_by_position: self.position_bins(),
            tokens_per_chunk: per_chunk
                .iter()
                .map(|(&tokens, &chunks)| TokensBin { tokens, chunks })
                .collect(),
            tokens_per_chunk_basis: basis.to_string(),
        })
    }

    /// Whether the position groups hold exactly the samples of `pooled` (the level's
    /// pooled ITL of the same records, sorted). Its gaps are some of theirs: the
    /// succeeded records' gaps that do not end before they start, less those of a record
    /// without a send time and those holding a wait on a slow proxy client
    /// ([`crate::metrics::itl_gaps`]). So when both are exact and hold as many, they
    /// hold the same.
    fn holds_exactly(&self, pooled: &Sorted<'_>) -> bool {
        let held: u64 = self.groups().map(|(_, d)| d.count()).sum();
        !self.coarse && pooled.is_exact_unit() && pooled.count() == held
    }

    fn position_bins(&self) -> Vec<PositionBin> {
        if self.groups().next().is_none() {
            return Vec::new();
        }
        // Bins of equal width, a whole number of position groups each.
        let width = self
            .last_pos
            .div_ceil(POSITION_BINS)
            .max(1)
            .div_ceil(self.group)
            * self.group;
        let mut bins: BTreeMap<u64, DistAcc> = BTreeMap::new();
        for (k, d) in self.groups() {
            bins.entry(k * self.group / width).or_default().merge(d);
        }
        bins.into_iter()
            .filter_map(|(b, d)| {
                let q = d.quantiles(&[0.5, 0.9, 0.99])?;
                Some(PositionBin {
                    from: b * width + 1,
                    to: (b + 1) * width,
                    count: d.count(),
                    p50_ms: q[0],
                    p90_ms: q[1],
                    p99_ms: q[2],
                })
            })
            .collect()
    }
}

/// `bins` log-spaced bins over ascending `sorted` values; empty for no values. With a
/// single positive value (or none), one bin around it.
pub fn log_histogram(sorted: &[f64], bins: usize) -> Vec<HistogramBin> {
    let pairs: Vec<(f64, u64)> = sorted.iter().map(|&x| (x, 1)).collect();
    let min_pos = sorted.iter().copied().find(|&x| x > 0.0);
    weighted_log_histogram(&pairs, min_pos, bins)
}

/// [`log_histogram`] over ascending `(value, weight)` pairs, the first edge being
/// `min_pos` (the smallest positive value).
fn weighted_log_histogram(
    sorted: &[(f64, u64)],
    min_pos: Option<f64>,
    bins: usize,
) -> Vec<HistogramBin> {
    let Some(&(max, _)) = sorted.last() else {
        return Vec::new();
    };
    let (lo, hi) = match min_pos {
        Some(lo) if max > lo => (lo, max),
        Some(lo) => (lo / 1.1, lo * 1.1),
        None => (1e-3, 1e-3 * 1.1),
    };
    let n = bins.max(1);
    let ratio = (hi / lo).ln() / n as f64;
    let edge = |i: usize| {
        if i == n {
            hi
        } else {
            lo * (ratio * i as f64).exp()
        }
    };
    let mut out: Vec<HistogramBin> = (0..n)
        .map(|i| HistogramBin {
            lo_ms: edge(i),
            hi_ms: edge(i + 1),
            count: 0,
        })
        .collect();
    for &(x, w) in sorted {
        let i = if x <= lo {
            0
        } else {
            (((x / lo).ln() / ratio) as usize).min(n - 1)
        };
        out[i].count += w;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Chunk;

    const MS: u64 = 1_000_000;

    fn rec(chunks_ms: &[u64], tokens: Option<u32>) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = chunks_ms.iter().map(|&t| Chunk(t * MS, tokens)).collect();
        r.end_ns = chunks_ms.last().map(|t| t * MS);
        r
    }

    #[test]
    fn cdf_is_the_type7_quantiles_of_pooled_gaps() {
        // gaps: 10, 20 and 30, 40
        let d = chart_data(&[rec(&[0, 10, 30], None), rec(&[0, 30, 70], None)]).unwrap();
        assert_eq!(d.itl_cdf.len(), 103);
        assert_eq!(d.itl_cdf[0].ms, 10.0);
        assert_eq!(d.itl_cdf[50].ms, 25.0);
        assert_eq!(d.itl_cdf.last().unwrap().ms, 40.0);
        assert!(d.itl_cdf.windows(2).all(|w| w[0].ms <= w[1].ms));
        // No per-chunk counts: each request's average (3 chunks, 3 tokens) stands in.
        assert_eq!(
            d.tokens_per_chunk,
            [TokensBin {
                tokens: 1,
                chunks: 6
            }]
        );
        assert_eq!(d.tokens_per_chunk_basis, "request_average");
    }

    /// The charts and the level's pooled ITL (the time series') fed the same records.
    fn both(records: &[RequestRecord]) -> (ChartsAcc, crate::timeseries::TimeSeriesAcc) {
        let mut charts = ChartsAcc::default();
        let mut series = crate::timeseries::TimeSeriesAcc::new(1_000 * MS);
        for r in records {
            charts.push(r);
            series.push(r);
        }
        (charts, series)
    }

    #[test]
    fn the_pooled_itls_sort_stands_in_only_for_the_same_gaps() {
        // Jittery gaps over several requests, one with a gap that ends before it starts.
        let mut records: Vec<RequestRecord> = (0..40u64)
            .map(|i| {
                let times: Vec<u64> = (0..12u64)
                    .scan(0, |t, k| {
                        *t += 1 + (i * 7 + k * 13) % 29;
                        Some(*t)
                    })
                    .collect();
                rec(&times, Some(1))
            })
            .collect();
        records[3].chunks.swap(4, 5);
        let (charts, series) = both(&records);
        let pooled = series.pooled_itl();
        let pooled = pooled.sorted();
        assert!(charts.holds_exactly(&pooled));
        assert_eq!(charts.finish_with(Some(&pooled)), charts.finish());

        // A gap the pooled ITL leaves out (a wait on a slow proxy client), and the gaps
        // of a succeeded record with no send time: the charts' own sort is used.
        let mut waited = records.clone();
        waited[5].proxy = Some(Box::new(crate::record::ProxyInfo {
            downstream_gaps: vec![3],
            ..Default::default()
        }));
        let mut unsent = records.clone();
        unsent[7].sent_ns = None;
        for set in [waited, unsent] {
            let (charts, series) = both(&set);
            let pooled = series.pooled_itl();
            let pooled = pooled.sorted();
            assert!(!charts.holds_exactly(&pooled));
            assert_eq!(charts.finish_with(Some(&pooled)), charts.finish());
            assert!(pooled.count() < charts.groups().map(|(_, d)| d.count()).sum());
        }

        // Bucketed charts, or another level's pooled ITL: not the same samples.
        let (mut charts, series) = both(&records);
        let (other, _) = both(&records[..10]);
        let pooled = series.pooled_itl();
        let pooled = pooled.sorted();
        assert!(!other.holds_exactly(&pooled));
        charts.bucketize();
        assert!(!charts.holds_exactly(&pooled));
        assert_eq!(charts.finish_with(Some(&pooled)), charts.finish());
    }

    #[test]
    fn histogram_counts_every_gap_once_in_log_bins() {
        let v = [0.0, 1.0, 1.5, 3.0, 5.0, 8.0];
        let h = log_histogram(&v, 3);
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].lo_ms, 1.0);
        assert_eq!(h[2].hi_ms, 8.0);
        assert!((h[1].lo_ms - 2.0).abs() < 1e-9);
        // Edges 1, 2, 4, 8: 0, 1 and 1.5 in the first bin, 3 in the second, 5 and 8
        // (the top edge) in the last.
        assert_eq!(h.iter().map(|b| b.count).collect::<Vec<_>>(), [3, 1, 2]);
        assert!(log_histogram(&[], 3).is_empty());
        assert_eq!(
            log_histogram(&[5.0, 5.0], 2)
                .iter()
                .map(|b| b.count)
                .sum::<u64>(),
            2
        );
        assert_eq!(
            log_histogram(&[0.0], 2)
                .iter()
                .map(|b| b.count)
                .sum::<u64>(),
            1
        );
    }

    #[test]
    fn position_bins_group_gaps_by_their_place_in_the_stream() {
        // Position 1 gaps: 10 and 30; position 2 gaps: 20 and 40.
        let d = chart_data(&[rec(&[0, 10, 30], Some(2)), rec(&[0, 30, 70], Some(1))]).unwrap();
        assert_eq!(d.itl_by_position.len(), 2);
        let p1 = d.itl_by_position[0];
        assert_eq!((p1.from, p1.to, p1.count), (1, 1, 2));
        assert_eq!(p1.p50_ms, 20.0);
        assert_eq!(d.itl_by_position[1].p50_ms, 30.0);
        assert_eq!(
            d.tokens_per_chunk,
            [
                TokensBin {
                    tokens: 1,
                    chunks: 3
                },
                TokensBin {
                    tokens: 2,
                    chunks: 3
                }
            ]
        );
        assert_eq!(d.tokens_per_chunk_basis, "chunk_counts");
        // 100 positions fold into bins of 3 (ceil(100/48)).
        let long: Vec<u64> = (0..=100).collect();
        let d = chart_data(&[rec(&long, None)]).unwrap();
        assert_eq!(d.itl_by_position[0].to, 3);
        assert_eq!(d.itl_by_position.iter().map(|b| b.count).sum::<u64>(), 100);
        assert!(d.itl_by_position.len() <= POSITION_BINS as usize);
    }

    #[test]
    fn failed_requests_and_chunkless_levels_draw_nothing() {
        let mut r = rec(&[0, 10], None);
        r.outcome = Outcome::Http5xx;
        assert_eq!(chart_data(&[r]), None);
        assert_eq!(chart_data(&[rec(&[], None)]), None);
        let one = chart_data(&[rec(&[5], None)]).unwrap();
        assert!(one.itl_cdf.is_empty() && one.itl_histogram.is_empty());
        assert_eq!(
            one.tokens_per_chunk,
            [TokensBin {
                tokens: 1,
                chunks: 1
            }]
        );
    }

    /// What `finish` did before it sorted once: the pooled gaps merged and sorted for
    /// the CDF, sorted again for the histogram, each position bin merged and sorted.
    fn naive(acc: &ChartsAcc) -> String {
        let mut gaps = DistAcc::new();
        acc.groups().for_each(|(_, d)| gaps.merge(d));
        let pcts: Vec<f64> = cdf_percents().iter().map(|p| p / 100.0).collect();
        let histogram = weighted_log_histogram(&gaps.sorted_values(), acc.min_pos, HISTOGRAM_BINS);
        let width = acc
            .last_pos
            .div_ceil(POSITION_BINS)
            .max(1)
            .div_ceil(acc.group)
            * acc.group;
        let mut bins: BTreeMap<u64, DistAcc> = BTreeMap::new();
        for (k, d) in acc.groups() {
            bins.entry(k * acc.group / width).or_default().merge(d);
        }
        let bins: Vec<_> = bins
            .iter()
            .map(|(b, d)| (b, d.count(), d.sorted().quantiles(&[0.5, 0.9, 0.99])))
            .collect();
        format!(
            "{:?} {histogram:?} {bins:?}",
            gaps.sorted().quantiles(&pcts)
        )
    }

    fn fast(acc: &ChartsAcc) -> String {
        let d = acc.finish().unwrap();
        let cdf: Option<Vec<f64>> =
            (!d.itl_cdf.is_empty()).then(|| d.itl_cdf.iter().map(|p| p.ms).collect());
        let width = d.itl_by_position[0].to;
        let bins: Vec<_> = d
            .itl_by_position
            .iter()
            .map(|b| {
                let q = vec![b.p50_ms, b.p90_ms, b.p99_ms];
                ((b.from - 1) / width, b.count, Some(q))
            })
            .collect();
        format!("{cdf:?} {:?} {bins:?}", d.itl_histogram)
    }

    #[test]
    fn figures_sorted_once_or_selected_are_what_a_sort_per_figure_gave() {
        // Streams of up to 150 chunks, gaps with ties (0 ms among them).
        let mut next = crate::testrng::lcg(3);
        let recs: Vec<RequestRecord> = (0..200)
            .map(|_| {
                let mut t = 0;
                let chunks: Vec<u64> = (0..1 + next(150))
                    .map(|_| {
                        t += next(4) * 10 + next(3) * next(2_000) / 100;
                        t
                    })
                    .collect();
                rec(&chunks, Some(1))
            })
            .collect();
        let mut acc = ChartsAcc::default();
        recs.iter().for_each(|r| {
            acc.push(r);
        });
        assert_eq!(fast(&acc), naive(&acc));
        // Two halves merged (a fleet's shards).
        let mut half = ChartsAcc::default();
        let mut rest = ChartsAcc::default();
        recs[..70].iter().for_each(|r| {
            half.push(r);
        });
        recs[70..].iter().for_each(|r| {
            rest.push(r);
        });
        half.merge(&rest);
        assert_eq!(fast(&half), naive(&acc));
        // Bucketed: the histograms' figures, as before.
        acc.bucketize();
        assert_eq!(fast(&acc), naive(&acc));
    }
}
