//! The sim's JSON for the dialects beyond OpenAI chat and completions (Responses,
//! Anthropic Messages, Ollama, TGI, SGLang, KServe v2, llama.cpp's `/completion`):
//! the events before the first token, each content event, the events that end the
//! stream and the error event, so the script and the engine model write every
//! dialect from the same plan and the same faults.

use serde_json::{json, Value};
use std::time::Duration;

use crate::openai::{Dialect, Piece, Usage, Writer, TOOL_NAME};

fn s(v: Value) -> String {
    v.to_string()
}

/// The text a piece carries (`None` for a chat role chunk).
fn piece_text<'a>(piece: &Piece<'a>) -> Option<&'a str> {
    match *piece {
        Piece::Role { .. } => None,
        Piece::Content(t) => Some(t.unwrap_or("")),
        Piece::Reasoning(t) => Some(t),
        Piece::Tool { arguments, .. } => Some(arguments),
    }
}

/// One content event, in any dialect (OpenAI's chat and completions chunks are the
/// [`Writer`]'s own).
pub(crate) fn chunk(
    w: &Writer<'_>,
    piece: Piece<'_>,
    finish: Option<&str>,
    ids: Option<&[u32]>,
    usage: Option<Usage>,
) -> String {
    let text = piece_text(&piece).unwrap_or("");
    match w.dialect {
        Dialect::Responses => {
            let kind = match piece {
                Piece::Reasoning(_) => "response.reasoning_summary_text.delta",
                Piece::Tool { .. } => "response.function_call_arguments.delta",
                _ => "response.output_text.delta",
            };
            s(
                json!({"type": kind, "item_id": format!("msg_{}", w.id), "output_index": 0,
                "content_index": 0, "delta": text}),
            )
        }
        Dialect::Realtime => {
            let kind = match piece {
                Piece::Tool { .. } => "response.function_call_arguments.delta",
                _ => "response.text.delta",
            };
            s(
                json!({"type": kind, "response_id": w.id, "item_id": format!("item_{}", w.id),
                "output_index": 0, "content_index": 0, "delta": text}),
            )
        }
        Dialect::Anthropic => {
            let delta = match piece {
                Piece::Reasoning(_) => json!({"type": "thinking_delta", "thinking": text}),
                Piece::Tool { .. } => json!({"type": "input_json_delta", "partial_json": text}),
                _ => json!({"type": "text_delta", "text": text}),
            };
            s(json!({"type": "content_block_delta", "index": 0, "delta": delta}))
        }
        Dialect::OllamaChat => {
            let mut message = json!({"role": "assistant", "content": ""});
            match piece {
                Piece::Reasoning(_) => message["thinking"] = json!(text),
                _ => message["content"] = json!(text),
            }
            s(
                json!({"model": w.model, "created_at": created_at(w), "message": message,
                "done": false}),
            )
        }
        Dialect::OllamaGenerate => s(json!({"model": w.model, "created_at": created_at(w),
            "response": text, "done": false})),
        Dialect::Tgi => {
            let id = ids.and_then(|i| i.first()).copied().unwrap_or(0);
            s(json!({"index": usage.map_or(0, |u| u.completion_tokens),
                "token": {"id": id, "text": text, "logprob": -0.5, "special": false},
                "generated_text": null, "details": null}))
        }
        Dialect::Sglang => {
            let u = usage.unwrap_or(Usage::new(0, 0));
            let finish = finish.map(|f| json!({"type": f, "length": u.completion_tokens}));
            s(
                json!({"text": text, "meta_info": {"id": w.id, "finish_reason": finish,
                "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "cached_tokens": 0}}),
            )
        }
        Dialect::Kserve => s(json!({"model_name": w.model, "model_version": "1",
            "text_output": text})),
        Dialect::Llamacpp => s(json!({"index": 0, "content": text,
            "tokens": ids.unwrap_or(&[]), "stop": false, "id_slot": 0})),
        Dialect::Chat | Dialect::Completion => w.chunk(piece, finish, ids, usage),
    }
}

fn created_at(w: &Writer<'_>) -> String {
    format!("{}", w.created)
}

/// The events before the first content event.
pub fn opening(w: &Writer<'_>, prompt_tokens: u32, tool: bool) -> Vec<String> {
    match w.dialect {
        Dialect::Responses => {
            let mut v = vec![s(json!({"type": "response.created", "response": {
                "id": w.id, "object": "response", "status": "in_progress", "model": w.model,
                "output": [], "usage": null}}))];
            if tool {
                v.push(s(
                    json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "function_call", "name": TOOL_NAME, "arguments": ""}}),
                ));
            }
            v
        }
        Dialect::Realtime => vec![s(json!({"type": "response.created",
            "response": {"id": w.id, "object": "realtime.response", "status": "in_progress"}}))],
        Dialect::Anthropic => {
            let block = if tool {
                json!({"type": "tool_use", "id": "toolu_cadence_0", "name": TOOL_NAME, "input": {}})
            } else {
                json!({"type": "text", "text": ""})
            };
            vec![
                s(
                    json!({"type": "message_start", "message": {"id": w.id, "type": "message",
                    "role": "assistant", "content": [], "model": w.model, "stop_reason": null,
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": 1}}}),
                ),
                s(json!({"type": "content_block_start", "index": 0, "content_block": block})),
            ]
        }
        _ => Vec::new(),
    }
}

/// The events before the first token of a reply of tool calls (see
/// [`crate::tools`]): each call's own opening goes out with its first token,
/// so Anthropic's text block is left out.
pub fn opening_calls(w: &Writer<'_>, prompt_tokens: u32) -> Vec<String> {
    let mut v = opening(w, prompt_tokens, false);
    if w.dialect == Dialect::Anthropic {
        v.truncate(1);
    }
    v
}

/// TGI's timing headers on its whole `/generate` answer, as its router writes them
/// (whole milliseconds, cut down; `x-compute-time` in seconds), from the sim's own
/// account of the request: its queue (the engine's, else none) and its inference time,
/// the prefill and decode the client's one chunk waited for.
pub fn tgi_headers(timing: Timing, usage: Usage) -> Vec<(&'static str, String)> {
    let inference = timing.prompt + timing.decode;
    let total = timing.queue + inference;
    let ms = |d: Duration| d.as_millis().to_string();
    let per_token = inference
        .checked_div(usage.completion_tokens.max(1))
        .unwrap_or_default();
    vec![
        ("x-compute-type", "cadence-sim".to_owned()),
        ("x-compute-time", total.as_secs_f64().to_string()),
        ("x-total-time", ms(total)),
        ("x-validation-time", "0".to_owned()),
        ("x-queue-time", ms(timing.queue)),
        ("x-inference-time", ms(inference)),
        ("x-time-per-token", ms(per_token)),
        ("x-prompt-tokens", usage.prompt_tokens.to_string()),
        ("x-generated-tokens", usage.completion_tokens.to_string()),
    ]
}

/// The server's own timing of a finished stream, for the dialects that report one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// From the request's arrival to its first scheduling (the engine's queue; zero on
    /// the sim's own schedule, which queues nothing).
    pub queue: Duration,
    /// From the request's start (or its scheduling, after a queue) to its first token
    /// (the prefill, as the server tells it).
    pub prompt: Duration,
    /// From the first token to the last.
    pub decode: Duration,
    /// Speculative decoding's counts, when the stream speculated.
    pub spec: Option<SpecCounts>,
}

/// A speculating stream's counts as vLLM reports them per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecCounts {
    /// Verification steps: the chunks after the first.
    pub steps: u32,
    /// Draft tokens accepted: each step's tokens but its bonus token.
    pub accepted: u32,
    /// Draft tokens proposed: the draft length each step.
    pub drafted: u32,
}

impl Timing {
    /// The timing of a stream that follows `plan` whole: the prefill up to its first
    /// chunk, the decode from its first chunk to its last, and its speculation.
    pub fn of_plan(plan: &crate::plan::StreamPlan) -> Timing {
        let first_at = plan.chunks.first().map_or(Duration::ZERO, |c| c.at);
        let spec = plan.spec_tokens.map(|k| {
            let steps = plan.chunks.len().saturating_sub(1) as u32;
            let after_first =
                plan.token_count() - plan.chunks.first().map_or(0, |c| c.tokens.len() as u32);
            SpecCounts {
                steps,
                accepted: after_first - steps,
                drafted: steps * k,
            }
        });
        Timing {
            queue: Duration::ZERO,
            prompt: first_at,
            decode: plan.last_at().saturating_sub(first_at),
            spec,
        }
    }
}

/// vLLM's per-request `metrics` object (as `--enable-per-request-metrics` adds it) for
/// a stream of `n` tokens: the queue (none on the sim's own schedule), the prefill up
/// to the first token, the decode from the first token to the last.
pub fn vllm_metrics(timing: Timing, n: u32) -> serde_json::Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean_itl = (n > 1).then(|| ms(timing.decode) / f64::from(n - 1));
    let total = timing.prompt + timing.decode;
    let per_s = (!total.is_zero()).then(|| f64::from(n) / total.as_secs_f64());
    let mut v = json!({"time_to_first_token_ms": ms(timing.prompt),
        "generation_time_ms": ms(timing.decode), "queue_time_ms": ms(timing.queue), "mean_itl_ms": mean_itl,
        "tokens_per_second": per_s});
    if let Some(s) = timing.spec {
        let steps = f64::from(s.steps.max(1));
        v["speculative_decoding"] = json!({
            "mean_acceptance_length": 1.0 + f64::from(s.accepted) / steps,
            "draft_acceptance_rate": f64::from(s.accepted) / f64::from(s.drafted.max(1)),
            "num_spec_steps": s.steps, "num_accepted_draft_tokens": s.accepted,
            "num_draft_tokens": s.drafted, "num_spec_tokens": s.drafted / s.steps.max(1)});
    }
    v
}

/// The events after the last content event: the counts and the end marker (`[DONE]`
/// is not among them; see [`Dialect::done_marker`]). `end` false leaves out a
/// separate end marker (Anthropic's `message_stop`).
pub fn closing(w: &Writer<'_>, usage: Usage, finish: &str, timing: Timing) -> Vec<String> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ns = |d: Duration| d.as_nanos() as u64;
    let n = usage.completion_tokens;
    match w.dialect {
        Dialect::Responses => vec![s(json!({"type": "response.completed", "response": {
            "id": w.id, "object": "response", "status": "completed", "model": w.model,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": n,
                "total_tokens": usage.total_tokens},
            "metrics": vllm_metrics(timing, n)}}))],
        Dialect::Realtime => vec![s(json!({"type": "response.done", "response": {
            "id": w.id, "object": "realtime.response", "status": "completed",
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": n,
                "total_tokens": usage.total_tokens}}}))],
        Dialect::Anthropic => vec![
            s(json!({"type": "content_block_stop", "index": 0})),
            s(
                json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(finish),
                "stop_sequence": null}, "usage": {"output_tokens": n}}),
            ),
            s(json!({"type": "message_stop"})),
        ],
        Dialect::OllamaChat | Dialect::OllamaGenerate => {
            let mut v = json!({"model": w.model, "created_at": created_at(w), "done": true,
                "done_reason": finish, "total_duration": ns(timing.prompt + timing.decode),
                "load_duration": 0, "prompt_eval_count": usage.prompt_tokens,
                "prompt_eval_duration": ns(timing.prompt), "eval_count": n,
                "eval_duration": ns(timing.decode)});
            if w.dialect == Dialect::OllamaChat {
                v["message"] = json!({"role": "assistant", "content": ""});
            } else {
                v["response"] = json!("");
            }
            vec![s(v)]
        }
        Dialect::Tgi => vec![s(json!({"index": n + 1,
            "token": {"id": 2, "text": "</s>", "logprob": 0.0, "special": true},
            "generated_text": "", "details": {"finish_reason": finish, "generated_tokens": n,
                "input_length": usage.prompt_tokens, "seed": null}}))],
        Dialect::Llamacpp => {
            let per_token = if n > 0 {
                ms(timing.decode) / n as f64
            } else {
                0.0
            };
            vec![s(
                json!({"index": 0, "content": "", "tokens": [], "id_slot": 0,
                "stop": true, "model": w.model, "tokens_predicted": n,
                "tokens_evaluated": usage.prompt_tokens, "stop_type": "limit",
                "timings": {"prompt_n": usage.prompt_tokens, "prompt_ms": ms(timing.prompt),
                    "predicted_n": n, "predicted_ms": ms(timing.decode),
                    "predicted_per_token_ms": per_token}}),
            )]
        }
        Dialect::Sglang | Dialect::Kserve | Dialect::Chat | Dialect::Completion => Vec::new(),
    }
}

/// A non-streamed answer (`"stream": false`, or an endpoint that never streams): the
/// whole text and the counts in the one JSON object the dialect answers with. Each
/// is the shape its stream's last event takes, with the text in it.
pub fn whole(w: &Writer<'_>, text: &str, usage: Usage, timing: Timing) -> String {
    let n = usage.completion_tokens;
    let finish = "length";
    let usage_json = json!({"input_tokens": usage.prompt_tokens, "output_tokens": n,
        "total_tokens": usage.total_tokens});
    match w.dialect {
        Dialect::Responses | Dialect::Realtime => s(json!({"id": w.id, "object": "response",
            "status": "completed", "model": w.model, "output": [{"type": "message",
                "id": format!("msg_{}", w.id), "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": usage_json})),
        Dialect::Anthropic => s(json!({"id": w.id, "type": "message", "role": "assistant",
            "model": w.model, "content": [{"type": "text", "text": text}],
            "stop_reason": anthropic_stop(finish), "stop_sequence": null,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": n}})),
        Dialect::Tgi => s(
            json!({"generated_text": text, "details": {"finish_reason": finish,
            "generated_tokens": n, "input_length": usage.prompt_tokens, "seed": null}}),
        ),
        Dialect::Sglang => s(json!({"text": text, "meta_info": {"id": w.id,
            "finish_reason": {"type": finish, "length": n}, "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": n, "cached_tokens": 0}})),
        Dialect::Kserve => s(json!({"model_name": w.model, "model_version": "1",
            "text_output": text})),
        // Ollama's and llama.cpp's last event with the whole text in it.
        Dialect::OllamaChat | Dialect::OllamaGenerate | Dialect::Llamacpp => {
            let last = closing(w, usage, finish, timing).pop().unwrap_or_default();
            let mut v: Value = serde_json::from_str(&last).unwrap_or_default();
            match w.dialect {
                Dialect::OllamaChat => v["message"]["content"] = json!(text),
                Dialect::OllamaGenerate => v["response"] = json!(text),
                _ => v["content"] = json!(text),
            }
            s(v)
        }
        Dialect::Chat | Dialect::Completion => crate::openai::completion(w, text, finish, usage),
    }
}

fn anthropic_stop(finish: &str) -> &str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        "stop" => "end_turn",
        other => other,
    }
}

/// An error event mid-stream, as the dialect reports one.
pub fn error(dialect: Dialect, message: &str) -> String {
    match dialect {
        Dialect::Responses => s(json!({"type": "error", "code": "server_error",
            "message": message, "param": null})),
        Dialect::Realtime => s(json!({"type": "error",
            "error": {"type": "server_error", "message": message}})),
        Dialect::Anthropic => s(json!({"type": "error",
            "error": {"type": "api_error", "message": message}})),
        Dialect::OllamaChat | Dialect::OllamaGenerate | Dialect::Kserve => {
            s(json!({"error": message}))
        }
        Dialect::Tgi => s(json!({"error": message, "error_type": "generation"})),
        _ => crate::openai::error_body(message, "server_error", 500),
    }
}

/// The top-level `type` of an event (its SSE `event:` name).
pub fn event_name(data: &str) -> Option<String> {
    let v: Value = serde_json::from_str(data).ok()?;
    v.get("type")?.as_str().map(str::to_owned)
}

/// One event as the dialect frames it on the wire, plain (no fault): an NDJSON line,
/// or an SSE event with its `event:` line when the dialect names events.
pub fn frame(dialect: Dialect, data: &str) -> String {
    if dialect.content_type() != "text/event-stream" {
        return format!("{data}\n");
    }
    match event_name(data).filter(|_| dialect.named_events()) {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speculating_plans_counts_are_its_steps_accepted_and_drafted_tokens() {
        let config = crate::SimConfig {
            spec_accept_len: Some(2.5),
            ..crate::SimConfig::default()
        };
        let p = crate::plan::plan(&config, 0, 12, &crate::plan::Overrides::default());
        // Chunks of 1, 2, 3, 2, 3, 1 tokens: 5 steps after the prefill's, 6 drafts
        // accepted of 2 a step.
        let s = Timing::of_plan(&p).spec.unwrap();
        assert_eq!((s.steps, s.accepted, s.drafted), (5, 6, 10));
        let m = vllm_metrics(Timing::of_plan(&p), 12);
        assert_eq!(m["speculative_decoding"]["mean_acceptance_length"], 2.2);
    }

    #[test]
    fn event_names_come_from_the_type_field() {
        let name = |d: &str| event_name(d);
        assert_eq!(
            name(r#"{"type":"message_stop"}"#).as_deref(),
            Some("message_stop")
        );
        let nested = r#"{"delta":{"type":"text_delta","text":"a"},"type":"content_block_delta"}"#;
        assert_eq!(name(nested).as_deref(), Some("content_block_delta"));
        assert_eq!(name(r#"{"text":"x"}"#), None);
    }
}
