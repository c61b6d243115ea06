//! OpenAI-style API dialects: one event's data (an SSE `data` field or an NDJSON line)
//! turned into a normalized [`StreamEvent`], so the tracker never looks at JSON.
//!
//! The reference parse is serde with borrowed strings and every field loosely typed: an
//! unexpected type in a field Cadence does not need never rejects a chunk, and unknown
//! fields are skipped without allocating. Only invalid JSON, JSON that is not an
//! object, or an object with none of `choices`, `usage`, `error` is malformed. A
//! hand-written fast path (`fast`) takes the common shapes first, for speed.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

#[macro_use]
mod visit;
mod fast;
mod typed;
#[cfg(test)]
mod typed_value;

pub use fast::Prefix;

/// Which request/response shape the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/chat/completions`: text in `choices[].delta.content`.
    Chat,
    /// `/v1/completions`: text in `choices[].text`.
    Completions,
    /// OpenAI Responses `/v1/responses`: typed events (`response.output_text.delta`,
    /// `response.completed` with usage).
    Responses,
    /// Anthropic Messages `/v1/messages`: `content_block_delta` events, usage in
    /// `message_start` / `message_delta`, `message_stop` ends the stream.
    Anthropic,
    /// Ollama's native `/api/chat` and `/api/generate` (NDJSON, `done: true` last).
    Ollama,
    /// TGI `/generate_stream` (one `token` per event, `details` last) and SGLang
    /// `/generate` (cumulative `text` with `meta_info`).
    Generate,
    /// KServe v2 / Triton generate extension `/v2/models/{m}/generate_stream`
    /// (`text_output` per event; the stream ends at EOF).
    Kserve,
    /// llama.cpp's native `/completion` (`content`, `tokens`, `stop`, `timings`).
    Llamacpp,
    /// A stream over WebSocket, one event per message: the OpenAI Realtime text
    /// events (`response.text.delta`, `response.done`).
    Websocket,
}

/// A name that is no dialect's: its message lists the names that are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownApi(pub String);

impl fmt::Display for UnknownApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Api::ALL.iter().map(|a| a.name()).collect();
        write!(
            f,
            "'{}' is not an API cadence speaks (one of: auto, {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownApi {}

/// A dialect by the name `--api`, a watch target's `api` and records use
/// ([`Api::name`]): the one table from names to dialects.
impl std::str::FromStr for Api {
    type Err = UnknownApi;

    fn from_str(s: &str) -> Result<Api, UnknownApi> {
        Api::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownApi(s.to_string()))
    }
}

impl Api {
    /// Every dialect, in the order docs/src/apis.md lists them.
    pub const ALL: [Api; 9] = [
        Api::Chat,
        Api::Completions,
        Api::Responses,
        Api::Anthropic,
        Api::Ollama,
        Api::Generate,
        Api::Kserve,
        Api::Llamacpp,
        Api::Websocket,
    ];

    /// The name `--api` and records use.
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Anthropic => "anthropic",
            Api::Ollama => "ollama",
            Api::Generate => "generate",
            Api::Kserve => "kserve",
            Api::Llamacpp => "llamacpp",
            Api::Websocket => "websocket",
        }
    }

    /// `auto` (`None`: the dialect follows the URL's path, see [`Api::from_path`]) or
    /// a dialect by its name.
    pub fn parse_or_auto(s: &str) -> Result<Option<Api>, UnknownApi> {
        if s == "auto" {
            return Ok(None);
        }
        s.parse().map(Some)
    }

    /// The dialect a URL path names (its endpoint suffix), if any: the rule
    /// `--api auto` starts from.
    pub fn from_path(path: &str) -> Option<Api> {
        let p = path.trim_end_matches('/');
        let ends = |s: &str| p.ends_with(s);
        Some(if ends("/chat/completions") {
            Api::Chat
        } else if ends("/completions") {
            Api::Completions
        } else if ends("/responses") {
            Api::Responses
        } else if ends("/messages") {
            Api::Anthropic
        } else if ends("/api/chat") || ends("/api/generate") {
            Api::Ollama
        } else if p.starts_with("/v2/models/") && (ends("/generate_stream") || ends("/generate")) {
            Api::Kserve
        } else if ends("/generate_stream") || ends("/generate") {
            Api::Generate
        } else if ends("/completion") {
            Api::Llamacpp
        } else if ends("/realtime") {
            Api::Websocket
        } else {
            return None;
        })
    }

    /// Served under an OpenAI-style `/v1` base (chat, completions, Responses,
    /// Messages, Realtime), so a bare host gets `/v1`.
    pub fn openai_style(self) -> bool {
        matches!(
            self,
            Api::Chat | Api::Completions | Api::Responses | Api::Anthropic | Api::Websocket
        )
    }

    /// The stream has no end marker of its own: a clean EOF after at least one event
    /// ends it successfully (KServe's generate_stream).
    pub fn ends_at_eof(self) -> bool {
        self == Api::Kserve
    }
}

/// What a delta carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaKind {
    /// Visible output text (chat `content` or `refusal`, completions `text`).
    Content,
    /// Reasoning text (`reasoning_content` or `reasoning`).
    Reasoning,
    /// Tool-call name and argument fragments (`tool_calls`, legacy `function_call`).
    ToolCall,
}

/// One piece of output in a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta<'a> {
    /// Which output the text is: content, reasoning or a tool-call fragment.
    pub kind: DeltaKind,
    /// The delta's text, as the chunk carried it (never empty).
    pub text: Cow<'a, str>,
    /// Tokens the chunk says it carries (token-id array length). Reported on the first
    /// delta of the chunk only, so summing over deltas never counts twice.
    pub tokens: Option<u32>,
}

/// Token usage as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "RawUsage")]
pub struct Usage {
    /// Tokens of the prompt, cached ones included; `None` when the usage object omits it.
    pub prompt_tokens: Option<u64>,
    /// Tokens generated so far (the last value reported is the total); `None` when omitted.
    pub completion_tokens: Option<u64>,
    /// Of `prompt_tokens`, those the server took from its prefix cache instead of
    /// computing them (`prompt_tokens_details.cached_tokens`, Responses'
    /// `input_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`,
    /// llama.cpp's `timings.cache_n`); `None` when the server did not say.
    pub cached_prompt_tokens: Option<u64>,
}

impl Usage {
    /// Prompt and completion counts, when either is known (no cache figure).
    pub fn of(prompt: Option<u64>, completion: Option<u64>) -> Option<Usage> {
        (prompt.is_some() || completion.is_some()).then_some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_prompt_tokens: None,
        })
    }
}

/// The OpenAI usage object as sent: the cache figure sits one object down, and that
/// object is read loosely (a details field of another shape is no cache figure, not a
/// malformed event).
#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<serde_json::Value>,
}

impl From<RawUsage> for Usage {
    fn from(r: RawUsage) -> Usage {
        Usage {
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_prompt_tokens: r
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.get("cached_tokens"))
                .and_then(serde_json::Value::as_u64),
        }
    }
}

/// Everything one data chunk said. A chunk can carry output, usage and a finish reason
/// at once. Text fields are `None` when absent, null or empty (FAULTS 15, 16); several
/// choices are concatenated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedChunk<'a> {
    /// Visible output text (chat `content` or `refusal`, completions `text`, and each
    /// dialect's equivalent).
    pub content: Option<Cow<'a, str>>,
    /// Reasoning text (`reasoning_content` or `reasoning`, thinking deltas).
    pub reasoning: Option<Cow<'a, str>>,
    /// Tool-call name and argument fragments, as streamed.
    pub tool_call: Option<Cow<'a, str>>,
    /// Total length of the choices' `token_ids` / `tokens` arrays, when present.
    pub tokens: Option<u32>,
    /// Token usage, when the chunk carried a usage object.
    pub usage: Option<Usage>,
    /// Why generation stopped (`stop`, `length`, `tool_calls`, …), on the chunk that says
    /// so.
    pub finish_reason: Option<Cow<'a, str>>,
    /// The event ends the stream, as `[DONE]` does (`response.completed`,
    /// `message_stop`, Ollama's `done: true`, TGI's `details`, llama.cpp's `stop`).
    pub end: bool,
    /// `content` is the whole text so far, not a delta (SGLang's `/generate`).
    pub cumulative: bool,
    /// The server's own timing of the request (vLLM's `metrics`, Ollama, llama.cpp,
    /// SGLang's queue time).
    /// Boxed: it comes once a stream, and keeps the chunk small on every other.
    pub server_timing: Option<Box<cadence_base::ServerTiming>>,
}

impl<'a> ParsedChunk<'a> {
    /// Content, reasoning or tool-call output: a content-bearing chunk.
    pub fn has_output(&self) -> bool {
        self.content.is_some() || self.reasoning.is_some() || self.tool_call.is_some()
    }

    /// The chunk's deltas, reasoning first, then tool calls, then content.
    pub fn deltas(&self) -> impl Iterator<Item = Delta<'_>> + '_ {
        let mut tokens = self.tokens;
        [
            (DeltaKind::Reasoning, &self.reasoning),
            (DeltaKind::ToolCall, &self.tool_call),
            (DeltaKind::Content, &self.content),
        ]
        .into_iter()
        .filter_map(move |(kind, text)| {
            text.as_deref().map(|t| Delta {
                kind,
                text: Cow::Borrowed(t),
                tokens: tokens.take(),
            })
        })
    }
}

/// A normalized stream event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent<'a> {
    /// A data chunk (possibly carrying nothing, like a role-only first chunk).
    Chunk(ParsedChunk<'a>),
    /// The server reported an error (`{"error": {...}}`, `{"error": "..."}` or vLLM's
    /// `{"object": "error", "message": ...}`).
    Error {
        /// The server's error message, as it sent it.
        message: Cow<'a, str>,
    },
    /// The `[DONE]` marker.
    Done,
    /// Invalid JSON, JSON that is not an object, or no recognised shape.
    Malformed,
}

/// Parse one event's data for `api`.
pub fn parse_data(api: Api, data: &str) -> StreamEvent<'_> {
    let mut chunk = ParsedChunk::default();
    match parse_data_into(api, data, &mut chunk, None) {
        None => StreamEvent::Chunk(chunk),
        Some(other) => other,
    }
}

/// [`parse_data`] for the hot path: a chunk is written into `chunk` (which must be
/// empty) and `None` returned, so the large chunk struct is never moved around; any
/// other event is returned. `prefix` carries the opening shared by a stream's chunks
/// from one call to the next.
pub(crate) fn parse_data_into<'a>(
    api: Api,
    data: &'a str,
    chunk: &mut ParsedChunk<'a>,
    prefix: Option<&mut Prefix>,
) -> Option<StreamEvent<'a>> {
    let data = data.trim_ascii();
    if data == "[DONE]" {
        return Some(StreamEvent::Done);
    }
    if !data.starts_with('{') {
        return Some(StreamEvent::Malformed);
    }
    if !matches!(api, Api::Chat | Api::Completions) {
        return match typed::parse(api, data) {
            StreamEvent::Chunk(c) => {
                *chunk = c;
                None
            }
            other => Some(other),
        };
    }
    if fast::parse(api, data, chunk, prefix).is_some() {
        return None;
    }
    // The fast path may have filled part of the chunk before declining.
    *chunk = ParsedChunk::default();
    match parse_object(api, data) {
        StreamEvent::Chunk(c) => {
            *chunk = c;
            None
        }
        other => Some(other),
    }
}

/// How the fast path and the serde reference each read one chat or completions
/// chunk's data, apart, for the tests and fuzzers that hold them to agree: the fast
/// path's event (`None` where it declined and serde decides), read with `prefix` (the
/// opening an earlier chunk of the stream left, as the tracker carries it) when given,
/// and serde's. Other dialects have one path only: both are theirs.
pub fn fast_and_reference<'a>(
    api: Api,
    data: &'a str,
    prefix: Option<&mut Prefix>,
) -> (Option<StreamEvent<'a>>, StreamEvent<'a>) {
    if !matches!(api, Api::Chat | Api::Completions) {
        return (None, parse_data(api, data));
    }
    let mut chunk = ParsedChunk::default();
    let fast = fast::parse(api, data, &mut chunk, prefix).map(|()| StreamEvent::Chunk(chunk));
    (fast, parse_object(api, data))
}

/// The serde path: the reference for every shape, used when the fast path declines.
fn parse_object(api: Api, data: &str) -> StreamEvent<'_> {
    let raw: RawChunk<'_> = match serde_json::from_str(data) {
        Ok(r) => r,
        Err(_) => return StreamEvent::Malformed,
    };
    if let Some(err) = raw.error {
        match err {
            ErrorField::Absent => {}
            ErrorField::Message(m) => return StreamEvent::Error { message: m },
            ErrorField::Unnamed => {
                return StreamEvent::Error {
                    message: Cow::Borrowed(data),
                }
            }
        }
    }
    if raw.object.as_ref().and_then(|o| o.0.as_deref()) == Some("error") {
        let message = raw.message.and_then(|m| m.0).unwrap_or(Cow::Borrowed(data));
        return StreamEvent::Error { message };
    }
    let usage = raw.usage;
    let server_timing =
        typed::openai_timing(&raw.metrics, &raw.timings, usage.as_ref()).map(Box::new);
    let Some(ch) = raw.choices else {
        return match usage {
            Some(u) => StreamEvent::Chunk(ParsedChunk {
                usage: Some(u),
                server_timing,
                ..ParsedChunk::default()
            }),
            None => StreamEvent::Malformed,
        };
    };
    let content = match api {
        Api::Chat => ch.content,
        _ => ch.text,
    };
    StreamEvent::Chunk(ParsedChunk {
        content,
        reasoning: ch.reasoning,
        tool_call: ch.tool_call,
        tokens: ch.tokens,
        usage,
        finish_reason: ch.finish_reason,
        end: ch.whole,
        server_timing,
        ..ParsedChunk::default()
    })
}

// ---------------------------------------------------------------------------------
// Raw serde shapes. Everything optional, loosely typed, borrowed where possible.

#[derive(Deserialize)]
struct RawChunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Choices<'a>>,
    #[serde(default, deserialize_with = "loose_usage")]
    usage: Option<Usage>,
    #[serde(borrow, default)]
    error: Option<ErrorField<'a>>,
    #[serde(borrow, default)]
    object: Option<LooseStr<'a>>,
    #[serde(borrow, default)]
    message: Option<LooseStr<'a>>,
    /// vLLM's per-request timing (`--enable-per-request-metrics`).
    #[serde(default)]
    metrics: typed::Obj<typed::VllmMetrics>,
    /// llama.cpp's timing on its last chunk.
    #[serde(default)]
    timings: typed::Obj<typed::Timings>,
}

#[derive(Deserialize)]
struct RawChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<RawDelta<'a>>,
    /// A whole (non-streamed) chat answer: the message in the delta's shape.
    #[serde(borrow, default)]
    message: Option<RawDelta<'a>>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<LooseStr<'a>>,
    #[serde(default)]
    token_ids: Option<Count>,
    #[serde(default)]
    tokens: Option<Count>,
}

#[derive(Deserialize)]
struct RawDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    refusal: Option<LooseStr<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<LooseStr<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<LooseStr<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<ToolCalls<'a>>,
    #[serde(borrow, default)]
    function_call: Option<RawFunction<'a>>,
}

#[derive(Deserialize)]
struct RawToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<RawFunction<'a>>,
}

#[derive(Deserialize)]
struct RawFunction<'a> {
    #[serde(borrow, default)]
    name: Option<LooseStr<'a>>,
    #[serde(borrow, default)]
    arguments: Option<LooseStr<'a>>,
}

impl<'a> RawFunction<'a> {
    fn text(self) -> Option<Cow<'a, str>> {
        let mut out = None;
        append(&mut out, self.name.and_then(|n| n.0));
        append(&mut out, self.arguments.and_then(|a| a.0));
        out
    }
}

/// Append `more` to `acc`, borrowing when `acc` was empty; empty strings are nothing.
fn append<'a>(acc: &mut Option<Cow<'a, str>>, more: Option<Cow<'a, str>>) {
    let Some(more) = more.filter(|m| !m.is_empty()) else {
        return;
    };
    match acc {
        None => *acc = Some(more),
        Some(a) => a.to_mut().push_str(&more),
    }
}

fn loose_usage<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Usage>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Usage>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("usage")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            Usage::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A string, or nothing for any other JSON value (which is skipped).
struct LooseStr<'a>(Option<Cow<'a, str>>);

/// Content text: a string, or an array of content parts (strings or `{"text": ...}`)
/// concatenated; anything else is nothing.
struct Text<'a>(Option<Cow<'a, str>>);

/// The length of an array; anything else is nothing.
struct Count(Option<u32>);

/// `choices[]` folded into one accumulator without allocating a Vec.
#[derive(Default)]
struct Choices<'a> {
    content: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    tool_call: Option<Cow<'a, str>>,
    tokens: Option<u32>,
    finish_reason: Option<Cow<'a, str>>,
    /// A choice carried a whole `message`: the answer was not streamed.
    whole: bool,
}

/// `tool_calls[]` folded into their concatenated name/argument text.
struct ToolCalls<'a>(Option<Cow<'a, str>>);

/// A top-level `error` as every dialect reads it: a string, or an object whose
/// `message` (else `type`) names it; the typed dialects share it.
#[derive(Default)]
enum ErrorField<'a> {
    /// Absent, `null` or `false`: no error.
    #[default]
    Absent,
    Message(Cow<'a, str>),
    /// An error without a usable message: the whole data is the message.
    Unnamed,
}

struct LooseStrVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for LooseStrVisitor<'a> {
    type Value = LooseStr<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(LooseStr(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(LooseStr(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(LooseStr(Some(Cow::Owned(v))))
    }
    skip_scalars!(LooseStr(None));
    skip_containers!(LooseStr(None));
}

impl<'de: 'a, 'a> Deserialize<'de> for LooseStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseStrVisitor(PhantomData))
    }
}

#[derive(Deserialize)]
struct PartObj<'a> {
    #[serde(borrow, default)]
    text: Option<LooseStr<'a>>,
}

struct TextVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
    type Value = Text<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("content text")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v))))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut acc = None;
        while let Some(part) = seq.next_element::<Part<'a>>()? {
            append(&mut acc, part.0);
        }
        Ok(Text(acc))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }
    skip_scalars!(Text(None));
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor(PhantomData))
    }
}

/// One content part: a string or an object with a `text` field.
struct Part<'a>(Option<Cow<'a, str>>);

struct PartVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for PartVisitor<'a> {
    type Value = Part<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content part")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Part(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Part(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let obj = PartObj::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Part(obj.text.and_then(|t| t.0)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Part(None))
    }
    skip_scalars!(Part(None));
}

impl<'de: 'a, 'a> Deserialize<'de> for Part<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PartVisitor(PhantomData))
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut n: u32 = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n = n.saturating_add(1);
        }
        Ok(Count(Some(n)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
    skip_scalars!(Count(None));
    skip_strings!(Count(None));
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct ChoicesVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ChoicesVisitor<'a> {
    type Value = Choices<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of choices")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut acc = Choices::default();
        while let Some(c) = seq.next_element::<RawChoice<'a>>()? {
            acc.whole |= c.message.is_some();
            for d in [c.delta, c.message].into_iter().flatten() {
                append(&mut acc.content, d.content.and_then(|t| t.0));
                append(&mut acc.content, d.refusal.and_then(|t| t.0));
                // Some servers send the same text as both names: take one.
                let reasoning = d
                    .reasoning_content
                    .and_then(|t| t.0)
                    .filter(|t| !t.is_empty())
                    .or_else(|| d.reasoning.and_then(|t| t.0));
                append(&mut acc.reasoning, reasoning);
                append(&mut acc.tool_call, d.tool_calls.and_then(|t| t.0));
                append(
                    &mut acc.tool_call,
                    d.function_call.and_then(RawFunction::text),
                );
            }
            append(&mut acc.text, c.text.and_then(|t| t.0));
            if acc.finish_reason.is_none() {
                acc.finish_reason = c.finish_reason.and_then(|f| f.0).filter(|f| !f.is_empty());
            }
            let n = c.token_ids.and_then(|n| n.0).or(c.tokens.and_then(|n| n.0));
            if let Some(n) = n {
                acc.tokens = Some(acc.tokens.unwrap_or(0).saturating_add(n));
            }
        }
        Ok(acc)
    }
    skip_scalars!(Choices::default());
    skip_strings!(Choices::default());
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Choices::default())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ChoicesVisitor(PhantomData))
    }
}

struct ToolCallsVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ToolCallsVisitor<'a> {
    type Value = ToolCalls<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of tool calls")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut acc = None;
        while let Some(c) = seq.next_element::<RawToolCall<'a>>()? {
            append(&mut acc, c.function.and_then(RawFunction::text));
        }
        Ok(ToolCalls(acc))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ToolCalls(None))
    }
    skip_scalars!(ToolCalls(None));
    skip_strings!(ToolCalls(None));
}

impl<'de: 'a, 'a> Deserialize<'de> for ToolCalls<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ToolCallsVisitor(PhantomData))
    }
}

#[derive(Deserialize)]
struct ErrorObj<'a> {
    #[serde(borrow, default)]
    message: Option<LooseStr<'a>>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<LooseStr<'a>>,
}

struct ErrorVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ErrorVisitor<'a> {
    type Value = ErrorField<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an error")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(named(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(named(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let obj = ErrorObj::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let message = obj
            .message
            .and_then(|m| m.0)
            .filter(|m| !m.is_empty())
            .or_else(|| obj.kind.and_then(|k| k.0));
        Ok(named(message))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ErrorField::Unnamed)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ErrorField::Absent)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(ErrorField::Absent)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(if v {
            ErrorField::Unnamed
        } else {
            ErrorField::Absent
        })
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ErrorField::Unnamed)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ErrorField::Unnamed)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ErrorField::Unnamed)
    }
}

/// An error named by `message` when it is a non-empty string, else unnamed.
fn named(message: Option<Cow<'_, str>>) -> ErrorField<'_> {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => ErrorField::Message(m),
        None => ErrorField::Unnamed,
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ErrorVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(api: Api, data: &str) -> ParsedChunk<'_> {
        match parse_data(api, data) {
            StreamEvent::Chunk(c) => c,
            other => panic!("not a chunk: {other:?}"),
        }
    }

    /// (prompt, cached) of the usage an event carried.
    fn cache_of(api: Api, data: &str) -> (Option<u64>, Option<u64>) {
        let u = chunk(api, data).usage.expect("usage");
        (u.prompt_tokens, u.cached_prompt_tokens)
    }

    #[test]
    fn cached_prompt_tokens_are_read_from_every_dialect_that_reports_them() {
        // Chat and completions (vLLM, SGLang, llama.cpp, OpenAI): inside the prompt count.
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":31,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":30}}}"#;
        assert_eq!(cache_of(Api::Chat, chat), (Some(31), Some(30)));
        let mut fast_read = ParsedChunk::default();
        assert!(fast::parse(Api::Chat, chat, &mut fast_read, None).is_some());
        assert_eq!(fast_read.usage.unwrap().cached_prompt_tokens, Some(30));
        let typed: Usage = serde_json::from_str(
            r#"{"prompt_tokens":31,"prompt_tokens_details":{"audio_tokens":null,"cached_tokens":30}}"#,
        )
        .unwrap();
        assert_eq!(typed.cached_prompt_tokens, Some(30));
        assert_eq!(
            cache_of(
                Api::Completions,
                r#"{"choices":[],"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}}"#
            ),
            (Some(8), Some(0))
        );
        // A details field of another shape, or none, is no figure and no malformed event.
        for odd in [r#""n/a""#, "null", "{}", r#"{"cached_tokens":"30"}"#] {
            let d = format!(
                r#"{{"choices":[],"usage":{{"prompt_tokens":31,"prompt_tokens_details":{odd}}}}}"#
            );
            assert_eq!(cache_of(Api::Chat, &d), (Some(31), None), "{odd}");
        }
        for (api, data, want) in [
            // Responses: inside `input_tokens`.
            (
                Api::Responses,
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":31,"output_tokens":3,"input_tokens_details":{"cached_tokens":30}}}}"#,
                (Some(31), Some(30)),
            ),
            // Anthropic: beside `input_tokens`, which counts only what was computed.
            (
                Api::Anthropic,
                r#"{"type":"message_start","message":{"usage":{"cache_read_input_tokens":30,"input_tokens":1,"output_tokens":0}}}"#,
                (Some(31), Some(30)),
            ),
            (
                Api::Anthropic,
                r#"{"type":"message_start","message":{"usage":{"cache_creation_input_tokens":20,"cache_read_input_tokens":10,"input_tokens":4}}}"#,
                (Some(34), Some(10)),
            ),
            (
                Api::Anthropic,
                r#"{"type":"message_start","message":{"usage":{"input_tokens":12}}}"#,
                (Some(12), None),
            ),
            // llama.cpp's native /completion: its timings' cache_n.
            (
                Api::Llamacpp,
                r#"{"content":"","stop":true,"tokens_evaluated":10,"tokens_predicted":3,"timings":{"cache_n":9,"prompt_n":1,"prompt_ms":4.1,"predicted_n":3,"predicted_ms":19.2}}"#,
                (Some(10), Some(9)),
            ),
            // SGLang's /generate: meta_info.cached_tokens.
            (
                Api::Generate,
                r#"{"text":"hi","meta_info":{"prompt_tokens":40,"completion_tokens":2,"cached_tokens":32,"finish_reason":null}}"#,
                (Some(40), Some(32)),
            ),
        ] {
            assert_eq!(cache_of(api, data), want, "{api:?}: {data}");
        }
    }

    #[test]
    fn every_dialect_is_found_by_its_name_and_an_unknown_name_lists_them() {
        for api in Api::ALL {
            assert_eq!(api.name().parse::<Api>(), Ok(api));
            assert_eq!(Api::parse_or_auto(api.name()), Ok(Some(api)));
        }
        assert_eq!(Api::parse_or_auto("auto"), Ok(None));
        assert!("auto".parse::<Api>().is_err());
        assert!("Chat".parse::<Api>().is_err());
        let e = "smoke".parse::<Api>().unwrap_err().to_string();
        assert_eq!(
            e,
            "'smoke' is not an API cadence speaks (one of: auto, chat, completions, responses, anthropic, ollama, generate, kserve, llamacpp, websocket)"
        );
    }

    const SAMPLE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hello"},"finish_reason":null}]}"#;

    #[test]
    fn typical_chat_chunk_borrows() {
        let c = chunk(Api::Chat, SAMPLE);
        assert!(matches!(c.content, Some(Cow::Borrowed(" hello"))));
        assert_eq!(c.finish_reason, None);
        assert_eq!(c.usage, None);
        assert_eq!(c.tokens, None);
        assert!(c.has_output());
    }

    #[test]
    fn escaped_content_is_unescaped() {
        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"delta":{"content":"a\nb \u00e9"}}]}"#,
        );
        assert_eq!(c.content.as_deref(), Some("a\nb \u{e9}"));
    }

    #[test]
    fn role_only_and_empty_content_are_not_output() {
        for d in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"choices":[]}"#,
        ] {
            assert!(!chunk(Api::Chat, d).has_output(), "{d}");
        }
    }

    #[test]
    fn reasoning_and_tool_calls() {
        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"think","content":"x"}}]}"#,
        );
        assert_eq!(c.reasoning.as_deref(), Some("think"));
        assert_eq!(c.content.as_deref(), Some("x"));
        let kinds: Vec<DeltaKind> = c.deltas().map(|d| d.kind).collect();
        assert_eq!(kinds, vec![DeltaKind::Reasoning, DeltaKind::Content]);

        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":""}}]}}]}"#,
        );
        assert_eq!(c.tool_call.as_deref(), Some("get"));
        assert_eq!(c.content, None);
        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}"#,
        );
        assert_eq!(c.tool_call.as_deref(), Some("{\"a\":"));
    }

    #[test]
    fn completions_text_and_token_ids() {
        let c = chunk(
            Api::Completions,
            r#"{"choices":[{"index":0,"text":"ab","token_ids":[1,2],"finish_reason":"length"}]}"#,
        );
        assert_eq!(c.content.as_deref(), Some("ab"));
        assert_eq!(c.tokens, Some(2));
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        // A chat parse of a completions chunk finds no content.
        assert!(!chunk(Api::Chat, r#"{"choices":[{"text":"ab"}]}"#).has_output());
        let c = chunk(
            Api::Completions,
            r#"{"choices":[{"text":"ab","tokens":[5,6,7]}]}"#,
        );
        assert_eq!(c.tokens, Some(3));
    }

    #[test]
    fn usage_only_chunk() {
        let c = chunk(
            Api::Chat,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#,
        );
        assert!(!c.has_output());
        assert_eq!(c.usage, Usage::of(Some(5), Some(7)));
        let c = chunk(Api::Chat, r#"{"usage":{"completion_tokens":3}}"#);
        assert_eq!(c.usage.unwrap().completion_tokens, Some(3));
        let c = chunk(Api::Chat, r#"{"choices":[],"usage":null}"#);
        assert_eq!(c.usage, None);
    }

    #[test]
    fn a_whole_chat_answer_is_one_chunk_that_ends_the_stream() {
        let d = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","reasoning_content":"hm"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let mut c = ParsedChunk::default();
        assert!(
            fast::parse(Api::Chat, d, &mut c, None).is_none(),
            "serde decides"
        );
        let c = chunk(Api::Chat, d);
        assert_eq!(c.content.as_deref(), Some("Hi there"));
        assert_eq!(c.reasoning.as_deref(), Some("hm"));
        assert!(c.end);
        assert_eq!(c.usage.unwrap().completion_tokens, Some(2));
        // A stream's chunks never end it by themselves.
        assert!(!chunk(Api::Chat, SAMPLE).end);
    }

    #[test]
    fn errors() {
        let msg = |d: &'static str| match parse_data(Api::Chat, d) {
            StreamEvent::Error { message } => message.into_owned(),
            other => panic!("{d}: {other:?}"),
        };
        assert_eq!(msg(r#"{"error":{"message":"boom","type":"x"}}"#), "boom");
        assert_eq!(msg(r#"{"error":"plain"}"#), "plain");
        assert_eq!(msg(r#"{"error":{"type":"overloaded"}}"#), "overloaded");
        assert_eq!(
            msg(r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#),
            "bad"
        );
        assert_eq!(
            msg(r#"{"error":{"code":500}}"#),
            r#"{"error":{"code":500}}"#
        );
        // A null error is no error.
        assert!(matches!(
            parse_data(Api::Chat, r#"{"choices":[],"error":null}"#),
            StreamEvent::Chunk(_)
        ));
    }

    #[test]
    fn every_dialect_names_a_top_level_error_alike() {
        let cases = [
            (r#"{"error":{"message":"boom","type":"x"}}"#, "boom"),
            (
                r#"{"error":{"message":"","type":"overloaded"}}"#,
                "overloaded",
            ),
            (r#"{"error":{"type":"overloaded"}}"#, "overloaded"),
            (r#"{"error":"plain"}"#, "plain"),
            // Nothing names it: the whole event is the message.
            (r#"{"error":""}"#, r#"{"error":""}"#),
            (r#"{"error":{"code":500}}"#, r#"{"error":{"code":500}}"#),
        ];
        for api in [
            Api::Chat,
            Api::Completions,
            Api::Ollama,
            Api::Generate,
            Api::Llamacpp,
        ] {
            for (data, want) in cases {
                match parse_data(api, data) {
                    StreamEvent::Error { message } => assert_eq!(message, want, "{api:?} {data}"),
                    other => panic!("{api:?} {data}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn done_and_malformed() {
        assert_eq!(parse_data(Api::Chat, "[DONE]"), StreamEvent::Done);
        assert_eq!(parse_data(Api::Chat, " [DONE] "), StreamEvent::Done);
        for d in [
            ": keepalive",
            "{not json",
            "[1,2]",
            "42",
            "\"s\"",
            "{}",
            r#"{"id":"x"}"#,
            r#"{"choices":[]} trailing"#,
            "",
        ] {
            assert_eq!(parse_data(Api::Chat, d), StreamEvent::Malformed, "{d:?}");
        }
    }

    #[test]
    fn odd_types_do_not_reject_a_chunk() {
        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"a"},"b"],"tool_calls":null},"finish_reason":7,"token_ids":"x"}]}"#,
        );
        assert_eq!(c.content.as_deref(), Some("ab"));
        assert_eq!(c.finish_reason, None);
        assert_eq!(c.tokens, None);
    }

    #[test]
    fn several_choices_are_merged() {
        let c = chunk(
            Api::Chat,
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"token_ids":[1]},{"index":1,"delta":{"content":"b"},"token_ids":[2,3],"finish_reason":"stop"}]}"#,
        );
        assert_eq!(c.content.as_deref(), Some("ab"));
        assert_eq!(c.tokens, Some(3));
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn api_serde_names() {
        assert_eq!(serde_json::to_string(&Api::Chat).unwrap(), "\"chat\"");
        assert_eq!(
            serde_json::from_str::<Api>("\"completions\"").unwrap(),
            Api::Completions
        );
    }

    #[test]
    fn fast_and_reference_gives_each_path_apart() {
        let mut prefix = Prefix::default();
        let (fast, reference) = fast_and_reference(Api::Chat, SAMPLE, Some(&mut prefix));
        assert_eq!(fast, Some(reference.clone()));
        assert!(matches!(reference, StreamEvent::Chunk(_)));
        // An error key: the fast path declines, serde reads the error.
        let (fast, reference) = fast_and_reference(Api::Chat, r#"{"error":"boom"}"#, None);
        assert_eq!(fast, None);
        assert!(matches!(reference, StreamEvent::Error { .. }));
        // One path only: both are the dialect's.
        let (fast, reference) = fast_and_reference(Api::Ollama, r#"{"done":true}"#, None);
        assert_eq!(
            (fast, reference),
            (None, parse_data(Api::Ollama, r#"{"done":true}"#))
        );
    }

    #[test]
    fn common_shapes_take_the_fast_path() {
        for (api, d) in [
            (Api::Chat, SAMPLE),
            (
                Api::Chat,
                r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            ),
            (
                Api::Chat,
                r#"{"choices":[{"delta":{"reasoning_content":"a\nb","content":null}}]}"#,
            ),
            (
                Api::Chat,
                r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}"#,
            ),
            (
                Api::Completions,
                r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" hi","token_ids":[1,2],"logprobs":null,"finish_reason":"length","stop_reason":null}]}"#,
            ),
        ] {
            let mut prefix = Prefix::default();
            // Twice: the second parse resumes after the cached opening.
            for _ in 0..2 {
                let mut c = ParsedChunk::default();
                fast::parse(api, d, &mut c, Some(&mut prefix))
                    .unwrap_or_else(|| panic!("declined: {d}"));
                assert_eq!(StreamEvent::Chunk(c), parse_object(api, d), "{d}");
            }
        }
    }

    mod differential {
        use super::super::*;
        use proptest::prelude::*;

        fn pick(v: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
            prop::sample::select(v).prop_map(str::to_owned)
        }

        fn text_value() -> impl Strategy<Value = String> + Clone {
            prop_oneof![
                4 => pick(&[
                    "null",
                    r#""""#,
                    r#"" hello""#,
                    r#""h\u00e9llo \ud83d\ude00""#,
                    r#""a\nb\t\"q\"\\ \/""#,
                    "\"\u{e9}t\u{e9} \u{1F600}\"",
                ]),
                1 => pick(&[
                    r#""lone \ud800 x""#,
                    r#""bad \x escape""#,
                    r#"[{"type":"text","text":"a"},"b"]"#,
                    "5",
                    "{}",
                ]),
            ]
        }

        fn object(fields: Vec<(String, String)>) -> String {
            let body: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("\"{k}\" : {v}"))
                .collect();
            format!("{{ {} }}", body.join(","))
        }

        /// Each key at most once (absent sometimes), in random order; now and then a
        /// random duplicate.
        fn fields(
            entries: Vec<(&'static str, BoxedStrategy<String>)>,
        ) -> impl Strategy<Value = Vec<(String, String)>> {
            let n = entries.len();
            let each: Vec<_> = entries
                .into_iter()
                .map(|(k, v)| prop::option::weighted(0.6, v.prop_map(move |v| (k.to_owned(), v))))
                .collect();
            (each, prop::option::weighted(0.05, 0..n))
                .prop_map(|(v, dup)| {
                    let mut f: Vec<(String, String)> = v.into_iter().flatten().collect();
                    if let Some(i) = dup {
                        if let Some(e) = f.get(i % f.len().max(1)).cloned() {
                            f.push(e);
                        }
                    }
                    f
                })
                .prop_shuffle()
        }

        fn delta() -> impl Strategy<Value = String> {
            let tool = prop_oneof![
                3 => Just("null".to_owned()),
                1 => pick(&[
                    r#"[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]"#,
                    r#"[{"index":0,"function":{"arguments":"{\"a\":1}"}}]"#,
                ]),
            ];
            prop_oneof![
                1 => pick(&["null", "{}", "\"x\""]),
                6 => fields(vec![
                    ("content", text_value().boxed()),
                    ("reasoning_content", text_value().boxed()),
                    ("reasoning", text_value().boxed()),
                    ("refusal", text_value().boxed()),
                    ("role", pick(&[r#""assistant""#]).boxed()),
                    ("tool_calls", tool.boxed()),
                ])
                .prop_map(object),
            ]
        }

        fn choice() -> impl Strategy<Value = String> {
            let finish = prop_oneof![
                4 => pick(&["null", r#""stop""#, r#""length""#, r#""""#]),
                1 => pick(&["7", "[]"]),
            ];
            let ids = prop_oneof![
                4 => pick(&["null", "[1,2,3]", "[]", "[ 7 ]"]),
                1 => pick(&["\"x\"", "{}", "[1,]", "-1.5e3", "01"]),
            ];
            let logprobs = pick(&[
                "null",
                r#"{"content":[{"token":"a","logprob":-0.1,"bytes":[97],"top_logprobs":[]}]}"#,
                r#"{"tokens":["a"],"token_logprobs":[-1.5E+2],"top_logprobs":null,"text_offset":[0]}"#,
                "tru",
            ]);
            fields(vec![
                ("index", pick(&["0", "1"]).boxed()),
                ("delta", delta().boxed()),
                ("text", text_value().boxed()),
                ("finish_reason", finish.boxed()),
                ("token_ids", ids.clone().boxed()),
                ("tokens", ids.boxed()),
                ("logprobs", logprobs.boxed()),
            ])
            .prop_map(object)
        }

        fn chunk_json() -> impl Strategy<Value = String> {
            let choices = prop_oneof![
                1 => pick(&["null", "[]", "{}", "\"x\""]),
                6 => prop::collection::vec(choice(), 0..3).prop_map(|v| format!("[{}]", v.join(","))),
            ];
            let usage = prop_oneof![
                4 => pick(&[
                    "null",
                    r#"{"prompt_tokens":5,"completion_tokens":7}"#,
                    r#"{"completion_tokens":null,"total_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}"#,
                ]),
                1 => pick(&[
                    r#"{"completion_tokens":-1}"#,
                    r#"{"completion_tokens":1.0}"#,
                    r#"{"completion_tokens":18446744073709551616}"#,
                    r#"{"completion_tokens":1,"completion_tokens":2}"#,
                    "\"x\"",
                ]),
            ];
            let object_field = prop_oneof![
                5 => pick(&[r#""chat.completion.chunk""#, r#""text_completion""#]),
                1 => pick(&[r#""error""#, "null", "12"]),
            ];
            let error = prop_oneof![
                5 => Just("null".to_owned()),
                1 => pick(&[r#"{"message":"boom"}"#, r#""plain""#, "true", "false"]),
            ];
            fields(vec![
                ("id", pick(&[r#""chatcmpl-1""#, r#""cmpl-\u0041""#]).boxed()),
                ("object", object_field.boxed()),
                ("created", pick(&["1", "1.7e9", "-3"]).boxed()),
                ("model", pick(&[r#""m""#]).boxed()),
                ("choices", choices.boxed()),
                ("usage", usage.boxed()),
                ("error", error.boxed()),
                ("message", pick(&[r#""boom""#, "{}"]).boxed()),
            ])
            .prop_map(object)
        }

        /// With and without the prefix cache (which the caller may carry over from an
        /// earlier, similar input): whenever the fast path decides, serde agrees.
        fn check(api: Api, s: &str, prefix: &mut Prefix) -> Result<(), TestCaseError> {
            for cache in [None, Some(&mut *prefix)] {
                let mut c = ParsedChunk::default();
                if fast::parse(api, s, &mut c, cache).is_some() {
                    prop_assert_eq!(StreamEvent::Chunk(c), parse_object(api, s), "input: {}", s);
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn fast_path_agrees_with_serde(s in chunk_json(), cut in any::<prop::sample::Index>(), junk in any::<char>()) {
                let mut prefix = Prefix::default();
                check(Api::Chat, &s, &mut prefix)?;
                check(Api::Completions, &s, &mut prefix)?;
                // Damaged copies, parsed with the cache the intact one left: cut short,
                // or a character inserted (often after the cached opening).
                let mut at = cut.index(s.len() + 1);
                while !s.is_char_boundary(at) {
                    at -= 1;
                }
                let p0 = prefix.clone();
                check(Api::Chat, &s[..at], &mut prefix)?;
                let mut damaged = s.clone();
                damaged.insert(at, junk);
                prefix = p0;
                check(Api::Chat, &damaged, &mut prefix)?;
            }
        }
    }
}
