//! Turns a planned stream plus a fault into the exact bytes to write and when:
//! a list of timed body frames. Pure, so every fault's wire format is tested
//! without a server; the streaming task only replays the script.

use std::time::Duration;

use bytes::Bytes;

use crate::dialects::{self, Timing};
use crate::fault::Fault;
use crate::openai::{Dialect, Piece, Usage, Writer, TOOL_CALL_ID, TOOL_NAME};
use crate::plan::StreamPlan;
use crate::text::Vocabulary;
use crate::tools::{CallPlan, ToolStream};

/// Size of the `huge_event` event's padding: over the 1 MiB cap clients apply.
pub const HUGE_EVENT_PADDING: usize = (1 << 20) + (64 << 10);

/// Events per frame under `coalesce`.
pub const COALESCE_GROUP: usize = 3;

/// Everything the script needs to know about one streamed request.
#[derive(Debug, Clone)]
pub struct StreamSpec<'a> {
    /// The wire shape of the stream.
    pub dialect: Dialect,
    /// The fault that shapes the bytes; `None`: a well-formed stream.
    pub fault: Option<Fault>,
    /// When each content chunk is due and its tokens.
    pub plan: &'a StreamPlan,
    /// The response id the chunks repeat.
    pub id: &'a str,
    /// The `created` field: wall-clock Unix seconds.
    pub created: u64,
    /// The model name the chunks repeat.
    pub model: &'a str,
    /// Prompt tokens, for the usage.
    pub prompt_tokens: u32,
    /// `stream_options.include_usage`: a usage chunk before the end.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: running usage on every chunk.
    pub continuous_usage: bool,
    /// Send each content chunk's `token_ids` (`return_token_ids: true`).
    pub token_ids: bool,
    /// Where truncating faults cut (chunks sent before the cut); default
    /// half the chunks, at least one.
    pub fault_after: Option<u32>,
    /// How long `no_tokens` stays silent before ending the body.
    pub silence: Duration,
    /// The reply is these tool calls (the request declared tools; see
    /// [`crate::tools`]). The `tool_calls` fault's fixed call wins over them.
    pub calls: Option<&'a CallPlan>,
}

/// One body frame: written at `at` (from the request's start), carrying whole
/// content chunks with these token counts (the send log stamps them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// When the frame is written, from the request's start.
    pub at: Duration,
    /// The frame's bytes, exactly as written.
    pub bytes: Bytes,
    /// The token count of each whole content chunk in the frame (empty for role, usage
    /// and end frames).
    pub tokens: Vec<u32>,
    /// Let the connection flush before this frame (used when splitting an
    /// event, so the pieces leave as separate writes).
    pub yield_first: bool,
}

/// The frames of one response body and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The body's frames in write order.
    pub frames: Vec<Frame>,
    /// Wait until then after the last frame before ending the body.
    pub end_at: Option<Duration>,
    /// End with a body error (the connection is cut) instead of cleanly.
    pub reset: bool,
    /// The response's `Content-Type`: `text/event-stream`, or `application/x-ndjson`.
    pub content_type: &'static str,
}

#[derive(Debug, Clone)]
enum Payload {
    /// One event's data; embedded `\n` become separate `data:` lines.
    Data(String),
    Done,
    Comment(&'static str),
    Named(&'static str, &'static str),
    Raw(&'static str),
}

#[derive(Debug, Clone)]
struct Event {
    at: Duration,
    payload: Payload,
    /// Tokens if this is a content-bearing chunk, else 0.
    tokens: u32,
}

fn default_cut(n: usize) -> usize {
    (n / 2).max(1).min(n)
}

/// What the fault changes about one stream, decided once before any event is built.
struct Shape {
    fault: Option<Fault>,
    /// Content chunks in the plan.
    n: usize,
    /// Where truncating faults cut.
    cut: usize,
    /// The stream ends without a finish reason.
    truncated: bool,
    /// Content chunks actually sent.
    send_n: usize,
    /// Leading chunks sent as reasoning deltas.
    reasoning_n: usize,
    /// The chunk padded past the event-size cap.
    huge_at: Option<usize>,
    /// Every chunk is a tool-call delta.
    tool: bool,
    include_usage: bool,
    continuous_usage: bool,
    vocab: Vocabulary,
}

impl Shape {
    fn new(spec: &StreamSpec<'_>) -> Shape {
        let fault = spec.fault;
        let is = |f: Fault| fault == Some(f);
        let n = spec.plan.chunks.len();
        let cut = spec
            .fault_after
            .map_or_else(|| default_cut(n), |k| (k as usize).min(n));
        let vocab = if is(Fault::SplitUtf8) {
            Vocabulary::Utf8
        } else if is(Fault::DataPrefixText) {
            Vocabulary::SseLookalike
        } else {
            Vocabulary::Plain
        };
        let (include_usage, continuous_usage) = match fault {
            Some(Fault::NoUsage) => (false, false),
            Some(Fault::UsageOnlyChunk) => (true, spec.continuous_usage),
            Some(Fault::UsageEveryChunk) => (true, true),
            _ if spec.dialect.counts_every_chunk() => (spec.include_usage, true),
            _ => (spec.include_usage, spec.continuous_usage),
        };
        let truncated = matches!(
            fault,
            Some(Fault::ErrorAfterTokens | Fault::EofNoDone | Fault::Reset | Fault::NoTokens)
        );
        let send_n = match fault {
            Some(Fault::NoTokens) => 0,
            _ if truncated => cut,
            _ => n,
        };
        let reasoning_n = if is(Fault::ReasoningFirst) {
            spec.fault_after.map_or(n / 2, |k| (k as usize).min(n))
        } else {
            0
        };
        Shape {
            fault,
            n,
            cut,
            truncated,
            send_n,
            reasoning_n,
            huge_at: is(Fault::HugeEvent).then(|| cut.min(n.saturating_sub(1))),
            tool: is(Fault::ToolCalls),
            include_usage,
            continuous_usage,
            vocab,
        }
    }

    fn is(&self, f: Fault) -> bool {
        self.fault == Some(f)
    }
}

fn data(at: Duration, data: String) -> Event {
    Event {
        at,
        payload: Payload::Data(data),
        tokens: 0,
    }
}

/// Builds the script for one streamed request.
pub fn build(spec: &StreamSpec<'_>) -> Script {
    let shape = Shape::new(spec);
    let w = Writer {
        dialect: spec.dialect,
        id: spec.id,
        created: spec.created,
        model: spec.model,
        pretty: shape.is(Fault::MultilineData),
    };
    let mut events = Vec::with_capacity(shape.n + 4);
    if shape.is(Fault::ErrorOnly) {
        let first_at = spec.plan.chunks.first().map_or(Duration::ZERO, |c| c.at);
        let msg = "simulated error: the model failed before producing output";
        events.push(data(first_at, dialects::error(spec.dialect, msg)));
        return frame(spec, events, None, false);
    }
    let mut calls = spec
        .calls
        .filter(|_| !shape.tool)
        .map(|p| ToolStream::new(p.clone(), shape.vocab));
    let produced = match calls.as_mut() {
        Some(calls) => call_events(spec, &shape, &w, calls, &mut events),
        None => content_events(spec, &shape, &w, &mut events),
    };
    let (end_at, reset) = ending(spec, &shape, &w, produced, calls.as_ref(), &mut events);
    interleave_fault(&shape, &w, &mut events);
    frame(spec, events, end_at, reset)
}

/// [`content_events`] for a reply of tool calls: the role chunk (chat) or the
/// message's opening, then each chunk's tokens as tool-call events.
fn call_events(
    spec: &StreamSpec<'_>,
    shape: &Shape,
    w: &Writer<'_>,
    calls: &mut ToolStream,
    events: &mut Vec<Event>,
) -> u32 {
    let usage = |completion: u32| {
        shape
            .continuous_usage
            .then(|| Usage::new(spec.prompt_tokens, completion))
    };
    if spec.dialect == Dialect::Chat {
        let role = Piece::Role { null_content: true };
        events.push(data(Duration::ZERO, w.chunk(role, None, None, usage(0))));
    }
    for e in dialects::opening_calls(w, spec.prompt_tokens) {
        events.push(data(Duration::ZERO, e));
    }
    let mut produced = 0u32;
    for (i, c) in spec.plan.chunks.iter().enumerate().take(shape.send_n) {
        produced += c.tokens.len() as u32;
        let last = i + 1 == shape.n && !shape.truncated;
        for (e, tokens) in calls.chunk(w, &c.tokens, last, usage) {
            events.push(Event {
                at: c.at,
                payload: Payload::Data(e),
                tokens,
            });
        }
    }
    produced
}

/// The role chunk (chat) and the content chunks the stream sends; returns the tokens
/// they carry.
fn content_events(
    spec: &StreamSpec<'_>,
    shape: &Shape,
    w: &Writer<'_>,
    events: &mut Vec<Event>,
) -> u32 {
    let usage = |completion: u32| {
        shape
            .continuous_usage
            .then(|| Usage::new(spec.prompt_tokens, completion))
    };
    let tool = shape.tool;
    if spec.dialect == Dialect::Chat {
        let role = Piece::Role { null_content: tool };
        events.push(data(
            Duration::ZERO,
            dialects::chunk(w, role, None, None, usage(0)),
        ));
    }
    for e in dialects::opening(w, spec.prompt_tokens, tool) {
        events.push(data(Duration::ZERO, e));
    }
    let mut produced = 0u32;
    let mut text = String::new();
    let cumulative = spec.dialect == Dialect::Sglang;
    for (i, c) in spec.plan.chunks.iter().enumerate().take(shape.send_n) {
        produced += c.tokens.len() as u32;
        if !cumulative {
            text.clear();
        }
        shape.vocab.push_text(&c.tokens, &mut text);
        let last = i + 1 == shape.n;
        if tool {
            // The arguments build a JSON object across the chunks.
            text = text.replace('"', "'");
            if i == 0 {
                text.insert_str(0, "{\"query\": \"");
            }
            if last {
                text.push_str("\"}");
            }
        }
        if shape.huge_at == Some(i) {
            text.push(' ');
            text.extend(std::iter::repeat_n('x', HUGE_EVENT_PADDING));
        }
        let piece = if tool {
            Piece::Tool {
                index: 0,
                head: (i == 0).then_some((TOOL_CALL_ID, TOOL_NAME)),
                arguments: &text,
            }
        } else if i < shape.reasoning_n {
            Piece::Reasoning(&text)
        } else {
            Piece::Content(Some(&text))
        };
        let finish =
            (last && !shape.truncated).then_some(if tool { "tool_calls" } else { "length" });
        let own_ids = matches!(spec.dialect, Dialect::Tgi | Dialect::Llamacpp);
        let ids = (spec.token_ids || own_ids || shape.is(Fault::MultiToken))
            .then_some(c.tokens.as_slice());
        events.push(Event {
            at: c.at,
            payload: Payload::Data(dialects::chunk(w, piece, finish, ids, usage(produced))),
            tokens: c.tokens.len() as u32,
        });
    }
    produced
}

/// How the stream ends after its content: the events after it, and when and how the
/// body ends (`end_at`, `reset`).
fn ending(
    spec: &StreamSpec<'_>,
    shape: &Shape,
    w: &Writer<'_>,
    produced: u32,
    calls: Option<&ToolStream>,
    events: &mut Vec<Event>,
) -> (Option<Duration>, bool) {
    let tail_at = events.last().map_or(Duration::ZERO, |e| e.at);
    // When the first chunk that was never sent was due.
    let cut_at = spec.plan.chunks.get(shape.send_n).map_or(tail_at, |c| c.at);
    match shape.fault {
        Some(Fault::ErrorAfterTokens) => {
            let msg = "simulated error: generation failed mid-stream";
            events.push(data(cut_at, dialects::error(spec.dialect, msg)));
        }
        Some(Fault::EofNoDone) => {}
        Some(Fault::Reset) => return (Some(cut_at), true),
        Some(Fault::NoTokens) => return (Some(spec.silence), false),
        _ => {
            let usage = Usage::new(spec.prompt_tokens, produced);
            let first_at = spec.plan.chunks.first().map_or(tail_at, |c| c.at);
            let timing = Timing {
                queue: Duration::ZERO,
                prompt: first_at,
                decode: tail_at.saturating_sub(first_at),
                spec: Timing::of_plan(spec.plan).spec,
            };
            if shape.include_usage && spec.dialect.is_openai() {
                let metrics = dialects::vllm_metrics(timing, produced);
                events.push(data(tail_at, w.usage_with_metrics(usage, metrics)));
            }
            let finish = if shape.tool { "tool_calls" } else { "length" };
            let closing = match calls {
                Some(calls) => calls.closing(w, usage),
                None => dialects::closing(w, usage, finish, timing),
            };
            for e in closing {
                events.push(data(tail_at, e));
            }
            if !shape.is(Fault::FinishNoDone) && spec.dialect.done_marker() {
                events.push(Event {
                    at: tail_at,
                    payload: Payload::Done,
                    tokens: 0,
                });
            }
            if shape.is(Fault::BytesAfterDone) {
                let late =
                    dialects::chunk(w, Piece::Content(Some(" after-done")), None, None, None);
                events.push(data(tail_at, late));
                events.push(Event {
                    at: tail_at,
                    payload: Payload::Raw("trailing garbage after the end marker\n\n"),
                    tokens: 0,
                });
            }
        }
    }
    (None, false)
}

/// The faults that slip extra events between the content chunks.
fn interleave_fault(shape: &Shape, w: &Writer<'_>, events: &mut Vec<Event>) {
    match shape.fault {
        Some(Fault::Keepalive) => {
            let mut k = 0;
            interleave(events, |_| {
                k += 1;
                Some(if k % 2 == 1 {
                    Payload::Comment("ping")
                } else {
                    Payload::Named("ping", r#"{"type":"ping"}"#)
                })
            });
        }
        Some(Fault::GarbageData) => {
            interleave(events, |_| Some(Payload::Data(": keepalive".to_owned())));
        }
        Some(Fault::EmptyContent) => {
            interleave(events, |ordinal| {
                (ordinal > 0).then(|| {
                    let content = if ordinal % 2 == 1 { Some("") } else { None };
                    Payload::Data(dialects::chunk(
                        w,
                        Piece::Content(content),
                        None,
                        None,
                        None,
                    ))
                })
            });
        }
        Some(Fault::InvalidJson) => {
            let broken = dialects::chunk(w, Piece::Content(Some(" broken")), None, None, None);
            let broken = broken[..broken.len() / 2].to_owned();
            let mut once = Some(Payload::Data(broken));
            let at = shape.cut.min(shape.n.saturating_sub(1));
            interleave(
                events,
                |ordinal| if ordinal == at { once.take() } else { None },
            );
        }
        _ => {}
    }
}

/// Inserts an extra event before the content chunk number `ordinal` (0-based)
/// wherever `extra(ordinal)` gives one, halfway between it and the event before.
fn interleave(events: &mut Vec<Event>, mut extra: impl FnMut(usize) -> Option<Payload>) {
    let mut out = Vec::with_capacity(events.len() * 2);
    let mut prev_at = Duration::ZERO;
    let mut ordinal = 0;
    for e in events.drain(..) {
        if e.tokens > 0 {
            if let Some(payload) = extra(ordinal) {
                out.push(Event {
                    at: prev_at + (e.at - prev_at) / 2,
                    payload,
                    tokens: 0,
                });
            }
            ordinal += 1;
        }
        prev_at = e.at;
        out.push(e);
    }
    *events = out;
}

/// Line ending and `data:` prefix choices of the SSE encoding.
struct Sse {
    /// Each JSON event opens with `event: TYPE` (Responses, Anthropic).
    named: bool,
    eol: &'static str,
    /// Prefix of `[DONE]` and `event:` data lines.
    data: &'static str,
    /// Prefix of the data lines of chunk events.
    json_data: &'static str,
}

fn encode_sse(sse: &Sse, payload: &Payload, out: &mut Vec<u8>) {
    let eol = sse.eol.as_bytes();
    match payload {
        Payload::Data(data) => {
            if let Some(name) = dialects::event_name(data).filter(|_| sse.named) {
                out.extend_from_slice(b"event: ");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(eol);
            }
            for line in data.split('\n') {
                out.extend_from_slice(sse.json_data.as_bytes());
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(eol);
            }
        }
        Payload::Done => {
            out.extend_from_slice(sse.data.as_bytes());
            out.extend_from_slice(b"[DONE]");
            out.extend_from_slice(eol);
        }
        Payload::Comment(text) => {
            out.extend_from_slice(b": ");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(eol);
        }
        Payload::Named(name, data) => {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(eol);
            out.extend_from_slice(sse.data.as_bytes());
            out.extend_from_slice(data.as_bytes());
            out.extend_from_slice(eol);
        }
        Payload::Raw(raw) => {
            out.extend_from_slice(raw.as_bytes());
            return;
        }
    }
    out.extend_from_slice(eol);
}

fn encode_ndjson(payload: &Payload, out: &mut Vec<u8>) {
    match payload {
        Payload::Data(data) => {
            out.extend_from_slice(data.as_bytes());
            out.push(b'\n');
        }
        Payload::Raw(raw) => out.extend_from_slice(raw.as_bytes()),
        Payload::Done | Payload::Comment(_) | Payload::Named(..) => {}
    }
}

fn frame(
    spec: &StreamSpec<'_>,
    events: Vec<Event>,
    end_at: Option<Duration>,
    reset: bool,
) -> Script {
    let fault = spec.fault;
    let ndjson = fault == Some(Fault::Ndjson) || spec.dialect.content_type() != "text/event-stream";
    let mut sse = Sse::for_fault(fault);
    sse.named = spec.dialect.named_events();
    let encode = |e: &Event| {
        let mut out = Vec::new();
        if ndjson {
            encode_ndjson(&e.payload, &mut out);
        } else {
            encode_sse(&sse, &e.payload, &mut out);
        }
        out
    };
    let frames = match fault {
        Some(Fault::Coalesce) => coalesced_frames(&events, encode),
        Some(Fault::SplitBytes) => one_byte_frames(&events, encode),
        Some(Fault::SplitUtf8) => utf8_split_frames(&events, encode),
        _ => events
            .iter()
            .filter_map(|e| {
                let bytes = encode(e);
                (!bytes.is_empty()).then(|| Frame {
                    at: e.at,
                    bytes: Bytes::from(bytes),
                    tokens: content(e),
                    yield_first: false,
                })
            })
            .collect(),
    };
    Script {
        frames,
        end_at,
        reset,
        content_type: if ndjson {
            "application/x-ndjson"
        } else {
            "text/event-stream"
        },
    }
}

impl Sse {
    /// The line endings and `data:` prefixes a fault asks for.
    fn for_fault(fault: Option<Fault>) -> Sse {
        let (eol, data, json_data) = match fault {
            Some(Fault::Crlf) => ("\r\n", "data: ", "data: "),
            Some(Fault::Cr) => ("\r", "data: ", "data: "),
            Some(Fault::DataNoSpace) => ("\n", "data:", "data:"),
            Some(Fault::DataTwoSpaces) => ("\n", "data: ", "data:  "),
            _ => ("\n", "data: ", "data: "),
        };
        Sse {
            named: false,
            eol,
            data,
            json_data,
        }
    }
}

/// The token count of a content-bearing event, for the frame that completes it.
fn content(e: &Event) -> Vec<u32> {
    if e.tokens > 0 {
        vec![e.tokens]
    } else {
        Vec::new()
    }
}

/// `coalesce`: several events per frame.
fn coalesced_frames(events: &[Event], encode: impl Fn(&Event) -> Vec<u8>) -> Vec<Frame> {
    events
        .chunks(COALESCE_GROUP)
        .map(|group| Frame {
            at: group.last().map_or(Duration::ZERO, |e| e.at),
            bytes: Bytes::from(group.iter().flat_map(&encode).collect::<Vec<u8>>()),
            tokens: group.iter().flat_map(content).collect(),
            yield_first: false,
        })
        .collect()
}

/// `split_bytes`: every byte its own frame.
fn one_byte_frames(events: &[Event], encode: impl Fn(&Event) -> Vec<u8>) -> Vec<Frame> {
    let mut frames = Vec::new();
    for e in events {
        let bytes = Bytes::from(encode(e));
        let len = bytes.len();
        for i in 0..len {
            frames.push(Frame {
                at: e.at,
                bytes: bytes.slice(i..i + 1),
                tokens: if i + 1 == len { content(e) } else { Vec::new() },
                yield_first: true,
            });
        }
    }
    frames
}

/// `split_utf8`: each event split right after the lead byte of its first multi-byte
/// character.
fn utf8_split_frames(events: &[Event], encode: impl Fn(&Event) -> Vec<u8>) -> Vec<Frame> {
    let mut frames = Vec::new();
    for e in events {
        let bytes = Bytes::from(encode(e));
        let Some(lead) = bytes.iter().position(|&b| b >= 0xC0) else {
            frames.push(Frame {
                at: e.at,
                bytes,
                tokens: content(e),
                yield_first: false,
            });
            continue;
        };
        frames.push(Frame {
            at: e.at,
            bytes: bytes.slice(..=lead),
            tokens: Vec::new(),
            yield_first: false,
        });
        frames.push(Frame {
            at: e.at,
            bytes: bytes.slice(lead + 1..),
            tokens: content(e),
            yield_first: true,
        });
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::dist::Dist;
    use crate::plan::{plan, Overrides};

    fn script(fault: Option<Fault>, include_usage: bool) -> Script {
        let config = SimConfig {
            ttft: Dist::Fixed(Duration::from_millis(50)),
            itl: Dist::Fixed(Duration::from_millis(10)),
            ..SimConfig::default()
        };
        let plan = plan(&config, 0, 4, &Overrides::default());
        build(&StreamSpec {
            dialect: Dialect::Chat,
            fault,
            plan: &plan,
            id: "x",
            created: 0,
            model: "m",
            prompt_tokens: 1,
            include_usage,
            continuous_usage: false,
            token_ids: false,
            fault_after: None,
            silence: Duration::from_secs(1),
            calls: None,
        })
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn normal_stream_frames_and_times() {
        let s = script(None, true);
        let times: Vec<Duration> = s.frames.iter().map(|f| f.at).collect();
        // role, 4 content, usage, [DONE]
        assert_eq!(
            times,
            [ms(0), ms(50), ms(60), ms(70), ms(80), ms(80), ms(80)]
        );
        let tokens: Vec<Vec<u32>> = s.frames.iter().map(|f| f.tokens.clone()).collect();
        assert_eq!(
            tokens,
            [vec![], vec![1], vec![1], vec![1], vec![1], vec![], vec![]]
        );
        assert_eq!(&s.frames[6].bytes[..], b"data: [DONE]\n\n");
        assert!(!s.reset && s.end_at.is_none());
    }

    #[test]
    fn split_bytes_stamps_the_chunk_on_its_last_byte() {
        let s = script(Some(Fault::SplitBytes), false);
        let whole = script(None, false);
        let joined: Vec<u8> = s.frames.iter().flat_map(|f| f.bytes.to_vec()).collect();
        let expected: Vec<u8> = whole.frames.iter().flat_map(|f| f.bytes.to_vec()).collect();
        assert_eq!(joined, expected);
        let stamped: Vec<usize> = s
            .frames
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.tokens.is_empty())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(stamped.len(), 4);
        for i in stamped {
            assert_eq!(&s.frames[i].bytes[..], b"\n", "the event's final byte");
        }
    }

    #[test]
    fn coalesced_frames_leave_with_their_last_event() {
        let s = script(Some(Fault::Coalesce), false);
        let shape: Vec<(Duration, Vec<u32>)> =
            s.frames.iter().map(|f| (f.at, f.tokens.clone())).collect();
        // [role, c1, c2] [c3, c4, DONE]
        assert_eq!(shape, [(ms(60), vec![1, 1]), (ms(80), vec![1, 1])]);
    }

    #[test]
    fn reset_and_no_tokens_end_as_planned() {
        let r = script(Some(Fault::Reset), false);
        assert!(r.reset);
        assert_eq!(r.end_at, Some(ms(70)), "when the third chunk was due");
        let n = script(Some(Fault::NoTokens), false);
        assert_eq!(n.frames.len(), 1);
        assert_eq!(n.end_at, Some(Duration::from_secs(1)));
    }
}
