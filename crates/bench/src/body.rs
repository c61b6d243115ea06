//! Builds the request bodies for each API dialect (`stream: true`, usage requested),
//! with the user's `--extra-body` merged in, so every request is ready to send as bytes.

use bytes::Bytes;
use cadence_wire::Api;
use serde_json::{json, Map, Value};

/// What every request of a run carries.
#[derive(Debug, Clone)]
pub struct BodySpec {
    pub api: Api,
    pub model: String,
    pub max_tokens: Option<u32>,
    /// Merged last, so it overrides anything above (objects merge key by key).
    pub extra: Option<Map<String, Value>>,
}

impl BodySpec {
    /// The JSON body for one prompt.
    pub fn body(&self, prompt: &str) -> Bytes {
        self.body_with(prompt, self.max_tokens)
    }

    /// The JSON body for one prompt with its own output length.
    pub fn body_with(&self, prompt: &str, max_tokens: Option<u32>) -> Bytes {
        match self.api {
            Api::Chat => self.encode(
                "messages",
                json!([{"role": "user", "content": prompt}]),
                max_tokens,
            ),
            Api::Completions => self.encode("prompt", json!(prompt), max_tokens),
        }
    }

    /// The JSON body for a conversation: chat sends the messages as they are; a
    /// completions endpoint gets their contents joined by blank lines as the prompt.
    pub fn body_messages(
        &self,
        messages: &[crate::workload::Message],
        max_tokens: Option<u32>,
    ) -> Bytes {
        if let [only] = messages {
            if only.role == "user" {
                return self.body_with(&only.content, max_tokens);
            }
        }
        match self.api {
            Api::Chat => {
                let msgs: Vec<Value> = messages
                    .iter()
                    .map(|m| json!({"role": m.role, "content": m.content}))
                    .collect();
                self.encode("messages", Value::Array(msgs), max_tokens)
            }
            Api::Completions => {
                let joined: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
                self.body_with(&joined.join("\n\n"), max_tokens)
            }
        }
    }

    /// The output length a request with this `max_tokens` demands in full: all of
    /// `max_tokens` when the body sets `ignore_eos: true`, else its `min_tokens` (never
    /// above `max_tokens`); `None` when the model may stop when it likes. `--extra-body`
    /// wins as it does in the body (it may set or remove `max_tokens`).
    pub fn expected_output(&self, max_tokens: Option<u32>) -> Option<u64> {
        let extra = self.extra.as_ref();
        let max = match extra.and_then(|e| e.get("max_tokens")) {
            Some(v) => v.as_u64(),
            None => max_tokens.map(u64::from),
        };
        let flag = |k: &str| extra.and_then(|e| e.get(k));
        if flag("ignore_eos").and_then(Value::as_bool) == Some(true) {
            return max;
        }
        let min = flag("min_tokens").and_then(Value::as_u64)?;
        Some(max.map_or(min, |m| m.min(min))).filter(|&n| n > 0)
    }

    /// The body around the request's input (`input_key`: `messages` or `prompt`):
    /// the model, streaming with usage, `max_tokens` when set, `--extra-body` last.
    fn encode(&self, input_key: &str, input: Value, max_tokens: Option<u32>) -> Bytes {
        let mut v = json!({
            "model": self.model,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        v[input_key] = input;
        if let Some(n) = max_tokens {
            v["max_tokens"] = json!(n);
        }
        if let Some(extra) = &self.extra {
            merge(&mut v, &Value::Object(extra.clone()));
        }
        Bytes::from(serde_json::to_vec(&v).expect("a JSON value serializes"))
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
    }

    #[test]
    fn extra_body_must_be_an_object() {
        assert!(parse_extra_body("[1]").unwrap_err().contains("JSON object"));
        assert!(parse_extra_body("{")
            .unwrap_err()
            .contains("not valid JSON"));
    }
}
