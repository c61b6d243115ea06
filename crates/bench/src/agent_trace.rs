//! Agent trace replay (`--agent-trace FILE`): recorded agent sessions read from a
//! Cadence session file, a Mooncake-style hash-id trace or an OpenTelemetry span
//! export, and replayed call by call. Each call's prompt is the session's transcript
//! so far (the earlier prompt and the reply the server actually gave) cut to the
//! recorded reuse, plus new text of exactly the tokens the recording adds, sent as a
//! tool result when the last reply called tools and as a user message otherwise.

use crate::agent::{AgentSpec, Transcript};
use crate::prompts::PromptGen;
use cadence_core::json::{kind, Field, JsonError, Obj};
use cadence_wire::{Api, ToolCall};
use rand::Rng;
use serde_json::Value;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

/// Tokens per `hash_ids` block in Mooncake traces.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// The most tokens a call's input or output may have: far past any context window,
/// and small enough that making its text cannot exhaust the client's memory.
pub const MAX_TOKENS: u64 = 1 << 24;

/// Idle gaps (between session arrivals, and before a call) longer than this are cut
/// to it unless `--agent-trace-max-gap` says otherwise.
pub const DEFAULT_MAX_GAP: Duration = Duration::from_secs(60);

/// Which earlier context a call sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The whole context so far: the previous call's prompt and its reply.
    Previous,
    /// The first N tokens of the session's context (0: a fresh context).
    Tokens(u64),
}

/// One recorded LLM call of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceCall {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub reuse: Reuse,
    /// The client's time between the previous call's last byte and this send.
    pub tool_wait: Duration,
    /// Not sent before this offset from the session's arrival (traces that record
    /// when each call arrived but not when the one before it ended: Mooncake).
    pub at: Option<Duration>,
}

/// One recorded session: when it arrived and its calls in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSession {
    pub id: String,
    /// Arrival offset from the trace's first session.
    pub at: Duration,
    pub calls: Vec<TraceCall>,
}

/// The layouts `--agent-trace` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Cadence's session JSON Lines: one session per line.
    Cadence,
    /// Mooncake-style JSON Lines: one call per line with `hash_ids`.
    Mooncake,
    /// OTLP JSON span exports (OpenTelemetry GenAI or OpenInference attributes).
    Otel,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cadence" => Ok(Format::Cadence),
            "mooncake" => Ok(Format::Mooncake),
            "otel" | "otlp" | "opentelemetry" | "openinference" => Ok(Format::Otel),
            _ => Err(format!(
                "'{s}' is not an agent trace format: cadence, mooncake or otel"
            )),
        }
    }
}

/// Why an agent trace could not be read: where (a line, a span) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTraceError(pub String);

impl std::fmt::Display for AgentTraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AgentTraceError {}

impl From<JsonError> for AgentTraceError {
    fn from(e: JsonError) -> AgentTraceError {
        AgentTraceError(e.to_string())
    }
}

fn at_line(line: usize, what: impl std::fmt::Display) -> AgentTraceError {
    AgentTraceError(format!("line {line}: {what}"))
}

/// The non-blank lines not starting with `#`, numbered from 1.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Which layout `text` is in, from its content: an OTLP export names
/// `resourceSpans`; a Cadence session line has `calls`; a Mooncake line has
/// `hash_ids` or `input_length`.
pub fn detect(text: &str) -> Result<Format, AgentTraceError> {
    let Some((line, first)) = lines(text).next() else {
        return Err(AgentTraceError(
            "the agent trace is empty (every line is blank or a # comment)".into(),
        ));
    };
    if text.contains("\"resourceSpans\"") {
        return Ok(Format::Otel);
    }
    let v: Value = serde_json::from_str(first).map_err(|e| {
        at_line(
            line,
            format!("not valid JSON ({e}); an OTLP export must name resourceSpans"),
        )
    })?;
    match &v {
        Value::Object(o) if o.contains_key("calls") => Ok(Format::Cadence),
        Value::Object(o) if o.contains_key("hash_ids") || o.contains_key("input_length") => {
            Ok(Format::Mooncake)
        }
        _ => Err(at_line(
            line,
            "cannot tell the format: expected a Cadence session (with calls), a Mooncake \
             call (with hash_ids or input_length) or an OTLP export (resourceSpans); \
             --agent-trace-format names it",
        )),
    }
}

/// Reads an agent trace in `format` (detected from the content when `None`).
/// Sessions come back in arrival order, the first at zero.
pub fn parse(
    text: &str,
    format: Option<Format>,
    block_size: u32,
) -> Result<Vec<TraceSession>, AgentTraceError> {
    let format = match format {
        Some(f) => f,
        None => detect(text)?,
    };
    let mut sessions = match format {
        Format::Cadence => parse_cadence(text)?,
        Format::Mooncake => parse_mooncake(text, block_size)?,
        Format::Otel => parse_otel(text)?,
    };
    if sessions.is_empty() {
        return Err(AgentTraceError(
            "the agent trace has no sessions (every line is blank or a # comment)".into(),
        ));
    }
    sessions.sort_by_key(|s| s.at); // stable: equal arrivals keep file order
    let first = sessions[0].at;
    for s in &mut sessions {
        s.at -= first;
    }
    Ok(sessions)
}

/// Speeds the trace's clock up by `speed` (arrivals and waits divided by it), then
/// cuts every idle gap to `max_gap`: between consecutive session arrivals, each
/// call's tool wait, and between consecutive recorded call arrivals in a session.
pub fn retime(sessions: &mut [TraceSession], speed: f64, max_gap: Duration) {
    assert!(
        speed.is_finite() && speed > 0.0,
        "trace speed must be a positive number, got {speed}"
    );
    let scaled = |d: Duration| Duration::from_secs_f64((d.as_secs_f64() / speed).min(1e12));
    let mut prev_raw = Duration::ZERO;
    let mut prev_new = Duration::ZERO;
    for s in sessions.iter_mut() {
        let gap = scaled(s.at.saturating_sub(prev_raw)).min(max_gap);
        prev_raw = s.at;
        s.at = prev_new + gap;
        prev_new = s.at;
        let mut prev_at_raw = Duration::ZERO;
        let mut prev_at_new = Duration::ZERO;
        for c in &mut s.calls {
            c.tool_wait = scaled(c.tool_wait).min(max_gap);
            if let Some(at) = c.at {
                let gap = scaled(at.saturating_sub(prev_at_raw)).min(max_gap);
                prev_at_raw = at;
                prev_at_new += gap;
                c.at = Some(prev_at_new);
            }
        }
    }
}

/// Milliseconds, finite and at least zero, as a duration (absolute Unix times fit).
fn millis(f: Field) -> Result<Duration, JsonError> {
    let ms = f.nonneg()?;
    if ms > 1e13 {
        return Err(f.error(format!("{} is too large", f.value)));
    }
    Ok(Duration::from_nanos((ms * 1e6).round() as u64))
}

/// A session's name: a non-empty string or a number.
fn id_of(f: Field) -> Result<String, JsonError> {
    match f.value {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(f.error(format!(
            "expected a non-empty string or a number, got {}",
            kind(other)
        ))),
    }
}

// ---------------------------------------------------------------- Cadence sessions

const SESSION_KEYS: [&str; 3] = ["session", "at_ms", "calls"];
const CALL_KEYS: [&str; 5] = [
    "input_tokens",
    "output_tokens",
    "reuse",
    "tool_wait_ms",
    "at_ms",
];

/// Cadence's session JSON Lines: one session per line,
/// `{"session": "s1", "at_ms": 0, "calls": [{"input_tokens": 900, "output_tokens": 40},
/// {"input_tokens": 1300, "output_tokens": 25, "reuse": "previous", "tool_wait_ms": 350}]}`.
/// `reuse` is `"previous"` (the default after the first call), a number of tokens of
/// the context so far, or 0 (a fresh context; the first call's only value).
pub fn parse_cadence(text: &str) -> Result<Vec<TraceSession>, AgentTraceError> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (line, t) in lines(text) {
        let v: Value =
            serde_json::from_str(t).map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
        let s = cadence_session(&Obj::new(format!("line {line}"), &v)?, line)?;
        if let Some(first) = seen.insert(s.id.clone(), line) {
            return Err(at_line(
                line,
                format!("session '{}' was already given on line {first}", s.id),
            ));
        }
        out.push(s);
    }
    Ok(out)
}

fn cadence_session(obj: &Obj, line: usize) -> Result<TraceSession, JsonError> {
    obj.only(&SESSION_KEYS)?;
    let id = obj
        .opt("session", id_of)?
        .unwrap_or_else(|| format!("line-{line}"));
    let at = obj.req("at_ms", millis)?;
    let calls = obj.req("calls", |f| f.arr())?;
    if calls.is_empty() {
        return Err(obj.error("calls", "empty: a session makes at least one call"));
    }
    let calls = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = Obj::at(obj.place.clone(), obj.path(&format!("calls[{i}]")), c)?;
            cadence_call(&c, i)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TraceSession { id, at, calls })
}

fn cadence_call(obj: &Obj, i: usize) -> Result<TraceCall, JsonError> {
    obj.only(&CALL_KEYS)?;
    let tokens = |k: &str| obj.req(k, |f| f.int(1..=MAX_TOKENS)).map(|n| n as u32);
    let input_tokens = tokens("input_tokens")?;
    let output_tokens = tokens("output_tokens")?;
    let reuse = match obj.get("reuse") {
        None if i == 0 => Reuse::Tokens(0),
        None => Reuse::Previous,
        Some(Value::String(s)) if s == "previous" => Reuse::Previous,
        Some(Value::Number(_)) => Reuse::Tokens(obj.req("reuse", |f| f.int(0..=MAX_TOKENS))?),
        Some(other) => {
            return Err(obj.error(
                "reuse",
                format!("expected \"previous\" or a number of tokens, got {other}"),
            ))
        }
    };
    if i == 0 && reuse != Reuse::Tokens(0) {
        return Err(obj.error(
            "reuse",
            "the first call has no earlier context to reuse (0 or none)",
        ));
    }
    if let Reuse::Tokens(n) = reuse {
        if n >= u64::from(input_tokens) {
            return Err(obj.error(
                "reuse",
                format!("{n} leaves no new tokens of the call's {input_tokens}"),
            ));
        }
    }
    Ok(TraceCall {
        input_tokens,
        output_tokens,
        reuse,
        tool_wait: obj.opt("tool_wait_ms", millis)?.unwrap_or(Duration::ZERO),
        at: obj.opt("at_ms", millis)?,
    })
}

// ---------------------------------------------------------------- Mooncake traces

/// Fields that name a call's session in Mooncake-style traces that record one.
const SESSION_FIELDS: [&str; 4] = ["session_id", "conversation_id", "chat_id", "session"];

/// One Mooncake line.
struct MoonCall {
    line: usize,
    at: Duration,
    input: u32,
    output: u32,
    hashes: Vec<u64>,
    session: Option<String>,
}

/// Mooncake-style JSON Lines, one call per line: `timestamp` (ms), `input_length`,
/// `output_length`, `hash_ids` (one id per `block_size` tokens of the prompt; equal
/// leading ids are a shared prefix). Calls are grouped into sessions by a
/// `session_id` (or `conversation_id`, `chat_id`, `session`) field when a line has
/// one; otherwise a call continues the session whose latest call's full blocks all
/// lead its own `hash_ids` (the longest such), and starts a session when none does.
/// A call that continues its session's previous call that way reuses the whole
/// previous context; one that shares fewer leading blocks with an earlier call of its
/// session reuses that many blocks' tokens; none, a fresh context. A session arrives
/// with its first call; later calls are sent at their recorded offsets from it, or as
/// soon as the previous reply ends when that is later (no tool wait is recorded).
pub fn parse_mooncake(text: &str, block_size: u32) -> Result<Vec<TraceSession>, AgentTraceError> {
    if block_size == 0 {
        return Err(AgentTraceError("the block size must be at least 1".into()));
    }
    let mut calls = Vec::new();
    for (line, t) in lines(text) {
        let v: Value =
            serde_json::from_str(t).map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
        calls.push(moon_call(&Obj::new(format!("line {line}"), &v)?, line)?);
    }
    calls.sort_by_key(|c| c.at); // stable
    let groups = if calls.iter().any(|c| c.session.is_some()) {
        group_by_field(calls)
    } else {
        group_by_prefix(calls, block_size)
    };
    Ok(groups
        .into_iter()
        .map(|g| moon_session(g, block_size))
        .collect())
}

fn moon_call(obj: &Obj, line: usize) -> Result<MoonCall, JsonError> {
    let tokens = |k: &str| obj.req(k, |f| f.int(1..=MAX_TOKENS)).map(|n| n as u32);
    let hashes = obj.opt("hash_ids", |f| f.each(|h| h.int(0..=u64::MAX)))?;
    let session = match SESSION_FIELDS.iter().find(|k| obj.has(k)) {
        Some(k) => Some(obj.req(k, id_of)?),
        None => None,
    };
    Ok(MoonCall {
        line,
        at: obj.req("timestamp", millis)?,
        input: tokens("input_length")?,
        output: tokens("output_length")?,
        hashes: hashes.unwrap_or_default(),
        session,
    })
}

/// Lines with the same session field, in arrival order; a line without one is a
/// session of its own.
fn group_by_field(calls: Vec<MoonCall>) -> Vec<Vec<MoonCall>> {
    let mut groups: Vec<Vec<MoonCall>> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for c in calls {
        let slot = match &c.session {
            Some(id) => *by_id.entry(id.clone()).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            }),
            None => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        groups[slot].push(c);
    }
    groups
}

/// The full blocks of a call's prompt: the last id of a prompt that does not end on
/// a block boundary hashes a partial block, which the next call fills differently.
fn full_blocks(c: &MoonCall, block_size: u32) -> usize {
    c.hashes.len().min((c.input / block_size) as usize)
}

fn group_by_prefix(calls: Vec<MoonCall>, block_size: u32) -> Vec<Vec<MoonCall>> {
    let mut groups: Vec<Vec<MoonCall>> = Vec::new();
    // (full blocks, last full block's id) of each session's latest call → session.
    let mut open: HashMap<(usize, u64), usize> = HashMap::new();
    for c in calls {
        let found = (1..=c.hashes.len()).rev().find_map(|l| {
            let g = *open.get(&(l, c.hashes[l - 1]))?;
            let last = groups[g].last()?;
            (last.hashes[..l] == c.hashes[..l]).then_some(g)
        });
        let g = match found {
            Some(g) => {
                let last = groups[g].last().expect("an open session has calls");
                let l = full_blocks(last, block_size);
                open.remove(&(l, last.hashes[l - 1]));
                g
            }
            None => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        let l = full_blocks(&c, block_size);
        if l > 0 {
            open.insert((l, c.hashes[l - 1]), g);
        }
        groups[g].push(c);
    }
    groups
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn moon_session(calls: Vec<MoonCall>, block_size: u32) -> TraceSession {
    let start = calls[0].at;
    let id = calls[0]
        .session
        .clone()
        .unwrap_or_else(|| format!("line-{}", calls[0].line));
    let mut out = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let reuse = if i == 0 {
            Reuse::Tokens(0)
        } else {
            let prev = &calls[i - 1];
            let full = full_blocks(prev, block_size);
            let shared_prev = common_prefix(&prev.hashes, &c.hashes);
            if full > 0 && shared_prev >= full {
                Reuse::Previous
            } else {
                // The most leading blocks shared with any earlier call (the last 64).
                let shared = calls[i.saturating_sub(64)..i]
                    .iter()
                    .map(|e| common_prefix(&e.hashes, &c.hashes))
                    .max()
                    .unwrap_or(0) as u64;
                Reuse::Tokens((shared * u64::from(block_size)).min(u64::from(c.input) - 1))
            }
        };
        out.push(TraceCall {
            input_tokens: c.input,
            output_tokens: c.output,
            reuse,
            tool_wait: Duration::ZERO,
            at: (i > 0).then(|| c.at - start),
        });
    }
    TraceSession {
        id,
        at: start,
        calls: out,
    }
}

// ---------------------------------------------------------------- OTLP span exports

const INPUT_ATTRS: [&str; 3] = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
];
const OUTPUT_ATTRS: [&str; 3] = [
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
];

/// One LLM span.
struct Span {
    trace: String,
    id: String,
    parent: String,
    start: u64,
    end: u64,
    input: Option<u32>,
    output: Option<u32>,
    /// Where it is, for errors: the document or line, and the span's path in it.
    place: String,
    path: String,
}

/// OTLP JSON span exports (a `{"resourceSpans": [...]}` document, a JSON array of
/// them, or one per line as the collector's file exporter writes). An LLM call is a
/// span with an input token count — `gen_ai.usage.input_tokens` (OpenTelemetry GenAI;
/// `gen_ai.usage.prompt_tokens` of older versions) or `llm.token_count.prompt`
/// (OpenInference) — and an output count (`gen_ai.usage.output_tokens`,
/// `gen_ai.usage.completion_tokens` or `llm.token_count.completion`); a counted span
/// that encloses another counted span (a framework's span around the client's) is
/// left out. Each trace is a session arriving at its first call's start; its calls in
/// start order; the tool wait before a call is the gap since the previous call's span
/// ended (zero when they overlap). A call reuses the previous context when its input
/// holds at least the previous prompt and reply, the previous prompt when it holds
/// only that, and starts afresh otherwise.
pub fn parse_otel(text: &str) -> Result<Vec<TraceSession>, AgentTraceError> {
    let mut spans = Vec::new();
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(docs)) => {
            for (i, d) in docs.iter().enumerate() {
                otel_doc(d, &format!("document {}", i + 1), &mut spans)?;
            }
        }
        Ok(doc) => otel_doc(&doc, "the export", &mut spans)?,
        Err(_) => {
            for (line, t) in lines(text) {
                let v: Value = serde_json::from_str(t)
                    .map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
                otel_doc(&v, &format!("line {line}"), &mut spans)?;
            }
        }
    }
    // A counted span with a counted descendant is a wrapper: the inner span is the call.
    let parents: HashMap<(&str, &str), &str> = spans
        .iter()
        .map(|s| ((s.trace.as_str(), s.id.as_str()), s.parent.as_str()))
        .collect();
    let mut wrappers: std::collections::HashSet<(&str, &str)> = Default::default();
    for s in spans.iter().filter(|s| s.input.is_some()) {
        let mut p = s.parent.as_str();
        let mut hops = 0;
        while !p.is_empty() && hops < 256 {
            wrappers.insert((s.trace.as_str(), p));
            p = parents.get(&(s.trace.as_str(), p)).copied().unwrap_or("");
            hops += 1;
        }
    }
    let mut by_trace: HashMap<&str, Vec<&Span>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for s in &spans {
        if s.input.is_none() || wrappers.contains(&(s.trace.as_str(), s.id.as_str())) {
            continue;
        }
        if s.output.is_none() {
            return Err(JsonError::new(
                &s.place,
                &s.path,
                format!(
                    "an input token count but no output count ({})",
                    OUTPUT_ATTRS.join(", ")
                ),
            )
            .into());
        }
        by_trace
            .entry(s.trace.as_str())
            .or_insert_with(|| {
                order.push(s.trace.as_str());
                Vec::new()
            })
            .push(s);
    }
    if order.is_empty() {
        return Err(AgentTraceError(format!(
            "no LLM spans with token counts ({} or {})",
            INPUT_ATTRS.join(", "),
            OUTPUT_ATTRS.join(", ")
        )));
    }
    let first = spans
        .iter()
        .filter(|s| s.input.is_some())
        .map(|s| s.start)
        .min()
        .unwrap_or(0);
    Ok(order
        .into_iter()
        .map(|t| {
            let mut calls = by_trace.remove(t).unwrap_or_default();
            calls.sort_by_key(|s| (s.start, s.end));
            otel_session(t, &calls, first)
        })
        .collect())
}

fn otel_session(trace: &str, spans: &[&Span], first: u64) -> TraceSession {
    let mut calls = Vec::with_capacity(spans.len());
    for (i, s) in spans.iter().enumerate() {
        let (input, output) = (s.input.unwrap_or(1), s.output.unwrap_or(1));
        let (reuse, tool_wait) = match i.checked_sub(1).map(|j| spans[j]) {
            None => (Reuse::Tokens(0), Duration::ZERO),
            Some(p) => {
                let (pi, po) = (
                    u64::from(p.input.unwrap_or(1)),
                    u64::from(p.output.unwrap_or(1)),
                );
                let reuse = if u64::from(input) > pi + po {
                    Reuse::Previous
                } else if u64::from(input) > pi {
                    Reuse::Tokens(pi)
                } else {
                    Reuse::Tokens(0)
                };
                (reuse, Duration::from_nanos(s.start.saturating_sub(p.end)))
            }
        };
        calls.push(TraceCall {
            input_tokens: input,
            output_tokens: output,
            reuse,
            tool_wait,
            at: None,
        });
    }
    TraceSession {
        id: trace.to_owned(),
        at: Duration::from_nanos(spans[0].start.saturating_sub(first)),
        calls,
    }
}

/// The array under `key` of `obj`, or none.
fn array<'a>(obj: &Obj<'a>, key: &str) -> Result<&'a [Value], JsonError> {
    Ok(obj.arr(key)?.unwrap_or(&[]))
}

fn otel_doc(doc: &Value, place: &str, out: &mut Vec<Span>) -> Result<(), JsonError> {
    let doc = Obj::new(place, doc)?;
    for (r, rs) in array(&doc, "resourceSpans")?.iter().enumerate() {
        let rs = Obj::at(place, format!("resourceSpans[{r}]"), rs)?;
        let mut scopes = array(&rs, "scopeSpans")?;
        if scopes.is_empty() {
            scopes = array(&rs, "instrumentationLibrarySpans")?;
        }
        for (s, ss) in scopes.iter().enumerate() {
            let ss = Obj::at(place, rs.path(&format!("scopeSpans[{s}]")), ss)?;
            for (k, span) in array(&ss, "spans")?.iter().enumerate() {
                out.push(otel_span(&Obj::at(
                    place,
                    ss.path(&format!("spans[{k}]")),
                    span,
                )?)?);
            }
        }
    }
    Ok(())
}

/// An OTLP `AnyValue` as a whole number (`intValue` is a string in OTLP JSON).
fn any_int(f: Field, key: &str) -> Result<u64, JsonError> {
    let v = f.value;
    let inner = v
        .get("intValue")
        .or_else(|| v.get("doubleValue"))
        .or_else(|| v.get("stringValue"))
        .unwrap_or(v);
    match inner {
        Value::String(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| f.error(format!("{key}: expected a whole number, got \"{s}\""))),
        other => Field { value: other, ..f }
            .int(0..=u64::MAX)
            .map_err(|e| f.error(format!("{key}: {}", e.what))),
    }
}

/// A time in nanoseconds, a whole number or a string of one (OTLP JSON's int64).
fn nanos(f: Field) -> Result<u64, JsonError> {
    match f.value {
        Value::String(s) => s.trim().parse::<u64>().map_err(|_| {
            f.error(format!(
                "expected a whole number of nanoseconds, got \"{s}\""
            ))
        }),
        _ => f.int(0..=u64::MAX),
    }
}

/// A span's token count attribute, kept when it is the first of its kind.
fn count(slot: &mut Option<u32>, f: Field, key: &str) -> Result<(), JsonError> {
    let n = any_int(f, key)?;
    if n > MAX_TOKENS {
        return Err(f.error(format!("{key}: {n} is too large (at most {MAX_TOKENS})")));
    }
    if slot.is_none() {
        *slot = Some(n as u32);
    }
    Ok(())
}

fn otel_span(span: &Obj) -> Result<Span, JsonError> {
    let mut input = None;
    let mut output = None;
    for (i, a) in array(span, "attributes")?.iter().enumerate() {
        let Some(key) = a.get("key").and_then(Value::as_str) else {
            continue;
        };
        let path = span.path(&format!("attributes[{i}].value"));
        let f = Field {
            place: &span.place,
            path: &path,
            value: a.get("value").unwrap_or(&Value::Null),
        };
        if INPUT_ATTRS.contains(&key) {
            count(&mut input, f, key)?;
        } else if OUTPUT_ATTRS.contains(&key) {
            count(&mut output, f, key)?;
        }
    }
    if input == Some(0) {
        return Err(span.error_here("an LLM span with 0 input tokens"));
    }
    if output == Some(0) {
        // A call that produced nothing still asks for one token.
        output = Some(1);
    }
    let trace = span.str("traceId")?.unwrap_or("").to_owned();
    if input.is_some() && trace.is_empty() {
        return Err(span.error_here("an LLM span without a traceId"));
    }
    let (start, end) = if input.is_some() {
        let start = span.req("startTimeUnixNano", nanos)?;
        let end = span.req("endTimeUnixNano", nanos)?;
        if end < start {
            return Err(span.error(
                "endTimeUnixNano",
                format!("{end} is before startTimeUnixNano {start}"),
            ));
        }
        (start, end)
    } else {
        (0, 0)
    };
    Ok(Span {
        trace,
        id: span.str("spanId")?.unwrap_or("").to_owned(),
        parent: span.str("parentSpanId")?.unwrap_or("").to_owned(),
        start,
        end,
        input,
        output,
        place: span.place.clone(),
        path: span.path.clone(),
    })
}

// ---------------------------------------------------------------- the replay

/// What a replay run shares: the sessions, the tools every call declares and the
/// text the new parts are cut from.
#[derive(Debug)]
pub struct Replay {
    pub sessions: Vec<TraceSession>,
    /// The tools (declared on every call; `tool_choice` left to the model) and the
    /// generator of exact-length text (`results`).
    pub agent: AgentSpec,
}

impl Replay {
    /// The session dispatch `k` replays.
    pub fn session(&self, k: u64) -> Option<&TraceSession> {
        (!self.sessions.is_empty())
            .then(|| &self.sessions[(k % self.sessions.len() as u64) as usize])
    }

    /// Calls in session `k`.
    pub fn calls(&self, k: u64) -> usize {
        self.session(k).map_or(1, |s| s.calls.len().max(1))
    }
}

/// What a stretch of the transcript is.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// A user message the replay wrote (its text is in `items[item]["content"]`).
    User { item: usize },
    /// The server's reply, with its tool calls.
    Reply { calls: Vec<ToolCall> },
    /// The results answering a reply's calls.
    Results,
}

/// A stretch of the transcript and where it ends.
#[derive(Debug, Clone)]
struct Seg {
    part: Part,
    items: usize,
    parts: usize,
    /// Context tokens up to the end of this stretch.
    tokens: u64,
}

/// One replayed session's context: the transcript sent, cut and grown call by call,
/// with the token count of each stretch.
#[derive(Debug)]
pub struct ReplayState {
    api: Api,
    transcript: Option<Transcript>,
    segs: Vec<Seg>,
}

impl ReplayState {
    pub fn new(api: Api) -> ReplayState {
        ReplayState {
            api,
            transcript: None,
            segs: Vec::new(),
        }
    }

    /// The context's tokens so far.
    pub fn tokens(&self) -> u64 {
        self.segs.last().map_or(0, |s| s.tokens)
    }

    /// The transcript the next call sends (after [`ReplayState::prepare`]).
    pub fn transcript(&self) -> &Transcript {
        self.transcript
            .as_ref()
            .expect("prepare() makes the transcript")
    }

    /// Makes `call`'s prompt: the context cut to the call's reuse, then new text of
    /// the tokens left (at least one). Returns the tokens reused.
    pub fn prepare(&mut self, call: &TraceCall, gen: &PromptGen, rng: &mut impl Rng) -> u64 {
        let input = u64::from(call.input_tokens);
        let mut cut_user = None;
        let kept = match call.reuse {
            _ if self.transcript.is_none() => 0,
            Reuse::Tokens(0) => 0,
            Reuse::Previous => self.tokens(),
            Reuse::Tokens(n) if n >= self.tokens() => self.tokens(),
            Reuse::Tokens(n) => {
                let (kept, cut) = self.cut(n, gen);
                cut_user = cut;
                kept
            }
        };
        if kept == 0 && cut_user.is_none() {
            self.transcript = None;
            self.segs.clear();
        }
        let new = input.saturating_sub(kept).max(1);
        let last_calls = match self.segs.last() {
            Some(Seg {
                part: Part::Reply { calls },
                ..
            }) if !calls.is_empty() && cut_user.is_none() => Some(calls.clone()),
            _ => None,
        };
        match (&mut self.transcript, last_calls, cut_user) {
            (None, _, _) => {
                let text = make_text(gen, new as usize, rng, false);
                self.transcript = Some(Transcript::new(self.api, &[], text));
                self.push_seg(Part::User { item: 0 }, new);
            }
            (Some(t), _, Some(item)) => {
                // The cut message goes on with the new text, as one message.
                let more = make_text(gen, new as usize, rng, true);
                if let Some(Value::String(s)) = t.items[item].get_mut("content") {
                    s.push_str(&more);
                    if let Some(p) = t.parts.last_mut() {
                        p.push_str(&more);
                    }
                }
                let seg = self.segs.last_mut().expect("the cut message's stretch");
                seg.tokens += new;
            }
            (Some(t), Some(calls), None) => {
                let k = calls.len() as u64;
                let results: Vec<String> = (0..k)
                    .map(|i| {
                        let n = new / k + u64::from(i < new % k);
                        make_text(gen, n as usize, rng, false)
                    })
                    .collect();
                t.push_results(&calls, &results);
                self.push_seg(Part::Results, new);
            }
            (Some(t), None, None) => {
                let item = t.items.len();
                t.push_user(&make_text(gen, new as usize, rng, false));
                self.push_seg(Part::User { item }, new);
            }
        }
        kept
    }

    /// The reply the server gave (`tokens` long, as it counted them), appended.
    pub fn push_reply(&mut self, text: &str, calls: &[ToolCall], tokens: u64) {
        if let Some(t) = &mut self.transcript {
            t.push_reply(text, calls);
            self.push_seg(
                Part::Reply {
                    calls: calls.to_vec(),
                },
                tokens,
            );
        }
    }

    fn push_seg(&mut self, part: Part, tokens: u64) {
        let t = self.transcript.as_ref().expect("a transcript to record");
        let seg = Seg {
            part,
            items: t.items.len(),
            parts: t.parts.len(),
            tokens: self.tokens() + tokens,
        };
        self.segs.push(seg);
    }

    /// Cuts the context to at most `n` tokens: whole stretches that fit, and when the
    /// next one is a user message, its first words up to `n` (the new text then goes
    /// on in that message). Returns the tokens kept and the cut message's item.
    fn cut(&mut self, n: u64, gen: &PromptGen) -> (u64, Option<usize>) {
        let whole = self.segs.iter().take_while(|s| s.tokens <= n).count();
        let before = if whole == 0 {
            0
        } else {
            self.segs[whole - 1].tokens
        };
        let next = self.segs.get(whole).cloned();
        let t = self.transcript.as_mut().expect("a context to cut");
        let (items, parts) = match whole {
            0 => (0, 0),
            w => (self.segs[w - 1].items, self.segs[w - 1].parts),
        };
        let mut cut = None;
        let mut kept = before;
        if let Some(Seg {
            part: Part::User { item },
            ..
        }) = next
        {
            let left = n - before;
            if left > 0 && item == items {
                if let Some(text) = t.items[item].get("content").and_then(Value::as_str) {
                    let head = head_within(text, left, gen);
                    let counted = gen.counter().count(&head) as u64;
                    if counted > 0 {
                        t.items.truncate(item + 1);
                        t.items[item]["content"] = Value::String(head.clone());
                        t.parts.truncate(parts + 1);
                        if let Some(p) = t.parts.last_mut() {
                            *p = head;
                        }
                        self.segs.truncate(whole);
                        self.segs.push(Seg {
                            part: Part::User { item },
                            items: item + 1,
                            parts: parts + 1,
                            tokens: before + counted,
                        });
                        kept += counted;
                        cut = Some(item);
                    }
                }
            }
        }
        if cut.is_none() {
            t.items.truncate(items);
            t.parts.truncate(parts);
            self.segs.truncate(whole);
        }
        (kept, cut)
    }
}

/// The most leading words of `text` that `gen`'s counter counts as at most `n` tokens
/// (found by bisection: a word is one token or more).
fn head_within(text: &str, n: u64, gen: &PromptGen) -> String {
    let fits = |m: usize| gen.counter().count(&first_words(text, m)) as u64 <= n;
    let (mut lo, mut hi) = (0usize, n as usize);
    if fits(hi) {
        return first_words(text, hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    first_words(text, lo)
}

/// The text up to the end of its `n`th whitespace-separated word.
fn first_words(text: &str, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    let mut seen = 0;
    let mut in_word = false;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            if in_word {
                seen += 1;
                if seen == n {
                    return text[..i].to_owned();
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    text.to_owned()
}

fn make_text(gen: &PromptGen, n: usize, rng: &mut impl Rng, continuation: bool) -> String {
    if n == 0 {
        return String::new();
    }
    gen.prompt(n, rng, continuation)
}

/// The tokens of a reply when the server did not count them: its text and its calls'
/// arguments, as `gen`'s counter counts them.
pub fn reply_tokens(gen: &PromptGen, text: &str, calls: &[ToolCall]) -> u64 {
    let c = gen.counter();
    (c.count(text) + calls.iter().map(|k| c.count(&k.arguments)).sum::<usize>()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompts::Counter;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    fn call(input: u32, output: u32, reuse: Reuse, wait_ms: u32) -> TraceCall {
        TraceCall {
            input_tokens: input,
            output_tokens: output,
            reuse,
            tool_wait: MS * wait_ms,
            at: None,
        }
    }

    #[track_caller]
    fn fails(text: &str, format: Format, contains: &str) {
        match parse(text, Some(format), DEFAULT_BLOCK_SIZE) {
            Err(e) => assert!(e.0.contains(contains), "{:?} lacks {contains:?}", e.0),
            Ok(s) => panic!("expected an error containing {contains:?}, got {s:?}"),
        }
    }

    #[test]
    fn cadence_sessions_parse_with_their_defaults() {
        let text = r#"# two sessions, the second first
{"session": "b", "at_ms": 1500, "calls": [{"input_tokens": 10, "output_tokens": 2}]}
{"session": 7, "at_ms": 1000.5, "calls": [{"input_tokens": 100, "output_tokens": 20},
   {"input_tokens": 150, "output_tokens": 5, "tool_wait_ms": 250}, {"input_tokens": 90, "output_tokens": 5, "reuse": 40}, {"input_tokens": 30, "output_tokens": 1, "reuse": 0}, {"input_tokens": 200, "output_tokens": 3, "reuse": "previous", "at_ms": 900}]}
"#;
        // The second session spans two lines: not JSON Lines.
        fails(text, Format::Cadence, "line 3: not valid JSON");
        let text = text.replace(",\n   {", ", {");
        let s = parse(&text, None, DEFAULT_BLOCK_SIZE).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id.as_str(), s[0].at), ("7", Duration::ZERO));
        assert_eq!(
            (s[1].id.as_str(), s[1].at),
            ("b", Duration::from_micros(499_500))
        );
        assert_eq!(
            s[0].calls[..4],
            [
                call(100, 20, Reuse::Tokens(0), 0),
                call(150, 5, Reuse::Previous, 250),
                call(90, 5, Reuse::Tokens(40), 0),
                call(30, 1, Reuse::Tokens(0), 0),
            ]
        );
        assert_eq!(s[0].calls[4].at, Some(MS * 900));
    }

    #[test]
    fn cadence_errors_name_the_line_the_call_and_the_field() {
        let ok =
            r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#;
        let cases = [
            (r#"{"at_ms": 0}"#, "field `calls`: missing"),
            (r#"{"session": "x", "calls": []}"#, "field `at_ms`: missing"),
            (
                r#"{"session": "x", "at_ms": 0, "calls": []}"#,
                "field `calls`: empty: a session makes at least one call",
            ),
            (
                r#"{"session": "x", "at_ms": -1, "calls": [{}]}"#,
                "field `at_ms`: expected a number >= 0, got -1",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: missing",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 0, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: expected at least 1, got 0",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 2.5, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: expected a whole number >= 1, got 2.5",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 9999999999, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: 9999999999 is too large (at most 16777216)",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1, "reuse": "previous"}]}"#,
                "field `calls[0].reuse`: the first call has no earlier context",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}, {"input_tokens": 5, "output_tokens": 1, "reuse": 5}]}"#,
                "field `calls[1].reuse`: 5 leaves no new tokens",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}, {"input_tokens": 5, "output_tokens": 1, "reuse": "all"}]}"#,
                "field `calls[1].reuse`: expected \"previous\" or a number",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_token": 1}]}"#,
                "field `calls[0].output_token`: unknown (expected input_tokens",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1, "tool_wait_ms": "1s"}]}"#,
                "field `calls[0].tool_wait_ms`: expected a number, got a string",
            ),
            (
                r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#,
                "session 'a' was already given on line 1",
            ),
            (r#"[1]"#, "expected an object, got an array"),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}"#,
                "not valid JSON",
            ),
        ];
        for (bad, what) in cases {
            fails(
                &format!("{ok}\n\n{bad}\n"),
                Format::Cadence,
                &format!("line 3: {what}"),
            );
        }
        fails("", Format::Cadence, "no sessions");
        assert!(detect("# nothing\n").unwrap_err().0.contains("empty"));
        assert!(detect("{\"x\": 1}")
            .unwrap_err()
            .0
            .contains("cannot tell the format"));
    }

    #[test]
    fn mooncake_calls_chain_into_sessions_by_their_full_blocks() {
        // Block size 4. Session A: 10 tokens (2 full blocks [1,2], partial [3]), then
        // a call holding those two blocks and more: a continuation. B shares only the
        // first block (a common system prompt) with A: its own session. C shares A's
        // first call's full blocks but A moved on: it continues from A's latest call
        // only if that call's full blocks lead it, which they do not.
        let text = r#"{"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [1, 2, 3]}
{"timestamp": 1000, "input_length": 9, "output_length": 2, "hash_ids": [1, 9, 10]}
{"timestamp": 1400, "input_length": 17, "output_length": 4, "hash_ids": [1, 2, 4, 5, 6]}
{"timestamp": 1500, "input_length": 12, "output_length": 4, "hash_ids": [1, 9, 11]}
{"timestamp": 2000, "input_length": 30, "output_length": 5, "hash_ids": [1, 2, 4, 5, 7, 8, 12, 13]}
{"timestamp": 2100, "input_length": 6, "output_length": 1, "hash_ids": [1, 2]}
"#;
        let s = parse(text, None, 4).unwrap();
        let shape: Vec<(&str, Vec<u32>)> = s
            .iter()
            .map(|s| {
                (
                    s.id.as_str(),
                    s.calls.iter().map(|c| c.input_tokens).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("line-1", vec![10, 17, 30]),
                ("line-2", vec![9, 12]),
                ("line-6", vec![6]),
            ]
        );
        let a = &s[0].calls;
        assert_eq!(a[0].reuse, Reuse::Tokens(0));
        assert_eq!((a[1].reuse, a[1].at), (Reuse::Previous, Some(MS * 400)));
        assert_eq!((a[2].reuse, a[2].at), (Reuse::Previous, Some(MS * 1000)));
        assert_eq!(
            s[1].calls[1].reuse,
            Reuse::Previous,
            "[1, 9] are 9's full blocks"
        );
        assert_eq!(s[2].at, MS * 1100);
    }

    #[test]
    fn mooncake_session_fields_group_and_partial_prefixes_reuse_blocks() {
        let text = r#"{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 3], "session_id": "s"}
{"timestamp": 0, "input_length": 50, "output_length": 3, "hash_ids": [40]}
{"timestamp": 30, "input_length": 700, "output_length": 3, "hash_ids": [1, 20], "session_id": "s"}
{"timestamp": 60, "input_length": 300, "output_length": 3, "hash_ids": [30], "session_id": "s"}
"#;
        let s = parse(text, Some(Format::Mooncake), 512).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].id, "s");
        let reuse: Vec<Reuse> = s[0].calls.iter().map(|c| c.reuse).collect();
        assert_eq!(
            reuse,
            [Reuse::Tokens(0), Reuse::Tokens(512), Reuse::Tokens(0)]
        );
        assert_eq!(s[1].id, "line-2");
        let bad = [
            (
                r#"{"input_length": 5, "output_length": 1}"#,
                "field `timestamp`: missing",
            ),
            (
                r#"{"timestamp": 0, "output_length": 1}"#,
                "field `input_length`: missing",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 0}"#,
                "field `output_length`: expected at least 1, got 0",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 3}"#,
                "field `hash_ids`: expected an array, got a number",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, -2]}"#,
                "field `hash_ids[1]`: expected a whole number >= 0, got -2",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "session_id": []}"#,
                "field `session_id`: expected a non-empty string or a number, got an array",
            ),
            (
                r#"{"timestamp": 1e300, "input_length": 5, "output_length": 1}"#,
                "field `timestamp`: 1e+300 is too large",
            ),
        ];
        for (b, what) in bad {
            fails(
                &format!("{b}\n"),
                Format::Mooncake,
                &format!("line 1: {what}"),
            );
        }
    }

    fn span(
        trace: &str,
        id: &str,
        parent: &str,
        start_ms: u64,
        end_ms: u64,
        counts: Option<(&str, u32, &str, u32)>,
    ) -> Value {
        let mut attrs = vec![
            serde_json::json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}),
        ];
        if let Some((ik, i, ok, o)) = counts {
            attrs.push(serde_json::json!({"key": ik, "value": {"intValue": i.to_string()}}));
            attrs.push(serde_json::json!({"key": ok, "value": {"intValue": o}}));
        }
        serde_json::json!({
            "traceId": trace, "spanId": id, "parentSpanId": parent, "name": "chat",
            "startTimeUnixNano": (1_700_000_000_000u64 + start_ms) * 1_000_000,
            "endTimeUnixNano": ((1_700_000_000_000u64 + end_ms) * 1_000_000).to_string(),
            "attributes": attrs,
        })
    }

    #[test]
    fn otel_traces_are_sessions_of_their_innermost_llm_spans() {
        let g = |i, o| {
            Some((
                "gen_ai.usage.input_tokens",
                i,
                "gen_ai.usage.output_tokens",
                o,
            ))
        };
        let oi = |i, o| Some(("llm.token_count.prompt", i, "llm.token_count.completion", o));
        let spans = [
            span("t1", "root", "", 0, 900, None),
            span("t1", "s1", "root", 10, 110, g(100, 20)),
            // A framework span around the client's: only the inner one is a call.
            span("t1", "wrap", "root", 150, 300, g(130, 10)),
            span("t1", "s2", "wrap", 160, 290, g(130, 10)),
            span("t1", "s3", "root", 400, 500, g(60, 5)),
            span("t2", "x1", "", 50, 80, oi(40, 4)),
            span("t2", "x2", "", 70, 120, oi(42, 4)),
        ];
        let doc = serde_json::json!({"resourceSpans": [{"resource": {}, "scopeSpans": [
            {"scope": {"name": "a"}, "spans": spans[..4]},
            {"scope": {"name": "b"}, "spans": spans[4..]},
        ]}]});
        let text = doc.to_string();
        let s = parse(&text, None, DEFAULT_BLOCK_SIZE).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id.as_str(), s[0].at), ("t1", Duration::ZERO));
        assert_eq!(
            s[0].calls,
            [
                call(100, 20, Reuse::Tokens(0), 0),
                call(130, 10, Reuse::Previous, 50),
                call(60, 5, Reuse::Tokens(0), 110),
            ]
        );
        assert_eq!((s[1].id.as_str(), s[1].at), ("t2", MS * 40));
        // Overlapping calls wait nothing; 42 holds the 40-token prompt, not its reply.
        assert_eq!(s[1].calls[1], call(42, 4, Reuse::Tokens(40), 0));
        // One document per line, as the collector's file exporter writes.
        let lines = format!("{}\n{}\n", doc, serde_json::json!({"resourceSpans": []}));
        assert_eq!(parse(&lines, None, DEFAULT_BLOCK_SIZE).unwrap(), s);
    }

    #[test]
    fn otel_errors_say_which_span() {
        let g = Some(("gen_ai.usage.input_tokens", 5, "other", 1));
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [span("t", "a", "", 0, 1, g)]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "the export: field `resourceSpans[0].scopeSpans[0].spans[0]`: an input token count but no output count",
        );
        let mut sp = span(
            "t",
            "a",
            "",
            5,
            1,
            Some(("llm.token_count.prompt", 5, "llm.token_count.completion", 1)),
        );
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [sp.clone()]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "field `resourceSpans[0].scopeSpans[0].spans[0].endTimeUnixNano`: 1700000000001000000 is before",
        );
        sp["startTimeUnixNano"] = "soon".into();
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [sp]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "spans[0].startTimeUnixNano`: expected a whole number of nanoseconds, got \"soon\"",
        );
        fails(
            r#"{"resourceSpans": [{"scopeSpans": 3}]}"#,
            Format::Otel,
            "the export: field `resourceSpans[0].scopeSpans`: expected an array, got a number",
        );
        fails(
            r#"{"resourceSpans": []}"#,
            Format::Otel,
            "no LLM spans with token counts",
        );
        fails(
            "{\"resourceSpans\": []}\n{\"resourceSpans\": [\n",
            Format::Otel,
            "line 2: not valid JSON",
        );
    }

    #[test]
    fn hostile_input_is_an_error_never_a_panic() {
        let pieces = [
            r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#,
            r#"{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}"#,
            r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": [{"key": "llm.token_count.prompt", "value": {"intValue": "3"}}, {"key": "llm.token_count.completion", "value": {"intValue": "1"}}]}]}]}]}"#,
        ];
        for p in pieces {
            assert!(parse(p, None, 512).is_ok(), "{p}");
            for cut in 0..p.len() {
                for format in [
                    None,
                    Some(Format::Cadence),
                    Some(Format::Mooncake),
                    Some(Format::Otel),
                ] {
                    let _ = parse(&p[..cut], format, 512);
                }
            }
        }
        let _ = parse("\u{feff}{\"calls\": [null]}", None, 512);
        let _ = parse(
            r#"{"timestamp": 0, "input_length": 5, "output_length": 1}"#,
            None,
            0,
        );
    }

    #[test]
    fn retime_scales_then_caps_every_gap() {
        let mut s = vec![
            TraceSession {
                id: "a".into(),
                at: Duration::ZERO,
                calls: vec![
                    call(5, 1, Reuse::Tokens(0), 0),
                    call(9, 1, Reuse::Previous, 400),
                ],
            },
            TraceSession {
                id: "b".into(),
                at: Duration::from_secs(3600),
                calls: vec![
                    call(5, 1, Reuse::Tokens(0), 0),
                    TraceCall {
                        at: Some(MS * 200),
                        ..call(9, 1, Reuse::Previous, 0)
                    },
                    TraceCall {
                        at: Some(MS * 9200),
                        ..call(20, 1, Reuse::Previous, 0)
                    },
                ],
            },
            TraceSession {
                id: "c".into(),
                at: Duration::from_secs(3601),
                calls: vec![call(5, 1, Reuse::Tokens(0), 0)],
            },
        ];
        retime(&mut s, 2.0, Duration::from_secs(1));
        assert_eq!(s[0].calls[1].tool_wait, MS * 200);
        assert_eq!(s[1].at, Duration::from_secs(1), "an hour's gap cut to 1 s");
        assert_eq!(s[2].at, MS * 1500, "the next second, halved");
        assert_eq!(s[1].calls[1].at, Some(MS * 100));
        assert_eq!(
            s[1].calls[2].at,
            Some(MS * 1100),
            "a 9 s gap, halved and cut to 1 s"
        );
    }

    fn replay_session(
        api: Api,
        calls: &[TraceCall],
        replies: &[(u64, usize)],
    ) -> Vec<(u64, Transcript)> {
        let gen = PromptGen::builtin(Counter::Words).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut st = ReplayState::new(api);
        let mut out = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            let kept = st.prepare(c, &gen, &mut rng);
            let t = st.transcript().clone();
            assert_eq!(
                st.tokens(),
                u64::from(c.input_tokens),
                "call {i} sends its input"
            );
            let words: usize = t.parts.iter().map(|p| p.split_whitespace().count()).sum();
            assert_eq!(words as u64, u64::from(c.input_tokens), "call {i}'s text");
            out.push((kept, t));
            let (tokens, ncalls) = replies[i];
            let calls: Vec<ToolCall> = (0..ncalls)
                .map(|k| ToolCall {
                    id: format!("c{i}_{k}"),
                    name: "read_file".into(),
                    arguments: String::new(),
                })
                .collect();
            let text = vec!["w"; tokens as usize].join(" ");
            st.push_reply(&text, &calls, tokens);
        }
        out
    }

    #[test]
    fn prompts_are_the_reused_context_and_exactly_the_new_tokens() {
        let calls = [
            call(50, 5, Reuse::Tokens(0), 0),
            call(80, 5, Reuse::Previous, 0), // 50 + 5 reply + 25 results (2 calls)
            call(100, 5, Reuse::Previous, 0), // 80 + 5 + 15 user
            call(70, 5, Reuse::Tokens(30), 0), // the first message cut to 30 words + 40
            call(20, 5, Reuse::Tokens(0), 0),
        ];
        for api in [Api::Chat, Api::Responses, Api::Anthropic] {
            let out = replay_session(api, &calls, &[(5, 2), (5, 0), (5, 1), (5, 0), (5, 0)]);
            let kept: Vec<u64> = out.iter().map(|(k, _)| *k).collect();
            assert_eq!(kept, [0, 55, 85, 30, 0], "{api:?}");
            let t1 = &out[1].1;
            let results: Vec<&str> = t1.parts[4..].iter().map(String::as_str).collect();
            let lens: Vec<usize> = results
                .iter()
                .map(|r| r.split_whitespace().count())
                .collect();
            assert_eq!(lens, [13, 12], "{api:?}: 25 new tokens over two results");
            // The cut call starts with the first call's first 30 words, in one message.
            let first = &out[0].1.parts[0];
            let cut = &out[3].1.parts[0];
            let head: Vec<&str> = first.split_whitespace().take(30).collect();
            assert_eq!(cut.split_whitespace().take(30).collect::<Vec<_>>(), head);
            assert_eq!(out[3].1.items.len(), 1, "{api:?}");
            assert_eq!(out[4].1.items.len(), 1);
        }
        // Chat: the results answer the reply's call ids; the next turn is a user message.
        let out = replay_session(Api::Chat, &calls[..3], &[(5, 2), (5, 0), (5, 0)]);
        let items = &out[2].1.items;
        assert_eq!(items[2]["tool_call_id"], "c0_0");
        assert_eq!(items[3]["tool_call_id"], "c0_1");
        assert_eq!(items[4]["role"], "assistant");
        assert_eq!(items[5]["role"], "user");
    }

    #[test]
    fn with_a_tokenizer_every_prompt_has_exactly_the_recorded_tokens() {
        let tk = crate::tokenizer::train_bpe(crate::prompts::CORPUS, 600).unwrap();
        let gen = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
        assert!(gen.splits_at_spaces());
        let calls = [
            call(120, 9, Reuse::Tokens(0), 0),
            call(200, 9, Reuse::Previous, 0),
            call(260, 9, Reuse::Previous, 0),
            call(150, 9, Reuse::Tokens(77), 0),
            call(90, 9, Reuse::Tokens(0), 0),
            call(400, 9, Reuse::Tokens(300), 0),
        ];
        let mut rng = SmallRng::seed_from_u64(7);
        let mut st = ReplayState::new(Api::Chat);
        for (i, c) in calls.iter().enumerate() {
            let context = st.tokens();
            let kept = st.prepare(c, &gen, &mut rng);
            let sent: usize = st.transcript().parts.iter().map(|p| tk.count(p)).sum();
            assert_eq!(sent, c.input_tokens as usize, "call {i}");
            if let Reuse::Tokens(n) = c.reuse {
                // A cut keeps whole words: at most the reuse, and nearly all of it.
                let n = n.min(context);
                assert!(
                    kept <= n && kept * 10 >= n * 9,
                    "call {i}: kept {kept} of {n}"
                );
            }
            // The live reply, as long as the tokenizer counts it; every other one calls
            // a tool (its arguments are counted too).
            let reply = gen.prompt(9, &mut rng, false);
            let calls: Vec<ToolCall> = (0..i % 2)
                .map(|k| ToolCall {
                    id: format!("c{i}_{k}"),
                    name: "f".into(),
                    arguments: r#"{"path": "src/lib.rs"}"#.into(),
                })
                .collect();
            st.push_reply(&reply, &calls, reply_tokens(&gen, &reply, &calls));
        }
    }

    #[test]
    fn a_longer_live_reply_than_recorded_still_sends_new_text() {
        let calls = [
            call(10, 5, Reuse::Tokens(0), 0),
            call(20, 5, Reuse::Previous, 0),
        ];
        let gen = PromptGen::builtin(Counter::Words).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut st = ReplayState::new(Api::Chat);
        st.prepare(&calls[0], &gen, &mut rng);
        st.push_reply(&vec!["w"; 30].join(" "), &[], 30);
        assert_eq!(st.prepare(&calls[1], &gen, &mut rng), 40);
        assert_eq!(st.tokens(), 41, "the context, and one new token");
    }
}
