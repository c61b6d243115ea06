//! Incremental level aggregation: a [`LevelAggregator`] takes one finished record at a
//! time and keeps, in bounded memory, everything a level's report needs (summary,
//! pacing, goodput, time series, conventions, charts, record warnings), so no source
//! has to hold a `Vec` of its records. [`LevelAggregators`] keys them by level and is
//! the [`RecordSink`] sources feed.

use crate::attribution::GapsAcc;
use crate::charts::{ChartData, ChartsAcc};
use crate::conventions::{ConventionView, ConventionsAcc};
use crate::dist::RELATIVE_ERROR;
use crate::metrics::{LevelOptions, LevelSummary, SummaryAcc, DEFAULT_STALL_THRESHOLD_NS};
use crate::pacing::{Pacing, PacingAcc};
use crate::slo::{Goodput, GoodputAcc, Slo};
use crate::timeseries::{TimeBucket, TimeSeriesAcc};
use crate::{Outcome, RecordSink, RequestRecord};
use std::collections::BTreeMap;

/// Values a level keeps exactly, over all its distributions, before they continue in
/// histograms (`--exact-samples`): 4 M values, about 32–64 MB of samples per level.
pub const DEFAULT_EXACT_SAMPLES: u64 = 4_000_000;

/// Distinct failure messages kept per outcome class for the record warnings.
pub const MAX_MESSAGES_PER_CLASS: usize = 256;

/// How a level is aggregated: the facts its records cannot tell.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelConfig {
    /// ITL gaps strictly longer than this are stalls.
    pub stall_threshold_ns: u64,
    /// Width of the time-series buckets (0 is taken as 1 ns).
    pub time_bucket_ns: u64,
    /// The SLOs goodput counts requests against.
    pub slos: Vec<Slo>,
    /// `--max-late`: the late share above which an open-loop level is invalid.
    pub max_late: f64,
    /// The level's budget of exactly kept values ([`DEFAULT_EXACT_SAMPLES`]).
    pub exact_samples: u64,
    /// Bytes of histograms the time series holds once bucketed
    /// ([`crate::timeseries::MAX_HISTOGRAM_BYTES`]).
    pub series_bytes: usize,
    /// Session re-pricings (`--what-if`).
    pub what_if: Vec<crate::sessions::WhatIf>,
}

impl Default for LevelConfig {
    fn default() -> Self {
        LevelConfig {
            stall_threshold_ns: DEFAULT_STALL_THRESHOLD_NS,
            time_bucket_ns: 1_000_000_000,
            slos: Vec::new(),
            max_late: 0.001,
            exact_samples: DEFAULT_EXACT_SAMPLES,
            series_bytes: crate::timeseries::MAX_HISTOGRAM_BYTES,
            what_if: Vec::new(),
        }
    }
}

/// Everything a level's report is built from, as the old per-`Vec` functions computed it.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelFigures {
    /// [`crate::summarize_level`].
    pub summary: LevelSummary,
    /// [`crate::pacing()`], the runner's dropped count taken from the options.
    pub pacing: Option<Pacing>,
    /// [`crate::goodput`] against the configured SLOs over the summary's window.
    pub goodput: Goodput,
    /// [`crate::time_series`], from bucket 0.
    pub time_series: Vec<TimeBucket>,
    /// [`crate::convention_views`].
    pub conventions: Vec<ConventionView>,
    /// [`crate::chart_data`].
    pub charts: Option<ChartData>,
    /// Where the time went, from the server's own per-request timing
    /// ([`crate::time_split`]); `None` when no request succeeded.
    pub time_split: Option<crate::TimeSplit>,
    /// Chunks of several tokens and speculation ([`crate::bursts`]).
    pub bursts: Option<crate::Bursts>,
    /// What the records say that the figures do not (failure messages, resends,
    /// unannounced multi-token chunks, coalesced reads, bucketing), in plain words.
    pub record_warnings: Vec<String>,
}

/// One level's running state. Push records with [`LevelAggregator::push`] (or through
/// [`RecordSink`]); [`LevelAggregator::finish`] gives its figures at any time.
#[derive(Debug, Clone)]
pub struct LevelAggregator {
    config: LevelConfig,
    summary: SummaryAcc,
    pacing: PacingAcc,
    goodput: GoodputAcc,
    series: TimeSeriesAcc,
    conventions: ConventionsAcc,
    charts: ChartsAcc,
    notes: RecordNotes,
    /// Gaps over the stall threshold, for the server-side stall table.
    gaps: GapsAcc,
    /// The server's per-request timing joined with the client's.
    split: crate::TimeSplitAcc,
    /// Chunk sizes and the acceptance length from both sides.
    bursts: crate::BurstsAcc,
    /// Send and end times, for the steady state found once the level ends.
    plateau: crate::PlateauAcc,
    /// Values held exactly right now, over every distribution.
    stored: u64,
    /// The budget was spent at least once: some distributions are bucketed.
    bucketed: bool,
}

impl LevelAggregator {
    /// An empty aggregator for one level under `config`.
    pub fn new(config: LevelConfig) -> LevelAggregator {
        LevelAggregator {
            // Pooled ITL comes from the time series, which holds the same gaps.
            summary: {
                let mut s = SummaryAcc::without_pooled_itl(config.stall_threshold_ns);
                s.set_what_if(config.what_if.clone());
                s
            },
            pacing: PacingAcc::default(),
            goodput: GoodputAcc::default(),
            series: TimeSeriesAcc::new(config.time_bucket_ns).with_max_bytes(config.series_bytes),
            conventions: ConventionsAcc::default(),
            charts: ChartsAcc::default(),
            notes: RecordNotes::default(),
            gaps: GapsAcc::new(config.stall_threshold_ns),
            split: crate::TimeSplitAcc::default(),
            bursts: crate::BurstsAcc::default(),
            plateau: crate::PlateauAcc::new(config.exact_samples),
            stored: 0,
            bucketed: false,
            config,
        }
    }

    /// What this level is aggregated under.
    pub fn config(&self) -> &LevelConfig {
        &self.config
    }

    /// Takes one record of this level.
    pub fn push(&mut self, r: &RequestRecord) {
        self.stored += self.summary.push(r)
            + self.pacing.push(r)
            + self.series.push(r)
            + self.conventions.push(r)
            + self.charts.push(r);
        self.goodput.push(r, &self.config.slos);
        self.notes.push(r);
        self.gaps.push(r);
        self.split.push(r);
        self.bursts.push(r);
        self.plateau.push(r);
        self.enforce_budget();
    }

    fn enforce_budget(&mut self) {
        if self.stored > self.config.exact_samples {
            self.bucketize();
        }
    }

    /// Folds every distribution into its histogram now (what the budget does when spent).
    pub fn bucketize(&mut self) {
        self.summary.bucketize();
        self.pacing.dist_mut().to_bucketed();
        self.series.bucketize();
        self.conventions
            .dists_mut()
            .for_each(crate::DistAcc::to_bucketed);
        self.charts.bucketize();
        self.stored = 0;
        self.bucketed = true;
    }

    /// Whether any distribution went over to a histogram.
    pub fn is_bucketed(&self) -> bool {
        self.bucketed
    }

    /// Warm-up records seen (they are only counted).
    pub fn summary_warmup(&self) -> u64 {
        self.summary.warmup()
    }

    /// Values held exactly right now (at most the budget between records).
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// Heap bytes of the distributions and per-bucket state (not the small fixed maps).
    pub fn approx_bytes(&self) -> usize {
        self.summary.approx_bytes()
            + self.pacing.approx_bytes()
            + self.series.approx_bytes()
            + self.conventions.approx_bytes()
            + self.charts.approx_bytes()
            + self.notes.approx_bytes()
            + self.gaps.approx_bytes()
            + self.plateau.approx_bytes()
    }

    /// The level's steady state as a closed loop at `concurrency` whose in flight must
    /// reach `share` of it ([`crate::plateau`]); `None` when `share` is 0.
    pub fn plateau(&self, concurrency: u32, share: f64) -> Option<crate::Plateau> {
        self.plateau.finish(concurrency, share)
    }

    /// The level's client gaps over the stall threshold (bounded; see [`GapsAcc`]).
    pub fn gaps(&self) -> &GapsAcc {
        &self.gaps
    }

    /// Adds another part of the same level (aggregated with the same config): the
    /// result is what one aggregator fed both parts' records would hold. Exact parts
    /// stay exact while their values together fit the budget.
    pub fn merge(&mut self, o: &LevelAggregator) {
        self.summary.merge(&o.summary);
        self.pacing.merge(&o.pacing);
        self.goodput.merge(&o.goodput);
        self.series.merge(&o.series);
        self.conventions.merge(&o.conventions);
        self.charts.merge(&o.charts);
        self.notes.merge(&o.notes);
        self.gaps.merge(&o.gaps);
        self.split.merge(&o.split);
        self.bursts.merge(&o.bursts);
        self.plateau.merge(&o.plateau);
        self.stored += o.stored;
        self.bucketed |= o.bucketed;
        if self.bucketed {
            // One bucketed side makes the merged level bucketed throughout.
            self.bucketize();
        }
        self.enforce_budget();
    }

    /// The level's figures. `opts.stall_threshold_ns` is ignored (the config's is used).
    pub fn finish(&self, opts: &LevelOptions) -> LevelFigures {
        // The pooled ITL sorted once: its summary, the per-token ITL's when it holds
        // the same gaps, and the charts' CDF and histogram of the same gaps.
        let pooled_itl = self.series.pooled_itl();
        let pooled_itl = pooled_itl.sorted();
        let mut summary = self.summary.finish_with(opts, Some(&pooled_itl));
        summary.itl = pooled_itl.summary();
        let goodput = self.goodput.finish(summary.throughput.window_s);
        let mut record_warnings = self.notes.finish();
        if let Some(w) = self.series.widened_ns() {
            let why = if self.series.widened_for_memory() {
                format!(
                    "would hold more than {} KiB of histograms",
                    self.config.series_bytes >> 10
                )
            } else {
                format!(
                    "would need more than {} buckets",
                    crate::timeseries::MAX_BUCKETS
                )
            };
            record_warnings.push(format!(
                "the time series in buckets of {} ms {why}: its buckets are {} ms wide instead",
                self.config.time_bucket_ns.max(1) as f64 / 1e6,
                w as f64 / 1e6
            ));
        }
        if self.bucketed {
            record_warnings.push(format!(
                "the level kept more than {} values (--exact-samples): its distributions continue in log-bucketed histograms, percentiles within {:.2} % (each bucketed distribution says so); count, mean, min and max stay exact",
                self.config.exact_samples,
                RELATIVE_ERROR * 100.0
            ));
        }
        // The conventions' pooled chunk gaps are, record by record, the per-token gaps
        // when every chunk carried one token: the same samples, summarized once.
        let pooled = self.conventions.pooled_itl();
        let pooled = if pooled.same_samples(self.summary.itl_per_token()) {
            summary.itl_per_token
        } else {
            pooled.summary()
        };
        LevelFigures {
            pacing: self.pacing.finish(opts.dropped, self.config.max_late),
            goodput,
            time_series: self.series.finish(),
            conventions: self.conventions.views_with_pooled(pooled),
            charts: self.charts.finish_with(Some(&pooled_itl)),
            time_split: self.split.finish(),
            bursts: self.bursts.finish(),
            record_warnings,
            summary,
        }
    }
}

/// Every level's aggregator, keyed by the records' `level`: the sink a source feeds.
#[derive(Debug, Clone)]
pub struct LevelAggregators {
    config: LevelConfig,
    levels: BTreeMap<u32, LevelAggregator>,
    any_sent: bool,
}

impl LevelAggregators {
    /// Each level is aggregated with `config`.
    pub fn new(config: LevelConfig) -> LevelAggregators {
        LevelAggregators {
            config,
            levels: BTreeMap::new(),
            any_sent: false,
        }
    }

    /// Aggregators fed every record of `records`.
    pub fn from_records<'a>(
        config: LevelConfig,
        records: impl IntoIterator<Item = &'a RequestRecord>,
    ) -> LevelAggregators {
        let mut a = LevelAggregators::new(config);
        for r in records {
            a.accept(r);
        }
        a
    }

    /// What every level is aggregated under.
    pub fn config(&self) -> &LevelConfig {
        &self.config
    }

    /// The aggregator of `level`, when any record of it arrived.
    pub fn get(&self, level: u32) -> Option<&LevelAggregator> {
        self.levels.get(&level)
    }

    /// The levels that have records, ascending.
    pub fn levels(&self) -> impl Iterator<Item = (u32, &LevelAggregator)> {
        self.levels.iter().map(|(k, v)| (*k, v))
    }

    /// Whether any record (of any level, warm-up included) was sent.
    pub fn any_sent(&self) -> bool {
        self.any_sent
    }

    /// Heap bytes held over every level.
    pub fn approx_bytes(&self) -> usize {
        self.levels
            .values()
            .map(LevelAggregator::approx_bytes)
            .sum()
    }

    /// Adds another source's aggregators (the same run split, e.g. across machines).
    pub fn merge(&mut self, o: &LevelAggregators) {
        for (level, agg) in &o.levels {
            match self.levels.get_mut(level) {
                Some(mine) => mine.merge(agg),
                None => {
                    self.levels.insert(*level, agg.clone());
                }
            }
        }
        self.any_sent |= o.any_sent;
    }
}

impl RecordSink for LevelAggregators {
    fn accept(&mut self, record: &RequestRecord) {
        self.any_sent |= record.was_sent();
        let config = &self.config;
        self.levels
            .entry(record.level)
            .or_insert_with(|| LevelAggregator::new(config.clone()))
            .push(record);
    }
}

impl RecordSink for LevelAggregator {
    fn accept(&mut self, record: &RequestRecord) {
        self.push(record);
    }
}

/// What the record warnings need: failure messages by class (at most
/// [`MAX_MESSAGES_PER_CLASS`] distinct ones each), resends, unannounced multi-token
/// chunks and coalesced reads.
#[derive(Debug, Clone, Default)]
struct RecordNotes {
    by_class: BTreeMap<&'static str, BTreeMap<String, u64>>,
    /// Failures whose message was not kept (the class already had the maximum).
    unkept: BTreeMap<&'static str, u64>,
    resent: u64,
    ok: u64,
    unknown_multi: u64,
    ok_tokens: u64,
    ok_chunks: u64,
    /// Over every record of the level, warm-up included.
    chunks: u64,
    coalesced: u64,
}

impl RecordNotes {
    fn push(&mut self, r: &RequestRecord) {
        self.chunks += r.chunks.len() as u64;
        self.coalesced += u64::from(r.counters.coalesced);
        self.resent += u64::from(r.counters.stale_connection_retries > 0);
        if r.warmup {
            return;
        }
        if r.outcome.is_failure() {
            let msg: String = r
                .error
                .as_deref()
                .unwrap_or("no detail")
                .chars()
                .take(200)
                .collect();
            let msgs = self.by_class.entry(r.outcome.name()).or_default();
            if msgs.len() < MAX_MESSAGES_PER_CLASS || msgs.contains_key(&msg) {
                *msgs.entry(msg).or_default() += 1;
            } else {
                *self.unkept.entry(r.outcome.name()).or_default() += 1;
            }
        }
        if r.outcome == Outcome::Succeeded {
            self.ok += 1;
            // Token counts come from the server: saturate rather than wrap.
            self.ok_tokens = self
                .ok_tokens
                .saturating_add(r.output_tokens.map_or(0, |t| t.count));
            self.ok_chunks += r.chunks.len() as u64;
            let unknown = r
                .output_tokens
                .is_some_and(|t| t.count > r.chunks.len() as u64)
                && r.chunks.iter().all(|c| c.tokens().is_none());
            self.unknown_multi += u64::from(unknown);
        }
    }

    fn merge(&mut self, o: &RecordNotes) {
        for (class, msgs) in &o.by_class {
            for (msg, n) in msgs {
                let mine = self.by_class.entry(class).or_default();
                if mine.len() < MAX_MESSAGES_PER_CLASS || mine.contains_key(msg) {
                    *mine.entry(msg.clone()).or_default() += n;
                } else {
                    *self.unkept.entry(class).or_default() += n;
                }
            }
        }
        for (class, n) in &o.unkept {
            *self.unkept.entry(class).or_default() += n;
        }
        self.resent += o.resent;
        self.ok += o.ok;
        self.unknown_multi += o.unknown_multi;
        self.ok_tokens = self.ok_tokens.saturating_add(o.ok_tokens);
        self.ok_chunks += o.ok_chunks;
        self.chunks += o.chunks;
        self.coalesced += o.coalesced;
    }

    fn approx_bytes(&self) -> usize {
        self.by_class
            .values()
            .flat_map(|m| m.keys())
            .map(|k| k.capacity() + std::mem::size_of::<(String, u64)>())
            .sum()
    }

    fn finish(&self) -> Vec<String> {
        let mut out = Vec::new();
        let (chunks, coalesced) = (self.chunks, self.coalesced);
        if chunks > 0 && coalesced * 100 > chunks {
            out.push(format!(
                "{coalesced} of {chunks} chunks arrived in the same read as an earlier one: gaps between them read as 0 (the server batched them, or the client fell behind)"
            ));
        }
        for (class, msgs) in &self.by_class {
            let unkept = self.unkept.get(class).copied().unwrap_or(0);
            let total: u64 = msgs.values().sum::<u64>() + unkept;
            let (msg, n) = msgs.iter().max_by_key(|(_, n)| **n).expect("non-empty");
            let others = if unkept > 0 {
                format!(
                    " ({} other messages and more; see the records)",
                    msgs.len() - 1
                )
            } else if msgs.len() > 1 {
                format!(" ({} other messages; see the records)", msgs.len() - 1)
            } else {
                String::new()
            };
            out.push(format!("{total} × {class}: {msg} [{n}×]{others}"));
        }
        if self.resent > 0 {
            out.push(format!(
                "{} requests were sent again because the server had closed the pooled keep-alive connection before answering (the server closes connections after streams); send time is the resend",
                self.resent
            ));
        }
        if self.unknown_multi > 0 {
            out.push(format!(
                "in {} of {} requests the server reported more tokens than chunks ({} tokens in {} chunks overall): some chunks carry several tokens but do not say which, so ITL per token equals ITL per chunk there",
                self.unknown_multi, self.ok, self.ok_tokens, self.ok_chunks
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregators_can_move_to_a_record_thread() {
        fn send<T: Send + 'static>() {}
        send::<LevelAggregators>();
        send::<LevelAggregator>();
    }

    #[test]
    fn failure_messages_are_bounded_per_class_and_say_so() {
        let mut a = LevelAggregator::new(LevelConfig::default());
        for i in 0..(MAX_MESSAGES_PER_CLASS as u64 + 10) {
            let mut r = RequestRecord::new(i, Outcome::Http5xx);
            r.sent_ns = Some(0);
            r.error = Some(format!("request {i} failed"));
            a.push(&r);
        }
        let w = a.finish(&LevelOptions::default()).record_warnings;
        let line = w.iter().find(|l| l.contains("× http_5xx")).unwrap();
        assert!(line.starts_with("266 × http_5xx"), "{line}");
        assert!(line.contains("(255 other messages and more;"), "{line}");
    }

    /// Streams whose chunks carry `tokens` each, gaps of 10–70 ms with ties.
    fn streams(tokens: Option<u32>) -> Vec<RequestRecord> {
        (0..60u64)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(i * 1_000_000);
                let mut t = i * 1_000_000 + 30_000_000;
                r.chunks = (0..1 + i % 9)
                    .map(|k| {
                        t += 10_000_000 * (1 + (i * k) % 7);
                        crate::Chunk(t, tokens)
                    })
                    .collect();
                r.end_ns = Some(t);
                r
            })
            .collect()
    }

    #[test]
    fn the_pooled_gaps_are_summarized_once_only_when_they_are_the_per_token_gaps() {
        let opts = LevelOptions::default();
        for (tokens, shared) in [(None, true), (Some(1), true), (Some(2), false)] {
            let recs = streams(tokens);
            let agg = LevelAggregators::from_records(LevelConfig::default(), &recs);
            let agg = agg.get(0).unwrap();
            let pooled = agg.conventions.pooled_itl();
            assert_eq!(pooled.same_samples(agg.summary.itl_per_token()), shared);
            // Either way each view is the convention's own figures, bit for bit.
            let f = agg.finish(&opts);
            assert_eq!(
                format!("{:?}", f.conventions),
                format!("{:?}", crate::convention_views(&recs))
            );
            assert_eq!(
                format!("{:?}", f.conventions[0].itl),
                format!("{:?}", pooled.summary())
            );
        }
    }

    #[test]
    fn the_per_token_itl_reads_the_pooled_sort_only_when_it_holds_the_same_gaps() {
        let opts = LevelOptions::default();
        let mut unsent = streams(Some(1));
        unsent[8].sent_ns = None;
        let others = LevelAggregators::from_records(LevelConfig::default(), &streams(None)[..20]);
        let others = others.get(0).unwrap().series.pooled_itl();
        let cases = [
            (streams(None), true, false),
            (streams(Some(1)), true, false),
            // A succeeded record without a send time: both leave its gaps out.
            (unsent, true, false),
            // Weighted samples: gap / 2, twice.
            (streams(Some(2)), false, false),
            // Another level's pooled ITL.
            (streams(None), false, true),
        ];
        for (recs, shared, other) in cases {
            let agg = LevelAggregators::from_records(LevelConfig::default(), &recs);
            let agg = agg.get(0).unwrap();
            let pooled = if other {
                others.clone()
            } else {
                agg.series.pooled_itl()
            };
            let pooled = pooled.sorted();
            assert_eq!(agg.summary.per_token_is_pooled(&pooled), shared);
            // Either way the summary is the one the per-token samples give alone.
            let alone = agg.summary.finish(&opts);
            let with = agg.summary.finish_with(&opts, Some(&pooled));
            assert_eq!(format!("{with:?}"), format!("{alone:?}"));
            assert_eq!(
                format!("{:?}", agg.finish(&opts).summary.itl_per_token),
                format!("{:?}", agg.summary.itl_per_token().summary())
            );
        }
        // A bucketed level's pooled ITL is not exact: its own samples are summarized.
        let mut agg = LevelAggregator::new(LevelConfig::default());
        streams(Some(1)).iter().for_each(|r| agg.push(r));
        let pooled = agg.series.pooled_itl();
        agg.bucketize();
        assert!(!agg.summary.per_token_is_pooled(&pooled.sorted()));
    }
}
