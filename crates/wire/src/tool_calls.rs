//! The tool calls a streamed reply made, assembled from its tool-call events after the
//! stream: an agent's next step sends them back with their ids, so it needs each
//! call whole (id, name, arguments), where the chunk parser only times the deltas.
//! Each dialect streams them its own way: OpenAI-style `tool_calls` argument deltas
//! by index (vLLM, SGLang, llama.cpp), Anthropic `tool_use` blocks filled by
//! `input_json_delta`, Responses `function_call` items filled by argument deltas.

use crate::dialect::Api;
use serde_json::Value;

/// One tool call of a reply, as the server sent it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    /// The id the tool's result must name (`call_…`, `toolu_…`); empty when the
    /// server sent none (Ollama).
    pub id: String,
    /// The function the model called; empty when the server sent none.
    pub name: String,
    /// The arguments as JSON text, exactly as streamed (not re-serialized).
    pub arguments: String,
}

/// The calls the kept tool-call events of one stream (see
/// [`crate::StreamText::tool_events`]) add up to, in the order the server numbered
/// them. Events that do not parse or do not belong to `api`'s tool-call shape are
/// skipped: the record already counted them.
pub fn assemble(api: Api, events: &[String]) -> Vec<ToolCall> {
    let mut calls = Calls::default();
    for data in events {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        match api {
            Api::Anthropic => anthropic(&v, &mut calls),
            Api::Responses | Api::Websocket => responses(&v, &mut calls),
            _ => openai(&v, &mut calls),
        }
    }
    calls.finish()
}

/// Calls keyed by the stream's own index for them.
#[derive(Default)]
struct Calls(Vec<(u64, ToolCall)>);

impl Calls {
    fn at(&mut self, key: u64) -> &mut ToolCall {
        let pos = match self.0.iter().position(|(k, _)| *k == key) {
            Some(p) => p,
            None => {
                self.0.push((key, ToolCall::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[pos].1
    }

    fn finish(mut self) -> Vec<ToolCall> {
        self.0.sort_by_key(|(k, _)| *k);
        self.0
            .into_iter()
            .map(|(_, c)| c)
            .filter(|c| !c.name.is_empty() || !c.arguments.is_empty())
            .collect()
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// OpenAI chat (and the servers that copy it): `choices[0].delta.tool_calls[]` by
/// `index`, the id and name on the first delta of a call, argument text appended;
/// the legacy `function_call` delta; a whole `message.tool_calls` (Ollama, or a
/// non-streamed answer) with object arguments written as JSON.
fn openai(v: &Value, calls: &mut Calls) {
    let choice = v.pointer("/choices/0");
    let delta = choice
        .and_then(|c| c.get("delta").or_else(|| c.get("message")))
        .or_else(|| v.get("message"));
    let Some(delta) = delta else {
        return;
    };
    if let Some(list) = delta.get("tool_calls").and_then(Value::as_array) {
        for (pos, tc) in list.iter().enumerate() {
            let key = tc
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            let call = calls.at(key);
            if let Some(id) = tc.get("id").and_then(Value::as_str) {
                call.id = id.to_owned();
            }
            if let Some(name) = str_at(tc, "/function/name") {
                call.name.push_str(name);
            }
            match tc.pointer("/function/arguments") {
                Some(Value::String(a)) => call.arguments.push_str(a),
                Some(obj @ Value::Object(_)) => call.arguments = obj.to_string(),
                _ => {}
            }
        }
    } else if let Some(fc) = delta.get("function_call") {
        let call = calls.at(0);
        if let Some(name) = fc.get("name").and_then(Value::as_str) {
            call.name.push_str(name);
        }
        if let Some(a) = fc.get("arguments").and_then(Value::as_str) {
            call.arguments.push_str(a);
        }
    }
}

/// Anthropic Messages: `content_block_start` opens a `tool_use` block (id, name, an
/// `input` that is usually `{}`), `input_json_delta`s at the same `index` append the
/// input's JSON text.
fn anthropic(v: &Value, calls: &mut Calls) {
    let key = v.get("index").and_then(Value::as_u64).unwrap_or(0);
    match v.get("type").and_then(Value::as_str) {
        Some("content_block_start") => {
            let Some(block) = v.get("content_block") else {
                return;
            };
            if block.get("type").and_then(Value::as_str) != Some("tool_use") {
                return;
            }
            let call = calls.at(key);
            call.id = str_at(block, "/id").unwrap_or_default().to_owned();
            call.name = str_at(block, "/name").unwrap_or_default().to_owned();
            // A non-empty `input` here is the whole input (no deltas follow).
            if let Some(input) = block
                .get("input")
                .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
            {
                call.arguments = input.to_string();
            }
        }
        Some("content_block_delta") => {
            if let Some(part) = v
                .get("delta")
                .filter(|d| d.get("type").and_then(Value::as_str) == Some("input_json_delta"))
                .and_then(|d| d.get("partial_json"))
                .and_then(Value::as_str)
            {
                calls.at(key).arguments.push_str(part);
            }
        }
        _ => {}
    }
}

/// The Responses API: `response.output_item.added` opens a `function_call` item at an
/// `output_index` (its `call_id` is the id results name), argument deltas append, and
/// `…arguments.done` / `response.output_item.done` carry the whole arguments, which
/// win over the deltas.
fn responses(v: &Value, calls: &mut Calls) {
    let key = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
    let function_item = || {
        v.get("item")
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
    };
    match v.get("type").and_then(Value::as_str) {
        Some("response.output_item.added") | Some("response.output_item.done") => {
            let Some(item) = function_item() else {
                return;
            };
            let call = calls.at(key);
            if let Some(id) = str_at(item, "/call_id").or_else(|| str_at(item, "/id")) {
                call.id = id.to_owned();
            }
            if let Some(name) = str_at(item, "/name") {
                call.name = name.to_owned();
            }
            if let Some(a) = str_at(item, "/arguments").filter(|a| !a.is_empty()) {
                call.arguments = a.to_owned();
            }
        }
        Some("response.function_call_arguments.delta") => {
            if let Some(d) = str_at(v, "/delta") {
                calls.at(key).arguments.push_str(d);
            }
        }
        Some("response.function_call_arguments.done") => {
            if let Some(a) = str_at(v, "/arguments") {
                calls.at(key).arguments = a.to_owned();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Framing, StreamTracker, TrackerConfig};
    use cadence_base::{Outcome, RequestRecord};

    /// Feeds an SSE body through a tracker that keeps tool events, and assembles.
    fn calls_of(api: Api, body: &str) -> (Vec<ToolCall>, RequestRecord) {
        let mut t = StreamTracker::new(TrackerConfig {
            api,
            framing: Framing::Sse,
            strict: false,
        });
        t.keep_tool_events();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        // One event per read, each a millisecond apart.
        for (i, ev) in body.split_inclusive("\n\n").enumerate() {
            t.feed(1_000_000 * (i as u64 + 1), ev.as_bytes(), &mut rec);
        }
        t.finish(99_000_000, &mut rec);
        (assemble(api, &t.take_text().tool_events), rec)
    }

    fn sse(events: &[&str]) -> String {
        events.iter().map(|e| format!("data: {e}\n\n")).collect()
    }

    #[test]
    fn openai_argument_deltas_of_two_parallel_calls_assemble_by_index() {
        let body = sse(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"run_tests","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \"a.rs\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let (calls, rec) = calls_of(Api::Chat, &body);
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path": "a.rs"}"#.into()
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "run_tests".into(),
                    arguments: "{}".into()
                },
            ]
        );
        // The tool-call deltas are the reply's output: timed as chunks.
        assert_eq!(rec.outcome, Outcome::Succeeded);
        assert_eq!(rec.chunks.len(), 4);
        assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn anthropic_tool_use_blocks_take_their_input_json_deltas() {
        let body = [
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Looking.\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search_code\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\": \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"fn main\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ]
        .concat();
        let (calls, rec) = calls_of(Api::Anthropic, &body);
        assert_eq!(
            calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "search_code".into(),
                arguments: r#"{"query": "fn main"}"#.into()
            }]
        );
        assert_eq!(rec.outcome, Outcome::Succeeded);
    }

    #[test]
    fn responses_function_call_items_take_call_ids_and_whole_arguments() {
        let body = sse(&[
            r#"{"type":"response.created","response":{"id":"r","status":"in_progress"}}"#,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_9","name":"apply_patch","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"diff\":"}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"\"x\"}"}"#,
            r#"{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,"arguments":"{\"diff\":\"x\"}"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_9","name":"apply_patch","arguments":"{\"diff\":\"x\"}"}}"#,
            r#"{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":3,"output_tokens":4}}}"#,
        ]);
        let (calls, _) = calls_of(Api::Responses, &body);
        assert_eq!(
            calls,
            vec![ToolCall {
                id: "call_9".into(),
                name: "apply_patch".into(),
                arguments: r#"{"diff":"x"}"#.into()
            }]
        );
    }

    /// The text of a chat SSE `body` fed in one read to a tracker keeping tool events.
    fn kept_text(body: &str) -> crate::StreamText {
        let mut t = StreamTracker::new(TrackerConfig {
            api: Api::Chat,
            framing: Framing::Sse,
            strict: false,
        });
        t.keep_tool_events();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        t.feed(1, body.as_bytes(), &mut rec);
        t.finish(2, &mut rec);
        t.take_text()
    }

    #[test]
    fn a_plain_reply_has_no_calls_and_keeps_no_events() {
        let body = sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        let text = kept_text(&body);
        assert!(text.tool_events.is_empty());
        assert!(assemble(Api::Chat, &text.tool_events).is_empty());
        assert_eq!(text.content, "hi");
    }

    #[test]
    fn events_past_the_ceiling_are_dropped_and_the_text_says_so() {
        // One call whose arguments come 64 KiB an event, up to the ceiling and past it.
        let piece = "x".repeat(64 << 10);
        let event = format!(
            r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"{piece}"}}}}]}}}}]}}"#
        );
        let fit = crate::MAX_TOOL_EVENT_BYTES / event.len();
        let body = |n: usize| {
            let mut events = vec![
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}"#.to_owned(),
            ];
            events.extend(std::iter::repeat_n(event.clone(), n));
            events.push("[DONE]".to_owned());
            sse(&events.iter().map(String::as_str).collect::<Vec<_>>())
        };
        // What fits is kept whole and not marked.
        let whole = kept_text(&body(fit - 1));
        assert!(!whole.tool_events_cut);
        let calls = assemble(Api::Chat, &whole.tool_events);
        assert_eq!(calls[0].arguments.len(), (fit - 1) * piece.len());
        // One event past the ceiling is dropped, and the text says so.
        let cut = kept_text(&body(fit + 1));
        assert!(cut.tool_events_cut);
        assert!(
            cut.tool_events.iter().map(String::len).sum::<usize>() <= crate::MAX_TOOL_EVENT_BYTES
        );
    }

    #[test]
    fn events_are_not_kept_unless_asked() {
        let body = sse(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        let mut t = StreamTracker::new(TrackerConfig {
            api: Api::Chat,
            framing: Framing::Sse,
            strict: false,
        });
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        t.feed(1, body.as_bytes(), &mut rec);
        t.finish(2, &mut rec);
        assert!(t.take_text().tool_events.is_empty());
        assert_eq!(rec.chunks.len(), 1, "still timed as output");
    }

    #[test]
    fn garbage_events_are_skipped_not_invented() {
        let events = vec![
            "not json".to_owned(),
            r#"{"choices":[{"delta":{"tool_calls":"nope"}}]}"#.to_owned(),
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#
                .to_owned(),
        ];
        assert!(assemble(Api::Chat, &events).is_empty());
        assert!(assemble(Api::Anthropic, &events).is_empty());
        assert!(assemble(Api::Responses, &events).is_empty());
    }
}
