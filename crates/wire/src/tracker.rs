//! The seam between bytes and records: the HTTP client, the proxy and replay feed each
//! socket read (stamped with the time it was read) to a [`StreamTracker`], which writes
//! chunks, token counts, counters and the outcome into a `RequestRecord`.
//!
//! The caller owns `http_status`, `sent_ns` and `headers_ns`; the tracker only writes
//! what the body says, and `rec.outcome` / `rec.end_ns`.

use crate::dialect::{parse_data, parse_data_into, Api, ParsedChunk, Prefix, StreamEvent, Usage};
use crate::ndjson::{NdjsonDecoder, NdjsonItem};
use crate::sse::{SseDecoder, SseItem};
use crate::{truncate_str, MAX_EVENT_BYTES};
use cadence_base::{Chunk, Outcome, RequestRecord, TokenCount, TokenSource};
use memchr::memchr2;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::ops::ControlFlow;

/// Cap on the output text kept for a tokenizer (visible and reasoning text each).
pub const MAX_TEXT_BYTES: usize = 4 << 20;

/// Cap on the tool-call events kept for an agent's next step
/// ([`StreamTracker::keep_tool_events`]): 16 MiB (about 100,000 streamed deltas), the
/// most an agent request in flight holds of them. An event past it is dropped and the text says so
/// ([`StreamText::tool_events_cut`]): its calls cannot be sent back whole.
pub const MAX_TOOL_EVENT_BYTES: usize = 16 << 20;

/// Cap on the chunks [`StreamTracker::expect_chunks`] makes room for at once; a longer
/// stream grows past it as usual.
pub const MAX_EXPECTED_CHUNKS: u32 = 1024;

/// Bytes of visible text made room for per expected chunk: about a token's worth.
const TEXT_BYTES_PER_CHUNK: usize = 4;

/// The largest usage count taken from a server: a billion tokens, far past any
/// context window; a larger one (`2^64 - 1`) is malformed (FAULTS 121).
pub const MAX_PLAUSIBLE_TOKENS: u64 = 1_000_000_000;

/// Cap on the server's error message stored in `rec.error`.
pub const MAX_ERROR_BYTES: usize = 1024;

/// How long a caller keeps reading after `[DONE]` before it ends the request: long enough for the body's own end to arrive (so a keep-alive
/// connection stays reusable) and for trailing bytes to be counted in
/// `bytes_after_done`, never long enough to hold a request on a server that keeps the
/// connection open. None of it is timed: E2E is the `[DONE]` time (see
/// [`StreamTracker::end_stream`]).
pub const AFTER_DONE_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// How the response body frames its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// `text/event-stream`.
    Sse,
    /// Newline-delimited JSON.
    Ndjson,
}

/// What the tracker needs to know about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerConfig {
    /// The dialect whose events the stream carries.
    pub api: Api,
    /// How events are framed in the body (SSE or NDJSON).
    pub framing: Framing,
    /// A malformed event fails the request (`malformed_event`) instead of being counted.
    pub strict: bool,
}

/// The output text of a finished stream, for a tokenizer to count after the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamText {
    /// Visible content deltas joined (capped at [`MAX_TEXT_BYTES`]).
    pub content: String,
    /// Reasoning deltas joined (same cap).
    pub reasoning: String,
    /// Per content-bearing chunk, `content.len()` and `reasoning.len()` once it was added.
    pub chunk_ends: Vec<(u32, u32)>,
    /// The data of every event that carried a tool-call delta, as it came, when the
    /// caller asked for them ([`StreamTracker::keep_tool_events`]): an agent's next step
    /// sends the calls back, so they are assembled from these after the stream
    /// ([`crate::tool_calls::assemble`]). Capped at [`MAX_TOOL_EVENT_BYTES`] in all.
    pub tool_events: Vec<String>,
    /// A tool-call event was dropped at [`MAX_TOOL_EVENT_BYTES`]: the calls assembled
    /// from `tool_events` are not the ones the server sent.
    pub tool_events_cut: bool,
}

/// Whether the caller should keep reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Nothing terminal yet: keep feeding reads.
    Continue,
    /// The stream has a terminal failure (`event_too_large`, strict `malformed_event`);
    /// stop reading and call [`StreamTracker::finish`].
    Stop,
}

/// Incremental per-request stream state.
#[derive(Debug, Clone)]
pub struct StreamTracker {
    config: TrackerConfig,
    sse: SseDecoder,
    ndjson: NdjsonDecoder,
    st: State,
}

/// Where the first bytes of an SSE body suggest a bare JSON body (an error object sent
/// without SSE framing, FAULTS 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RawBody {
    /// Only whitespace so far.
    Unknown,
    /// Starts with `{`: kept until an SSE item shows up.
    Collect,
    Off,
}

#[derive(Debug, Clone)]
struct State {
    api: Api,
    strict: bool,
    /// `[DONE]` seen.
    done: bool,
    /// When the stream said it ended: the read that carried `[DONE]`, or (no `[DONE]`
    /// yet) the last event read at or after the first finish reason.
    end_event_ns: Option<u64>,
    /// A terminal failure: later reads are ignored.
    stopped: bool,
    finished: bool,
    /// An outcome that the end of the stream cannot change.
    decided: Option<Outcome>,
    finish_reason_seen: bool,
    /// Last `usage.completion_tokens`, for per-chunk increases.
    last_completion: Option<u64>,
    usage_seen: bool,
    token_id_sum: u64,
    token_ids_seen: bool,
    has_output: bool,
    /// Visible text, as bytes: every piece appended is valid UTF-8 (checked where it
    /// came from) and the cap cuts on a char boundary, so this is valid UTF-8 too. A
    /// chunk's text taken straight from a read is checked alone, not with its event.
    text: Vec<u8>,
    reasoning: Vec<u8>,
    /// Per content-bearing chunk, the lengths of `text` and `reasoning` after it, so a
    /// tokenizer can later attribute tokens of the joined text to chunks.
    text_ends: Vec<(u32, u32)>,
    /// Content-bearing events in the current read.
    read_events: u32,
    last_read_ns: u64,
    /// A CR ended the `[DONE]` event at the end of a read: an LF opening the next read
    /// is part of it, not a byte after it.
    skip_lf_after_done: bool,
    saw_item: bool,
    /// The opening its chunks share, so the parser can skip it (see `Prefix`).
    prefix: Prefix,
    /// The last parsed content chunk around its text, so the next one that differs
    /// only in the text is not parsed again (see `Template`).
    template: Template,
    raw_mode: RawBody,
    raw: Vec<u8>,
    /// Bytes of cumulative text (SGLang) already taken as output.
    cumulative_len: usize,
    /// Chunks to make room for at the first one ([`StreamTracker::expect_chunks`]).
    expect_chunks: u32,
    /// Whether the output text is kept ([`StreamTracker::discard_text`]).
    keep_text: bool,
    /// Tool-call events kept ([`StreamTracker::keep_tool_events`]), and their bytes.
    tool_events: Option<Vec<String>>,
    tool_event_bytes: usize,
    /// A tool-call event was dropped at [`MAX_TOOL_EVENT_BYTES`].
    tool_events_cut: bool,
    /// Most chunks the record keeps ([`StreamTracker::keep_chunks`]).
    max_chunks: usize,
}

impl StreamTracker {
    /// A tracker for a new stream, with `config.framing`'s decoder; it keeps the output
    /// text and every chunk, and no tool-call events until
    /// [`StreamTracker::keep_tool_events`].
    pub fn new(config: TrackerConfig) -> Self {
        StreamTracker {
            config,
            sse: SseDecoder::new(),
            ndjson: NdjsonDecoder::new(),
            st: State {
                api: config.api,
                strict: config.strict,
                done: false,
                end_event_ns: None,
                stopped: false,
                finished: false,
                decided: None,
                finish_reason_seen: false,
                last_completion: None,
                usage_seen: false,
                token_id_sum: 0,
                token_ids_seen: false,
                has_output: false,
                text: Vec::new(),
                reasoning: Vec::new(),
                text_ends: Vec::new(),
                read_events: 0,
                last_read_ns: 0,
                skip_lf_after_done: false,
                saw_item: false,
                prefix: Prefix::default(),
                template: Template::default(),
                raw_mode: if config.framing == Framing::Sse {
                    RawBody::Unknown
                } else {
                    RawBody::Off
                },
                raw: Vec::new(),
                cumulative_len: 0,
                expect_chunks: 0,
                keep_text: true,
                tool_events: None,
                tool_event_bytes: 0,
                tool_events_cut: false,
                max_chunks: usize::MAX,
            },
        }
    }

    /// The configuration the tracker was made with.
    pub fn config(&self) -> TrackerConfig {
        self.config
    }

    /// A hint: the stream will likely carry up to `n` chunks (a request's
    /// `max_tokens`). At its first chunk, room for that many (at most
    /// [`MAX_EXPECTED_CHUNKS`]) is made in the record's chunk vectors
    /// ([`RequestRecord::reserve_chunks`]) and in the text kept for a tokenizer, so
    /// they grow once instead of by doubling; [`finish`](Self::finish) gives back what
    /// was not used ([`RequestRecord::fit_chunks`]). Nothing else changes.
    pub fn expect_chunks(&mut self, n: u32) {
        self.st.expect_chunks = n.min(MAX_EXPECTED_CHUNKS);
    }

    /// Keeps no output text (no tokenizer will count it, no later turn quotes it):
    /// [`take_text`](Self::take_text) then gives empty text, and no chunk's text is
    /// copied. Nothing the record gets changes.
    pub fn discard_text(&mut self) {
        self.st.keep_text = false;
    }

    /// Keeps at most `max` chunks in the record: the stream's first `max`
    /// content-bearing chunks are timed as usual; later ones are only counted, in
    /// `counters.chunks_not_kept` (with no time, no text and no per-chunk entry), so a
    /// stream that never ends costs bounded memory. Everything else the stream says
    /// (usage, finish reason, `[DONE]`, errors, the first visible content's time) is
    /// read as before, and the outcome is the stream's own: the caller that wants
    /// the request ended at a ceiling does that itself (bench's `--max-chunks`).
    pub fn keep_chunks(&mut self, max: usize) {
        self.st.max_chunks = max;
    }

    /// Keeps the data of events that carry tool-call deltas (see
    /// [`StreamText::tool_events`]), for a caller that sends the calls back. Nothing the
    /// record gets changes; the parse of every other event is untouched.
    pub fn keep_tool_events(&mut self) {
        self.st.tool_events.get_or_insert_with(Vec::new);
    }

    /// One socket read's bytes, stamped with the time (ns since run start) the caller
    /// took BEFORE calling.
    pub fn feed(&mut self, t_ns: u64, bytes: &[u8], rec: &mut RequestRecord) -> Flow {
        self.feed_read(t_ns, bytes, rec, true)
    }

    /// [`feed`](Self::feed); `whole_event_path` off makes every read go through the
    /// decoders, which the tests compare the whole-event path with.
    #[inline]
    fn feed_read(
        &mut self,
        t_ns: u64,
        bytes: &[u8],
        rec: &mut RequestRecord,
        whole_event_path: bool,
    ) -> Flow {
        if bytes.is_empty() {
            return self.flow();
        }
        rec.counters.reads = rec.counters.reads.saturating_add(1);
        if self.st.stopped || self.st.finished {
            return self.flow();
        }
        if self.st.done {
            self.count_after_done(bytes, rec);
            return Flow::Continue;
        }
        self.st.last_read_ns = t_ns;
        self.st.read_events = 0;
        if self.st.raw_mode != RawBody::Off {
            self.st.sniff_raw(bytes);
        }
        let st = &mut self.st;
        let consumed = match self.config.framing {
            Framing::Sse => {
                // A read that is one whole single-line event (one chunk per read, as
                // most servers write them) skips the decoder's line scan and buffers.
                let taken = whole_event_path
                    && self
                        .sse
                        .lone_data_event(bytes)
                        .and_then(|value| st.on_lone_event(value, t_ns, rec))
                        .is_some();
                if taken {
                    bytes.len()
                } else {
                    self.sse
                        .feed_with(bytes, &mut |item| st.on_sse(item, t_ns, rec))
                }
            }
            Framing::Ndjson => self
                .ndjson
                .feed_with(bytes, &mut |item| st.on_ndjson(item, t_ns, rec)),
        };
        if self.st.done {
            rec.counters.bytes_after_done += (bytes.len() - consumed) as u64;
            self.st.skip_lf_after_done =
                self.config.framing == Framing::Sse && self.sse.awaiting_lf();
        }
        self.flow()
    }

    /// EOF reached normally: flush decoders, classify, set `rec.end_ns = Some(t_ns)` and
    /// `rec.outcome`. A second call only updates `end_ns` and the outcome.
    ///
    /// Outcome: a failure decided while feeding (error object, oversized event, strict
    /// malformed) stays; else `[DONE]` seen → `Succeeded`; else a finish reason seen →
    /// `Succeeded` (with `no_done_marker` on SSE, the only framing with a `[DONE]`);
    /// else `Truncated`, with a plain-words
    /// `rec.error` when none was set. A caller that ends the stream itself (idle or
    /// total timeout, deadline) sets its own outcome after this call.
    pub fn finish(&mut self, t_ns: u64, rec: &mut RequestRecord) {
        if !self.st.finished {
            self.st.finished = true;
            if !self.st.stopped && !self.st.done {
                // A tail flushed at EOF arrived with the last read.
                let t = self.st.last_read_ns;
                let st = &mut self.st;
                match self.config.framing {
                    Framing::Sse => self.sse.finish_with(&mut |item| st.on_sse(item, t, rec)),
                    Framing::Ndjson => self
                        .ndjson
                        .finish_with(&mut |item| st.on_ndjson(item, t, rec)),
                }
                self.st.raw_fallback(rec);
            }
        }
        rec.fit_chunks();
        rec.end_ns = Some(t_ns);
        rec.outcome = match self.st.decided {
            Some(o) => o,
            None if self.st.done => Outcome::Succeeded,
            None if self.config.api.ends_at_eof() && self.st.saw_item => Outcome::Succeeded,
            None if self.st.finish_reason_seen => {
                // `[DONE]` is an SSE convention: newline-delimited JSON (and a whole
                // `application/json` answer, read the same way) never carries one.
                rec.counters.no_done_marker = self.config.framing == Framing::Sse;
                Outcome::Succeeded
            }
            None => {
                if rec.error.is_none() {
                    rec.error = Some(if self.st.saw_item {
                        "stream ended without [DONE] or a finish reason".to_owned()
                    } else {
                        "stream ended without any event".to_owned()
                    });
                }
                Outcome::Truncated
            }
        };
    }

    /// The caller stops reading (EOF, a read error, [`AFTER_DONE_GRACE`] after
    /// `[DONE]`, or a deadline once `[DONE]` was seen): [`finish`](Self::finish), then a
    /// stream that succeeded ends when it said so (the `[DONE]` read or, without
    /// `[DONE]`, its finish event), not when the connection did. Bytes after that
    /// are counted in `bytes_after_done`, never timed.
    pub fn end_stream(&mut self, t_ns: u64, rec: &mut RequestRecord) {
        self.finish(t_ns, rec);
        if rec.outcome == Outcome::Succeeded {
            if let Some(e) = self.st.end_event_ns {
                rec.end_ns = Some(e.min(t_ns));
            }
        }
    }

    /// True once any content-bearing chunk (content, reasoning or tool-call delta) arrived.
    pub fn has_output(&self) -> bool {
        self.st.has_output
    }

    /// True once `[DONE]` was seen (the caller may stop reading after a short grace).
    pub fn is_done(&self) -> bool {
        self.st.done
    }

    /// The visible output text so far (content deltas joined), capped at 4 MiB.
    pub fn text(&self) -> &str {
        as_str(&self.st.text)
    }

    /// The reasoning text so far (reasoning deltas joined), capped at 4 MiB: a
    /// tokenizer counting output tokens needs it too.
    pub fn reasoning_text(&self) -> &str {
        as_str(&self.st.reasoning)
    }

    /// Per content-bearing chunk (in `rec.chunks` order), the byte lengths of
    /// [`text`](Self::text) and [`reasoning_text`](Self::reasoning_text) once that
    /// chunk was added: chunk `i` carried the bytes between entry `i - 1` and entry `i`.
    pub fn chunk_text_ends(&self) -> &[(u32, u32)] {
        &self.st.text_ends
    }

    /// Moves the output text out (the tracker keeps empty text afterwards).
    pub fn take_text(&mut self) -> StreamText {
        StreamText {
            content: into_string(std::mem::take(&mut self.st.text)),
            reasoning: into_string(std::mem::take(&mut self.st.reasoning)),
            chunk_ends: std::mem::take(&mut self.st.text_ends),
            tool_events: self
                .st
                .tool_events
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default(),
            tool_events_cut: std::mem::take(&mut self.st.tool_events_cut),
        }
    }

    fn flow(&self) -> Flow {
        if self.st.stopped {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    fn count_after_done(&mut self, bytes: &[u8], rec: &mut RequestRecord) {
        let mut n = bytes.len();
        if std::mem::take(&mut self.st.skip_lf_after_done) && bytes[0] == b'\n' {
            n -= 1;
        }
        rec.counters.bytes_after_done += n as u64;
    }
}

impl State {
    /// The value of a read that may be one whole `data` event
    /// ([`SseDecoder::lone_data_event`]): what [`on_sse`](Self::on_sse) does with that
    /// event, or `None` (nothing done) when the read must go through the decoder
    /// instead: the value spans lines, or is not UTF-8 (the decoder's lossy decoding
    /// and the malformed count decide then).
    ///
    /// Only the new text is checked for UTF-8 when the event matches the template: the
    /// template's bytes were valid where they came from.
    #[inline]
    fn on_lone_event(
        &mut self,
        value: &[u8],
        t_ns: u64,
        rec: &mut RequestRecord,
    ) -> Option<ControlFlow<()>> {
        if let Some((text, ascii)) = self.template.reuse(value) {
            // No CR or LF in a matched event: it is the single line it looks like.
            let text = &value[text];
            if !ascii && std::str::from_utf8(text).is_err() {
                return None;
            }
            self.sse_item_seen();
            return Some(self.on_template_chunk(text, t_ns, rec));
        }
        if memchr2(b'\n', b'\r', value).is_some() {
            return None;
        }
        let data = std::str::from_utf8(value).ok()?;
        self.sse_item_seen();
        // A `message` event, not lossy: `on_sse` takes it straight to `on_data`.
        Some(self.on_data(data, t_ns, rec))
    }

    /// An SSE item showed up: the body is SSE, not bare JSON.
    #[inline]
    fn sse_item_seen(&mut self) {
        if !self.saw_item {
            self.saw_item = true;
            self.raw_mode = RawBody::Off;
            self.raw = Vec::new();
        }
    }

    fn on_sse(&mut self, item: SseItem<'_>, t_ns: u64, rec: &mut RequestRecord) -> ControlFlow<()> {
        // An incomplete tail at EOF is no evidence that the body was SSE.
        if !matches!(item, SseItem::Incomplete { .. }) {
            self.sse_item_seen();
        }
        match item {
            SseItem::Comment(_) => {
                rec.counters.keepalives += 1;
                ControlFlow::Continue(())
            }
            SseItem::Dataless { event } => {
                if event == "ping" {
                    rec.counters.keepalives += 1;
                } else if event == "error" {
                    self.error(rec, "the server sent an error event without data");
                }
                ControlFlow::Continue(())
            }
            SseItem::Event(ev) => {
                if ev.event == "ping" {
                    rec.counters.keepalives += 1;
                    return ControlFlow::Continue(());
                }
                if ev.lossy && self.malformed(rec).is_break() {
                    return ControlFlow::Break(());
                }
                if ev.event == "error" {
                    let msg = match parse_data(self.api, ev.data) {
                        StreamEvent::Error { message } => message,
                        _ => ev.data.into(),
                    };
                    let msg = if msg.trim().is_empty() {
                        "the server sent an error event".into()
                    } else {
                        msg
                    };
                    self.error(rec, &msg);
                    return ControlFlow::Continue(());
                }
                self.on_data(ev.data, t_ns, rec)
            }
            SseItem::TooLarge => self.too_large(rec),
            SseItem::Incomplete { .. } => {
                // WHATWG discards an event not ended by a blank line; it is counted as
                // malformed but, arriving at EOF, does not decide the outcome.
                rec.counters.malformed += 1;
                ControlFlow::Continue(())
            }
        }
    }

    fn on_ndjson(
        &mut self,
        item: NdjsonItem<'_>,
        t_ns: u64,
        rec: &mut RequestRecord,
    ) -> ControlFlow<()> {
        self.saw_item = true;
        match item {
            NdjsonItem::Line { text, lossy } => {
                if lossy && self.malformed(rec).is_break() {
                    return ControlFlow::Break(());
                }
                self.on_data(text, t_ns, rec)
            }
            NdjsonItem::TooLarge => self.too_large(rec),
        }
    }

    fn on_data(&mut self, data: &str, t_ns: u64, rec: &mut RequestRecord) -> ControlFlow<()> {
        if let Some((text, _)) = self.template.reuse(data.as_bytes()) {
            return self.on_template_chunk(&data.as_bytes()[text], t_ns, rec);
        }
        let mut chunk = ParsedChunk::default();
        let Some(event) = parse_data_into(self.api, data, &mut chunk, Some(&mut self.prefix))
        else {
            self.template.learn(data, &chunk);
            self.keep_tool_event(data, &chunk);
            return self.on_event_chunk(chunk, t_ns, rec);
        };
        match event {
            StreamEvent::Chunk(c) => {
                self.keep_tool_event(data, &c);
                self.on_event_chunk(c, t_ns, rec)
            }
            StreamEvent::Done => self.on_done(t_ns),
            StreamEvent::Error { message } => {
                self.error(rec, &message);
                ControlFlow::Continue(())
            }
            StreamEvent::Malformed => self.malformed(rec),
        }
    }

    /// Keeps `data` when tool-call events are kept and this one carries a delta.
    fn keep_tool_event(&mut self, data: &str, c: &ParsedChunk<'_>) {
        if c.tool_call.is_none() {
            return;
        }
        if let Some(events) = &mut self.tool_events {
            if self.tool_event_bytes + data.len() <= MAX_TOOL_EVENT_BYTES {
                self.tool_event_bytes += data.len();
                events.push(data.to_owned());
            } else {
                self.tool_events_cut = true;
            }
        }
    }

    /// A chunk, then (when its dialect says the event ends the stream) the end.
    fn on_event_chunk(
        &mut self,
        mut c: ParsedChunk<'_>,
        t_ns: u64,
        rec: &mut RequestRecord,
    ) -> ControlFlow<()> {
        if c.cumulative {
            self.decumulate(&mut c);
        }
        if let Some(t) = &c.server_timing {
            rec.counters.server_timing = Some(**t);
        }
        self.on_chunk(&c, t_ns, rec);
        if self.api.ends_at_eof() {
            self.end_event_ns = Some(t_ns);
        }
        if c.end {
            return self.on_done(t_ns);
        }
        ControlFlow::Continue(())
    }

    fn on_done(&mut self, t_ns: u64) -> ControlFlow<()> {
        self.done = true;
        self.end_event_ns = Some(t_ns);
        ControlFlow::Break(())
    }

    /// Cumulative text (the whole output so far) becomes the part not seen before.
    fn decumulate(&mut self, c: &mut ParsedChunk<'_>) {
        let Some(full) = c.content.take() else {
            return;
        };
        let seen = std::mem::replace(&mut self.cumulative_len, full.len());
        let fresh = if full.len() >= seen && full.is_char_boundary(seen) {
            &full[seen..]
        } else {
            &full[..]
        };
        if !fresh.is_empty() {
            c.content = Some(std::borrow::Cow::Owned(fresh.to_owned()));
        }
    }

    /// What [`on_event_chunk`](Self::on_event_chunk) does with the template's chunk
    /// around `text` (valid UTF-8, not empty): content only, the template's token ids
    /// and usage, no finish reason, not the end. Nothing else is built or dropped.
    #[inline]
    fn on_template_chunk(
        &mut self,
        text: &[u8],
        t_ns: u64,
        rec: &mut RequestRecord,
    ) -> ControlFlow<()> {
        let (tokens, usage) = (self.template.tokens, self.template.usage);
        let usage_increase = self.on_counts(usage, tokens, rec);
        if self.finish_reason_seen {
            self.end_event_ns = Some(t_ns);
        }
        self.on_output(tokens, usage_increase, Some(text), None, t_ns, rec);
        if self.api.ends_at_eof() {
            self.end_event_ns = Some(t_ns);
        }
        ControlFlow::Continue(())
    }

    fn on_chunk(&mut self, c: &ParsedChunk<'_>, t_ns: u64, rec: &mut RequestRecord) {
        let usage_increase = self.on_counts(c.usage, c.tokens, rec);
        if let Some(fr) = c.finish_reason.as_deref() {
            self.finish_reason_seen = true;
            if rec.finish_reason.as_deref() != Some(fr) {
                rec.finish_reason = Some(fr.to_owned());
            }
        }
        if self.finish_reason_seen {
            self.end_event_ns = Some(t_ns);
        }
        if !c.has_output() {
            return;
        }
        let content = c.content.as_deref().map(str::as_bytes);
        let reasoning = c.reasoning.as_deref().map(str::as_bytes);
        self.on_output(c.tokens, usage_increase, content, reasoning, t_ns, rec);
    }

    /// A chunk's usage and token ids; gives how much its usage raised the completion
    /// tokens, when it had some.
    #[inline]
    fn on_counts(
        &mut self,
        usage: Option<Usage>,
        tokens: Option<u32>,
        rec: &mut RequestRecord,
    ) -> Option<u64> {
        let mut usage_increase = None;
        if let Some(mut u) = usage {
            // FAULTS 121: a count no response can reach is no count; the event is
            // counted as malformed and the next source counts the tokens.
            for n in [
                &mut u.completion_tokens,
                &mut u.prompt_tokens,
                &mut u.cached_prompt_tokens,
            ] {
                if n.is_some_and(|n| n > MAX_PLAUSIBLE_TOKENS) {
                    *n = None;
                    rec.counters.malformed = rec.counters.malformed.saturating_add(1);
                }
            }
            if let Some(ct) = u.completion_tokens {
                usage_increase = Some(ct.saturating_sub(self.last_completion.unwrap_or(0)));
                self.last_completion = Some(ct);
                self.usage_seen = true;
                rec.token_sources.usage = Some(ct);
                rec.output_tokens = Some(TokenCount {
                    count: ct,
                    source: TokenSource::Usage,
                });
            }
            if let Some(pt) = u.prompt_tokens {
                rec.input_tokens = Some(pt);
                rec.input_tokens_source = Some(cadence_base::InputTokenSource::Usage);
            }
            if let Some(cached) = u.cached_prompt_tokens {
                rec.cached_input_tokens = Some(cached);
            }
        }
        if let Some(n) = tokens {
            self.token_id_sum += u64::from(n);
            self.token_ids_seen = true;
            rec.token_sources.token_ids = Some(self.token_id_sum);
            if !self.usage_seen {
                rec.output_tokens = Some(TokenCount {
                    count: self.token_id_sum,
                    source: TokenSource::TokenIds,
                });
            }
        }
        usage_increase
    }

    /// A content-bearing chunk: its time and tokens, and its text (each valid UTF-8).
    #[inline]
    fn on_output(
        &mut self,
        tokens: Option<u32>,
        usage_increase: Option<u64>,
        content: Option<&[u8]>,
        reasoning: Option<&[u8]>,
        t_ns: u64,
        rec: &mut RequestRecord,
    ) {
        let tokens = match (tokens, usage_increase) {
            (Some(n), _) => {
                rec.chunk_tokens_source = Some(TokenSource::TokenIds);
                Some(n)
            }
            (None, Some(n)) => {
                rec.chunk_tokens_source.get_or_insert(TokenSource::Usage);
                Some(u32::try_from(n).unwrap_or(u32::MAX))
            }
            (None, None) => None,
        };
        if !self.has_output && self.expect_chunks > 0 {
            self.make_room(rec);
        }
        self.has_output = true;
        if content.is_some() && rec.first_content_ns.is_none() {
            rec.first_content_ns = Some(t_ns);
        }
        if rec.chunks.len() >= self.max_chunks {
            // Past the ceiling: counted, not kept (nor its text, which no chunk holds).
            rec.counters.chunks_not_kept = rec.counters.chunks_not_kept.saturating_add(1);
            return;
        }
        rec.chunks.push(Chunk(t_ns, tokens));
        if self.read_events > 0 {
            rec.counters.coalesced += 1;
        }
        self.read_events += 1;
        if let (Some(text), true) = (content, self.keep_text) {
            push_capped(&mut self.text, text);
        }
        if !self.keep_text {
            return;
        }
        if let Some(text) = reasoning {
            push_capped(&mut self.reasoning, text);
        }
        self.text_ends
            .push((self.text.len() as u32, self.reasoning.len() as u32));
    }

    /// Room for the expected chunks, made at the first one.
    #[cold]
    fn make_room(&mut self, rec: &mut RequestRecord) {
        let n = (self.expect_chunks as usize).min(self.max_chunks);
        rec.reserve_chunks(n);
        if !self.keep_text {
            return;
        }
        self.text_ends
            .reserve(n.saturating_sub(self.text_ends.len()));
        self.text
            .reserve((n * TEXT_BYTES_PER_CHUNK).saturating_sub(self.text.len()));
    }

    fn error(&mut self, rec: &mut RequestRecord, message: &str) {
        if self.decided.is_none() {
            self.decided = Some(Outcome::StreamError);
            rec.outcome = Outcome::StreamError;
            rec.error = Some(truncate_str(message, MAX_ERROR_BYTES).to_owned());
        }
    }

    fn malformed(&mut self, rec: &mut RequestRecord) -> ControlFlow<()> {
        rec.counters.malformed += 1;
        if !self.strict {
            return ControlFlow::Continue(());
        }
        self.fail(
            rec,
            Outcome::MalformedEvent,
            "malformed event (strict mode)",
        )
    }

    fn too_large(&mut self, rec: &mut RequestRecord) -> ControlFlow<()> {
        self.fail(
            rec,
            Outcome::EventTooLarge,
            "an event exceeded the 1 MiB cap",
        )
    }

    /// A terminal failure: decide the outcome (unless an error object already did) and
    /// stop reading.
    fn fail(&mut self, rec: &mut RequestRecord, outcome: Outcome, why: &str) -> ControlFlow<()> {
        self.stopped = true;
        if self.decided.is_none() {
            self.decided = Some(outcome);
            rec.outcome = outcome;
            rec.error = Some(why.to_owned());
        }
        ControlFlow::Break(())
    }

    /// Keep the start of an SSE body that looks like bare JSON, until SSE shows up.
    fn sniff_raw(&mut self, bytes: &[u8]) {
        if self.raw_mode == RawBody::Unknown {
            match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
                None => return,
                Some(b'{') => self.raw_mode = RawBody::Collect,
                Some(_) => {
                    self.raw_mode = RawBody::Off;
                    return;
                }
            }
        }
        if self.raw.len() + bytes.len() > MAX_EVENT_BYTES {
            self.raw_mode = RawBody::Off;
            self.raw = Vec::new();
        } else {
            self.raw.extend_from_slice(bytes);
        }
    }

    /// At EOF: an SSE body with no SSE item that is a bare JSON error object is a
    /// stream error, not a truncation (FAULTS 9).
    fn raw_fallback(&mut self, rec: &mut RequestRecord) {
        if self.raw_mode != RawBody::Collect || self.saw_item {
            return;
        }
        let raw = std::mem::take(&mut self.raw);
        let text = String::from_utf8_lossy(&raw);
        if let StreamEvent::Error { message } = parse_data(self.api, &text) {
            self.error(rec, &message);
        }
    }
}

/// Template bytes kept in the tracker itself; a chat chunk's opening and closing (id,
/// object, created, model, the choice around the text) take 150–250.
const INLINE_SHAPE: usize = 256;

/// A parsed chunk whose only text was its content, copied verbatim from the data (no
/// escapes), and no finish reason: the bytes before the content string (up to its
/// opening quote) and after it (from its closing quote). A later event made of the same
/// bytes around a plain string (no quote, backslash or control character in it, so it
/// ends where the template's did) is the same JSON with another content string: it
/// parses to the same chunk with that text, so it is not parsed again. Chunks of one
/// stream usually differ only there (id, created, model and the empty fields repeat
/// byte for byte); anything else takes the parser, which is always the reference.
///
/// A template never holds a CR or LF, so an event it matches is one line.
#[derive(Debug, Clone, Default)]
struct Template {
    /// The bytes before the text, then the bytes after it. Inline up to
    /// [`INLINE_SHAPE`] bytes: every content chunk compares against them, and in the
    /// tracker's own memory they share its cache lines and page instead of lying in an
    /// allocation of their own, cold at every read of a stream quiet for a while.
    shape: SmallVec<[u8; INLINE_SHAPE]>,
    /// Where the bytes after the text start in `shape`.
    head: usize,
    tokens: Option<u32>,
    usage: Option<Usage>,
    valid: bool,
}

impl Template {
    /// Where the text sits in `data` when `data` is the template around another plain
    /// string (so `data` holds no CR or LF either), and whether the text is all ASCII.
    /// Text that is not is left unchecked for UTF-8: `data` borrowed from a `&str`
    /// cuts on char boundaries (the bytes on both sides are ASCII quotes); bytes from a
    /// read must still be checked.
    #[inline]
    fn reuse(&self, data: &[u8]) -> Option<(std::ops::Range<usize>, bool)> {
        if !self.valid {
            return None;
        }
        let (head, tail) = self.shape.split_at(self.head);
        let end = data.len().checked_sub(tail.len())?;
        if end <= head.len() || !data.starts_with(head) || data[end..] != *tail {
            return None;
        }
        let mut high = 0u8;
        for &c in &data[head.len()..end] {
            if c == b'"' || c == b'\\' || c < 0x20 {
                return None;
            }
            high |= c;
        }
        Some((head.len()..end, high < 0x80))
    }

    /// Keeps `chunk` (parsed from `data`) as the template when it has that shape.
    fn learn(&mut self, data: &str, chunk: &ParsedChunk<'_>) {
        self.valid = false;
        let Some(Cow::Borrowed(text)) = &chunk.content else {
            return;
        };
        if chunk.reasoning.is_some()
            || chunk.tool_call.is_some()
            || chunk.finish_reason.is_some()
            || chunk.end
            || chunk.cumulative
            || chunk.server_timing.is_some()
        {
            return;
        }
        // Where the text sits in `data` (it is a slice of it when borrowed).
        let Some(start) = (text.as_ptr() as usize).checked_sub(data.as_ptr() as usize) else {
            return;
        };
        let end = start + text.len();
        let b = data.as_bytes();
        if start == 0 || end >= b.len() || b[start - 1] != b'"' || b[end] != b'"' {
            return;
        }
        let (head, tail) = (&b[..start], &b[end..]);
        if memchr2(b'\n', b'\r', head).is_some() || memchr2(b'\n', b'\r', tail).is_some() {
            return;
        }
        self.shape.clear();
        self.shape.reserve(head.len() + tail.len());
        self.shape.extend_from_slice(head);
        self.shape.extend_from_slice(tail);
        self.head = head.len();
        self.tokens = chunk.tokens;
        self.usage = chunk.usage;
        self.valid = true;
    }
}

/// Appends UTF-8 `s` to `buf` up to [`MAX_TEXT_BYTES`] in all, cut on a char boundary.
fn push_capped(buf: &mut Vec<u8>, s: &[u8]) {
    let room = MAX_TEXT_BYTES.saturating_sub(buf.len());
    let mut n = s.len().min(room);
    // Back to the start of a character: a continuation byte is 0b10xx_xxxx.
    while n < s.len() && n > 0 && s[n] & 0xC0 == 0x80 {
        n -= 1;
    }
    buf.extend_from_slice(&s[..n]);
}

/// Text the tracker kept as bytes: valid UTF-8 by construction (were it not, the
/// valid start).
fn as_str(text: &[u8]) -> &str {
    std::str::from_utf8(text)
        .unwrap_or_else(|e| std::str::from_utf8(&text[..e.valid_up_to()]).unwrap_or_default())
}

fn into_string(text: Vec<u8>) -> String {
    String::from_utf8(text).unwrap_or_else(|e| as_str(e.as_bytes()).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(content_json: &str, finish: &str, extra: &str) -> String {
        format!(
            "data: {{\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content_json}}},\"finish_reason\":{finish}}}]{extra}}}\n\n"
        )
    }

    /// Chunks that differ from the template only in a plain string reuse it; every
    /// other chunk is parsed, and the record and text are those of parsing each one.
    #[test]
    fn the_template_gives_what_the_parser_gives() {
        let events = [
            event("\"\"", "null", ""),          // role-like: empty content, no output
            event("\"Hello\"", "null", ""),     // learned
            event("\" world\"", "null", ""),    // reused
            event("\"a\\\"q\"", "null", ""),    // escape: parsed, not learned
            event("\"é 東\"", "null", ""),      // parsed (no template after an escape), learned
            event("\"\"", "null", ""),          // empty: no output, as parsed
            event("\" x\\\\y\"", "null", ""),   // backslash escape: parsed
            event("\"\\u0041\"", "null", ""),   // unicode escape: parsed
            event("\" same\"", "null", ",\"usage\":null"), // other tail: parsed
            event("\" tail\"", "null", ",\"usage\":null"), // reused with that tail
            event("\" end\"", "\"length\"", ""), // finish reason: parsed
            "data: {\"id\":\"c-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9}}\n\n".to_string(),
            "data: [DONE]\n\n".to_string(),
        ];
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        let mut tracker = StreamTracker::new(TrackerConfig {
            api: Api::Chat,
            framing: Framing::Sse,
            strict: true,
        });
        for (i, e) in events.iter().enumerate() {
            assert_eq!(
                tracker.feed(i as u64, e.as_bytes(), &mut rec),
                Flow::Continue
            );
        }
        tracker.end_stream(99, &mut rec);
        assert_eq!(rec.outcome, Outcome::Succeeded);
        assert_eq!(rec.counters.malformed, 0);
        let texts = [
            "Hello", " world", "a\"q", "é 東", " x\\y", "A", " same", " tail", " end",
        ];
        assert_eq!(tracker.text(), texts.concat());
        let times: Vec<u64> = rec.chunks.iter().map(|c| c.0).collect();
        assert_eq!(times, vec![1, 2, 3, 4, 6, 7, 8, 9, 10]);
        let mut end = 0;
        let ends: Vec<u32> = texts
            .iter()
            .map(|t| {
                end += t.len() as u32;
                end
            })
            .collect();
        let got: Vec<u32> = tracker.chunk_text_ends().iter().map(|e| e.0).collect();
        assert_eq!(got, ends);
        assert_eq!(rec.finish_reason.as_deref(), Some("length"));
        assert_eq!(rec.output_tokens.map(|t| t.count), Some(9));
        assert_eq!(rec.first_content_ns, Some(1));
    }

    /// A shape past the inline room (a long model name) is kept whole all the same, and
    /// matches only chunks with that shape.
    #[test]
    fn the_record_keeps_the_cached_prompt_tokens_the_usage_reported() {
        let feed = |usages: &[&str]| {
            let mut rec = RequestRecord::new(0, Outcome::TransportError);
            let mut tracker = StreamTracker::new(TrackerConfig {
                api: Api::Chat,
                framing: Framing::Sse,
                strict: true,
            });
            let mut events = vec![event("\"Hi\"", "null", "")];
            for u in usages {
                events.push(format!("data: {{\"choices\":[],\"usage\":{u}}}\n\n"));
            }
            events.push("data: [DONE]\n\n".to_string());
            for (i, e) in events.iter().enumerate() {
                tracker.feed(i as u64, e.as_bytes(), &mut rec);
            }
            tracker.end_stream(99, &mut rec);
            (
                rec.input_tokens,
                rec.cached_input_tokens,
                rec.counters.malformed,
            )
        };
        let full = r#"{"prompt_tokens":31,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":30}}"#;
        assert_eq!(feed(&[full]), (Some(31), Some(30), 0));
        // A later usage without the figure keeps the one said; none said is none.
        let later = r#"{"prompt_tokens":31,"completion_tokens":1}"#;
        assert_eq!(feed(&[full, later]), (Some(31), Some(30), 0));
        assert_eq!(feed(&[later]), (Some(31), None, 0));
        // An impossible figure is no figure, and the event is counted malformed.
        let absurd = r#"{"prompt_tokens":31,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":99999999999}}"#;
        assert_eq!(feed(&[absurd]), (Some(31), None, 1));
    }

    #[test]
    fn a_template_longer_than_its_inline_room_is_kept_whole() {
        let model = "m".repeat(INLINE_SHAPE);
        let chunk_with = |text: &str, model: &str| {
            format!(r#"{{"model":"{model}","choices":[{{"delta":{{"content":"{text}"}}}}]}}"#)
        };
        let data = chunk_with("ab", &model);
        let mut chunk = ParsedChunk::default();
        assert!(parse_data_into(Api::Chat, &data, &mut chunk, None).is_none());
        let mut t = Template::default();
        t.learn(&data, &chunk);
        assert!(t.valid && t.shape.len() > INLINE_SHAPE && t.shape.spilled());
        let same = chunk_with("xyz", &model);
        assert_eq!(t.reuse(same.as_bytes()).map(|(r, _)| &same[r]), Some("xyz"));
        // The model's last byte changed: the far end of the shape's head.
        let other = chunk_with("xyz", &format!("{}n", &model[1..]));
        assert!(t.reuse(other.as_bytes()).is_none());
    }

    #[test]
    fn a_template_is_only_what_was_parsed() {
        let data = r#"{"choices":[{"delta":{"content":"ab"},"finish_reason":null}]}"#;
        let mut chunk = ParsedChunk::default();
        assert!(parse_data_into(Api::Chat, data, &mut chunk, None).is_none());
        let mut t = Template::default();
        t.learn(data, &chunk);
        assert!(t.valid);
        let same = r#"{"choices":[{"delta":{"content":"xyz"},"finish_reason":null}]}"#;
        assert_eq!(
            t.reuse(same.as_bytes()).map(|(r, ascii)| (&same[r], ascii)),
            Some(("xyz", true))
        );
        let wide = r#"{"choices":[{"delta":{"content":"é"},"finish_reason":null}]}"#;
        assert_eq!(
            t.reuse(wide.as_bytes()).map(|(r, ascii)| (&wide[r], ascii)),
            Some(("é", false))
        );
        for other in [
            r#"{"choices":[{"delta":{"content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"x"y"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"x\ny"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
            "{\"choices\":[{\"delta\":{\"content\":\"x\ty\"},\"finish_reason\":null}]}",
        ] {
            assert!(t.reuse(other.as_bytes()).is_none(), "{other}");
        }
        // Nor one with a line break in its JSON (the whole-event path relies on it).
        let broken = "{\"choices\":[{\"delta\":{\"content\":\"ab\"},\n\"finish_reason\":null}]}";
        let mut chunk = ParsedChunk::default();
        assert!(parse_data_into(Api::Chat, broken, &mut chunk, None).is_none());
        t.learn(broken, &chunk);
        assert!(!t.valid);
        // A chunk whose text had escapes is not a template.
        let escaped = r#"{"choices":[{"delta":{"content":"a\"b"},"finish_reason":null}]}"#;
        let mut chunk = ParsedChunk::default();
        assert!(parse_data_into(Api::Chat, escaped, &mut chunk, None).is_none());
        t.learn(escaped, &chunk);
        assert!(!t.valid);
    }

    #[test]
    fn text_is_capped_on_a_char_boundary() {
        let mut buf = Vec::new();
        let piece = "é".repeat(1000); // two bytes each
        while buf.len() < MAX_TEXT_BYTES {
            push_capped(&mut buf, "x".as_bytes());
            push_capped(&mut buf, piece.as_bytes());
        }
        assert!(buf.len() <= MAX_TEXT_BYTES);
        assert!(MAX_TEXT_BYTES - buf.len() < 2, "filled up to the last char");
        let text = std::str::from_utf8(&buf).expect("valid UTF-8");
        // What `truncate_str` keeps of the same pieces.
        let mut want = String::new();
        while want.len() < MAX_TEXT_BYTES {
            for p in ["x", piece.as_str()] {
                let room = MAX_TEXT_BYTES - want.len();
                want.push_str(truncate_str(p, room));
            }
        }
        assert_eq!(text, want);
        let len = buf.len();
        push_capped(&mut buf, b"more");
        assert_eq!(buf.len(), len, "nothing past the cap");
    }
}

/// The whole-event path (a read that is one `data` event, taken without the SSE
/// decoder) against the decoder on the same reads, and any read split in two.
#[cfg(test)]
mod whole_event_tests {
    use super::*;

    /// Everything a stream leaves behind: the record, the text and the tracker's state.
    #[derive(Debug, PartialEq)]
    struct Run {
        rec: RequestRecord,
        flows: Vec<Flow>,
        text: String,
        reasoning: String,
        ends: Vec<(u32, u32)>,
        done: bool,
        has_output: bool,
    }

    fn run(config: TrackerConfig, reads: &[(u64, Vec<u8>)], whole_event_path: bool) -> Run {
        let mut tr = StreamTracker::new(config);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        let flows = reads
            .iter()
            .map(|(t, b)| tr.feed_read(*t, b, &mut rec, whole_event_path))
            .collect();
        let (done, has_output) = (tr.is_done(), tr.has_output());
        tr.end_stream(1_000, &mut rec);
        Run {
            rec,
            flows,
            text: tr.text().to_owned(),
            reasoning: tr.reasoning_text().to_owned(),
            ends: tr.chunk_text_ends().to_vec(),
            done,
            has_output,
        }
    }

    fn cfg(api: Api, strict: bool) -> TrackerConfig {
        TrackerConfig {
            api,
            framing: Framing::Sse,
            strict,
        }
    }

    fn chat_data(delta: serde_json::Value, finish: serde_json::Value) -> String {
        serde_json::json!({"id":"chatcmpl-7","object":"chat.completion.chunk","created":1795625586,
            "model":"m","choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish}]})
        .to_string()
    }

    fn content(text: &str) -> String {
        format!(
            "data: {}\n\n",
            chat_data(
                serde_json::json!({"content": text}),
                serde_json::Value::Null
            )
        )
    }

    fn role() -> String {
        format!(
            "data: {}\n\n",
            chat_data(
                serde_json::json!({"role":"assistant","content":""}),
                serde_json::Value::Null
            )
        )
    }

    fn finish(text: &str) -> String {
        format!(
            "data: {}\n\n",
            chat_data(serde_json::json!({"content": text}), "length".into())
        )
    }

    fn usage(n: u64) -> String {
        format!("data: {{\"id\":\"chatcmpl-7\",\"choices\":[],\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n", n + 12)
    }

    const DONE: &str = "data: [DONE]\n\n";

    /// A stream of `n` one-word content chunks between the role event and the finish,
    /// usage and `[DONE]` events.
    fn words(n: u64) -> Vec<String> {
        let mut parts = vec![role()];
        parts.extend((0..n).map(|i| content(&format!(" w{i}"))));
        parts.extend([finish("."), usage(n + 1), DONE.to_owned()]);
        parts
    }

    /// One read per string, at times 10, 20, 30...
    fn reads(parts: &[String]) -> Vec<(u64, Vec<u8>)> {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| (10 * (i as u64 + 1), p.clone().into_bytes()))
            .collect()
    }

    /// A stream's name, configuration and reads.
    type Stream = (&'static str, TrackerConfig, Vec<(u64, Vec<u8>)>);

    /// A typical chat stream, an event a string: role, words with escapes and
    /// multi-byte characters, a finish, usage and `[DONE]`.
    fn typical() -> Vec<String> {
        let words = [
            "Hel",
            "lo",
            ", w\u{f6}rld",
            " \u{1F600}",
            "!",
            " a\"q",
            "\\",
            " ok",
        ];
        let mut typical = vec![role()];
        typical.extend(words.iter().map(|w| content(w)));
        typical.extend([finish(" end"), usage(10), DONE.to_owned()]);
        typical
    }

    /// How events are framed: events per read, line endings.
    fn framing_streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        let strict = cfg(Api::Chat, true);
        let typical = typical();
        vec![
            ("one event per read", chat, reads(&typical)),
            ("one event per read, strict", strict, reads(&typical)),
            ("several events per read", chat, {
                let (a, b) = typical.split_at(4);
                reads(&[a.concat(), content("x"), b.concat()])
            }),
            ("CRLF line endings", chat, {
                let crlf: Vec<String> = typical.iter().map(|e| e.replace('\n', "\r\n")).collect();
                reads(&crlf)
            }),
            ("bare CR line endings", chat, {
                let cr: Vec<String> = typical.iter().map(|e| e.replace('\n', "\r")).collect();
                reads(&cr)
            }),
            (
                "a CR at a read's end, its LF in the next",
                chat,
                reads(&[
                    content("a").replace("\n\n", "\r\n\r"),
                    "\n".to_owned() + &content("b"),
                    content("c"),
                    DONE.to_owned(),
                ]),
            ),
            (
                "a bare CR ending a read, then [DONE] whole",
                chat,
                reads(&[
                    content("a").replace("\n\n", "\r\r"),
                    DONE.into(),
                    "\nxyz".into(),
                ]),
            ),
        ]
    }

    /// Comments, keep-alives and the fields around `data`; the end marker.
    fn field_streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        vec![
            (
                "comments and keep-alives",
                chat,
                reads(&[
                    role(),
                    ": ping\n\n".into(),
                    content("a"),
                    "event: ping\ndata: {}\n\n".into(),
                    content("b"),
                    "event: ping\n\n".into(),
                    ":\n\n".into(),
                    content("c"),
                    "data: : keepalive\n\n".into(),
                    content("d"),
                    DONE.into(),
                ]),
            ),
            (
                "no space, two spaces, bare data field",
                chat,
                reads(&[
                    content("a").replacen("data: ", "data:", 1),
                    content("b").replacen("data: ", "data:  ", 1),
                    content("c"),
                    "data\n\n".into(),
                    "data:\n\n".into(),
                    content("d"),
                    DONE.into(),
                ]),
            ),
            (
                "data on several lines",
                chat,
                reads(&[
                    content("a"),
                    content("b").replacen(",\"model\"", "\ndata: ,\"model\"", 1),
                    content("c"),
                    content("d").replacen("{", "\n{", 1),
                    DONE.into(),
                ]),
            ),
            (
                "an event type or id before the data",
                chat,
                reads(&[
                    content("a"),
                    "event: message\n".to_owned() + &content("b"),
                    "id: 7\n".to_owned() + &content("c"),
                    content("d"),
                    "retry: 10\n".to_owned() + &content("e"),
                    DONE.into(),
                ]),
            ),
            (
                "[DONE] with bytes after it",
                chat,
                reads(&[
                    content("a"),
                    DONE.to_owned() + &content("late"),
                    content("later"),
                ]),
            ),
            (
                "[DONE] alone, then more",
                chat,
                reads(&[content("a"), DONE.into(), content("b")]),
            ),
        ]
    }

    /// Usage and token ids.
    fn payload_streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        vec![
            ("usage on every chunk", chat, {
                let with_usage = |t: &str, n: u64| {
                    format!(
                        "data: {}\n\n",
                        serde_json::json!({"id":"c","choices":[{"index":0,"delta":{"content":t},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":n}})
                    )
                };
                reads(&[
                    with_usage("a", 1),
                    with_usage("b", 2),
                    with_usage("c", 2),
                    with_usage("d", 4),
                    usage(4),
                    DONE.into(),
                ])
            }),
            (
                "a usage-only chunk and token ids",
                cfg(Api::Completions, false),
                {
                    let text = |t: &str, ids: &str| {
                        format!("data: {{\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{{\"index\":0,\"text\":\"{t}\",\"token_ids\":[{ids}],\"finish_reason\":null}}]}}\n\n")
                    };
                    reads(&[
                        text("a", "1"),
                        text("b", "2"),
                        text("c", "3,4"),
                        text("d", "5"),
                        usage(5),
                        DONE.into(),
                    ])
                },
            ),
        ]
    }

    /// Errors in the stream: an error object or event, after tokens or alone.
    fn error_streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        vec![
            (
                "an error object after tokens",
                chat,
                reads(&[
                    role(),
                    content("a"),
                    content("b"),
                    "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n".into(),
                    content("c"),
                    DONE.into(),
                ]),
            ),
            (
                "an error event",
                chat,
                reads(&[
                    content("a"),
                    "event: error\ndata: {\"message\":\"overloaded\"}\n\n".into(),
                    content("b"),
                ]),
            ),
            (
                "vLLM's error object alone",
                chat,
                reads(&[
                    "data: {\"object\":\"error\",\"message\":\"bad request\",\"code\":400}\n\n"
                        .into(),
                ]),
            ),
            (
                "a bare JSON error body",
                chat,
                reads(&["{\"error\":{\"message\":\"no\"}}".into()]),
            ),
        ]
    }

    /// Malformed data, odd endings and text.
    fn odd_streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        let strict = cfg(Api::Chat, true);
        vec![
            (
                "malformed data",
                chat,
                reads(&[
                    content("a"),
                    "data: {bad json}\n\n".into(),
                    "data: 42\n\n".into(),
                    content("b"),
                    DONE.into(),
                ]),
            ),
            (
                "malformed data, strict",
                strict,
                reads(&[
                    content("a"),
                    content("b"),
                    "data: {bad json}\n\n".into(),
                    content("c"),
                ]),
            ),
            (
                "no finish reason, no [DONE]",
                chat,
                reads(&[content("a"), content("b")]),
            ),
            (
                "a finish reason, no [DONE]",
                chat,
                reads(&[content("a"), finish("b"), content("c")]),
            ),
            (
                "a stream start with a BOM",
                chat,
                reads(&[
                    "\u{FEFF}".to_owned() + &content("a"),
                    content("b"),
                    DONE.into(),
                ]),
            ),
            (
                "an incomplete event at EOF",
                chat,
                reads(&[
                    content("a"),
                    content("b"),
                    content("c").trim_end().to_owned(),
                ]),
            ),
            (
                "text with escapes, controls and quotes",
                chat,
                reads(&[
                    content("plain"),
                    content("tab\there"),
                    content("line\nbreak"),
                    content("quote\"d"),
                    content("more plain"),
                    content("\u{7f}\u{80}\u{ffff}"),
                    DONE.into(),
                ]),
            ),
        ]
    }

    /// The other dialects' event shapes.
    fn dialect_streams() -> Vec<Stream> {
        vec![
            ("KServe: no end marker", cfg(Api::Kserve, false), reads(&[
                "data: {\"model_name\":\"m\",\"model_version\":\"1\",\"text_output\":\"a\"}\n\n".into(),
                "data: {\"model_name\":\"m\",\"model_version\":\"1\",\"text_output\":\"b\"}\n\n".into(),
                "data: {\"model_name\":\"m\",\"model_version\":\"1\",\"text_output\":\"c\"}\n\n".into(),
            ])),
            ("Anthropic", cfg(Api::Anthropic, false), reads(&[
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n".into(),
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n".into(),
                "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"b\"}}\n\n".into(),
                "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"c\"}}\n\n".into(),
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n".into(),
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into(),
            ])),
            ("Responses", cfg(Api::Responses, false), reads(&[
                "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"a\"}\n\n".into(),
                "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"b\"}\n\n".into(),
                "data: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"hm\"}\n\n".into(),
                "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"c\"}\n\n".into(),
                "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":4,\"output_tokens\":4}}}\n\n".into(),
            ])),
        ]
    }

    /// Hand-built streams, each as the reads it arrives in, with its configuration.
    fn streams() -> Vec<Stream> {
        let chat = cfg(Api::Chat, false);
        let strict = cfg(Api::Chat, true);
        let mut streams = framing_streams();
        streams.extend(field_streams());
        streams.extend(payload_streams());
        streams.extend(error_streams());
        streams.extend(odd_streams());
        streams.extend(dialect_streams());

        // An event over the cap in one read, after the template was learned.
        let big = content(&"x".repeat(MAX_EVENT_BYTES));
        streams.push((
            "an event over the cap in one read",
            chat,
            reads(&[content("a"), content("b"), big, content("c")]),
        ));

        // Invalid UTF-8: in a read the template matches, in one it does not, and split
        // across reads; a valid character split across reads.
        let mut bad = content("xy").into_bytes();
        let at = bad.windows(2).position(|w| w == b"xy").unwrap();
        bad[at] = 0xFF;
        let mut bad_parsed = content("a\"b").into_bytes();
        let q = bad_parsed.windows(2).position(|w| w == b"a\\").unwrap();
        bad_parsed[q] = 0xC3;
        let emoji = content("\u{1F600}").into_bytes();
        let e = emoji.iter().position(|&b| b == 0xF0).unwrap();
        let mut utf8 = vec![
            (10, content("a").into_bytes()),
            (20, content("b").into_bytes()),
            (30, bad.clone()),
            (40, content("c").into_bytes()),
            (50, bad_parsed),
            (60, bad[..at + 1].to_vec()),
            (70, bad[at + 1..].to_vec()),
            (80, emoji[..e + 2].to_vec()),
            (90, emoji[e + 2..].to_vec()),
            (100, content("d").into_bytes()),
            (110, DONE.as_bytes().to_vec()),
        ];
        streams.push(("invalid UTF-8", chat, utf8.clone()));
        utf8.truncate(5);
        streams.push(("invalid UTF-8, strict", strict, utf8));
        streams
    }

    #[test]
    fn the_whole_event_path_gives_what_the_decoder_gives() {
        for (name, config, reads) in streams() {
            let fast = run(config, &reads, true);
            let general = run(config, &reads, false);
            assert_eq!(fast, general, "{name}");
        }
        // The whole-event path is taken: after the first read (the stream start, which
        // may open with a BOM), every read of a typical stream is one whole event, and
        // its content chunks match the template.
        let (_, config, reads) = &streams()[0];
        let mut tr = StreamTracker::new(*config);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        for (i, (t, b)) in reads.iter().enumerate() {
            assert_eq!(tr.sse.lone_data_event(b).is_some(), i > 0, "read {i}");
            tr.feed(*t, b, &mut rec);
            // Escaped text (reads 6 and 7) is parsed, and is no template.
            if (1..=8).contains(&i) {
                assert_eq!(tr.st.template.valid, !(6..=7).contains(&i), "read {i}");
            }
        }
        tr.end_stream(1_000, &mut rec);
        assert_eq!(rec.chunks.len(), 9);
        assert_eq!(rec.outcome, Outcome::Succeeded);
    }

    /// Any read of any stream cut in two (both parts at the read's time) gives the
    /// record of the uncut read: the cut read takes the decoder, the others may not.
    #[test]
    fn a_read_cut_anywhere_gives_what_the_whole_read_gives() {
        for (name, config, reads) in streams() {
            let mut want = run(config, &reads, true);
            // Only the read count and the events sharing a read may differ.
            let base = (want.rec.counters.reads, want.rec.counters.coalesced);
            want.flows.clear();
            for i in 0..reads.len() {
                let (t, bytes) = &reads[i];
                // Every offset, but only a sample of a long read's.
                let n = bytes.len();
                let cuts = (1..n).filter(|&k| n < 4096 || k < 64 || n - k < 64 || k % 65_521 == 0);
                for k in cuts {
                    let mut cut = reads[..i].to_vec();
                    cut.push((*t, bytes[..k].to_vec()));
                    cut.push((*t, bytes[k..].to_vec()));
                    cut.extend_from_slice(&reads[i + 1..]);
                    let mut got = run(config, &cut, true);
                    let (reads_now, coalesced) =
                        (got.rec.counters.reads, got.rec.counters.coalesced);
                    assert!(reads_now <= base.0 + 1, "{name}: read {i} cut at {k}");
                    assert!(coalesced <= base.1, "{name}: read {i} cut at {k}");
                    got.rec.counters.reads = base.0;
                    got.rec.counters.coalesced = base.1;
                    got.flows.clear();
                    assert_eq!(got, want, "{name}: read {i} cut at {k}");
                }
            }
        }
    }

    /// The hint makes room once, at the first chunk; the record gives back what the
    /// stream did not use, and nothing else changes.
    #[test]
    fn expected_chunks_grow_the_record_once_and_fit_at_the_end() {
        let reads = reads(&words(40));
        let plain = run(cfg(Api::Chat, false), &reads, true);

        let mut tr = StreamTracker::new(cfg(Api::Chat, false));
        tr.expect_chunks(500);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        tr.feed(1, role().as_bytes(), &mut rec);
        assert_eq!(rec.chunks.capacity(), 0, "no room before the first chunk");
        tr.feed(2, content("a").as_bytes(), &mut rec);
        let cap = rec.chunks.capacity();
        assert!(cap >= 500);
        assert!(tr.st.text_ends.capacity() >= 500);
        let mut tr = StreamTracker::new(cfg(Api::Chat, false));
        tr.expect_chunks(500);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        for (t, b) in &reads {
            tr.feed(*t, b, &mut rec);
            assert!(
                rec.chunks.is_empty() || rec.chunks.capacity() == cap,
                "grew once"
            );
        }
        tr.end_stream(1_000, &mut rec);
        assert!(rec.chunks.capacity() <= rec.chunks.len() + cadence_base::CHUNK_SLACK);
        assert_eq!(rec, plain.rec);
        assert_eq!(tr.text(), plain.text);
        assert_eq!(tr.chunk_text_ends(), plain.ends);

        // A huge hint is capped.
        let mut tr = StreamTracker::new(cfg(Api::Chat, false));
        tr.expect_chunks(u32::MAX);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        tr.feed(1, content("a").as_bytes(), &mut rec);
        assert!(rec.chunks.capacity() >= MAX_EXPECTED_CHUNKS as usize);
        assert!(rec.chunks.capacity() < 2 * MAX_EXPECTED_CHUNKS as usize);
        // A stream that fails before any chunk reserves nothing.
        let mut tr = StreamTracker::new(cfg(Api::Chat, false));
        tr.expect_chunks(500);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        tr.feed(1, b"data: {\"error\":{\"message\":\"no\"}}\n\n", &mut rec);
        tr.end_stream(2, &mut rec);
        assert_eq!(rec.chunks.capacity(), 0);
        assert_eq!(rec.outcome, Outcome::StreamError);
    }
    /// Past the ceiling a chunk is counted, not kept: the record keeps the first
    /// `max` chunks exactly as without a ceiling (times, text ends), counts the rest,
    /// and everything else (usage, finish reason, `[DONE]`, the outcome) is the same.
    #[test]
    fn chunks_past_the_ceiling_are_counted_not_kept() {
        // 40 words and the finish event's "." are 41 content-bearing chunks.
        let reads = reads(&words(40));
        let plain = run(cfg(Api::Chat, false), &reads, true);
        assert_eq!(plain.rec.chunks.len(), 41);
        for (max, not_kept) in [(1, 40), (10, 31), (40, 1), (41, 0), (1_000, 0)] {
            let mut tr = StreamTracker::new(cfg(Api::Chat, false));
            tr.keep_chunks(max);
            tr.expect_chunks(500);
            let mut rec = RequestRecord::new(0, Outcome::TransportError);
            for (t, b) in &reads {
                assert_eq!(tr.feed(*t, b, &mut rec), Flow::Continue);
                assert!(rec.chunks.capacity() <= 500.min(max).max(4), "{max}");
            }
            tr.end_stream(1_000, &mut rec);
            let mut want = plain.rec.clone();
            want.chunks.truncate(max);
            want.counters.chunks_not_kept = not_kept;
            assert_eq!(rec, want, "ceiling {max}");
            assert_eq!(rec.chunks_truncated(), not_kept > 0);
            assert_eq!(rec.chunk_count(), 41);
            assert_eq!(tr.chunk_text_ends(), &plain.ends[..max.min(41)]);
            assert_eq!(rec.outcome, Outcome::Succeeded);
            assert_eq!(rec.output_tokens.map(|t| t.count), Some(41), "usage");
        }
        // Without usage, the chunk count stands in for the tokens: every chunk that
        // arrived, kept or not.
        let mut tr = StreamTracker::new(cfg(Api::Chat, false));
        tr.keep_chunks(5);
        let mut rec = RequestRecord::new(0, Outcome::TransportError);
        for i in 0..12 {
            tr.feed(i, content(&format!(" w{i}")).as_bytes(), &mut rec);
        }
        tr.feed(20, DONE.as_bytes(), &mut rec);
        tr.end_stream(30, &mut rec);
        assert_eq!((rec.chunks.len(), rec.counters.chunks_not_kept), (5, 7));
        assert_eq!(rec.output_token_count().count, 12);
        assert_eq!(rec.end_ns, Some(20), "the stream still ends at [DONE]");
    }

    /// Without text the record is the same, for content and reasoning chunks, read one
    /// event per read or cut anywhere in two; only the text is empty.
    #[test]
    fn discarded_text_leaves_the_record_as_it_was() {
        let mut parts = words(20);
        parts.insert(
            1,
            format!(
                "data: {}\n\n",
                chat_data(
                    serde_json::json!({"reasoning_content": "think"}),
                    serde_json::Value::Null
                )
            ),
        );
        let body = parts.concat().into_bytes();
        let cuts =
            (0..=body.len()).map(|k| vec![(10, body[..k].to_vec()), (20, body[k..].to_vec())]);
        for (i, reads) in std::iter::once(reads(&parts)).chain(cuts).enumerate() {
            let kept = run(cfg(Api::Chat, false), &reads, true);
            assert!(!kept.text.is_empty());
            let mut tr = StreamTracker::new(cfg(Api::Chat, false));
            tr.discard_text();
            if i % 2 == 0 {
                tr.expect_chunks(64);
            }
            let mut rec = RequestRecord::new(0, Outcome::TransportError);
            for (t, b) in &reads {
                tr.feed(*t, b, &mut rec);
            }
            tr.end_stream(1_000, &mut rec);
            assert_eq!(rec, kept.rec, "reads {i}");
            assert_eq!(tr.reasoning_text(), "");
            assert_eq!(tr.take_text(), StreamText::default());
        }
    }
}
