//! Builds the request bodies for each API dialect (`stream: true`, usage requested),
//! with the user's `--extra-body` merged in, so every request is ready to send as bytes.

use bytes::Bytes;
use cadence_wire::Api;
use serde_json::{json, Map, Value};

/// `max_tokens` of a Messages request when the run sets none (the API requires one).
pub const ANTHROPIC_MAX_TOKENS: u32 = 4096;

/// One chat message, as a body carries it (a dataset's conversation, a session's
/// turns and replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl Message {
    /// A message from `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }
}

/// What every request of a run carries.
#[derive(Debug, Clone)]
pub struct BodySpec {
    /// The dialect the body is written in.
    pub api: Api,
    /// The model named in every body.
    pub model: String,
    /// The output limit sent when a prompt gives none (`--max-tokens`).
    pub max_tokens: Option<u32>,
    /// Merged last, so it overrides anything above (objects merge key by key).
    pub extra: Option<Map<String, Value>>,
    /// The endpoint's path, which picks between a dialect's two request shapes
    /// (Ollama's `/api/generate` takes a prompt, `/api/chat` messages; SGLang's
    /// `/generate` takes `text`, TGI's `/generate_stream` `inputs`). Empty: the first.
    pub path: String,
}

impl BodySpec {
    /// The JSON body for one prompt.
    pub fn body(&self, prompt: &str) -> Bytes {
        self.body_with(prompt, self.max_tokens)
    }

    /// The JSON body for one prompt with its own output length.
    pub fn body_with(&self, prompt: &str, max_tokens: Option<u32>) -> Bytes {
        self.body_messages(&[Message::new("user", prompt)], max_tokens)
    }

    /// The JSON body for a conversation: dialects that take messages get them as they
    /// are (Anthropic's system messages go to `system`); a prompt-only endpoint gets
    /// their contents joined by blank lines.
    pub fn body_messages(&self, messages: &[Message], max_tokens: Option<u32>) -> Bytes {
        self.with_extra(self.base(messages, max_tokens))
    }

    /// [`body_messages`](Self::body_messages) before `--extra-body`, nulls removed.
    fn base(&self, messages: &[Message], max_tokens: Option<u32>) -> Value {
        let prompt = || match messages {
            [only] => only.content.clone(),
            _ => {
                let joined: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
                joined.join("\n\n")
            }
        };
        let n = max_tokens.map(|n| json!(n));
        let mut v = match self.api {
            Api::Chat => json!({
                "model": self.model,
                "messages": message_list(&mut messages.iter()),
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": n,
            }),
            Api::Completions => json!({
                "model": self.model,
                "prompt": prompt(),
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": n,
            }),
            Api::Responses => json!({
                "model": self.model,
                "input": message_list(&mut messages.iter()),
                "stream": true,
                "max_output_tokens": n,
            }),
            Api::Anthropic => self.anthropic_body(messages, max_tokens),
            Api::Ollama if self.path.ends_with("/api/generate") => json!({
                "model": self.model,
                "prompt": prompt(),
                "stream": true,
                "options": {"num_predict": n},
            }),
            Api::Ollama => json!({
                "model": self.model,
                "messages": message_list(&mut messages.iter()),
                "stream": true,
                "options": {"num_predict": n},
            }),
            Api::Generate if self.path.trim_end_matches('/').ends_with("/generate") => json!({
                "text": prompt(),
                "stream": true,
                "sampling_params": {"max_new_tokens": n},
            }),
            Api::Generate => json!({
                "inputs": prompt(),
                "stream": true,
                "parameters": {"max_new_tokens": n, "details": true},
            }),
            Api::Kserve => json!({
                "text_input": prompt(),
                "parameters": {"max_tokens": n, "stream": true},
            }),
            Api::Llamacpp => json!({
                "prompt": prompt(),
                "n_predict": n,
                "stream": true,
                "return_tokens": true,
            }),
            Api::Websocket => realtime_events(prompt(), n),
        };
        strip_nulls(&mut v);
        v
    }

    /// The JSON body of an agent step: `items` in the dialect's own message shapes
    /// (see `agent::Transcript`), the declared `tools` and, when set, `tool_choice`.
    /// Only the chat, Responses and Anthropic dialects carry tools.
    pub fn body_agent(
        &self,
        system: Option<&str>,
        items: &[Value],
        tools: Value,
        tool_choice: Option<Value>,
        max_tokens: Option<u32>,
    ) -> Bytes {
        let mut v = self.base(&[], max_tokens);
        // Added after `strip_nulls`: an empty `input` or `properties` object is meant.
        let list = Value::Array(items.to_vec());
        match self.api {
            Api::Anthropic => {
                v["messages"] = list;
                if let Some(s) = system {
                    v["system"] = json!(s);
                }
            }
            Api::Responses => v["input"] = list,
            _ => v["messages"] = list,
        }
        v["tools"] = tools;
        if let Some(c) = tool_choice {
            v["tool_choice"] = c;
        }
        self.with_extra(v)
    }

    /// `--extra-body` merged into `v`, as bytes.
    fn with_extra(&self, mut v: Value) -> Bytes {
        if let Some(extra) = &self.extra {
            // A WebSocket body is a list of client events: the extra goes into the
            // `response.create` event's `response`.
            let target = match &mut v {
                Value::Array(events) => events.last_mut().map(|e| &mut e["response"]),
                other => Some(other),
            };
            if let Some(t) = target {
                merge(t, &Value::Object(extra.clone()));
            }
        }
        Bytes::from(serde_json::to_vec(&v).expect("a JSON value serializes"))
    }

    /// Anthropic Messages: system messages go to `system`, and `max_tokens` is required.
    fn anthropic_body(&self, messages: &[Message], max_tokens: Option<u32>) -> Value {
        let system: Vec<&str> = messages
            .iter()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
            .collect();
        let mut v = json!({
            "model": self.model,
            "messages": message_list(&mut messages.iter().filter(|m| m.role != "system")),
            "stream": true,
            // Required by the Messages API.
            "max_tokens": max_tokens.unwrap_or(ANTHROPIC_MAX_TOKENS),
        });
        if !system.is_empty() {
            v["system"] = json!(system.join("\n\n"));
        }
        v
    }

    /// The output length a request with this `max_tokens` demands in full: all of
    /// `max_tokens` when the body sets `ignore_eos: true`, else its `min_tokens` (never
    /// above `max_tokens`); `None` when the model may stop when it likes. `--extra-body`
    /// wins as it does in the body (it may set or remove `max_tokens`).
    pub fn expected_output(&self, max_tokens: Option<u32>) -> Option<u64> {
        let extra = self.extra.as_ref();
        let max = self.max_tokens_sent(max_tokens);
        let flag = |k: &str| extra.and_then(|e| e.get(k));
        if flag("ignore_eos").and_then(Value::as_bool) == Some(true) {
            return max;
        }
        let min = flag("min_tokens").and_then(Value::as_u64)?;
        Some(max.map_or(min, |m| m.min(min))).filter(|&n| n > 0)
    }

    /// The `max_tokens` a request with this output length sends: `--extra-body`'s
    /// when it sets one (a number, else none), as in the body.
    pub fn max_tokens_sent(&self, max_tokens: Option<u32>) -> Option<u64> {
        match self.extra.as_ref().and_then(|e| e.get("max_tokens")) {
            Some(v) => v.as_u64(),
            None => max_tokens.map(u64::from),
        }
    }
}

/// Removes `null` members (an unset `max_tokens`) at any depth, and objects left empty
/// by that.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| {
                strip_nulls(x);
                !(x.is_null() || x.as_object().is_some_and(|o| o.is_empty()))
            });
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Deep-merges `patch` into `base`: objects key by key, anything else replaces; a
/// `null` in the patch removes the key (so `--extra-body '{"stream_options":null}'` works).
pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// Parses `--extra-body`: a JSON object.
pub fn parse_extra_body(s: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!("--extra-body must be a JSON object, got {other}")),
        Err(e) => Err(format!("--extra-body is not valid JSON: {e}")),
    }
}

/// Messages as the chat-style APIs take them: `[{role, content}]`.
fn message_list(ms: &mut dyn Iterator<Item = &Message>) -> Value {
    Value::Array(
        ms.map(|m| json!({"role": m.role, "content": m.content}))
            .collect(),
    )
}

/// The OpenAI Realtime client events for one prompt: the user item, then the response.
fn realtime_events(prompt: String, max_output_tokens: Option<Value>) -> Value {
    json!([
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": prompt}],
            },
        },
        {
            "type": "response.create",
            "response": {"modalities": ["text"], "max_output_tokens": max_output_tokens},
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: Bytes) -> Value {
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn chat_body_streams_with_usage() {
        let spec = BodySpec {
            api: Api::Chat,
            model: "m".into(),
            max_tokens: Some(16),
            extra: None,
            path: String::new(),
        };
        let v = parse(spec.body("hi"));
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["messages"][0]["content"], "hi");
        assert_eq!(v["max_tokens"], 16);
    }

    #[test]
    fn completions_body_uses_prompt() {
        let spec = BodySpec {
            api: Api::Completions,
            model: "m".into(),
            max_tokens: None,
            extra: None,
            path: String::new(),
        };
        let v = parse(spec.body("once"));
        assert_eq!(v["prompt"], "once");
        assert!(v.get("max_tokens").is_none());
    }

    #[test]
    fn extra_body_merges_deeply_and_null_removes() {
        let extra = parse_extra_body(
            r#"{"ignore_eos": true, "stream_options": {"continuous_usage_stats": true}, "max_tokens": null}"#,
        )
        .unwrap();
        let spec = BodySpec {
            api: Api::Chat,
            model: "m".into(),
            max_tokens: Some(8),
            extra: Some(extra),
            path: String::new(),
        };
        let v = parse(spec.body("x"));
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["stream_options"]["continuous_usage_stats"], true);
        assert!(v.get("max_tokens").is_none());
    }

    #[test]
    fn the_full_length_is_expected_only_when_the_body_demands_it() {
        let spec = |extra: &str| BodySpec {
            api: Api::Chat,
            model: "m".into(),
            max_tokens: Some(64),
            extra: (!extra.is_empty()).then(|| parse_extra_body(extra).unwrap()),
            path: String::new(),
        };
        assert_eq!(spec("").expected_output(Some(64)), None);
        assert_eq!(
            spec(r#"{"ignore_eos": true}"#).expected_output(Some(64)),
            Some(64)
        );
        assert_eq!(
            spec(r#"{"ignore_eos": false}"#).expected_output(Some(64)),
            None
        );
        assert_eq!(
            spec(r#"{"min_tokens": 16}"#).expected_output(Some(64)),
            Some(16)
        );
        assert_eq!(
            spec(r#"{"min_tokens": 99}"#).expected_output(Some(64)),
            Some(64)
        );
        assert_eq!(spec(r#"{"min_tokens": 0}"#).expected_output(Some(64)), None);
        let overridden = spec(r#"{"ignore_eos": true, "max_tokens": 8}"#);
        assert_eq!(overridden.expected_output(Some(64)), Some(8));
        let removed = spec(r#"{"ignore_eos": true, "max_tokens": null}"#);
        assert_eq!(removed.expected_output(Some(64)), None);
        // The max_tokens sent, whatever the model must produce.
        assert_eq!(spec("").max_tokens_sent(Some(64)), Some(64));
        assert_eq!(spec("").max_tokens_sent(None), None);
        assert_eq!(overridden.max_tokens_sent(Some(64)), Some(8));
        assert_eq!(overridden.max_tokens_sent(None), Some(8));
        assert_eq!(removed.max_tokens_sent(Some(64)), None);
    }

    #[test]
    fn each_dialect_gets_its_own_body() {
        let spec = |api, path: &str| BodySpec {
            api,
            model: "m".into(),
            max_tokens: Some(7),
            extra: None,
            path: path.into(),
        };
        let v = parse(spec(Api::Responses, "").body("hi"));
        assert_eq!(
            (
                &v["input"][0]["content"],
                &v["max_output_tokens"],
                &v["stream"]
            ),
            (&json!("hi"), &json!(7), &json!(true))
        );
        let sys = [
            Message::new("system", "be brief"),
            Message::new("user", "hi"),
        ];
        let v = parse(spec(Api::Anthropic, "").body_messages(&sys, None));
        assert_eq!(v["system"], "be brief");
        assert_eq!(v["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(v["max_tokens"], ANTHROPIC_MAX_TOKENS);
        let v = parse(spec(Api::Ollama, "/api/chat").body("hi"));
        assert_eq!(
            (&v["messages"][0]["content"], &v["options"]["num_predict"]),
            (&json!("hi"), &json!(7))
        );
        let v = parse(spec(Api::Ollama, "/api/generate").body("hi"));
        assert_eq!(v["prompt"], "hi");
        let v = parse(spec(Api::Generate, "/generate_stream").body("hi"));
        assert_eq!(
            (&v["inputs"], &v["parameters"]["max_new_tokens"]),
            (&json!("hi"), &json!(7))
        );
        assert_eq!(v["parameters"]["details"], true);
        let v = parse(spec(Api::Generate, "/generate").body("hi"));
        assert_eq!(
            (&v["text"], &v["sampling_params"]["max_new_tokens"]),
            (&json!("hi"), &json!(7))
        );
        let v = parse(spec(Api::Kserve, "/v2/models/m/generate_stream").body("hi"));
        assert_eq!(
            (&v["text_input"], &v["parameters"]["max_tokens"]),
            (&json!("hi"), &json!(7))
        );
        let v = parse(spec(Api::Llamacpp, "/completion").body("hi"));
        assert_eq!((&v["prompt"], &v["n_predict"]), (&json!("hi"), &json!(7)));
        let mut ws = spec(Api::Websocket, "/v1/realtime");
        ws.extra = Some(parse_extra_body(r#"{"temperature": 0.5}"#).unwrap());
        let v = parse(ws.body("hi"));
        assert_eq!(v[0]["item"]["content"][0]["text"], "hi");
        assert_eq!(v[1]["type"], "response.create");
        assert_eq!(v[1]["response"]["max_output_tokens"], 7);
        assert_eq!(v[1]["response"]["temperature"], 0.5);
        // No output cap set: no null left in the body.
        let v = parse(spec(Api::Ollama, "").body_with("hi", None));
        assert!(v.get("options").is_none(), "{v}");
    }

    #[test]
    fn extra_body_must_be_an_object() {
        assert!(parse_extra_body("[1]").unwrap_err().contains("JSON object"));
        assert!(parse_extra_body("{")
            .unwrap_err()
            .contains("not valid JSON"));
    }
}
