//! The metrics of one load level as pure functions of its records: latency
//! distributions, throughput, token counts, stalls, and the request accounting that
//! FAULTS.md requires. Every number a report prints about a level comes from here.

use crate::stats::{self, Distribution};
use crate::{Outcome, RequestRecord, TokenSource};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Gaps between chunks longer than this count as stalls unless the caller says otherwise.
pub const DEFAULT_STALL_THRESHOLD_NS: u64 = 500_000_000;

// The per-request formulas live in `crate::per_request`; re-exported here for the
// modules that reach them through `metrics`.
pub(crate) use crate::per_request::NS_PER_S;
pub(crate) use crate::per_request::{
    e2e_ms, itl_gaps, ms, per_token_weight, tpot_and_speed, ttft_content_ms, ttft_ms,
    ttft_response_ms,
};

/// The formulas in words, one constant per metric: [`crate::report::definitions`]
/// gathers them so `--help`, the console and the JSON report say the same thing.
pub mod formula {
    pub const TTFT: &str = "time to first token: arrival of the first content-bearing chunk \
(content, reasoning or tool-call delta) minus the time the request was sent; succeeded \
requests only";
    pub const TTFT_CONTENT: &str = "time to first visible content: arrival of the first chunk \
carrying visible content (not reasoning, not tool calls) minus the send time; succeeded \
requests that produced visible content only";
    pub const TTFT_RESPONSE: &str = "TTFT as response time: arrival of the first \
content-bearing chunk minus the time an open-loop schedule wanted the request sent, so \
client-side queueing is included (coordinated omission made visible); succeeded requests \
with a schedule only";
    pub const ITL: &str = "inter-token latency: the gaps between consecutive content-bearing \
chunks of a request, one sample per gap, pooled over all succeeded requests of the level";
    pub const ITL_PER_TOKEN: &str = "per-token ITL: each ITL gap divided by the number of tokens \
in the later chunk and entered once per token; a chunk whose token count is unknown (or 0) \
counts as 1 token";
    pub const TPOT: &str = "time per output token, per request: (last chunk - first chunk) / \
(output tokens - 1), over succeeded requests with at least 2 output tokens in at least 2 \
chunks; a distribution over requests whose mean is the 'average ITL' of some tools";
    pub const E2E: &str = "end-to-end latency: the end of the request minus the time it was \
sent; succeeded requests only";
    pub const OUTPUT_SPEED: &str = "output speed, per request: (output tokens - 1) / (last \
chunk - first chunk) in tokens/s, over the requests TPOT uses whose last chunk arrived after \
the first";
    pub const TOKENS_PER_CHUNK: &str = "tokens carried by each content-bearing chunk of \
succeeded requests, where the count is known: from per-chunk usage or token ids the server \
sent, else from the run's tokenizer (each token of the joined text attributed to the chunk \
that completed it, then scaled by largest remainder to the server's usage count when that \
differs, so chunk counts add up to the count used) (burstiness)";
    pub const THROUGHPUT: &str = "output tokens of succeeded requests per second of the \
measured window, and succeeded requests per second; the window runs from the first send to \
the last end among the level's non-warm-up requests unless the run sets it; absent when the \
window has zero length";
    pub const OUTPUT_TOKENS: &str = "output tokens per request: the server's usage count, else \
counted token ids, else the tokenizer over the text, else one per content-bearing chunk; \
'source' names the weakest of these any succeeded request needed; 'total' counts succeeded \
requests, 'received_total' every request including the partial output of failed ones";
    pub const TOKEN_AGREEMENT: &str = "how far each other output-token source disagrees \
with the count each succeeded request used: over the requests where both are known, \
diff_pct = (sum of the other source - sum of the used count) / sum of the used count x 100, \
max_abs_diff the largest per-request difference and requests_differing how many differ; \
'chunks' is the content-bearing chunk count";
    pub const BY_TURN: &str = "multi-turn sessions: TTFT and ITL (as defined above) over the \
succeeded requests of each turn index (0 = the first turn), so growing history shows";
    pub const STALLS: &str = "ITL gaps longer than threshold_ms, and the number of succeeded \
requests with at least one";
    pub const REQUESTS: &str = "intended = sent + dropped; sent = succeeded + failed (by \
outcome) + aborted. A request is sent once it has a send time or ended in a connect, TLS or \
transport error; a request that never left the client is dropped; warm-up requests are \
counted apart and excluded from every statistic";
    pub const UNITS: &str = "times are in milliseconds (keys ending in _ms), speeds in \
tokens/s, rates per second of the measured window";
    /// One console line naming the formulas that differ most between tools.
    pub const SHORT: &str = "TTFT = first chunk - sent; ITL = gaps between consecutive \
chunks, pooled; TPOT = (last - first)/(tokens - 1) per request; E2E = end - sent; \
latency from succeeded requests only; percentiles: linear interpolation (type 7)";
}

/// How to summarize a level: what the records alone cannot say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelOptions {
    /// ITL gaps strictly longer than this are stalls (default 500 ms).
    pub stall_threshold_ns: u64,
    /// The measured window `[start, end]` in ns since run start. When `None` it is
    /// derived from the records: first `sent_ns` to last `end_ns` of non-warm-up records.
    pub window: Option<(u64, u64)>,
    /// Requests the load shape intended to send; `None` means sent + dropped.
    pub intended: Option<u64>,
    /// Requests the runner dropped without leaving a record (open loop behind schedule).
    pub dropped: u64,
}

impl Default for LevelOptions {
    fn default() -> Self {
        LevelOptions {
            stall_threshold_ns: DEFAULT_STALL_THRESHOLD_NS,
            window: None,
            intended: None,
            dropped: 0,
        }
    }
}

/// Where every request of a level went (FAULTS.md accounting invariants).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestCounts {
    pub intended: u64,
    /// Requests an attempt was made for (see [`RequestRecord::was_sent`]).
    pub sent: u64,
    pub succeeded: u64,
    /// Requests intended but never sent: the runner's count plus records that never
    /// left the client.
    pub dropped: u64,
    /// Sent requests ended by the run's deadline or Ctrl-C (`aborted_at_deadline`) or by
    /// the proxy's client hanging up (`client_disconnected`).
    pub aborted: u64,
    /// Sent requests that failed, by [`Outcome::name`]; only non-zero classes appear.
    pub failed: BTreeMap<String, u64>,
}

impl RequestCounts {
    /// Failed requests over every failure class.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }

    /// Verifies `intended = sent + dropped` and `sent = succeeded + Σ failed + aborted`.
    pub fn check(&self) -> Result<(), AccountingError> {
        if self.intended != self.sent + self.dropped {
            return Err(AccountingError::Intended {
                intended: self.intended,
                sent: self.sent,
                dropped: self.dropped,
            });
        }
        let failed = self.failed_total();
        if self.sent != self.succeeded + failed + self.aborted {
            return Err(AccountingError::Sent {
                sent: self.sent,
                succeeded: self.succeeded,
                failed,
                aborted: self.aborted,
            });
        }
        Ok(())
    }
}

/// A broken accounting invariant: a request was lost or counted twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountingError {
    #[error(
        "request accounting broken: intended = sent + dropped fails: intended {intended}, \
         sent {sent} + dropped {dropped} = {}; {}",
        .sent + .dropped,
        gap(*.intended, .sent + .dropped, "intended")
    )]
    Intended {
        intended: u64,
        sent: u64,
        dropped: u64,
    },
    #[error(
        "request accounting broken: sent = succeeded + failed + aborted fails: sent {sent}, \
         succeeded {succeeded} + failed {failed} + aborted {aborted} = {}; {}",
        .succeeded + .failed + .aborted,
        gap(*.sent, .succeeded + .failed + .aborted, "sent")
    )]
    Sent {
        sent: u64,
        succeeded: u64,
        failed: u64,
        aborted: u64,
    },
}

fn gap(lhs: u64, rhs: u64, what: &str) -> String {
    if lhs > rhs {
        format!(
            "off by {}: {} {what} request(s) unaccounted for",
            lhs - rhs,
            lhs - rhs
        )
    } else {
        format!(
            "off by {}: {} more request(s) accounted for than {what}",
            rhs - lhs,
            rhs - lhs
        )
    }
}

/// Output-token totals and where the counts came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputTokens {
    /// Output tokens of succeeded requests (what throughput divides).
    pub total: u64,
    /// Output tokens that arrived at all, including partial output of failed requests.
    pub received_total: u64,
    /// The weakest source any succeeded request's count needed (usage < token_ids <
    /// tokenizer < chunks); `None` when no request succeeded.
    pub source: Option<TokenSource>,
    /// Succeeded requests per source, keyed by [`TokenSource::name`].
    pub by_source: BTreeMap<String, u64>,
}

/// Rates over the measured window; each absent when it cannot be computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    pub output_tokens_per_s: Option<f64>,
    pub requests_per_s: Option<f64>,
    /// Length of the measured window; absent when there is no window (no records).
    pub window_s: Option<f64>,
}

/// ITL gaps over the stall threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stalls {
    pub threshold_ms: f64,
    /// Gaps longer than the threshold, over succeeded requests.
    pub gaps: u64,
    /// Succeeded requests with at least one such gap.
    pub requests: u64,
}

/// Stream-cleanliness counters summed over the level's requests (failed ones too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    pub keepalives: u64,
    pub malformed: u64,
    pub coalesced: u64,
    pub bytes_after_done: u64,
    /// Requests whose stream ended with a finish reason but no `[DONE]`.
    pub no_done_marker: u64,
    pub reads: u64,
    /// Succeeded requests with fewer output tokens than the workload demanded in full
    /// ([`RequestRecord::is_short_answer`]); left out of the report when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub short_answers: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Counters {
    /// The level's warning when some answers were short (`succeeded` requests in all).
    pub fn short_answer_warning(&self, succeeded: u64) -> Option<String> {
        (self.short_answers > 0).then(|| {
            format!(
                "{} of {succeeded} succeeded requests ended with fewer output tokens than the workload demanded (ignore_eos or min_tokens): the context filled or the server capped the length (e.g. n_predict), so their E2E and throughput describe shorter answers than asked",
                self.short_answers
            )
        })
    }

    /// Whether any counter that signals an unclean stream is non-zero (`reads` is not one).
    pub fn any_unclean(&self) -> bool {
        self.keepalives
            + self.malformed
            + self.coalesced
            + self.bytes_after_done
            + self.no_done_marker
            > 0
    }
}

/// Everything Cadence reports about one level; serializes as the metric part of a
/// level in the JSON report (time distributions with `_ms` keys, `null` when empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelSummary {
    pub requests: RequestCounts,
    /// Warm-up requests, excluded from everything else.
    pub warmup: u64,
    #[serde(with = "stats::as_ms")]
    pub ttft: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub ttft_content: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub ttft_response: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub itl: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub itl_per_token: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub tpot: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub e2e: Option<Distribution>,
    /// Per-request output speed in tokens/s.
    pub output_speed_tok_s: Option<Distribution>,
    /// Tokens per chunk, where known.
    pub tokens_per_chunk: Option<Distribution>,
    pub output_tokens: OutputTokens,
    pub throughput: Throughput,
    pub stalls: Stalls,
    pub counters: Counters,
    /// Inconsistencies found in the records, in plain words.
    pub warnings: Vec<String>,
    /// How far the other output-token sources disagree with the one used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_agreement: Vec<SourceAgreement>,
    /// TTFT and ITL by turn of multi-turn sessions (empty without sessions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_turn: Vec<TurnSummary>,
}

/// One alternative output-token source compared with the count each request used
/// ([`formula::TOKEN_AGREEMENT`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceAgreement {
    pub source: TokenSource,
    /// Succeeded requests where this source and the used count (from another
    /// source) are both known.
    pub requests: u64,
    /// This source's tokens over those requests.
    pub total: u64,
    /// The used counts over the same requests.
    pub used_total: u64,
    /// `(total − used_total) / used_total × 100`; absent when `used_total` is 0.
    pub diff_pct: Option<f64>,
    /// The largest per-request |this − used|.
    pub max_abs_diff: u64,
    /// Requests where this source differs from the used count.
    pub requests_differing: u64,
}

/// TTFT and ITL over the succeeded requests of one turn index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSummary {
    pub turn: u32,
    pub requests: u64,
    #[serde(with = "stats::as_ms")]
    pub ttft: Option<Distribution>,
    #[serde(with = "stats::as_ms")]
    pub itl: Option<Distribution>,
}

/// Running sums for one [`SourceAgreement`].
#[derive(Default)]
struct Agree {
    requests: u64,
    total: u64,
    used: u64,
    max_abs: u64,
    differing: u64,
}

impl Agree {
    fn add(&mut self, other: u64, used: u64) {
        self.requests += 1;
        self.total = self.total.saturating_add(other);
        self.used = self.used.saturating_add(used);
        let d = other.abs_diff(used);
        self.max_abs = self.max_abs.max(d);
        self.differing += u64::from(d > 0);
    }

    fn finish(self, source: TokenSource) -> SourceAgreement {
        SourceAgreement {
            source,
            requests: self.requests,
            total: self.total,
            used_total: self.used,
            diff_pct: (self.used > 0)
                .then(|| (self.total as f64 - self.used as f64) / self.used as f64 * 100.0),
            max_abs_diff: self.max_abs,
            requests_differing: self.differing,
        }
    }
}

/// Summarizes one level from its records (all of which should belong to it).
///
/// Warm-up records are only counted. Latency distributions, output speed, tokens per
/// chunk and stalls use succeeded requests only: the partial output of a failed
/// request is kept and counted in `output_tokens.received_total`, never in success
/// latency (FAULTS 8). Counters sum every non-warm-up record. See [`formula`].
pub fn summarize_level(records: &[RequestRecord], opts: &LevelOptions) -> LevelSummary {
    let mut warmup = 0u64;
    let mut counts = RequestCounts {
        dropped: opts.dropped,
        ..RequestCounts::default()
    };
    let mut unsent_odd: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut bad_intervals = 0u64;
    let mut no_end = 0u64;

    let (mut ttft, mut ttft_content, mut ttft_response) = (vec![], vec![], vec![]);
    let (mut itl, mut itl_tok, mut tpot, mut e2e) = (vec![], vec![], vec![], vec![]);
    let (mut speed, mut per_chunk) = (vec![], vec![]);
    let mut tokens = OutputTokens::default();
    let mut stalls = Stalls {
        threshold_ms: ms(opts.stall_threshold_ns),
        ..Stalls::default()
    };
    let mut counters = Counters::default();
    let (mut first_sent, mut last_end): (Option<u64>, Option<u64>) = (None, None);
    let mut agree: BTreeMap<TokenSource, Agree> = BTreeMap::new();
    let mut turns: BTreeMap<u32, (u64, Vec<f64>, Vec<f64>)> = BTreeMap::new();

    for r in records {
        if r.warmup {
            warmup += 1;
            continue;
        }
        let c = &r.counters;
        counters.keepalives += u64::from(c.keepalives);
        counters.malformed += u64::from(c.malformed);
        counters.coalesced += u64::from(c.coalesced);
        counters.bytes_after_done += c.bytes_after_done;
        counters.no_done_marker += u64::from(c.no_done_marker);
        counters.reads += u64::from(c.reads);
        counters.short_answers += u64::from(r.is_short_answer());
        // Token counts come from the server: saturate rather than wrap (usage 2^64 − 1).
        tokens.received_total = tokens
            .received_total
            .saturating_add(r.output_token_count().count);
        if let Some(s) = r.sent_ns {
            first_sent = Some(first_sent.map_or(s, |f| f.min(s)));
        }
        if let Some(e) = r.end_ns {
            last_end = Some(last_end.map_or(e, |l| l.max(e)));
        }

        if !r.was_sent() {
            counts.dropped += 1;
            if !matches!(r.outcome, Outcome::AbortedAtDeadline | Outcome::Dropped) {
                *unsent_odd.entry(r.outcome.name()).or_default() += 1;
            }
            continue;
        }
        counts.sent += 1;
        match r.outcome {
            Outcome::Succeeded => counts.succeeded += 1,
            o if o.is_abort() => counts.aborted += 1,
            o => *counts.failed.entry(o.name().to_string()).or_default() += 1,
        }
        if r.outcome != Outcome::Succeeded {
            continue;
        }

        // Succeeded: latency, tokens, stalls.
        let tc = r.output_token_count();
        tokens.total = tokens.total.saturating_add(tc.count);
        tokens.source = tokens.source.max(Some(tc.source));
        *tokens
            .by_source
            .entry(tc.source.name().to_string())
            .or_default() += 1;
        for src in [
            TokenSource::Usage,
            TokenSource::TokenIds,
            TokenSource::Tokenizer,
            TokenSource::Chunks,
        ] {
            let other = match src {
                TokenSource::Chunks => Some(r.chunks.len() as u64),
                s => r.token_sources.get(s),
            };
            if let (Some(n), true) = (other, src != tc.source) {
                agree.entry(src).or_default().add(n, tc.count);
            }
        }
        if let Some(turn) = r.turn {
            let (n, t, i) = turns.entry(turn).or_default();
            *n += 1;
            let mut scratch = 0;
            t.extend(ttft_ms(r, &mut scratch));
            i.extend(itl_gaps(r, &mut scratch).map(|(g, _)| ms(g)));
        }

        ttft.extend(ttft_ms(r, &mut bad_intervals));
        ttft_content.extend(ttft_content_ms(r, &mut bad_intervals));
        ttft_response.extend(ttft_response_ms(r, &mut bad_intervals));
        if r.sent_ns.is_some() && r.end_ns.is_some() {
            e2e.extend(e2e_ms(r, &mut bad_intervals));
        } else {
            no_end += 1;
        }

        let mut stalled = false;
        for (g, later) in itl_gaps(r, &mut bad_intervals) {
            itl.push(ms(g));
            let k = per_token_weight(later);
            itl_tok.push((ms(g) / k as f64, k));
            if g > opts.stall_threshold_ns {
                stalls.gaps += 1;
                stalled = true;
            }
        }
        stalls.requests += u64::from(stalled);
        per_chunk.extend(r.chunks.iter().filter_map(|c| c.tokens()).map(f64::from));

        if let Some((t, s)) = tpot_and_speed(r, &mut bad_intervals) {
            tpot.push(t);
            speed.extend(s);
        }
    }

    counts.intended = opts.intended.unwrap_or(counts.sent + counts.dropped);

    let window = opts.window.or(match (first_sent, last_end) {
        (Some(s), Some(e)) => Some((s, e)),
        _ => None,
    });
    let window_ns = window.map(|(s, e)| e.saturating_sub(s));
    let per_s = |n: u64| {
        window_ns
            .filter(|&w| w > 0)
            .map(|w| n as f64 * NS_PER_S / w as f64)
    };
    let throughput = Throughput {
        output_tokens_per_s: per_s(tokens.total),
        requests_per_s: per_s(counts.succeeded),
        window_s: window_ns.map(|w| w as f64 / NS_PER_S),
    };

    let mut warnings = Vec::new();
    for (name, n) in &unsent_odd {
        warnings.push(format!(
            "{n} request(s) with outcome {name} have no send time; counted as dropped"
        ));
    }
    if bad_intervals > 0 {
        warnings.push(format!(
            "{bad_intervals} interval(s) end before they start (record timestamps out of \
             order); those samples were skipped"
        ));
    }
    if no_end > 0 {
        warnings.push(format!(
            "{no_end} succeeded request(s) lack a send or end time; no E2E sample for them"
        ));
    }
    if window_ns == Some(0) && counts.sent > 0 {
        warnings.push("the measured window has zero length; throughput is absent".into());
    }

    LevelSummary {
        requests: counts,
        warmup,
        ttft: Distribution::from_samples(&mut ttft),
        ttft_content: Distribution::from_samples(&mut ttft_content),
        ttft_response: Distribution::from_samples(&mut ttft_response),
        itl: Distribution::from_samples(&mut itl),
        itl_per_token: Distribution::from_weighted(&mut itl_tok),
        tpot: Distribution::from_samples(&mut tpot),
        e2e: Distribution::from_samples(&mut e2e),
        output_speed_tok_s: Distribution::from_samples(&mut speed),
        tokens_per_chunk: Distribution::from_samples(&mut per_chunk),
        output_tokens: tokens,
        throughput,
        stalls,
        counters,
        warnings,
        token_agreement: agree.into_iter().map(|(s, a)| a.finish(s)).collect(),
        by_turn: turns
            .into_iter()
            .map(|(turn, (requests, mut t, mut i))| TurnSummary {
                turn,
                requests,
                ttft: Distribution::from_samples(&mut t),
                itl: Distribution::from_samples(&mut i),
            })
            .collect(),
    }
}
