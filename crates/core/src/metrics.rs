//! The metrics of one load level as pure functions of its records: latency
//! distributions, throughput, token counts, stalls, and the request accounting that
//! FAULTS.md requires. Every number a report prints about a level comes from here.

use crate::dist::{DistAcc, Sorted};
use crate::sessions::{SessionAcc, SessionSummary, WhatIf};
use crate::stats::{self, Distribution};
use crate::{Outcome, RequestRecord, StampClock, TokenSource};
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
    /// Defines `ttft`: the first content-bearing chunk minus the send time.
    pub const TTFT: &str = "time to first token: arrival of the first content-bearing chunk \
(content, reasoning or tool-call delta) minus the time the request was sent; succeeded \
requests only";
    /// Defines `ttft_content`: the first chunk of visible content (not reasoning, not tool
    /// calls) minus the send time.
    pub const TTFT_CONTENT: &str = "time to first visible content: arrival of the first chunk \
carrying visible content (not reasoning, not tool calls) minus the send time; succeeded \
requests that produced visible content only";
    /// Defines `ttft_response`: TTFT from the time the schedule wanted the request sent,
    /// client-side queueing included.
    pub const TTFT_RESPONSE: &str = "TTFT as response time: arrival of the first \
content-bearing chunk minus the time an open-loop schedule wanted the request sent, so \
client-side queueing is included (coordinated omission made visible); succeeded requests \
with a schedule only";
    /// Defines `itl`: the gaps between consecutive content-bearing chunks, pooled over
    /// requests.
    pub const ITL: &str = "inter-token latency: the gaps between consecutive content-bearing \
chunks of a request, one sample per gap, pooled over all succeeded requests of the level";
    /// Defines `itl_per_token`: each ITL gap spread over the tokens of its later chunk.
    pub const ITL_PER_TOKEN: &str = "per-token ITL: each ITL gap divided by the number of tokens \
in the later chunk and entered once per token; a chunk whose token count is unknown (or 0) \
counts as 1 token";
    /// Defines `tpot`: one decode time per output token for each request.
    pub const TPOT: &str = "time per output token, per request: (last chunk - first chunk) / \
(output tokens - 1), over succeeded requests with at least 2 output tokens in at least 2 \
chunks; a distribution over requests whose mean is the 'average ITL' of some tools";
    /// Defines `e2e`: the end of the request minus its send time.
    pub const E2E: &str = "end-to-end latency: the end of the request minus the time it was \
sent; succeeded requests only";
    /// Defines `output_speed_tok_s`: each request's decode speed in tokens/s.
    pub const OUTPUT_SPEED: &str = "output speed, per request: (output tokens - 1) / (last \
chunk - first chunk) in tokens/s, over the requests TPOT uses whose last chunk arrived after \
the first";
    /// Defines `tokens_per_chunk`: the tokens each chunk carried and where that count came
    /// from.
    pub const TOKENS_PER_CHUNK: &str = "tokens carried by each content-bearing chunk of \
succeeded requests, where the count is known: from per-chunk usage or token ids the server \
sent, else from the run's tokenizer (each token of the joined text attributed to the chunk \
that completed it, then scaled by largest remainder to the server's usage count when that \
differs, so chunk counts add up to the count used) (burstiness)";
    /// Defines `throughput`: tokens/s and requests/s over the measured window.
    pub const THROUGHPUT: &str = "output tokens of succeeded requests per second of the \
measured window, and succeeded requests per second; the window runs from the first send to \
the last end among the level's non-warm-up requests unless the run sets it; absent when the \
window has zero length";
    /// Defines `output_tokens`: the sources of a request's count in order of trust, and the
    /// totals.
    pub const OUTPUT_TOKENS: &str = "output tokens per request: the server's usage count, else \
counted token ids, else the tokenizer over the text, else one per content-bearing chunk; \
'source' names the weakest of these any succeeded request needed; 'total' counts succeeded \
requests, 'received_total' every request including the partial output of failed ones";
    /// Defines `token_agreement`: how far the other token sources are from the count used.
    pub const TOKEN_AGREEMENT: &str = "how far each other output-token source disagrees \
with the count each succeeded request used: over the requests where both are known, \
diff_pct = (sum of the other source - sum of the used count) / sum of the used count x 100, \
max_abs_diff the largest per-request difference and requests_differing how many differ; \
'chunks' is the content-bearing chunk count";
    /// Defines `by_turn`: TTFT and ITL per turn index of multi-turn sessions.
    pub const BY_TURN: &str = "multi-turn sessions: TTFT and ITL (as defined above) over the \
succeeded requests of each turn index (0 = the first turn), so growing history shows";
    /// Defines `clock`: kernel or user stamps, reads carrying several chunks, the client's
    /// read delay.
    pub const CLOCK: &str = "which clock stamped the chunks: kernel (the kernel's receive time \
of the socket read that carried them, SO_TIMESTAMPNS, moved to the monotonic clock) or user (the \
client's clock when the read reached it); kernel_requests and user_requests count sent requests; \
multi_event_reads counts socket reads that carried more than one chunk (those share one time); \
read_delay is user read time - kernel receive time per chunk of succeeded kernel-stamped requests: \
how late the client read";
    /// Defines `prompt_cache`: the share of prompt tokens served from the server's cache.
    pub const PROMPT_CACHE: &str = "prompt tokens the server took from its prompt (prefix) \
cache: cached_tokens / prompt_tokens over the succeeded requests whose usage reported both \
(prompt_tokens_details.cached_tokens, input_tokens_details.cached_tokens, Anthropic's \
cache_read_input_tokens, llama.cpp's timings.cache_n); a cached prompt skips prefill, so at 10 % \
or more a warning says TTFT measures cache hits";
    /// Defines `stalls`: waits over the threshold and the requests that had one.
    pub const STALLS: &str = "a stall is a wait longer than threshold_ms, over succeeded \
requests: a gap between chunks (gaps) or the wait from the send to the first chunk \
(first_token); requests counts those with at least one. The server attribution's stalls are \
the same waits";
    /// Defines `requests`: the accounting identities between intended, sent, dropped and
    /// the outcomes.
    pub const REQUESTS: &str = "intended = sent + dropped; sent = succeeded + failed (by \
outcome) + aborted. A request is sent once it has a send time or ended in a connect, TLS or \
transport error; a request that never left the client is dropped; warm-up requests are \
counted apart and excluded from every statistic";
    /// The units of the report's figures: milliseconds, tokens/s, per second.
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
    /// Requests the load shape meant to send: `sent + dropped` unless the run knows the
    /// number ([`LevelOptions::intended`]).
    pub intended: u64,
    /// Requests an attempt was made for (see [`RequestRecord::was_sent`]).
    pub sent: u64,
    /// Sent requests whose outcome is [`Outcome::Succeeded`].
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
    /// `intended` differs from `sent + dropped`.
    #[error(
        "request accounting broken: intended = sent + dropped fails: intended {intended}, \
         sent {sent} + dropped {dropped} = {}; {}",
        .sent + .dropped,
        gap(*.intended, .sent + .dropped, "intended")
    )]
    Intended {
        /// Requests the level intended to send.
        intended: u64,
        /// Requests sent.
        sent: u64,
        /// Requests dropped before they were sent.
        dropped: u64,
    },
    /// `sent` differs from `succeeded + failed + aborted`.
    #[error(
        "request accounting broken: sent = succeeded + failed + aborted fails: sent {sent}, \
         succeeded {succeeded} + failed {failed} + aborted {aborted} = {}; {}",
        .succeeded + .failed + .aborted,
        gap(*.sent, .succeeded + .failed + .aborted, "sent")
    )]
    Sent {
        /// Requests sent.
        sent: u64,
        /// Sent requests that succeeded.
        succeeded: u64,
        /// Sent requests that failed, over every failure class.
        failed: u64,
        /// Sent requests aborted by the deadline, Ctrl-C or the client hanging up.
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
    /// Output tokens of succeeded requests per second of the window; absent when the window
    /// is unknown or zero long.
    pub output_tokens_per_s: Option<f64>,
    /// Succeeded requests per second of the window; absent when the window is unknown or
    /// zero long.
    pub requests_per_s: Option<f64>,
    /// Length of the measured window; absent when there is no window (no records).
    pub window_s: Option<f64>,
}

/// Stalls: waits longer than the stall threshold, for the first token or between
/// chunks, the same waits the server attribution names a cause for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stalls {
    /// The stall threshold in ms: waits strictly longer than this count.
    pub threshold_ms: f64,
    /// Gaps between chunks longer than the threshold, over succeeded requests.
    pub gaps: u64,
    /// Waits for the first token (send to first chunk) longer than the threshold, over
    /// succeeded requests. Absent in reports made before it was counted (read as 0).
    #[serde(default)]
    pub first_token: u64,
    /// Succeeded requests with at least one stall of either kind.
    pub requests: u64,
}

impl Stalls {
    /// Every stall: the long first-token waits and the long gaps between chunks.
    pub fn total(&self) -> u64 {
        self.gaps + self.first_token
    }
}

/// Stream-cleanliness counters summed over the level's requests (failed ones too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// SSE keep-alive comments and ping events (FAULTS 6).
    pub keepalives: u64,
    /// Events whose data was not valid for the dialect (FAULTS 7, 24).
    pub malformed: u64,
    /// Events that arrived in the same socket read as an earlier event (FAULTS 2).
    pub coalesced: u64,
    /// Bytes received after `[DONE]` (FAULTS 12).
    pub bytes_after_done: u64,
    /// Requests whose stream ended with a finish reason but no `[DONE]`.
    pub no_done_marker: u64,
    /// Socket reads that delivered body bytes; counted, not a sign of an unclean stream.
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
    /// Where every non-warm-up request of the level went.
    pub requests: RequestCounts,
    /// Warm-up requests, excluded from everything else.
    pub warmup: u64,
    /// Time to first token in ms over succeeded requests ([`formula::TTFT`]); `None` when
    /// none had one.
    #[serde(with = "stats::as_ms")]
    pub ttft: Option<Distribution>,
    /// Time to first visible content in ms ([`formula::TTFT_CONTENT`]); `None` when no
    /// succeeded request showed content.
    #[serde(with = "stats::as_ms")]
    pub ttft_content: Option<Distribution>,
    /// TTFT from the scheduled send time in ms ([`formula::TTFT_RESPONSE`]); `None` without
    /// an open-loop schedule.
    #[serde(with = "stats::as_ms")]
    pub ttft_response: Option<Distribution>,
    /// Inter-token gaps in ms pooled over succeeded requests ([`formula::ITL`]); `None`
    /// when no request had two content-bearing chunks.
    #[serde(with = "stats::as_ms")]
    pub itl: Option<Distribution>,
    /// Per-token ITL in ms ([`formula::ITL_PER_TOKEN`]); `None` when `itl` is.
    #[serde(with = "stats::as_ms")]
    pub itl_per_token: Option<Distribution>,
    /// Time per output token in ms, one sample per request ([`formula::TPOT`]); `None` when
    /// no request had 2 tokens in 2 chunks.
    #[serde(with = "stats::as_ms")]
    pub tpot: Option<Distribution>,
    /// End-to-end latency in ms ([`formula::E2E`]); `None` when no succeeded request has
    /// both a send and an end time.
    #[serde(with = "stats::as_ms")]
    pub e2e: Option<Distribution>,
    /// Per-request output speed in tokens/s.
    pub output_speed_tok_s: Option<Distribution>,
    /// Tokens per chunk, where known.
    pub tokens_per_chunk: Option<Distribution>,
    /// Output-token totals and the sources of the counts.
    pub output_tokens: OutputTokens,
    /// Tokens/s and requests/s over the measured window.
    pub throughput: Throughput,
    /// ITL gaps over the stall threshold.
    pub stalls: Stalls,
    /// Stream-cleanliness counters over every non-warm-up request.
    pub counters: Counters,
    /// Inconsistencies found in the records, and conclusions the records put in doubt
    /// (a prompt cache that made TTFT a cache hit's), in plain words.
    pub warnings: Vec<String>,
    /// How far the other output-token sources disagree with the one used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_agreement: Vec<SourceAgreement>,
    /// TTFT and ITL by turn of multi-turn sessions (empty without sessions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_turn: Vec<TurnSummary>,
    /// Whole sessions (agent loops, multi-turn chats): wall time and its split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionSummary>,
    /// Which clock stamped the chunks and how late the client read them; absent when
    /// no record says (records of older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockCheck>,
    /// How much of the prompts the server served from its prefix cache; absent when no
    /// succeeded request's usage said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<PromptCache>,
}

/// Share of a level's prompt tokens the server took from its prompt (prefix) cache, over
/// the succeeded requests whose usage reported both the prompt and its cached part. A
/// cached prompt skips prefill: its TTFT measures a cache hit, not the prompt's
/// computation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCache {
    /// Succeeded requests whose usage reported cached prompt tokens.
    pub requests: u64,
    /// Their prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Of those, the tokens served from the cache.
    pub cached_tokens: u64,
}

impl PromptCache {
    /// A cached share at or above this (percent) is warned about: the level's TTFT is
    /// mostly a cache hit's.
    pub const MATERIAL_PCT: f64 = 10.0;

    /// Cached tokens over prompt tokens, in percent; absent without prompt tokens.
    pub fn share_pct(&self) -> Option<f64> {
        (self.prompt_tokens > 0)
            .then(|| self.cached_tokens as f64 / self.prompt_tokens as f64 * 100.0)
    }

    fn push(&mut self, r: &RequestRecord) {
        if let (Some(cached), Some(prompt)) = (r.cached_input_tokens, r.input_tokens) {
            self.requests += 1;
            self.prompt_tokens = self.prompt_tokens.saturating_add(prompt);
            // A server cannot have cached more of a prompt than it had.
            self.cached_tokens = self.cached_tokens.saturating_add(cached.min(prompt));
        }
    }

    fn merge(&mut self, o: &PromptCache) {
        self.requests += o.requests;
        self.prompt_tokens = self.prompt_tokens.saturating_add(o.prompt_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(o.cached_tokens);
    }

    /// The warning a material share deserves, in plain words (counts, not the share,
    /// which the report writes in its own format).
    fn warning(&self) -> Option<String> {
        self.share_pct().filter(|&p| p >= Self::MATERIAL_PCT)?;
        Some(format!(
            "the server took {} of {} prompt tokens from its prompt cache ({} request(s) \
             reporting): TTFT here measures cache hits as well as prefill; for cold \
             prefill send prompts it has not seen (--input-tokens N draws new ones each run \
             unless --seed repeats them) or turn its cache off",
            self.cached_tokens, self.prompt_tokens, self.requests
        ))
    }
}

/// The self-check of the two clocks: requests stamped by the kernel's receive time or
/// by the user clock, socket reads that carried several chunks, and the client's own
/// read delay (user read time − kernel receive time, per chunk of the succeeded
/// kernel-stamped requests): how late the client was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockCheck {
    /// Sent requests whose chunks carry the kernel's receive time.
    pub kernel_requests: u64,
    /// Sent requests stamped by the user clock (`--timestamps user`, or no stamp).
    pub user_requests: u64,
    /// Socket reads that carried more than one chunk (they share one time).
    pub multi_event_reads: u64,
    /// User read time minus kernel receive time per chunk, in ms; `None` when no succeeded
    /// kernel-stamped request had a chunk.
    #[serde(with = "stats::as_ms")]
    pub read_delay: Option<Distribution>,
}

/// Running sums of a [`ClockCheck`] (boxed in [`SummaryAcc`], created by the first
/// record that says its clock: levels without one stay as small as before).
#[derive(Debug, Clone, Default)]
struct ClockAcc {
    kernel: u64,
    user: u64,
    multi: u64,
    delay: DistAcc,
}

impl ClockAcc {
    /// Counts a sent record; its delays when it succeeded. Returns the values kept.
    fn push(&mut self, r: &RequestRecord) -> u64 {
        let Some(clock) = r.clock else {
            return 0;
        };
        match clock {
            StampClock::Kernel => self.kernel += 1,
            StampClock::User => self.user += 1,
        }
        self.multi += u64::from(r.counters.multi_event_reads);
        if r.outcome != Outcome::Succeeded {
            return 0;
        }
        r.read_delays_us
            .iter()
            .map(|&us| self.delay.push(f64::from(us) / 1e3))
            .sum()
    }

    fn merge(&mut self, o: &ClockAcc) {
        self.kernel += o.kernel;
        self.user += o.user;
        self.multi += o.multi;
        self.delay.merge(&o.delay);
    }

    fn finish(&self) -> ClockCheck {
        ClockCheck {
            kernel_requests: self.kernel,
            user_requests: self.user,
            multi_event_reads: self.multi,
            read_delay: self.delay.summary(),
        }
    }
}

/// One alternative output-token source compared with the count each request used
/// ([`formula::TOKEN_AGREEMENT`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceAgreement {
    /// The alternative source compared with the used count.
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
    /// The turn index (0 = a session's first turn).
    pub turn: u32,
    /// Succeeded requests at this turn index.
    pub requests: u64,
    /// TTFT in ms over those requests; `None` when none had one.
    #[serde(with = "stats::as_ms")]
    pub ttft: Option<Distribution>,
    /// Pooled ITL in ms over those requests; `None` when none had a gap.
    #[serde(with = "stats::as_ms")]
    pub itl: Option<Distribution>,
}

/// Running sums for one [`SourceAgreement`].
#[derive(Debug, Clone, Default)]
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

    fn merge(&mut self, o: &Agree) {
        self.requests += o.requests;
        self.total = self.total.saturating_add(o.total);
        self.used = self.used.saturating_add(o.used);
        self.max_abs = self.max_abs.max(o.max_abs);
        self.differing += o.differing;
    }

    fn finish(&self, source: TokenSource) -> SourceAgreement {
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
///
/// A fold of [`SummaryAcc`] over `records`, every distribution exact.
pub fn summarize_level(records: &[RequestRecord], opts: &LevelOptions) -> LevelSummary {
    let mut acc = SummaryAcc::new(opts.stall_threshold_ns);
    for r in records {
        acc.push(r);
    }
    acc.finish(opts)
}

/// Running sums of one turn index.
#[derive(Debug, Clone, Default)]
struct TurnAcc {
    requests: u64,
    ttft: DistAcc,
    itl: DistAcc,
}

/// [`summarize_level`] one record at a time: what a level keeps of its records for its
/// [`LevelSummary`]. Counts and sums are exact; distributions are [`DistAcc`]s, exact
/// until [`SummaryAcc::bucketize`]. Two of them over parts of a level [`merge`] into the
/// one over the whole.
///
/// [`merge`]: SummaryAcc::merge
#[derive(Debug, Clone)]
pub struct SummaryAcc {
    stall_threshold_ns: u64,
    /// Whether pooled ITL is kept here (see [`SummaryAcc::without_pooled_itl`]).
    keep_itl: bool,
    /// The level's budget was spent: a new turn's distributions start bucketed.
    bucketed: bool,
    warmup: u64,
    counts: RequestCounts,
    unsent_odd: BTreeMap<&'static str, u64>,
    bad_intervals: u64,
    no_end: u64,
    ttft: DistAcc,
    ttft_content: DistAcc,
    ttft_response: DistAcc,
    itl: DistAcc,
    itl_tok: DistAcc,
    tpot: DistAcc,
    e2e: DistAcc,
    speed: DistAcc,
    per_chunk: DistAcc,
    tokens: OutputTokens,
    stalls: Stalls,
    counters: Counters,
    first_sent: Option<u64>,
    last_end: Option<u64>,
    agree: BTreeMap<TokenSource, Agree>,
    turns: BTreeMap<u32, TurnAcc>,
    clock: Option<Box<ClockAcc>>,
    /// Created by the first record that says its cached prompt tokens (boxed, as
    /// `sessions`: the proxy's live window keeps hundreds of these).
    cache: Option<Box<PromptCache>>,
    /// Created by the first record of a session (boxed: levels without sessions stay
    /// as small as before, which the proxy's live window counts on).
    sessions: Option<Box<SessionAcc>>,
}

impl SummaryAcc {
    /// ITL gaps strictly longer than `stall_threshold_ns` count as stalls.
    pub fn new(stall_threshold_ns: u64) -> SummaryAcc {
        SummaryAcc {
            stall_threshold_ns,
            keep_itl: true,
            bucketed: false,
            warmup: 0,
            counts: RequestCounts::default(),
            unsent_odd: BTreeMap::new(),
            bad_intervals: 0,
            no_end: 0,
            ttft: DistAcc::new(),
            ttft_content: DistAcc::new(),
            ttft_response: DistAcc::new(),
            itl: DistAcc::new(),
            itl_tok: DistAcc::new(),
            tpot: DistAcc::new(),
            e2e: DistAcc::new(),
            speed: DistAcc::new(),
            per_chunk: DistAcc::new(),
            tokens: OutputTokens::default(),
            stalls: Stalls {
                threshold_ms: ms(stall_threshold_ns),
                ..Stalls::default()
            },
            counters: Counters::default(),
            first_sent: None,
            last_end: None,
            agree: BTreeMap::new(),
            turns: BTreeMap::new(),
            clock: None,
            cache: None,
            sessions: None,
        }
    }

    /// Session what-ifs to re-price the level's sessions at (`--what-if`).
    pub fn set_what_if(&mut self, what_if: Vec<WhatIf>) {
        if !what_if.is_empty() || self.sessions.is_some() {
            self.sessions_mut().set_what_if(what_if);
        }
    }

    /// One that leaves pooled ITL (`itl`) empty, for an owner that keeps the same gaps
    /// elsewhere (the time series holds exactly these gaps, by bucket) and sets it.
    pub fn without_pooled_itl(stall_threshold_ns: u64) -> SummaryAcc {
        SummaryAcc {
            keep_itl: false,
            ..SummaryAcc::new(stall_threshold_ns)
        }
    }

    /// Warm-up records seen (they are only counted).
    pub fn warmup(&self) -> u64 {
        self.warmup
    }

    /// The per-token ITL samples (`itl_per_token` of the summary).
    pub(crate) fn itl_per_token(&self) -> &DistAcc {
        &self.itl_tok
    }

    /// Whether the per-token ITL holds the same gaps as `pooled`, the time series' pooled
    /// ITL of the same level. Both take `itl_gaps` of every sent, succeeded record
    /// outside the warm-up, and a chunk of k > 1 tokens puts its gap here as k samples
    /// of gap/k (weighted). So when both are exact, every weight here is one (each
    /// sample is then the gap itself: x / 1.0 is x) and both hold as many, they hold the
    /// same; the count also tells another level's pooled ITL apart.
    pub(crate) fn per_token_is_pooled(&self, pooled: &Sorted<'_>) -> bool {
        self.itl_tok.is_exact_unit()
            && pooled.is_exact_unit()
            && pooled.count() == self.itl_tok.count()
    }

    /// Takes one record; returns the values it kept exactly (for the level's budget).
    pub fn push(&mut self, r: &RequestRecord) -> u64 {
        if r.session.is_some() {
            self.sessions_mut().push(r);
        }
        if r.warmup {
            self.warmup += 1;
            return 0;
        }
        let c = &r.counters;
        let k = &mut self.counters;
        k.keepalives += u64::from(c.keepalives);
        k.malformed += u64::from(c.malformed);
        k.coalesced += u64::from(c.coalesced);
        k.bytes_after_done += c.bytes_after_done;
        k.no_done_marker += u64::from(c.no_done_marker);
        k.reads += u64::from(c.reads);
        k.short_answers += u64::from(r.is_short_answer());
        // Token counts come from the server: saturate rather than wrap (usage 2^64 − 1).
        self.tokens.received_total = self
            .tokens
            .received_total
            .saturating_add(r.output_token_count().count);
        if let Some(s) = r.sent_ns {
            self.first_sent = Some(self.first_sent.map_or(s, |f| f.min(s)));
        }
        if let Some(e) = r.end_ns {
            self.last_end = Some(self.last_end.map_or(e, |l| l.max(e)));
        }
        if !r.was_sent() {
            self.counts.dropped += 1;
            if !matches!(r.outcome, Outcome::AbortedAtDeadline | Outcome::Dropped) {
                *self.unsent_odd.entry(r.outcome.name()).or_default() += 1;
            }
            return 0;
        }
        self.counts.sent += 1;
        let kept = match r.clock {
            Some(_) => self.clock.get_or_insert_with(Box::default).push(r),
            None => 0,
        };
        match r.outcome {
            Outcome::Succeeded => self.counts.succeeded += 1,
            o if o.is_abort() => self.counts.aborted += 1,
            o => *self.counts.failed.entry(o.name().to_string()).or_default() += 1,
        }
        if r.outcome != Outcome::Succeeded {
            return kept;
        }
        self.push_tokens(r);
        kept + self.push_latency(r)
    }

    /// Output-token totals and source agreement of a succeeded record.
    fn push_tokens(&mut self, r: &RequestRecord) {
        if r.cached_input_tokens.is_some() {
            self.cache.get_or_insert_with(Box::default).push(r);
        }
        let tc = r.output_token_count();
        let tokens = &mut self.tokens;
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
                self.agree.entry(src).or_default().add(n, tc.count);
            }
        }
    }

    /// Latency samples, stalls and tokens per chunk of a succeeded record.
    fn push_latency(&mut self, r: &RequestRecord) -> u64 {
        let mut kept = 0u64;
        let bad = &mut self.bad_intervals;
        if let Some(turn) = r.turn {
            let t = self.turns.entry(turn).or_default();
            t.requests += 1;
            let mut scratch = 0;
            let b = self.bucketed;
            kept += ttft_ms(r, &mut scratch).map_or(0, |v| t.ttft.push_in(v, b));
            for (g, _) in itl_gaps(r, &mut scratch) {
                kept += t.itl.push_in(ms(g), b);
            }
        }
        kept += ttft_ms(r, bad).map_or(0, |v| self.ttft.push(v));
        kept += ttft_content_ms(r, bad).map_or(0, |v| self.ttft_content.push(v));
        kept += ttft_response_ms(r, bad).map_or(0, |v| self.ttft_response.push(v));
        if r.sent_ns.is_some() && r.end_ns.is_some() {
            kept += e2e_ms(r, bad).map_or(0, |v| self.e2e.push(v));
        } else {
            self.no_end += 1;
        }
        // A stall is a wait over the threshold, for the first token or between chunks:
        // the waits attribution::GapsAcc takes, so the two counts agree.
        let first_wait = r.sent_ns.zip(r.first_chunk_ns());
        let mut stalled =
            first_wait.is_some_and(|(s, f)| f.saturating_sub(s) > self.stall_threshold_ns);
        self.stalls.first_token += u64::from(stalled);
        for (g, later) in itl_gaps(r, bad) {
            if self.keep_itl {
                kept += self.itl.push(ms(g));
            }
            let k = per_token_weight(later);
            kept += self.itl_tok.push_weighted(ms(g) / k as f64, k);
            if g > self.stall_threshold_ns {
                self.stalls.gaps += 1;
                stalled = true;
            }
        }
        self.stalls.requests += u64::from(stalled);
        for t in r.chunks.iter().filter_map(|c| c.tokens()) {
            kept += self.per_chunk.push(f64::from(t));
        }
        if let Some((t, s)) = tpot_and_speed(r, bad) {
            kept += self.tpot.push(t);
            kept += s.map_or(0, |s| self.speed.push(s));
        }
        kept
    }

    fn dists_mut(&mut self) -> impl Iterator<Item = &mut DistAcc> {
        [
            &mut self.ttft,
            &mut self.ttft_content,
            &mut self.ttft_response,
            &mut self.itl,
            &mut self.itl_tok,
            &mut self.tpot,
            &mut self.e2e,
            &mut self.speed,
            &mut self.per_chunk,
        ]
        .into_iter()
        .chain(self.clock.iter_mut().map(|c| &mut c.delay))
        .chain(
            self.turns
                .values_mut()
                .flat_map(|t| [&mut t.ttft, &mut t.itl]),
        )
    }

    /// Folds every distribution into its histogram (the level's budget is spent).
    pub fn bucketize(&mut self) {
        self.bucketed = true;
        self.dists_mut().for_each(DistAcc::to_bucketed);
    }

    /// Heap bytes held by the distributions.
    pub fn approx_bytes(&self) -> usize {
        [
            &self.ttft,
            &self.ttft_content,
            &self.ttft_response,
            &self.itl,
            &self.itl_tok,
            &self.tpot,
            &self.e2e,
            &self.speed,
            &self.per_chunk,
        ]
        .into_iter()
        .chain(self.clock.iter().map(|c| &c.delay))
        .chain(self.turns.values().flat_map(|t| [&t.ttft, &t.itl]))
        .map(DistAcc::approx_bytes)
        .sum()
    }

    /// Adds another part of the same level (same stall threshold).
    pub fn merge(&mut self, o: &SummaryAcc) {
        self.warmup += o.warmup;
        let c = &mut self.counts;
        c.sent += o.counts.sent;
        c.succeeded += o.counts.succeeded;
        c.dropped += o.counts.dropped;
        c.aborted += o.counts.aborted;
        for (k, n) in &o.counts.failed {
            *c.failed.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.unsent_odd {
            *self.unsent_odd.entry(k).or_default() += n;
        }
        self.bad_intervals += o.bad_intervals;
        self.no_end += o.no_end;
        for (a, b) in [
            (&mut self.ttft, &o.ttft),
            (&mut self.ttft_content, &o.ttft_content),
            (&mut self.ttft_response, &o.ttft_response),
            (&mut self.itl, &o.itl),
            (&mut self.itl_tok, &o.itl_tok),
            (&mut self.tpot, &o.tpot),
            (&mut self.e2e, &o.e2e),
            (&mut self.speed, &o.speed),
            (&mut self.per_chunk, &o.per_chunk),
        ] {
            a.merge(b);
        }
        let t = &mut self.tokens;
        t.total = t.total.saturating_add(o.tokens.total);
        t.received_total = t.received_total.saturating_add(o.tokens.received_total);
        t.source = t.source.max(o.tokens.source);
        for (k, n) in &o.tokens.by_source {
            *t.by_source.entry(k.clone()).or_default() += n;
        }
        self.stalls.gaps += o.stalls.gaps;
        self.stalls.first_token += o.stalls.first_token;
        self.stalls.requests += o.stalls.requests;
        let k = &mut self.counters;
        k.keepalives += o.counters.keepalives;
        k.malformed += o.counters.malformed;
        k.coalesced += o.counters.coalesced;
        k.bytes_after_done += o.counters.bytes_after_done;
        k.no_done_marker += o.counters.no_done_marker;
        k.reads += o.counters.reads;
        k.short_answers += o.counters.short_answers;
        self.first_sent = min_opt(self.first_sent, o.first_sent);
        self.last_end = self.last_end.max(o.last_end);
        for (s, a) in &o.agree {
            self.agree.entry(*s).or_default().merge(a);
        }
        for (turn, t) in &o.turns {
            let mine = self.turns.entry(*turn).or_default();
            mine.requests += t.requests;
            mine.ttft.merge(&t.ttft);
            mine.itl.merge(&t.itl);
        }
        if let Some(c) = &o.clock {
            self.clock.get_or_insert_with(Box::default).merge(c);
        }
        if let Some(c) = &o.cache {
            self.cache.get_or_insert_with(Box::default).merge(c);
        }
        if let Some(s) = &o.sessions {
            self.sessions_mut().merge(s);
        }
    }

    fn sessions_mut(&mut self) -> &mut SessionAcc {
        self.sessions.get_or_insert_with(Box::default)
    }

    /// The level's summary; `opts` supplies what the records cannot (window, intended,
    /// dropped); its stall threshold is the one given to [`SummaryAcc::new`].
    pub fn finish(&self, opts: &LevelOptions) -> LevelSummary {
        self.finish_with(opts, None)
    }

    /// [`Self::finish`], given the level's pooled ITL already sorted (the time series'
    /// gaps): when every chunk carried one token, the per-token ITL holds the same gaps
    /// and is summarized from that sort instead of its own (see
    /// `SummaryAcc::per_token_is_pooled`).
    pub fn finish_with(&self, opts: &LevelOptions, pooled: Option<&Sorted<'_>>) -> LevelSummary {
        let mut counts = self.counts.clone();
        counts.dropped += opts.dropped;
        counts.intended = opts.intended.unwrap_or(counts.sent + counts.dropped);
        let window = opts.window.or(match (self.first_sent, self.last_end) {
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
            output_tokens_per_s: per_s(self.tokens.total),
            requests_per_s: per_s(counts.succeeded),
            window_s: window_ns.map(|w| w as f64 / NS_PER_S),
        };
        let sessions = self.sessions.as_ref().and_then(|s| s.finish());
        let mut warnings = self.warnings(window_ns, counts.sent);
        warnings.extend(sessions.as_ref().and_then(|s| s.tool_use.warning()));
        LevelSummary {
            requests: counts,
            warmup: self.warmup,
            ttft: self.ttft.summary(),
            ttft_content: self.ttft_content.summary(),
            ttft_response: self.ttft_response.summary(),
            itl: self.itl.summary(),
            itl_per_token: match pooled.filter(|p| self.per_token_is_pooled(p)) {
                Some(p) => p.summary(),
                None => self.itl_tok.summary(),
            },
            tpot: self.tpot.summary(),
            e2e: self.e2e.summary(),
            output_speed_tok_s: self.speed.summary(),
            tokens_per_chunk: self.per_chunk.summary(),
            output_tokens: self.tokens.clone(),
            throughput,
            stalls: self.stalls,
            counters: self.counters,
            warnings,
            token_agreement: self.agree.iter().map(|(s, a)| a.finish(*s)).collect(),
            by_turn: self
                .turns
                .iter()
                .map(|(turn, t)| TurnSummary {
                    turn: *turn,
                    requests: t.requests,
                    ttft: t.ttft.summary(),
                    itl: t.itl.summary(),
                })
                .collect(),
            clock: self.clock.as_ref().map(|c| c.finish()),
            prompt_cache: self.cache.as_deref().filter(|c| c.requests > 0).copied(),
            sessions,
        }
    }

    fn warnings(&self, window_ns: Option<u64>, sent: u64) -> Vec<String> {
        let mut warnings = Vec::new();
        for (name, n) in &self.unsent_odd {
            warnings.push(format!(
                "{n} request(s) with outcome {name} have no send time; counted as dropped"
            ));
        }
        let bad_intervals = self.bad_intervals;
        if bad_intervals > 0 {
            warnings.push(format!(
                "{bad_intervals} interval(s) end before they start (record timestamps out of \
                 order); those samples were skipped"
            ));
        }
        let no_end = self.no_end;
        if no_end > 0 {
            warnings.push(format!(
                "{no_end} succeeded request(s) lack a send or end time; no E2E sample for them"
            ));
        }
        if window_ns == Some(0) && sent > 0 {
            warnings.push("the measured window has zero length; throughput is absent".into());
        }
        warnings.extend(self.cache.as_ref().and_then(|c| c.warning()));
        warnings
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
