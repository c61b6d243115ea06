//! The OpenAI JSON shapes the sim writes (stream chunks, whole completions,
//! errors), as typed structs so field order and `null`s match real servers.

use serde::Serialize;

/// Which API the request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /v1/completions`
    Completion,
    /// `POST /v1/responses` (OpenAI Responses events).
    Responses,
    /// `POST /v1/messages` (Anthropic Messages events).
    Anthropic,
    /// `POST /api/chat` (Ollama, NDJSON).
    OllamaChat,
    /// `POST /api/generate` (Ollama, NDJSON).
    OllamaGenerate,
    /// `POST /generate_stream` (TGI: one token per event).
    Tgi,
    /// `POST /generate` (SGLang: the whole text so far per event).
    Sglang,
    /// `POST /v2/models/{model}/generate_stream` (KServe v2 / Triton).
    Kserve,
    /// `POST /completion` (llama.cpp's native API).
    Llamacpp,
    /// `GET /v1/realtime` upgraded to a WebSocket: OpenAI Realtime text events, one
    /// message each.
    Realtime,
}

impl Dialect {
    /// OpenAI chat or completions: `choices`, usage chunks and `[DONE]`.
    pub fn is_openai(self) -> bool {
        matches!(self, Dialect::Chat | Dialect::Completion)
    }

    /// Ollama writes newline-delimited JSON, everyone else SSE.
    pub fn content_type(self) -> &'static str {
        match self {
            // A WebSocket message per line.
            Dialect::OllamaChat | Dialect::OllamaGenerate | Dialect::Realtime => {
                "application/x-ndjson"
            }
            _ => "text/event-stream",
        }
    }

    /// Each event's name goes in an `event:` line (its JSON `type`).
    pub fn named_events(self) -> bool {
        matches!(self, Dialect::Responses | Dialect::Anthropic)
    }

    /// The stream ends with `data: [DONE]`.
    pub fn done_marker(self) -> bool {
        matches!(self, Dialect::Chat | Dialect::Completion | Dialect::Sglang)
    }

    /// Every content event carries the running token count (SGLang's `meta_info`).
    pub fn counts_every_chunk(self) -> bool {
        self == Dialect::Sglang
    }
}

/// Token counts of a reply, in OpenAI's `usage` shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt tokens counted (see [`crate::request::prompt_tokens`]).
    pub prompt_tokens: u32,
    /// Output tokens sent so far (all of them in the final usage).
    pub completion_tokens: u32,
    /// Prompt plus completion tokens.
    pub total_tokens: u32,
}

impl Usage {
    /// The usage of `prompt_tokens` in and `completion_tokens` out, with their total.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    /// vLLM's per-request timing, on the usage chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCall<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: Option<&'a str>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

/// What one choice of one chunk says.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    /// The chat role chunk: `{"role":"assistant","content":""}` (or `null`).
    Role {
        /// Write `"content": null` rather than `""`.
        null_content: bool,
    },
    /// Visible text; `None` writes `null`.
    Content(Option<&'a str>),
    /// `reasoning_content` text.
    Reasoning(&'a str),
    /// A delta of tool call `index`; its first one names the call and function
    /// (`head`: the call's id and the function's name).
    Tool {
        /// Which of the reply's calls the delta belongs to (0-based).
        index: u32,
        /// The call's id and function name, on its first delta only.
        head: Option<(&'a str, &'a str)>,
        /// A fragment of the call's JSON arguments.
        arguments: &'a str,
    },
}

/// Serializes chunks for one stream.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    /// The wire shape the chunks take.
    pub dialect: Dialect,
    /// The response id every chunk repeats (`chatcmpl-…` in chat).
    pub id: &'a str,
    /// The `created` field: wall-clock Unix seconds when the response began.
    pub created: u64,
    /// The model name every chunk repeats (the request's, else the sim's).
    pub model: &'a str,
    /// Pretty-print (multi-line JSON, for the `multiline_data` fault).
    pub pretty: bool,
}

/// The id of the `tool_calls` fault's one fixed call.
pub const TOOL_CALL_ID: &str = "call_cadence_0";
/// The function the `tool_calls` fault's call names.
pub const TOOL_NAME: &str = "lookup";

impl Writer<'_> {
    fn object(&self) -> &'static str {
        match self.dialect {
            Dialect::Chat => "chat.completion.chunk",
            _ => "text_completion",
        }
    }

    fn write<C: Serialize>(&self, choices: C, usage: Option<Usage>) -> String {
        self.write_with(choices, usage, None)
    }

    fn write_with<C: Serialize>(
        &self,
        choices: C,
        usage: Option<Usage>,
        metrics: Option<serde_json::Value>,
    ) -> String {
        let chunk = Chunk {
            id: self.id,
            object: self.object(),
            created: self.created,
            model: self.model,
            choices,
            usage,
            metrics,
        };
        let out = if self.pretty {
            serde_json::to_string_pretty(&chunk)
        } else {
            serde_json::to_string(&chunk)
        };
        out.expect("chunk structs always serialize")
    }

    /// One OpenAI chunk with a single choice: chat's delta, else completions' text.
    /// The other dialects' content events are written from the same pieces by the
    /// dialects module, which hands OpenAI's back here.
    pub fn chunk(
        &self,
        piece: Piece<'_>,
        finish_reason: Option<&str>,
        token_ids: Option<&[u32]>,
        usage: Option<Usage>,
    ) -> String {
        debug_assert!(self.dialect.is_openai(), "{:?} is not OpenAI", self.dialect);
        match self.dialect {
            Dialect::Chat => {
                let delta = match piece {
                    Piece::Role { null_content } => Delta {
                        role: Some("assistant"),
                        content: Some(if null_content { None } else { Some("") }),
                        ..Delta::default()
                    },
                    Piece::Content(text) => Delta {
                        content: Some(text),
                        ..Delta::default()
                    },
                    Piece::Reasoning(text) => Delta {
                        reasoning_content: Some(text),
                        ..Delta::default()
                    },
                    Piece::Tool {
                        index,
                        head,
                        arguments,
                    } => Delta {
                        tool_calls: Some([ToolCall {
                            index,
                            id: head.map(|h| h.0),
                            kind: head.map(|_| "function"),
                            function: Function {
                                name: head.map(|h| h.1),
                                arguments,
                            },
                        }]),
                        ..Delta::default()
                    },
                };
                let choice = ChatChoice {
                    index: 0,
                    delta,
                    logprobs: None,
                    finish_reason,
                    token_ids,
                };
                self.write([choice], usage)
            }
            _ => {
                let text = match piece {
                    Piece::Role { .. } => Some(""),
                    Piece::Content(t) => t,
                    Piece::Reasoning(t) | Piece::Tool { arguments: t, .. } => Some(t),
                };
                let choice = TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
                    finish_reason,
                    token_ids,
                };
                self.write([choice], usage)
            }
        }
    }

    /// The final `choices: []` chunk that carries only usage.
    pub fn usage_only(&self, usage: Usage) -> String {
        self.write([(); 0], Some(usage))
    }

    /// The final usage chunk with vLLM's per-request `metrics` object beside the usage.
    pub fn usage_with_metrics(&self, usage: Usage, metrics: serde_json::Value) -> String {
        self.write_with([(); 0], Some(usage), Some(metrics))
    }
}

/// `{"error":{"message":…,"type":…,"code":…}}`, the OpenAI error envelope.
pub fn error_body(message: &str, kind: &str, code: u16) -> String {
    serde_json::json!({ "error": { "message": message, "type": kind, "code": code } }).to_string()
}

#[derive(Serialize)]
struct Completion<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [C; 1],
    usage: Usage,
}

#[derive(Serialize)]
struct MessageChoice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: &'a str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

/// A whole (non-streamed) completion.
pub fn completion(w: &Writer<'_>, text: &str, finish_reason: &str, usage: Usage) -> String {
    match w.dialect {
        Dialect::Chat => serde_json::to_string(&Completion {
            id: w.id,
            object: "chat.completion",
            created: w.created,
            model: w.model,
            choices: [MessageChoice {
                index: 0,
                message: Message {
                    role: "assistant",
                    content: text,
                },
                logprobs: None,
                finish_reason,
            }],
            usage,
        }),
        _ => serde_json::to_string(&Completion {
            id: w.id,
            object: "text_completion",
            created: w.created,
            model: w.model,
            choices: [TextChoice {
                index: 0,
                text: Some(text),
                logprobs: None,
                finish_reason: Some(finish_reason),
                token_ids: None,
            }],
            usage,
        }),
    }
    .expect("completion structs always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(dialect: Dialect) -> Writer<'static> {
        Writer {
            dialect,
            id: "chatcmpl-1",
            created: 7,
            model: "m",
            pretty: false,
        }
    }

    #[test]
    fn chat_chunks_look_like_openai() {
        let w = writer(Dialect::Chat);
        assert_eq!(
            w.chunk(
                Piece::Role {
                    null_content: false
                },
                None,
                None,
                None
            ),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#
        );
        assert_eq!(
            w.chunk(
                Piece::Content(Some(" hi")),
                Some("length"),
                Some(&[3]),
                Some(Usage::new(2, 1))
            ),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":"length","token_ids":[3]}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}"#
        );
        assert_eq!(
            w.usage_only(Usage::new(1, 2)),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#
        );
        let tool = w.chunk(
            Piece::Tool {
                index: 0,
                head: Some((TOOL_CALL_ID, TOOL_NAME)),
                arguments: "{",
            },
            None,
            None,
            None,
        );
        assert!(tool.contains(r#""tool_calls":[{"index":0,"id":"call_cadence_0","type":"function","function":{"name":"lookup","arguments":"{"}}]"#), "{tool}");
    }

    #[test]
    fn completion_chunks_use_text() {
        let w = writer(Dialect::Completion);
        assert_eq!(
            w.chunk(Piece::Content(Some(" a")), None, None, None),
            r#"{"id":"chatcmpl-1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}]}"#
        );
    }
}
