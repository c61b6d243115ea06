//! Why the tail moved: the client's long gaps lined up with the server's own metrics
//! over the same interval. Splits TTFT into server queue + server prefill + the rest,
//! compares the client's decode pace with the server's, and names the likeliest cause
//! of each stall by the stated [`RULE`]. Pure functions of plain data.

use crate::metrics::LevelSummary;
use crate::server::{ServerSample, ServerScrape, SumCount};
use crate::stats::median;
use crate::RequestRecord;
use serde::{Deserialize, Serialize};

/// Client gaps a level keeps for the stall table, at most (the rest are counted).
pub const MAX_GAPS: usize = 100_000;
/// Stall rows the report lists (the longest); the cause counts cover every gap.
pub const MAX_STALL_ROWS: usize = 50;

/// The rule a stall's cause is named by, in words (the report carries it).
pub const RULE: &str =
    "each client gap over the stall threshold (first token, or between chunks) is \
compared with the server samples from the last one at or before its start to the first one at or \
after its end; first match: kv_preemption if the server pre-empted any request then; queueing if \
it is a first-token gap and the server's mean queue time over the interval was at least half \
the gap (without a queue histogram, or nobody scheduled then: requests were waiting); kv_transfer if it \
is a first-token gap and the server's mean KV-cache transfer from its prefill worker over the interval \
was at least half the gap (disaggregated serving); prefill_interference if the prompt tokens \
prefilled then were at least twice the level's median prefill rate and more than the tokens \
generated; batch_growth if the running batch reached 1.5 times the level's median (and at least \
2 more); else none (the server looked as usual: network, client or the engine's own noise)";

/// Which wait a gap is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapKind {
    /// Send to first chunk.
    FirstToken,
    /// Between two chunks.
    Chunk,
}

/// One client gap over the stall threshold, on the run clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// When the wait began (the send, or the earlier chunk), ns since the run's start.
    pub start_ns: u64,
    /// When the chunk that ended the wait arrived, ns since the run's start.
    pub end_ns: u64,
    /// Whether the wait was for the first token or between chunks.
    pub kind: GapKind,
}

/// Collects a level's gaps over the threshold from succeeded records (bounded).
#[derive(Debug, Clone, Default)]
pub struct GapsAcc {
    threshold_ns: u64,
    gaps: Vec<Gap>,
    /// Gaps past [`MAX_GAPS`], counted only.
    over: u64,
}

impl GapsAcc {
    /// An empty collector of the gaps strictly longer than `threshold_ns`.
    pub fn new(threshold_ns: u64) -> GapsAcc {
        GapsAcc {
            threshold_ns,
            ..GapsAcc::default()
        }
    }

    /// Takes the long gaps of a succeeded, non-warm-up record; other records are skipped.
    pub fn push(&mut self, r: &RequestRecord) {
        if r.warmup || r.outcome != crate::Outcome::Succeeded {
            return;
        }
        let mut bad = 0;
        let first = r.sent_ns.zip(r.first_chunk_ns());
        let first = first.map(|(s, f)| (s, f, GapKind::FirstToken));
        let chunks = crate::per_request::itl_gaps(r, &mut bad)
            .map(|(g, later)| (later.t_ns() - g, later.t_ns(), GapKind::Chunk));
        let long: Vec<_> = first
            .into_iter()
            .chain(chunks)
            .filter(|(a, b, _)| b.saturating_sub(*a) > self.threshold_ns)
            .collect();
        for (start_ns, end_ns, kind) in long {
            self.add(Gap {
                start_ns,
                end_ns,
                kind,
            });
        }
    }

    fn add(&mut self, g: Gap) {
        if self.gaps.len() < MAX_GAPS {
            self.gaps.push(g);
        } else {
            self.over += 1;
        }
    }

    /// Adds another collector's gaps and count, keeping at most [`MAX_GAPS`].
    pub fn merge(&mut self, o: &GapsAcc) {
        for g in &o.gaps {
            self.add(*g);
        }
        self.over += o.over;
    }

    /// The gaps kept, in the order they were pushed.
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// Gaps seen but not kept.
    pub fn over(&self) -> u64 {
        self.over
    }

    /// Heap bytes held by the kept gaps.
    pub fn approx_bytes(&self) -> usize {
        self.gaps.capacity() * std::mem::size_of::<Gap>()
    }
}

/// The likeliest cause of a stall ([`RULE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The server pre-empted a request during the gap (its KV cache filled).
    KvPreemption,
    /// A first-token gap while requests waited in the server's queue.
    Queueing,
    /// A first-token gap mostly spent moving the KV cache from the prefill worker to
    /// the decode worker (disaggregated serving): the TTFT tail from KV transfer.
    KvTransfer,
    /// Prompt tokens prefilled during the gap were at least twice the usual rate and more
    /// than the tokens generated.
    PrefillInterference,
    /// The running batch grew to 1.5 times its median (and by at least 2).
    BatchGrowth,
    /// The server looked as usual.
    None,
    /// No server samples around the gap.
    NoServerData,
}

impl Cause {
    /// The cause's name as serialized and printed (`kv_preemption`, `no_server_data`, …).
    pub fn name(self) -> &'static str {
        match self {
            Cause::KvPreemption => "kv_preemption",
            Cause::Queueing => "queueing",
            Cause::KvTransfer => "kv_transfer",
            Cause::PrefillInterference => "prefill_interference",
            Cause::BatchGrowth => "batch_growth",
            Cause::None => "none",
            Cause::NoServerData => "no_server_data",
        }
    }

    /// What the cause means, in a few words.
    pub fn meaning(self) -> &'static str {
        match self {
            Cause::KvPreemption => "the KV cache filled and the server pre-empted requests",
            Cause::Queueing => "requests waited in the server's queue for a batch slot",
            Cause::KvTransfer => {
                "the KV cache's transfer from the prefill worker held the first token"
            }
            Cause::PrefillInterference => "long prompts were prefilled in the same steps as decode",
            Cause::BatchGrowth => "the running batch grew, so every step took longer",
            Cause::None => "the server looked as usual: network, client or engine noise",
            Cause::NoServerData => "no server samples cover the gap",
        }
    }
}

/// The server's state over one stall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallRow {
    /// Gap start, seconds since the run's start.
    pub start_s: f64,
    /// The gap's length, ms.
    pub gap_ms: f64,
    /// Whether it waited for the first token or between chunks.
    pub kind: GapKind,
    /// Its likeliest cause by [`RULE`].
    pub cause: Cause,
    /// The largest running batch the samples around the gap read; absent when none read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_max: Option<f64>,
    /// The most requests waiting that those samples read; absent when none read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_max: Option<f64>,
    /// The highest KV-cache usage (1 = full) those samples read; absent when none read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage_max: Option<f64>,
    /// Pre-emptions the server counted across those samples; absent when not exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Prompt tokens the server prefilled across those samples; absent when not exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens: Option<f64>,
}

/// How many stalls a cause explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CauseCount {
    /// The cause counted.
    pub cause: Cause,
    /// Stalls it explains (the gaps not kept count as [`Cause::NoServerData`]).
    pub gaps: u64,
    /// Its share of all the level's stalls, 0 to 1.
    pub share: f64,
}

/// Mean client TTFT split into the server's mean queue and prefill times and the rest
/// (network, HTTP, client), ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtftSplit {
    /// The client's mean TTFT, ms.
    pub client_ms: f64,
    /// The server's mean queue time over the level, ms; absent without a queue histogram or
    /// an observation.
    pub server_queue_ms: Option<f64>,
    /// The server's mean prefill time over the level, ms; absent without a prefill
    /// histogram or an observation.
    pub server_prefill_ms: Option<f64>,
    /// The mean KV-cache transfer from the prefill worker over the level (disaggregated
    /// serving: vLLM's NIXL, SGLang's `kv_transfer`), ms; absent when none is exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_kv_transfer_ms: Option<f64>,
    /// Client − queue − prefill − KV transfer (what the server's figures do not hold).
    pub rest_ms: Option<f64>,
}

/// The client's decode pace next to the server's over the level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeCompare {
    /// Tokens the server generated between the level's first and last samples.
    pub server_generated_tokens: Option<f64>,
    /// Output tokens the client received (every request of the level).
    pub client_output_tokens: u64,
    /// The server's decode time per output token, ms.
    pub server_decode_per_token_ms: Option<f64>,
    /// The server's mean gap between a request's tokens, ms.
    pub server_itl_ms: Option<f64>,
    /// The client's mean TPOT, ms; absent when the level has none.
    pub client_tpot_ms: Option<f64>,
    /// The client's mean pooled ITL, ms; absent when the level has none.
    pub client_itl_ms: Option<f64>,
}

/// A level's server side: the scrape, the figures lined up with the client's, and
/// the stall table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerReport {
    /// The level's scraping: where from, how it went, the samples.
    pub scrape: ServerScrape,
    /// Mean TTFT split into the server's queue and prefill and the rest; absent when the
    /// level has no TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_split: Option<TtftSplit>,
    /// The client's decode pace beside the server's; absent without samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeCompare>,
    /// Speculative decoding as the server's counters (or gauges) read it over the
    /// level; absent when it exports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculation: Option<crate::server::speculation::SpecCounters>,
    /// NVIDIA Dynamo's worker types over the level (the most each gauge read); empty
    /// for other engines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<crate::server::dynamo::WorkerRow>,
    /// Stalls (gaps over the threshold) seen, every one with a cause counted.
    pub stalls_total: u64,
    /// Causes by how many stalls they explain, most first.
    pub causes: Vec<CauseCount>,
    /// The longest stalls with the server's state ([`MAX_STALL_ROWS`]).
    pub stalls: Vec<StallRow>,
    /// The rule the causes were named by ([`RULE`]).
    pub rule: String,
}

/// The level's typical server state: median running batch and prefill rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Baseline {
    /// The median running batch over the samples; absent when none read it.
    pub running: Option<f64>,
    /// Prompt tokens per second.
    pub prefill_rate: Option<f64>,
}

/// Medians over the samples (running) and over consecutive pairs (prefill rate).
pub fn baseline(samples: &[ServerSample]) -> Baseline {
    let running = median(samples.iter().filter_map(|s| s.figures.running).collect());
    let rates = samples
        .windows(2)
        .filter_map(|w| {
            let dt = w[1].t_ns.checked_sub(w[0].t_ns).filter(|&d| d > 0)? as f64 / 1e9;
            Some(delta(&w[0], &w[1], |s| s.figures.prompt_tokens)? / dt)
        })
        .collect();
    Baseline {
        running,
        prefill_rate: median(rates),
    }
}

/// A counter's change from `a` to `b` (a restart reads as the later value).
fn delta(
    a: &ServerSample,
    b: &ServerSample,
    f: impl Fn(&ServerSample) -> Option<f64>,
) -> Option<f64> {
    let (x, y) = (f(a)?, f(b)?);
    Some(if y >= x { y - x } else { y })
}

fn max_of(w: &[ServerSample], f: impl Fn(&ServerSample) -> Option<f64>) -> Option<f64> {
    w.iter().filter_map(f).reduce(f64::max)
}

/// The samples around `[start, end]`: from the last at or before the start to the
/// first at or after the end (at least two when there are two).
fn window(samples: &[ServerSample], start: u64, end: u64) -> &[ServerSample] {
    let n = samples.len();
    let i0 = samples.iter().rposition(|s| s.t_ns <= start).unwrap_or(0);
    let i1 = samples
        .iter()
        .position(|s| s.t_ns >= end)
        .unwrap_or(n.saturating_sub(1))
        .max((i0 + 1).min(n.saturating_sub(1)));
    &samples[i0..=i1.max(i0).min(n.saturating_sub(1))]
}

/// One stall's row: the server's state over it and its cause by [`RULE`].
pub fn stall_row(g: &Gap, samples: &[ServerSample], base: &Baseline) -> StallRow {
    let mut row = StallRow {
        start_s: g.start_ns as f64 / 1e9,
        gap_ms: g.end_ns.saturating_sub(g.start_ns) as f64 / 1e6,
        kind: g.kind,
        cause: Cause::NoServerData,
        running_max: None,
        waiting_max: None,
        kv_usage_max: None,
        preemptions: None,
        prefill_tokens: None,
    };
    if samples.len() < 2 {
        return row;
    }
    let w = window(samples, g.start_ns, g.end_ns);
    let (first, last) = (&w[0], &w[w.len() - 1]);
    row.running_max = max_of(w, |s| s.figures.running);
    row.waiting_max = max_of(w, |s| s.figures.waiting);
    row.kv_usage_max = max_of(w, |s| s.figures.kv_usage);
    row.preemptions = delta(first, last, |s| s.figures.preemptions);
    row.prefill_tokens = delta(first, last, |s| s.figures.prompt_tokens);
    let generated = delta(first, last, |s| s.figures.generation_tokens).unwrap_or(0.0);
    let dt = last.t_ns.saturating_sub(first.t_ns) as f64 / 1e9;
    let prefill_heavy = row.prefill_tokens.is_some_and(|p| {
        p > generated && p > 0.0 && p >= 2.0 * base.prefill_rate.unwrap_or(0.0) * dt
    });
    let batch_grew = match (row.running_max, base.running) {
        (Some(m), Some(b)) => m >= 1.5 * b && m >= b + 2.0,
        _ => false,
    };
    let queued = match window_mean(first, last, |s| s.figures.queue) {
        Some(mean_s) => mean_s * 1e3 >= row.gap_ms / 2.0,
        None => row.waiting_max.is_some_and(|q| q >= 1.0),
    };
    let transfer = window_mean(first, last, |s| s.figures.kv_transfer)
        .is_some_and(|mean_s| mean_s * 1e3 >= row.gap_ms / 2.0);
    row.cause = if row.preemptions.is_some_and(|p| p > 0.0) {
        Cause::KvPreemption
    } else if g.kind == GapKind::FirstToken && queued {
        Cause::Queueing
    } else if g.kind == GapKind::FirstToken && transfer {
        Cause::KvTransfer
    } else if prefill_heavy {
        Cause::PrefillInterference
    } else if batch_grew {
        Cause::BatchGrowth
    } else {
        Cause::None
    };
    row
}

/// Δsum / Δcount of a histogram from `a` to `b` (`None`: absent, or nothing observed).
fn window_mean(
    a: &ServerSample,
    b: &ServerSample,
    f: impl Fn(&ServerSample) -> Option<SumCount>,
) -> Option<f64> {
    let (a, b) = (f(a)?, f(b)?);
    let count = b.count - a.count;
    (count > 0.0).then(|| (b.sum - a.sum) / count)
}

/// [`window_mean`] between the first and last samples, × `scale`.
fn mean_between(
    s: &[ServerSample],
    f: impl Fn(&ServerSample) -> Option<SumCount>,
    scale: f64,
) -> Option<f64> {
    window_mean(s.first()?, s.last()?, f).map(|m| m * scale)
}

/// The level's server side from its scrape, its client gaps (`over`: gaps seen but
/// not kept) and its summary.
pub fn attribute(
    scrape: &ServerScrape,
    gaps: &[Gap],
    over: u64,
    summary: &LevelSummary,
) -> ServerReport {
    let samples = &scrape.samples;
    let base = baseline(samples);
    let mut rows: Vec<StallRow> = gaps.iter().map(|g| stall_row(g, samples, &base)).collect();
    let total = rows.len() as u64 + over;
    let mut counts: std::collections::BTreeMap<Cause, u64> = Default::default();
    for r in &rows {
        *counts.entry(r.cause).or_default() += 1;
    }
    if over > 0 {
        *counts.entry(Cause::NoServerData).or_default() += over;
    }
    let mut causes: Vec<CauseCount> = counts
        .into_iter()
        .map(|(cause, gaps)| CauseCount {
            cause,
            gaps,
            share: gaps as f64 / total.max(1) as f64,
        })
        .collect();
    causes.sort_by(|a, b| b.gaps.cmp(&a.gaps).then(a.cause.cmp(&b.cause)));
    rows.sort_by(|a, b| b.gap_ms.total_cmp(&a.gap_ms));
    rows.truncate(MAX_STALL_ROWS);
    ServerReport {
        scrape: scrape.clone(),
        ttft_split: ttft_split(samples, summary),
        decode: decode_compare(samples, summary),
        speculation: crate::server::speculation::spec_counters(samples),
        workers: crate::server::dynamo::worker_rows(samples),
        stalls_total: total,
        causes,
        stalls: rows,
        rule: RULE.to_string(),
    }
}

/// Mean client TTFT next to the server's mean queue and prefill over the level.
pub fn ttft_split(samples: &[ServerSample], summary: &LevelSummary) -> Option<TtftSplit> {
    let client_ms = summary.ttft.as_ref()?.mean;
    let queue = mean_between(samples, |s| s.figures.queue, 1e3);
    let prefill = mean_between(samples, |s| s.figures.prefill, 1e3);
    let transfer = mean_between(samples, |s| s.figures.kv_transfer, 1e3);
    let rest = match (queue, prefill, transfer) {
        (None, None, None) => None,
        (q, p, t) => Some(client_ms - q.unwrap_or(0.0) - p.unwrap_or(0.0) - t.unwrap_or(0.0)),
    };
    Some(TtftSplit {
        client_ms,
        server_queue_ms: queue,
        server_prefill_ms: prefill,
        server_kv_transfer_ms: transfer,
        rest_ms: rest,
    })
}

/// The server's generated tokens and decode pace over the level, next to the client's.
pub fn decode_compare(samples: &[ServerSample], summary: &LevelSummary) -> Option<DecodeCompare> {
    let (a, b) = (samples.first()?, samples.last()?);
    Some(DecodeCompare {
        server_generated_tokens: delta(a, b, |s| s.figures.generation_tokens),
        client_output_tokens: summary.output_tokens.received_total,
        server_decode_per_token_ms: mean_between(samples, |s| s.figures.decode, 1e3),
        server_itl_ms: mean_between(samples, |s| s.figures.itl, 1e3),
        client_tpot_ms: summary.tpot.as_ref().map(|d| d.mean),
        client_itl_ms: summary.itl.as_ref().map(|d| d.mean),
    })
}

/// The level's warning when scraping gave too little to line up (under two samples).
pub fn scrape_warning(s: &ServerScrape) -> Option<String> {
    (s.samples.len() < 2).then(|| {
        format!(
            "server metrics: {} of {} scrapes of {} failed{}; the level was measured without them",
            s.failures,
            s.attempts,
            s.url,
            s.failure
                .as_deref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        )
    })
}

/// One point per interval between samples, for charts: at the later sample's time,
/// the batch, queue and KV usage it read, and the prompt tokens prefilled and
/// pre-emptions since the earlier one.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerPoint {
    /// The later sample's time, seconds since the run's start.
    pub t_s: f64,
    /// Requests in the running batch at that sample; absent when not exported.
    pub running: Option<f64>,
    /// Requests waiting at that sample; absent when not exported.
    pub waiting: Option<f64>,
    /// KV-cache usage at that sample (1 = full); absent when not exported.
    pub kv_usage: Option<f64>,
    /// Prompt tokens prefilled since the earlier sample; absent when not exported.
    pub prefill_tokens: Option<f64>,
    /// Pre-emptions since the earlier sample; absent when not exported.
    pub preemptions: Option<f64>,
}

/// The chart points of a level's samples, one per consecutive pair (none under two
/// samples).
pub fn server_series(samples: &[ServerSample]) -> Vec<ServerPoint> {
    samples
        .windows(2)
        .map(|w| ServerPoint {
            t_s: w[1].t_ns as f64 / 1e9,
            running: w[1].figures.running,
            waiting: w[1].figures.waiting,
            kv_usage: w[1].figures.kv_usage,
            prefill_tokens: delta(&w[0], &w[1], |s| s.figures.prompt_tokens),
            preemptions: delta(&w[0], &w[1], |s| s.figures.preemptions),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::ServerFigures;
    use crate::{Chunk, Outcome};

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn sample(
        t_ns: u64,
        running: f64,
        waiting: f64,
        preempt: f64,
        prompt: f64,
        gen: f64,
    ) -> ServerSample {
        ServerSample {
            t_ns,
            figures: ServerFigures {
                running: Some(running),
                waiting: Some(waiting),
                kv_usage: Some(0.5),
                preemptions: Some(preempt),
                prompt_tokens: Some(prompt),
                generation_tokens: Some(gen),
                ..ServerFigures::default()
            },
            raw: Default::default(),
        }
    }

    /// Ten seconds at batch 4, 100 prompt tokens/s and 400 generated tokens/s.
    fn steady() -> Vec<ServerSample> {
        (0..=10u64)
            .map(|i| sample(i * S, 4.0, 0.0, 0.0, 100.0 * i as f64, 400.0 * i as f64))
            .collect()
    }

    fn gap(start_ms: u64, end_ms: u64, kind: GapKind) -> Gap {
        Gap {
            start_ns: start_ms * MS,
            end_ns: end_ms * MS,
            kind,
        }
    }

    #[test]
    fn gaps_over_the_threshold_are_kept_from_succeeded_records() {
        let mut acc = GapsAcc::new(100 * MS);
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = vec![
            Chunk(150 * MS, None),
            Chunk(200 * MS, None),
            Chunk(400 * MS, None),
        ];
        acc.push(&r);
        assert_eq!(
            acc.gaps(),
            &[
                gap(0, 150, GapKind::FirstToken),
                gap(200, 400, GapKind::Chunk)
            ]
        );
        let mut failed = r.clone();
        failed.outcome = Outcome::Http5xx;
        acc.push(&failed);
        let mut warm = r;
        warm.warmup = true;
        acc.push(&warm);
        assert_eq!(acc.gaps().len(), 2, "failed and warm-up records add none");
    }

    #[test]
    fn the_baseline_is_the_median() {
        let mut s = steady();
        s[3].figures.running = Some(40.0);
        let b = baseline(&s);
        assert_eq!(b.running, Some(4.0));
        assert_eq!(b.prefill_rate, Some(100.0));
    }

    #[test]
    fn preemptions_name_kv_exhaustion_first() {
        let mut s = steady();
        for x in &mut s[5..] {
            x.figures.preemptions = Some(3.0);
            x.figures.running = Some(20.0);
        }
        let row = stall_row(&gap(4200, 4800, GapKind::Chunk), &s, &baseline(&s));
        assert_eq!(row.cause, Cause::KvPreemption);
        assert_eq!(row.preemptions, Some(3.0));
        assert_eq!(row.running_max, Some(20.0));
        assert_eq!(row.gap_ms, 600.0);
        assert_eq!(row.start_s, 4.2);
    }

    #[test]
    fn waiting_names_queueing_for_first_token_gaps_only() {
        let mut s = steady();
        s[5].figures.waiting = Some(6.0);
        let b = baseline(&s);
        assert_eq!(
            stall_row(&gap(4200, 4800, GapKind::FirstToken), &s, &b).cause,
            Cause::Queueing
        );
        assert_eq!(
            stall_row(&gap(4200, 4800, GapKind::Chunk), &s, &b).cause,
            Cause::None
        );
    }

    #[test]
    fn with_a_queue_histogram_queueing_needs_half_the_gap_in_the_queue() {
        let mut s = steady();
        s[5].figures.waiting = Some(6.0);
        for (i, x) in s.iter_mut().enumerate() {
            // Two requests scheduled per second, each after 100 ms in the queue...
            let n = 2.0 * i as f64;
            x.figures.queue = Some(SumCount {
                sum: 0.1 * n,
                count: n,
            });
        }
        let b = baseline(&s);
        let g = gap(4200, 4800, GapKind::FirstToken);
        assert_eq!(
            stall_row(&g, &s, &b).cause,
            Cause::None,
            "100 ms of a 600 ms gap"
        );
        // ...but the two scheduled between 4 s and 5 s waited 400 ms each.
        for x in &mut s[5..] {
            x.figures.queue.as_mut().unwrap().sum += 0.6;
        }
        assert_eq!(stall_row(&g, &s, &b).cause, Cause::Queueing);
    }

    #[test]
    fn a_first_token_held_by_the_kv_transfer_names_kv_transfer() {
        let mut s = steady();
        for (i, x) in s.iter_mut().enumerate() {
            // A transfer a second of 50 ms, then one of 450 ms between 4 s and 5 s.
            let slow = if i >= 5 { 0.4 } else { 0.0 };
            x.figures.kv_transfer = Some(SumCount {
                sum: 0.05 * i as f64 + slow,
                count: i as f64,
            });
        }
        let b = baseline(&s);
        let row = |from, to, kind| stall_row(&gap(from, to, kind), &s, &b).cause;
        assert_eq!(
            row(4200, 4800, GapKind::FirstToken),
            Cause::KvTransfer,
            "450 ms of a 600 ms wait for the first token"
        );
        assert_eq!(
            row(4200, 4800, GapKind::Chunk),
            Cause::None,
            "not between chunks"
        );
        assert_eq!(
            row(2000, 3000, GapKind::FirstToken),
            Cause::None,
            "50 ms of a 1 s wait"
        );
    }

    #[test]
    fn a_prefill_burst_names_prefill_interference() {
        let mut s = steady();
        // 5,000 prompt tokens between 4 s and 5 s: 50× the usual rate, more than generated.
        for x in &mut s[5..] {
            x.figures.prompt_tokens = Some(x.figures.prompt_tokens.unwrap() + 5000.0);
        }
        let row = stall_row(&gap(4200, 4800, GapKind::Chunk), &s, &baseline(&s));
        assert_eq!(row.cause, Cause::PrefillInterference);
        assert_eq!(row.prefill_tokens, Some(5100.0));
    }

    #[test]
    fn a_grown_batch_names_batch_growth_and_a_small_change_does_not() {
        let mut s = steady();
        s[5].figures.running = Some(12.0);
        s[7].figures.running = Some(5.0);
        let b = baseline(&s);
        assert_eq!(
            stall_row(&gap(4200, 4800, GapKind::Chunk), &s, &b).cause,
            Cause::BatchGrowth
        );
        assert_eq!(
            stall_row(&gap(6200, 6800, GapKind::Chunk), &s, &b).cause,
            Cause::None
        );
    }

    #[test]
    fn without_samples_the_cause_is_no_server_data() {
        let s = steady();
        let row = stall_row(&gap(100, 900, GapKind::Chunk), &s[..1], &baseline(&s));
        assert_eq!(row.cause, Cause::NoServerData);
        // A gap past the last sample still reads the last interval.
        let row = stall_row(&gap(20_000, 21_000, GapKind::Chunk), &s, &baseline(&s));
        assert_eq!(row.cause, Cause::None);
    }

    fn scrape(samples: Vec<ServerSample>) -> ServerScrape {
        ServerScrape {
            url: "http://x/metrics".into(),
            engine: "vllm".into(),
            interval_ms: 1000.0,
            attempts: samples.len() as u64,
            failures: 0,
            failure: None,
            samples,
        }
    }

    #[test]
    fn attribute_counts_causes_and_keeps_the_longest_rows() {
        let mut s = steady();
        s[5].figures.running = Some(12.0);
        for x in &mut s[8..] {
            x.figures.preemptions = Some(1.0);
        }
        let gaps = vec![
            gap(4200, 4800, GapKind::Chunk),
            gap(4300, 4700, GapKind::Chunk),
            gap(7100, 7900, GapKind::Chunk),
            gap(1100, 1700, GapKind::Chunk),
        ];
        let summary = crate::summarize_level(&[], &crate::LevelOptions::default());
        let rep = attribute(&scrape(s), &gaps, 2, &summary);
        assert_eq!(rep.stalls_total, 6);
        let got: Vec<(Cause, u64)> = rep.causes.iter().map(|c| (c.cause, c.gaps)).collect();
        assert_eq!(
            got,
            vec![
                (Cause::BatchGrowth, 2),
                (Cause::NoServerData, 2),
                (Cause::KvPreemption, 1),
                (Cause::None, 1)
            ]
        );
        assert_eq!(rep.causes[0].share, 2.0 / 6.0);
        assert_eq!(rep.stalls[0].gap_ms, 800.0, "longest first");
        assert_eq!(rep.stalls.len(), 4);
    }

    #[test]
    fn ttft_splits_into_queue_prefill_and_rest() {
        let mut s = steady();
        s[0].figures.queue = Some(SumCount {
            sum: 1.0,
            count: 10.0,
        });
        s[10].figures.queue = Some(SumCount {
            sum: 3.0,
            count: 30.0,
        });
        s[0].figures.prefill = Some(SumCount {
            sum: 0.0,
            count: 0.0,
        });
        s[10].figures.prefill = Some(SumCount {
            sum: 1.0,
            count: 20.0,
        });
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = vec![Chunk(200 * MS, Some(1)), Chunk(210 * MS, Some(1))];
        r.end_ns = Some(210 * MS);
        let summary = crate::summarize_level(&[r], &crate::LevelOptions::default());
        let split = ttft_split(&s, &summary).unwrap();
        assert_eq!(split.client_ms, 200.0);
        assert_eq!(split.server_queue_ms, Some(100.0));
        assert_eq!(split.server_prefill_ms, Some(50.0));
        assert_eq!(split.rest_ms, Some(50.0));
        assert_eq!(split.server_kv_transfer_ms, None);
        // Disaggregated: 10 transfers took 0.4 s over the level, 40 ms each, out of the rest.
        for (i, (sum, count)) in [(0, (0.1, 5.0)), (10, (0.5, 15.0))] {
            s[i].figures.kv_transfer = Some(SumCount { sum, count });
        }
        let split = ttft_split(&s, &summary).unwrap();
        assert_eq!(split.server_kv_transfer_ms, Some(40.0));
        assert_eq!(split.rest_ms, Some(10.0));
        let d = decode_compare(&s, &summary).unwrap();
        assert_eq!(d.server_generated_tokens, Some(4000.0));
        assert_eq!(d.client_output_tokens, 2);
        assert_eq!(d.client_tpot_ms, Some(10.0));
    }

    #[test]
    fn a_scrape_without_samples_is_named() {
        let mut s = scrape(Vec::new());
        s.attempts = 3;
        s.failures = 3;
        s.failure = Some("HTTP 404 Not Found".into());
        let w = scrape_warning(&s).unwrap();
        assert!(w.contains("3 of 3 scrapes") && w.contains("404"), "{w}");
        assert_eq!(scrape_warning(&scrape(steady())), None);
    }

    #[test]
    fn the_series_has_one_point_per_interval() {
        let p = server_series(&steady());
        assert_eq!(p.len(), 10);
        assert_eq!(p[0].t_s, 1.0);
        assert_eq!(p[0].prefill_tokens, Some(100.0));
        assert_eq!(p[0].running, Some(4.0));
    }
}
