//! The per-request record: plain data that every source (load generator, proxy,
//! replay) produces and every number Cadence prints is computed from. Times are
//! monotonic-clock offsets in nanoseconds from the run's start.

use crate::Outcome;
use serde::{Deserialize, Serialize};

/// One content-bearing chunk's arrival: the time its bytes were read from the socket
/// (ns since run start) and the tokens it carried when known (per-chunk usage or token
/// ids). Serialized compactly as `[t_ns, tokens]`, `tokens` being `null` when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk(pub u64, pub Option<u32>);

impl Chunk {
    /// When the chunk's bytes were read: ns since the run's start.
    pub fn t_ns(&self) -> u64 {
        self.0
    }
    /// The tokens the chunk carried; `None` when the stream did not say.
    pub fn tokens(&self) -> Option<u32> {
        self.1
    }
}

/// Where an output-token count came from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage.completion_tokens` (last value seen).
    Usage,
    /// Counted from token ids the server sent with each chunk.
    TokenIds,
    /// Counted by running a tokenizer over the output text.
    Tokenizer,
    /// Nothing better: one token per content-bearing chunk.
    Chunks,
}

impl TokenSource {
    /// The source's name as serialized and printed (`usage`, `token_ids`, `tokenizer`,
    /// `chunks`).
    pub fn name(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::TokenIds => "token_ids",
            TokenSource::Tokenizer => "tokenizer",
            TokenSource::Chunks => "chunks",
        }
    }
}

/// Where a prompt-token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputTokenSource {
    /// The server's `usage.prompt_tokens`.
    Usage,
    /// The run's `--tokenizer` over the prompt text the workload sent (message
    /// contents summed; no chat template, no BOS).
    Tokenizer,
    /// Whitespace-separated words of the prompt text (no `--tokenizer` given): the
    /// built-in simulator's tokens, an estimate for a real model.
    Words,
}

impl InputTokenSource {
    /// The source's name as serialized and printed (`usage`, `tokenizer`, `words`).
    pub fn name(self) -> &'static str {
        match self {
            InputTokenSource::Usage => "usage",
            InputTokenSource::Tokenizer => "tokenizer",
            InputTokenSource::Words => "words",
        }
    }
}

/// A token count and the source it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    /// Output tokens counted.
    pub count: u64,
    /// Which source gave `count`.
    pub source: TokenSource,
}

/// Which clock stamped a request's chunks (`--timestamps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StampClock {
    /// The kernel's receive time of the socket read that carried the chunk
    /// (`SO_TIMESTAMPNS`), moved to the monotonic clock.
    Kernel,
    /// The client's monotonic clock when the read reached it.
    User,
}

impl StampClock {
    /// The clock's name as serialized and as `--timestamps` takes it (`kernel`, `user`).
    pub fn name(self) -> &'static str {
        match self {
            StampClock::Kernel => "kernel",
            StampClock::User => "user",
        }
    }
}

/// What an agent step's `tool_choice` asked of the model (`--agent-force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (no `tool_choice`, or `auto`): a reply without a call ends the
    /// session (`--agent-force off` or `mock`).
    Auto,
    /// Every step demands a call (`tool_choice` required; Anthropic's `any`).
    Required,
}

/// Which Cadence component produced a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordSource {
    /// The load generator (`cadence bench`); files written before this field existed.
    #[default]
    Bench,
    /// Live traffic measured by `cadence proxy`.
    Proxy,
}

impl RecordSource {
    fn is_bench(&self) -> bool {
        *self == RecordSource::Bench
    }
}

/// The output-token count each source gave for one request, so a report can show how
/// far they disagree. The chunk count is `chunks.len()` and is not repeated here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSources {
    /// Last `usage.completion_tokens` the server sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<u64>,
    /// Token ids the server sent, summed over chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<u64>,
    /// The run's tokenizer over the joined output text (content and reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<u64>,
}

impl TokenSources {
    /// True when no source gave a count (nothing to serialize).
    pub fn is_empty(&self) -> bool {
        *self == TokenSources::default()
    }

    /// The count `source` gave, if it gave one (`chunks` is not held here).
    pub fn get(&self, source: TokenSource) -> Option<u64> {
        match source {
            TokenSource::Usage => self.usage,
            TokenSource::TokenIds => self.token_ids,
            TokenSource::Tokenizer => self.tokenizer,
            TokenSource::Chunks => None,
        }
    }
}

/// Stream-level counters that are not outcomes but tell how clean a stream was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCounters {
    /// SSE comments (`: ping`) and `event: ping` keep-alives (FAULTS 6).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keepalives: u32,
    /// Events whose data was not valid for the dialect (FAULTS 7, 24).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed: u32,
    /// Events that arrived in the same socket read as an earlier event (FAULTS 2).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub coalesced: u32,
    /// Bytes received after `[DONE]` (FAULTS 12).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_after_done: u64,
    /// The stream ended with a finish reason but no `[DONE]` marker (FAULTS 11).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_done_marker: bool,
    /// The request was sent again because a pooled keep-alive connection turned out
    /// to be closed before any response byte (the server never saw it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stale_connection_retries: u32,
    /// Socket reads that delivered body bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reads: u32,
    /// Socket reads that carried more than one chunk (TCP merged them in the receive
    /// queue, or the client read late): those chunks share one time, kernel or user.
    /// Counted per `recvmsg` with kernel stamps, per body frame without.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub multi_event_reads: u32,
    /// Content-bearing chunks that arrived past the ceiling on chunks a record keeps
    /// (the proxy's `--max-chunks`): counted, not timed. Above 0, `chunks` holds the
    /// stream's first ones only and the record's measurement was truncated; the
    /// stream itself was not.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunks_not_kept: u64,
    /// The server's own account of its timing, when its dialect reports one (vLLM's
    /// `metrics`, Ollama's durations, llama.cpp's `timings`, SGLang's `meta_info`,
    /// TGI's timing headers): kept beside what the client measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<ServerTiming>,
}

/// What a server says it spent on one request, as its dialect reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerTiming {
    /// Waiting in the server's queue before its work began, ns (vLLM's
    /// `queue_time_ms`, SGLang's `queue_time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ns: Option<u64>,
    /// Prompt processing (prefill) up to the first token, ns (vLLM's
    /// `time_to_first_token_ms`, which starts when the request is scheduled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ns: Option<u64>,
    /// Token generation (decode), first token to last, ns (vLLM's
    /// `generation_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_ns: Option<u64>,
    /// Tokens the decode time covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tokens: Option<u64>,
    /// Speculative decoding: verification steps (vLLM's `num_spec_steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_steps: Option<u64>,
    /// Speculative decoding: draft tokens accepted, the bonus tokens not counted
    /// (`num_accepted_draft_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted: Option<u64>,
    /// Speculative decoding: draft tokens proposed (`num_draft_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafted: Option<u64>,
}

impl ServerTiming {
    /// The server's mean acceptance length: tokens per verification step, the bonus
    /// token included (`1 + accepted ÷ steps`); `None` without speculation figures.
    pub fn acceptance_length(&self) -> Option<f64> {
        let (steps, accepted) = (self.spec_steps?, self.spec_accepted?);
        (steps > 0).then(|| 1.0 + accepted as f64 / steps as f64)
    }

    /// The server's own time per output token, ns.
    pub fn per_token_ns(&self) -> Option<f64> {
        let (ns, n) = (self.decode_ns?, self.decode_tokens?);
        (n > 0).then(|| ns as f64 / n as f64)
    }
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Spare room [`RequestRecord::fit_chunks`] leaves in a chunk vector: a few entries,
/// so that fitting a vector grown by doubling rarely costs a reallocation for little.
pub const CHUNK_SLACK: usize = 16;

fn fit<T>(v: &mut Vec<T>) {
    if v.capacity() > v.len() + CHUNK_SLACK {
        v.shrink_to_fit();
    }
}

/// Everything Cadence knows about one request. Plain data: statistics are pure
/// functions of a slice of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position of the request in the run (0-based, in the order requests were issued).
    pub index: u64,
    /// The load level (sweep step) the request belongs to; 0 for a single-level run.
    #[serde(default)]
    pub level: u32,
    /// The worker (closed loop) or slot that issued it.
    #[serde(default)]
    pub worker: u32,
    /// Identifier of the prompt used, when the workload names its prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    /// Warm-up requests are recorded but excluded from statistics.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// When an open-loop schedule wanted the request sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ns: Option<u64>,
    /// When the request was handed to the connection (absent if it never was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ns: Option<u64>,
    /// When the response status line and headers arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_ns: Option<u64>,
    /// When the first *visible* content (not reasoning, not tool calls) arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_content_ns: Option<u64>,
    /// Every content-bearing chunk (content, reasoning or tool-call delta), in order.
    #[serde(default)]
    pub chunks: Vec<Chunk>,
    /// When the request ended (stream finished, failed or was aborted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// Prompt tokens, from usage (or the workload when it knows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Where `input_tokens` came from. Absent in files written before this field, when
    /// only usage set `input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_source: Option<InputTokenSource>,
    /// Of `input_tokens`, those the server says it served from its prompt (prefix)
    /// cache rather than computed; absent when it did not say (usage without the
    /// figure, or servers that never report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Output tokens and their source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<TokenCount>,
    /// How the request ended: its outcome class.
    pub outcome: Outcome,
    /// The response's HTTP status; `None` when no response head arrived (e.g. the
    /// connection failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The server's `finish_reason` for the stream (`stop`, `length`, …); `None` when it
    /// sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// What went wrong, in plain words, secrets redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Counters of how clean the stream was (keep-alives, malformed or coalesced events).
    #[serde(default)]
    pub counters: StreamCounters,
    /// Who measured the request; omitted for `bench` so older readers see no change.
    #[serde(default, skip_serializing_if = "RecordSource::is_bench")]
    pub source: RecordSource,
    /// Output-token counts by source (what `output_tokens` chose from).
    #[serde(default, skip_serializing_if = "TokenSources::is_empty")]
    pub token_sources: TokenSources,
    /// Where the per-chunk token counts in `chunks` came from, when any are known:
    /// `usage` (per-chunk usage), `token_ids`, `chunks` (one token per chunk: their
    /// number equals the server's total), or `tokenizer` (tokens of the joined text
    /// attributed to the chunk that completed them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_tokens_source: Option<TokenSource>,
    /// The multi-turn session this request belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Its turn in the session (0-based): an agent session's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// An agent step: the tool calls its reply made (0: the session's last step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u32>,
    /// An agent step after tool calls: how long the client ran the tools (its tool
    /// time) between the step before's end and this step's send, in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_wait_ns: Option<u64>,
    /// The client injected a tool call because the reply made none (`--agent-force
    /// mock`, for models that never call tools): the session went on as if it had.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tool_call_mocked: bool,
    /// An agent step (`--agent`): what its `tool_choice` asked for. Absent for plain
    /// requests and for replayed steps, whose sessions follow their recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The reply's tool-call events passed the client's ceiling (16 MiB, the wire's
    /// `MAX_TOOL_EVENT_BYTES`): its calls could not be read whole, so none was sent
    /// back and the session ended at this step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tool_calls_cut: bool,
    /// The shared-prefix group its prompt starts with (`--prefix-groups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_group: Option<u32>,
    /// The output length the workload demanded in full: `max_tokens` when the body set
    /// `ignore_eos`, else its `min_tokens`. Absent when the model may stop when it likes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output_tokens: Option<u64>,
    /// Which clock stamped the chunks; absent in files written before it existed and
    /// for records the client did not time itself (read as `user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<StampClock>,
    /// With `clock: kernel`, one value per chunk: microseconds from the kernel's
    /// receive time to the client's read (the client's own read delay; 0 for a chunk
    /// whose read had no usable stamp).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_delays_us: Vec<u32>,
    /// What only the proxy knows about the request (absent for `bench`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Box<ProxyInfo>>,
    /// Its W3C trace context, when the run traced it (`--otlp`): the ids its
    /// `traceparent` carried and its span was exported under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceIds>,
}

/// A proxied request: which one it was, and how long the proxy waited on its client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyInfo {
    /// The client's `x-request-id` (cut to 128 bytes), else one the proxy made up.
    pub request_id: String,
    /// The request's HTTP method.
    pub method: String,
    /// The request path, without the query (which may carry secrets).
    pub path: String,
    /// The body's `model`, as the client asked for it (cut to 128 bytes): a span's
    /// `gen_ai.request.model` and its metrics series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Time the proxy spent waiting for the client to take bytes (downstream
    /// back-pressure): upstream reads stood still meanwhile.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub downstream_wait_ns: u64,
    /// Indices into `chunks` of the chunks whose gap before them includes such a wait:
    /// that gap is the client's, not the server's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downstream_gaps: Vec<u32>,
}

impl RequestRecord {
    /// A record for a request that has not been sent yet.
    pub fn new(index: u64, outcome: Outcome) -> Self {
        RequestRecord {
            index,
            level: 0,
            worker: 0,
            prompt_id: None,
            warmup: false,
            scheduled_ns: None,
            sent_ns: None,
            headers_ns: None,
            first_content_ns: None,
            chunks: Vec::new(),
            end_ns: None,
            input_tokens: None,
            input_tokens_source: None,
            cached_input_tokens: None,
            output_tokens: None,
            outcome,
            http_status: None,
            finish_reason: None,
            error: None,
            counters: StreamCounters::default(),
            source: RecordSource::Bench,
            token_sources: TokenSources::default(),
            chunk_tokens_source: None,
            session: None,
            turn: None,
            tool_calls: None,
            tool_wait_ns: None,
            tool_call_mocked: false,
            tool_choice: None,
            tool_calls_cut: false,
            prefix_group: None,
            expected_output_tokens: None,
            clock: None,
            read_delays_us: Vec::new(),
            proxy: None,
            trace: None,
        }
    }

    /// Makes room for `n` chunks in all, in `chunks` and (on the kernel clock) in
    /// `read_delays_us`, so a stream of up to `n` chunks grows them once instead of by
    /// doubling. [`fit_chunks`](Self::fit_chunks) gives back what was not used.
    pub fn reserve_chunks(&mut self, n: usize) {
        self.chunks.reserve(n.saturating_sub(self.chunks.len()));
        if self.clock == Some(StampClock::Kernel) {
            self.read_delays_us
                .reserve(n.saturating_sub(self.read_delays_us.len()));
        }
    }

    /// Gives back the room `chunks` and `read_delays_us` hold beyond their length plus
    /// [`CHUNK_SLACK`], so a record kept after its stream holds about what it uses,
    /// however much was reserved.
    pub fn fit_chunks(&mut self) {
        fit(&mut self.chunks);
        fit(&mut self.read_delays_us);
    }

    /// Keeps `headers_ns` no later than the first chunk: on the kernel clock a chunk
    /// read together with the response head carries the stamp of the bytes' arrival,
    /// while the head's time was taken when it was parsed; the head came no later.
    pub fn head_no_later_than_first_chunk(&mut self) {
        if let (Some(h), Some(f)) = (self.headers_ns, self.first_chunk_ns()) {
            self.headers_ns = Some(h.min(f));
        }
    }

    /// Time of the first content-bearing chunk.
    pub fn first_chunk_ns(&self) -> Option<u64> {
        self.chunks.first().map(Chunk::t_ns)
    }

    /// Time of the last content-bearing chunk.
    pub fn last_chunk_ns(&self) -> Option<u64> {
        self.chunks.last().map(Chunk::t_ns)
    }

    /// Whether the request counts as *sent* in the accounting (FAULTS.md invariants).
    ///
    /// A request is sent when it has a send time, or when it ended in a
    /// connection-stage failure (`connect_error`, `tls_error`, `transport_error`): an
    /// attempt was made even though the request never reached a connection. Any other
    /// record without a send time, and every `dropped` one, never left the client and
    /// counts as dropped.
    pub fn was_sent(&self) -> bool {
        match self.outcome {
            Outcome::Dropped => false,
            Outcome::ConnectError | Outcome::TlsError | Outcome::TransportError => true,
            _ => self.sent_ns.is_some(),
        }
    }

    /// Brings a record of an older records file up to the current outcomes: a dropped
    /// arrival used to be written as `aborted_at_deadline` with no send time, and is
    /// read as [`Outcome::Dropped`]. The accounting is the same either way.
    pub fn upgrade_outcome(&mut self) {
        if self.outcome == Outcome::AbortedAtDeadline && self.sent_ns.is_none() {
            self.outcome = Outcome::Dropped;
        }
    }

    /// A short answer: it succeeded with fewer output tokens than the workload demanded
    /// in full ([`RequestRecord::expected_output_tokens`]) — the context filled, or a
    /// server-side cap (`n_predict`) ended it.
    pub fn is_short_answer(&self) -> bool {
        self.outcome == Outcome::Succeeded
            && self
                .expected_output_tokens
                .is_some_and(|e| self.output_token_count().count < e)
    }

    /// The record as the user clock saw it: with `clock: kernel`, each chunk moved
    /// later by its read delay (and the first content time with the first content
    /// chunk's); otherwise the record unchanged. How `cadence fidelity` compares both
    /// clocks from one run.
    pub fn on_user_clock(&self) -> RequestRecord {
        let mut r = self.clone();
        if r.clock != Some(StampClock::Kernel) || r.read_delays_us.len() != r.chunks.len() {
            return r;
        }
        let first_content = r
            .first_content_ns
            .and_then(|t| r.chunks.iter().position(|c| c.0 == t));
        for (c, d) in r.chunks.iter_mut().zip(&r.read_delays_us) {
            c.0 = c.0.saturating_add(u64::from(*d) * 1_000);
        }
        if let Some(i) = first_content {
            r.first_content_ns = Some(r.chunks[i].0);
        }
        r.clock = Some(StampClock::User);
        r.read_delays_us.clear();
        r
    }

    /// Output tokens: the recorded count, else the chunk count (source `chunks`),
    /// chunks past the ceiling included.
    pub fn output_token_count(&self) -> TokenCount {
        self.output_tokens.unwrap_or(TokenCount {
            count: self.chunk_count(),
            source: TokenSource::Chunks,
        })
    }

    /// Content-bearing chunks that arrived: those kept in `chunks` and those past the
    /// ceiling (`counters.chunks_not_kept`).
    pub fn chunk_count(&self) -> u64 {
        (self.chunks.len() as u64).saturating_add(self.counters.chunks_not_kept)
    }

    /// Whether the record keeps fewer chunks than arrived: its chunk figures (ITL)
    /// cover the first ones only, and it has no last chunk to time the stream by.
    pub fn chunks_truncated(&self) -> bool {
        self.counters.chunks_not_kept > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_serializes_compactly() {
        let c = Chunk(1500, Some(2));
        assert_eq!(serde_json::to_string(&c).unwrap(), "[1500,2]");
        let u = Chunk(7, None);
        assert_eq!(serde_json::to_string(&u).unwrap(), "[7,null]");
    }

    #[test]
    fn record_round_trips() {
        let mut r = RequestRecord::new(3, Outcome::Succeeded);
        r.sent_ns = Some(10);
        r.chunks = vec![Chunk(20, Some(1)), Chunk(30, None)];
        r.output_tokens = Some(TokenCount {
            count: 2,
            source: TokenSource::Usage,
        });
        r.counters.keepalives = 1;
        let line = serde_json::to_string(&r).unwrap();
        let back: RequestRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert!(
            !line.contains("malformed"),
            "zero counters are omitted: {line}"
        );
    }

    #[test]
    fn source_defaults_to_bench_and_round_trips_proxy() {
        let old: RequestRecord =
            serde_json::from_str(r#"{"index":1,"outcome":"succeeded"}"#).unwrap();
        assert_eq!(old.source, RecordSource::Bench);
        assert!(!serde_json::to_string(&old).unwrap().contains("source"));
        let mut r = RequestRecord::new(2, Outcome::Succeeded);
        r.source = RecordSource::Proxy;
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""source":"proxy""#), "{line}");
        assert_eq!(serde_json::from_str::<RequestRecord>(&line).unwrap(), r);
    }

    #[test]
    fn clock_and_read_delays_round_trip_and_old_lines_still_parse() {
        // A line written before the clock existed reads as no clock, no delays, no
        // multi-event reads.
        let old: RequestRecord = serde_json::from_str(
            r#"{"index":1,"outcome":"succeeded","chunks":[[5,null]],"counters":{"reads":1,"coalesced":2}}"#,
        )
        .unwrap();
        assert_eq!(old.clock, None);
        assert!(old.read_delays_us.is_empty());
        assert_eq!(old.counters.multi_event_reads, 0);
        assert!(!serde_json::to_string(&old).unwrap().contains("clock"));
        let mut r = RequestRecord::new(2, Outcome::Succeeded);
        r.clock = Some(StampClock::Kernel);
        r.chunks = vec![Chunk(10, None), Chunk(20, None)];
        r.read_delays_us = vec![3, 1500];
        r.counters.multi_event_reads = 1;
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""clock":"kernel""#), "{line}");
        assert!(line.contains(r#""read_delays_us":[3,1500]"#), "{line}");
        assert!(line.contains(r#""multi_event_reads":1"#), "{line}");
        assert_eq!(serde_json::from_str::<RequestRecord>(&line).unwrap(), r);
    }

    #[test]
    fn the_user_clock_view_adds_each_chunks_read_delay() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.chunks = vec![Chunk(1_000_000, Some(1)), Chunk(2_000_000, None)];
        r.first_content_ns = Some(2_000_000);
        // User clock: unchanged.
        r.clock = Some(StampClock::User);
        assert_eq!(r.on_user_clock(), r);
        r.clock = Some(StampClock::Kernel);
        r.read_delays_us = vec![500, 7];
        let u = r.on_user_clock();
        assert_eq!(
            u.chunks,
            vec![Chunk(1_500_000, Some(1)), Chunk(2_007_000, None)]
        );
        assert_eq!(u.first_content_ns, Some(2_007_000));
        assert_eq!(u.clock, Some(StampClock::User));
        assert!(u.read_delays_us.is_empty());
        // Delays that do not line up with the chunks are not applied.
        r.read_delays_us = vec![500];
        assert_eq!(r.on_user_clock(), r);
    }

    #[test]
    fn sent_means_a_send_time_or_a_connection_stage_failure() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        assert!(!r.was_sent(), "no send time, no attempt");
        r.sent_ns = Some(1);
        assert!(r.was_sent());
        for o in [
            Outcome::ConnectError,
            Outcome::TlsError,
            Outcome::TransportError,
        ] {
            assert!(RequestRecord::new(0, o).was_sent(), "{o} is an attempt");
        }
        assert!(!RequestRecord::new(0, Outcome::AbortedAtDeadline).was_sent());
    }

    #[test]
    fn reserved_chunk_room_is_given_back_when_fitted() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.reserve_chunks(1024);
        assert!(r.chunks.capacity() >= 1024);
        // Only the kernel clock keeps read delays.
        assert_eq!(r.read_delays_us.capacity(), 0);
        for i in 0..40 {
            r.chunks.push(Chunk(i, None));
        }
        r.fit_chunks();
        assert_eq!(r.chunks.len(), 40);
        assert!(
            r.chunks.capacity() <= 40 + CHUNK_SLACK,
            "{}",
            r.chunks.capacity()
        );

        let mut k = RequestRecord::new(1, Outcome::Succeeded);
        k.clock = Some(StampClock::Kernel);
        k.chunks.push(Chunk(1, Some(1)));
        k.read_delays_us.push(5);
        k.reserve_chunks(512);
        assert!(k.chunks.capacity() >= 512);
        assert!(k.read_delays_us.capacity() >= 512);
        // Reserving less than is there changes nothing.
        let cap = k.chunks.capacity();
        k.reserve_chunks(2);
        assert_eq!(k.chunks.capacity(), cap);
        k.fit_chunks();
        assert!(k.chunks.capacity() <= 1 + CHUNK_SLACK);
        assert!(k.read_delays_us.capacity() <= 1 + CHUNK_SLACK);
        assert_eq!((k.chunks[0], k.read_delays_us[0]), (Chunk(1, Some(1)), 5));

        // Room within the slack is kept (no reallocation for a few entries).
        let mut s = RequestRecord::new(2, Outcome::Succeeded);
        s.chunks = Vec::with_capacity(8);
        s.chunks.push(Chunk(1, None));
        s.fit_chunks();
        assert_eq!(s.chunks.capacity(), 8);
    }

    #[test]
    fn token_count_falls_back_to_chunks() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.chunks = vec![Chunk(1, None), Chunk(2, None)];
        assert_eq!(
            r.output_token_count(),
            TokenCount {
                count: 2,
                source: TokenSource::Chunks
            }
        );
    }
}
