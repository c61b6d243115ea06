//! The first reading of the dialects beyond chat and completions, through a
//! `serde_json::Value`, kept for tests only: the typed structs in `typed` must read
//! every event as this did (`typed_structs_read_every_event_as_the_value_reading_did`).

use super::{Api, ParsedChunk, StreamEvent, Usage};
use cadence_base::ServerTiming;
use serde_json::Value;
use std::borrow::Cow;

/// Parse one event's data (already trimmed, starting with `{`) for a dialect other
/// than chat or completions.
pub(super) fn parse(api: Api, data: &str) -> StreamEvent<'static> {
    let v: Value = match serde_json::from_str(data) {
        Ok(v @ Value::Object(_)) => v,
        _ => return StreamEvent::Malformed,
    };
    let mut event = match api {
        Api::Responses | Api::Websocket => responses(&v, data),
        Api::Anthropic => anthropic(&v, data),
        Api::Ollama => ollama(&v, data),
        Api::Generate => generate(&v, data),
        Api::Kserve => kserve(&v, data),
        Api::Llamacpp => llamacpp(&v, data),
        Api::Chat | Api::Completions => StreamEvent::Malformed,
    };
    // llama.cpp adds its `timings` to the last event of every dialect it serves.
    if let StreamEvent::Chunk(c) = &mut event {
        if c.server_timing.is_none() && v.get("timings").is_some_and(Value::is_object) {
            c.server_timing = llamacpp_timings(&v).map(Box::new);
        }
    }
    event
}

/// llama.cpp's `timings` object (ms) as the server's own timing.
fn llamacpp_timings(v: &Value) -> Option<ServerTiming> {
    let timing = ServerTiming {
        prompt_ns: ms_as_ns(v, "/timings/prompt_ms"),
        decode_ns: ms_as_ns(v, "/timings/predicted_ms"),
        decode_tokens: uint(v, "/timings/predicted_n"),
        ..ServerTiming::default()
    };
    (timing != ServerTiming::default()).then_some(timing)
}

/// A non-empty string at `ptr` (a JSON pointer), owned.
fn text(v: &Value, ptr: &str) -> Option<Cow<'static, str>> {
    match v.pointer(ptr) {
        Some(Value::String(s)) if !s.is_empty() => Some(Cow::Owned(s.clone())),
        _ => None,
    }
}

fn uint(v: &Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(Value::as_u64)
}

/// Milliseconds (possibly fractional) at `ptr`, as ns.
fn ms_as_ns(v: &Value, ptr: &str) -> Option<u64> {
    let ms = v.pointer(ptr).and_then(Value::as_f64)?;
    (ms.is_finite() && (0.0..=86_400_000.0).contains(&ms)).then(|| (ms * 1e6).round() as u64)
}

fn usage(prompt: Option<u64>, completion: Option<u64>) -> Option<Usage> {
    Usage::of(prompt, completion)
}

/// A top-level `error` (a string, or an object with a `message`, else a `type`): the
/// error event.
fn top_error(v: &Value, data: &str) -> Option<StreamEvent<'static>> {
    match v.get("error")? {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if !s.is_empty() => Some(error(s.clone())),
        e => Some(error(
            e.get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .or_else(|| e.get("type").and_then(Value::as_str))
                .filter(|m| !m.is_empty())
                .unwrap_or(data)
                .to_owned(),
        )),
    }
}

fn error(message: String) -> StreamEvent<'static> {
    StreamEvent::Error {
        message: Cow::Owned(message),
    }
}

fn chunk(c: ParsedChunk<'static>) -> StreamEvent<'static> {
    StreamEvent::Chunk(c)
}

/// OpenAI Responses (and the Realtime events, which share its naming): the event's
/// `type` says what it carries.
fn responses(v: &Value, data: &str) -> StreamEvent<'static> {
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return top_error(v, data).unwrap_or(StreamEvent::Malformed);
    };
    let mut c = ParsedChunk::default();
    match kind {
        "response.output_text.delta" | "response.text.delta" | "response.refusal.delta" => {
            c.content = text(v, "/delta");
        }
        "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.reasoning.delta" => c.reasoning = text(v, "/delta"),
        "response.function_call_arguments.delta" => c.tool_call = text(v, "/delta"),
        "response.output_item.added"
            if v.pointer("/item/type").and_then(Value::as_str) == Some("function_call") =>
        {
            c.tool_call = text(v, "/item/name");
        }
        "response.completed" | "response.done" | "response.incomplete" => {
            c.usage = usage(
                uint(v, "/response/usage/input_tokens"),
                uint(v, "/response/usage/output_tokens"),
            );
            c.finish_reason = text(v, "/response/incomplete_details/reason")
                .or_else(|| text(v, "/response/status"))
                .or(Some(Cow::Borrowed("completed")));
            c.end = true;
        }
        "response.failed" => {
            return error(
                text(v, "/response/error/message").map_or_else(|| data.to_owned(), Cow::into_owned),
            )
        }
        "error" => {
            return error(
                text(v, "/message")
                    .or_else(|| text(v, "/error/message"))
                    .map_or_else(|| data.to_owned(), Cow::into_owned),
            )
        }
        _ => {}
    }
    chunk(c)
}

/// Anthropic Messages: deltas in `content_block_delta`, usage in `message_start`
/// (input) and `message_delta` (output, a running total), `message_stop` last.
fn anthropic(v: &Value, data: &str) -> StreamEvent<'static> {
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return top_error(v, data).unwrap_or(StreamEvent::Malformed);
    };
    let mut c = ParsedChunk::default();
    match kind {
        "message_start" => {
            c.usage = usage(uint(v, "/message/usage/input_tokens"), None);
        }
        "content_block_start"
            if v.pointer("/content_block/type").and_then(Value::as_str) == Some("tool_use") =>
        {
            c.tool_call = text(v, "/content_block/name");
        }
        "content_block_delta" => match v.pointer("/delta/type").and_then(Value::as_str) {
            Some("text_delta") => c.content = text(v, "/delta/text"),
            Some("thinking_delta") => c.reasoning = text(v, "/delta/thinking"),
            Some("input_json_delta") => c.tool_call = text(v, "/delta/partial_json"),
            _ => {}
        },
        "message_delta" => {
            c.usage = usage(
                uint(v, "/usage/input_tokens"),
                uint(v, "/usage/output_tokens"),
            );
            c.finish_reason = text(v, "/delta/stop_reason");
        }
        "message_stop" => c.end = true,
        "error" => {
            return error(
                text(v, "/error/message").map_or_else(|| data.to_owned(), Cow::into_owned),
            )
        }
        _ => {}
    }
    chunk(c)
}

/// Ollama's native NDJSON: `message.content` (`/api/chat`) or `response`
/// (`/api/generate`) per line; the `done: true` line carries the counts and the
/// server's own durations (ns).
fn ollama(v: &Value, data: &str) -> StreamEvent<'static> {
    if let Some(e) = top_error(v, data) {
        return e;
    }
    if v.get("done").is_none() && v.get("message").is_none() && v.get("response").is_none() {
        return StreamEvent::Malformed;
    }
    let mut c = ParsedChunk {
        content: text(v, "/message/content").or_else(|| text(v, "/response")),
        reasoning: text(v, "/message/thinking").or_else(|| text(v, "/thinking")),
        ..ParsedChunk::default()
    };
    if let Some(calls) = v.pointer("/message/tool_calls").and_then(Value::as_array) {
        let joined: String = calls
            .iter()
            .filter_map(|call| call.get("function"))
            .map(|f| {
                let name = f.get("name").and_then(Value::as_str).unwrap_or("");
                let args = f.get("arguments").map_or(String::new(), Value::to_string);
                format!("{name}{args}")
            })
            .collect();
        c.tool_call = (!joined.is_empty()).then_some(Cow::Owned(joined));
    }
    if v.get("done").and_then(Value::as_bool) == Some(true) {
        c.end = true;
        c.finish_reason = text(v, "/done_reason").or(Some(Cow::Borrowed("stop")));
        c.usage = usage(uint(v, "/prompt_eval_count"), uint(v, "/eval_count"));
        let timing = ServerTiming {
            prompt_ns: uint(v, "/prompt_eval_duration"),
            decode_ns: uint(v, "/eval_duration"),
            decode_tokens: uint(v, "/eval_count"),
            ..ServerTiming::default()
        };
        c.server_timing = (timing != ServerTiming::default()).then(|| Box::new(timing));
    }
    chunk(c)
}

/// TGI's `/generate_stream` (one `token` per event; `details` on the last) or
/// SGLang's `/generate` (the whole `text` so far, counts in `meta_info`).
fn generate(v: &Value, data: &str) -> StreamEvent<'static> {
    if let Some(e) = top_error(v, data) {
        return e;
    }
    let mut c = ParsedChunk::default();
    if let Some(token) = v.get("token").filter(|t| t.is_object()) {
        let special = token.get("special").and_then(Value::as_bool) == Some(true);
        if !special {
            c.content = text(token, "/text");
        }
        c.tokens = Some(1);
        if let Some(details) = v.get("details").filter(|d| d.is_object()) {
            c.end = true;
            c.finish_reason = text(details, "/finish_reason");
            c.usage = usage(None, uint(details, "/generated_tokens"));
        }
        return chunk(c);
    }
    let Some(meta) = v.get("meta_info").filter(|m| m.is_object()) else {
        return StreamEvent::Malformed;
    };
    c.content = text(v, "/text");
    c.cumulative = true;
    c.usage = usage(
        uint(meta, "/prompt_tokens"),
        uint(meta, "/completion_tokens"),
    );
    c.finish_reason = text(meta, "/finish_reason/type").or_else(|| text(meta, "/finish_reason"));
    chunk(c)
}

/// KServe v2 / Triton generate extension: `text_output` per event, no end marker.
fn kserve(v: &Value, data: &str) -> StreamEvent<'static> {
    if let Some(e) = top_error(v, data) {
        return e;
    }
    if v.get("text_output").is_none() && v.get("model_name").is_none() {
        return StreamEvent::Malformed;
    }
    chunk(ParsedChunk {
        content: text(v, "/text_output"),
        ..ParsedChunk::default()
    })
}

/// llama.cpp's native `/completion`: `content` and `tokens` per event; the `stop: true`
/// event carries the counts and the server's `timings` (ms).
fn llamacpp(v: &Value, data: &str) -> StreamEvent<'static> {
    if let Some(e) = top_error(v, data) {
        return e;
    }
    if v.get("content").is_none() && v.get("stop").is_none() {
        return StreamEvent::Malformed;
    }
    let mut c = ParsedChunk {
        content: text(v, "/content"),
        tokens: v
            .get("tokens")
            .and_then(Value::as_array)
            .map(|a| a.len() as u32)
            .filter(|&n| n > 0),
        ..ParsedChunk::default()
    };
    if v.get("stop").and_then(Value::as_bool) == Some(true) {
        c.end = true;
        c.finish_reason = text(v, "/stop_type").or(Some(Cow::Borrowed("stop")));
        c.usage = usage(uint(v, "/tokens_evaluated"), uint(v, "/tokens_predicted"));
        c.server_timing = llamacpp_timings(v).map(Box::new);
    }
    chunk(c)
}
