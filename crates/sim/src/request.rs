//! What a client asked for: the OpenAI request body (only the fields the sim
//! honours) and the `x-cadence-*` control headers, both validated up front so
//! a bad value is a clear 400, never a silent default.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use crate::fault::{Fault, UnknownFault};
use crate::openai::Dialect;
use crate::plan::{Overrides, Stall};
use crate::tools::{check_history, content_words, tool_words, Tools};

/// Default `stall` fault pause when `x-cadence-stall-ms` is absent.
pub const DEFAULT_STALL: Duration = Duration::from_secs(2);
/// Default `stall` position when `x-cadence-stall-after` is absent.
pub const DEFAULT_STALL_AFTER: u32 = 1;
/// Default `header_delay` wait before the response headers.
pub const DEFAULT_HEADER_DELAY: Duration = Duration::from_secs(10);
/// Default `no_tokens` silence after the role chunk.
pub const DEFAULT_SILENCE: Duration = Duration::from_secs(3600);
/// Tokens per chunk under `multi_token` when `x-cadence-burst` is absent.
pub const MULTI_TOKEN_BURST: u32 = 4;

/// Header names of the per-request controls.
pub mod headers {
    /// A fault by name for this request (see [`crate::Fault`]).
    pub const FAULT: &str = "x-cadence-fault";
    /// The first content chunk's delay in ms, replacing the configured distribution.
    pub const TTFT_MS: &str = "x-cadence-ttft-ms";
    /// The gap between content chunks in ms, replacing the configured distribution.
    pub const ITL_MS: &str = "x-cadence-itl-ms";
    /// Tokens per content chunk, at least 1.
    pub const BURST: &str = "x-cadence-burst";
    /// One pause of this many ms (the wait of `header_delay`, the silence of `no_tokens`).
    pub const STALL_MS: &str = "x-cadence-stall-ms";
    /// Content chunks sent before the pause (default [`super::DEFAULT_STALL_AFTER`]).
    pub const STALL_AFTER: &str = "x-cadence-stall-after";
    /// Chunks sent before a truncating fault cuts the stream
    /// (`error_after_tokens`, `eof_no_done`, `reset`, `huge_event`,
    /// `invalid_json`, and the reasoning chunks of `reasoning_first`).
    pub const FAULT_AFTER: &str = "x-cadence-fault-after";
    /// Use this request index (for the plan and the send log) instead of the
    /// arrival counter; echoed on every response as well.
    pub const REQUEST: &str = "x-cadence-request";
}

/// The model-name prefix that selects a fault for clients that cannot set headers.
pub const FAULT_MODEL_PREFIX: &str = "fault/";

/// Parsed `x-cadence-*` headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// `x-cadence-fault`: the fault to apply; `None`: none by header (a `fault/NAME`
    /// model may still name one).
    pub fault: Option<Fault>,
    /// `x-cadence-ttft-ms`: a fixed first-chunk delay; `None`: the config's distribution.
    pub ttft: Option<Duration>,
    /// `x-cadence-itl-ms`: a fixed gap between chunks; `None`: the config's distribution.
    pub itl: Option<Duration>,
    /// `x-cadence-burst`: tokens per chunk (at least 1); `None`: the config's.
    pub burst: Option<u32>,
    /// `x-cadence-stall-ms`: one pause (or the `header_delay` / `no_tokens` wait).
    pub stall: Option<Duration>,
    /// `x-cadence-stall-after`: content chunks before the pause.
    pub stall_after: Option<u32>,
    /// `x-cadence-fault-after`: chunks before a truncating fault cuts the stream.
    pub fault_after: Option<u32>,
    /// `x-cadence-request`: the request's index; `None`: the arrival counter's.
    pub request: Option<u64>,
    /// The W3C `traceparent` the request came with (one header; `--otlp` makes the
    /// sim's span a child of it).
    pub traceparent: Option<String>,
}

/// Why a request was refused with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A control header is not a whole number.
    #[error("header {name} must be a whole number, got `{value}`")]
    Header {
        /// The header's name.
        name: &'static str,
        /// Its value as sent.
        value: String,
    },
    /// `x-cadence-burst` is 0.
    #[error("header x-cadence-burst must be at least 1")]
    ZeroBurst,
    /// The fault named (by header or model) is not one the sim knows.
    #[error(transparent)]
    UnknownFault(#[from] UnknownFault),
    /// The body is not JSON of the endpoint's shape (the parser's message).
    #[error("the request body is not valid JSON for this endpoint: {0}")]
    Body(String),
    /// The request asks for 0 output tokens.
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// The fault shapes chat streams only, and the request is not chat.
    #[error("fault `{0}` only applies to /v1/chat/completions")]
    ChatOnlyFault(Fault),
    /// The fault shapes OpenAI chat and completions streams only.
    #[error("fault `{0}` only applies to the OpenAI chat and completions endpoints")]
    OpenAiOnlyFault(Fault),
    /// The declared tools, `tool_choice` or the history's tool traffic make no sense (why).
    #[error("tools: {0}")]
    Tools(String),
}

/// The 400 a refused request gets: the OpenAI error envelope, with the valid fault
/// names when the fault was unknown.
pub(crate) fn bad_request(err: &RequestError) -> Response {
    let mut error = serde_json::json!({
        "message": err.to_string(),
        "type": "invalid_request_error",
        "code": 400,
    });
    if matches!(err, RequestError::UnknownFault(_)) {
        error["valid_faults"] = Fault::ALL.iter().map(|(_, n)| *n).collect();
    }
    let body = serde_json::json!({ "error": error }).to_string();
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn number<T: std::str::FromStr>(
    map: &HeaderMap,
    name: &'static str,
) -> Result<Option<T>, RequestError> {
    let Some(raw) = map.get(name) else {
        return Ok(None);
    };
    let text = raw.to_str().unwrap_or("").trim();
    text.parse().map(Some).map_err(|_| RequestError::Header {
        name,
        value: String::from_utf8_lossy(raw.as_bytes()).into_owned(),
    })
}

fn millis(map: &HeaderMap, name: &'static str) -> Result<Option<Duration>, RequestError> {
    Ok(number::<u64>(map, name)?.map(Duration::from_millis))
}

impl Controls {
    /// Reads the `x-cadence-*` headers; refused when a number is malformed, the burst is 0
    /// or the fault unknown.
    pub fn from_headers(map: &HeaderMap) -> Result<Self, RequestError> {
        let fault = match map.get(headers::FAULT) {
            Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).parse::<Fault>()?),
            None => None,
        };
        let burst = number::<u32>(map, headers::BURST)?;
        if burst == Some(0) {
            return Err(RequestError::ZeroBurst);
        }
        Ok(Controls {
            fault,
            ttft: millis(map, headers::TTFT_MS)?,
            itl: millis(map, headers::ITL_MS)?,
            burst,
            stall: millis(map, headers::STALL_MS)?,
            stall_after: number(map, headers::STALL_AFTER)?,
            fault_after: number(map, headers::FAULT_AFTER)?,
            request: number(map, headers::REQUEST)?,
            traceparent: map
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        })
    }

    /// What the controls and the fault change in the stream's plan.
    pub(crate) fn overrides(&self, fault: Option<Fault>) -> Overrides {
        let stall = match fault {
            // For these two the stall header is their own duration.
            Some(Fault::HeaderDelay | Fault::NoTokens) => None,
            Some(Fault::Stall) => Some(Stall {
                after: self.stall_after.unwrap_or(DEFAULT_STALL_AFTER),
                duration: self.stall.unwrap_or(DEFAULT_STALL),
            }),
            _ => self.stall.map(|duration| Stall {
                after: self.stall_after.unwrap_or(DEFAULT_STALL_AFTER),
                duration,
            }),
        };
        let burst = match fault {
            Some(Fault::MultiToken) => Some(self.burst.unwrap_or(MULTI_TOKEN_BURST)),
            _ => self.burst,
        };
        Overrides {
            ttft: self.ttft,
            itl: self.itl,
            burst,
            stall,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawBody {
    model: Option<String>,
    messages: Option<Vec<Value>>,
    prompt: Option<Value>,
    stream: Option<bool>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    stream_options: Option<RawStreamOptions>,
    return_token_ids: Option<bool>,
    // The other dialects' names for the same things.
    /// Responses: a string or a list of messages.
    input: Option<Value>,
    max_output_tokens: Option<u32>,
    /// Ollama: `num_predict`.
    options: Option<RawParameters>,
    /// TGI `max_new_tokens`, KServe `max_tokens` / `stream`.
    parameters: Option<RawParameters>,
    /// SGLang: `max_new_tokens`.
    sampling_params: Option<RawParameters>,
    /// llama.cpp.
    n_predict: Option<i64>,
    /// TGI's prompt.
    inputs: Option<Value>,
    /// SGLang's prompt.
    text: Option<Value>,
    /// KServe's prompt.
    text_input: Option<Value>,
    /// Declared tools (chat, Responses or Anthropic shape) and how to use them.
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    /// Responses: the history lives on the server.
    previous_response_id: Option<String>,
}

/// A `num_predict` / `n_predict`: negative means "no limit".
fn predict(n: Option<i64>) -> Option<u32> {
    n.and_then(|n| u32::try_from(n).ok())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawParameters {
    num_predict: Option<i64>,
    max_new_tokens: Option<u32>,
    max_tokens: Option<u32>,
    stream: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawStreamOptions {
    include_usage: Option<bool>,
    continuous_usage_stats: Option<bool>,
}

/// The parts of a chat or completions request the sim honours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiRequest {
    /// The `model` the body names (`fault/NAME` selects a fault); `None` when absent.
    pub model: Option<String>,
    /// Whether to stream the reply (`stream`, or the dialect's parameters' `stream`; false
    /// when not given).
    pub stream: bool,
    /// The body said whether to stream (Ollama streams unless told not to).
    pub stream_given: bool,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<u32>,
    /// `stream_options.include_usage`: a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (vLLM): running usage on every chunk.
    pub continuous_usage: bool,
    /// `return_token_ids: true` (vLLM): each chunk carries its `token_ids`.
    pub token_ids: bool,
    /// See [`prompt_tokens`].
    pub prompt_tokens: u32,
    /// The tools the request declares, if any.
    pub tools: Option<Tools>,
    /// Why `tools` / `tool_choice` make no sense, if they do not (refused only
    /// where the sim calls tools: see [`ApiRequest::check_tools`]).
    pub tools_error: Option<String>,
    /// The messages (chat, Anthropic) or input items (Responses), for the prefix
    /// cache's view of the history (see [`crate::history`]).
    pub messages: Vec<Value>,
    /// Responses' `previous_response_id` was given: the history lives on the
    /// server, so tool outputs may answer calls this request does not repeat.
    pub previous_response: bool,
}

impl ApiRequest {
    /// Reads a request body of any dialect (an empty body is an empty request); refused
    /// when it is not JSON of the expected shape or asks for 0 tokens.
    pub fn parse(body: &[u8]) -> Result<Self, RequestError> {
        let raw: RawBody = if body.iter().all(u8::is_ascii_whitespace) {
            RawBody::default()
        } else {
            serde_json::from_slice(body).map_err(|e| RequestError::Body(e.to_string()))?
        };
        let params = [&raw.options, &raw.parameters, &raw.sampling_params];
        let param = |f: &dyn Fn(&RawParameters) -> Option<u32>| {
            params.iter().find_map(|p| p.as_ref().and_then(f))
        };
        let max_tokens = raw
            .max_completion_tokens
            .or(raw.max_tokens)
            .or(raw.max_output_tokens)
            .or(param(&|p| p.max_new_tokens))
            .or(param(&|p| p.max_tokens))
            .or(param(&|p| predict(p.num_predict)))
            .or(predict(raw.n_predict));
        if max_tokens == Some(0) {
            return Err(RequestError::ZeroMaxTokens);
        }
        let opts = raw.stream_options.unwrap_or_default();
        let input_messages = raw
            .input
            .as_ref()
            .and_then(Value::as_array)
            .map(Vec::as_slice);
        let prompt = raw
            .prompt
            .as_ref()
            .or(raw.input.as_ref().filter(|i| i.is_string()))
            .or(raw.inputs.as_ref())
            .or(raw.text.as_ref())
            .or(raw.text_input.as_ref());
        let disable_parallel = raw
            .tool_choice
            .as_ref()
            .and_then(|c| c.get("disable_parallel_tool_use"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let tools = Tools::parse(
            raw.tools.as_ref(),
            raw.tool_choice.as_ref(),
            raw.parallel_tool_calls.unwrap_or(true) && !disable_parallel,
        );
        let stream = raw.stream.or(params
            .iter()
            .find_map(|p| p.as_ref().and_then(|p| p.stream)));
        Ok(ApiRequest {
            prompt_tokens: prompt_tokens(raw.messages.as_deref().or(input_messages), prompt),
            model: raw.model,
            stream: stream.unwrap_or(false),
            stream_given: stream.is_some(),
            max_tokens,
            include_usage: opts.include_usage.unwrap_or(false),
            continuous_usage: opts.continuous_usage_stats.unwrap_or(false),
            token_ids: raw.return_token_ids.unwrap_or(false),
            tools_error: tools.as_ref().err().cloned(),
            tools: tools.unwrap_or(None),
            previous_response: raw.previous_response_id.is_some(),
            messages: raw
                .messages
                .or(raw.input.filter(Value::is_array).and_then(|i| match i {
                    Value::Array(a) => Some(a),
                    _ => None,
                }))
                .unwrap_or_default(),
        })
    }

    /// Checks the declared tools and the tool traffic of the history (see
    /// [`check_history`]) for a dialect the sim calls tools in; Responses items
    /// only pair ids, and not at all after a `previous_response_id`.
    pub fn check_tools(&self, dialect: Dialect) -> Result<(), RequestError> {
        if let (Some(e), true) = (&self.tools_error, crate::tools::supports(dialect)) {
            return Err(RequestError::Tools(e.clone()));
        }
        let loose = match dialect {
            Dialect::Chat | Dialect::Anthropic => false,
            Dialect::Responses if !self.previous_response => true,
            _ => return Ok(()),
        };
        check_history(&self.messages, loose).map_err(RequestError::Tools)
    }

    /// The fault named by a `fault/NAME` model, if the model is one.
    pub fn model_fault(&self) -> Result<Option<Fault>, UnknownFault> {
        match self
            .model
            .as_deref()
            .and_then(|m| m.strip_prefix(FAULT_MODEL_PREFIX))
        {
            Some(name) => name.parse().map(Some),
            None => Ok(None),
        }
    }
}

/// The prompt-token estimate: whitespace-separated words in every message's
/// text content (string, or the `text` of content parts) and tool traffic
/// (see [`message_tokens`]) plus the `prompt` (a string, an array of strings,
/// or an array of token ids counted one each).
pub fn prompt_tokens(messages: Option<&[Value]>, prompt: Option<&Value>) -> u32 {
    let from_messages = messages
        .unwrap_or_default()
        .iter()
        .map(message_tokens)
        .fold(0u32, u32::saturating_add);
    from_messages.saturating_add(prompt.map_or(0, content_words))
}

/// One message's (or Responses input item's) share of [`prompt_tokens`]: its
/// text content, plus the words of its tool calls' arguments (the string values,
/// one word per token the sim generated) and of its tool results.
pub fn message_tokens(m: &Value) -> u32 {
    m.get("content")
        .map_or(0, content_words)
        .saturating_add(tool_words(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn headers_parse_and_bad_values_are_named() {
        let mut h = HeaderMap::new();
        h.insert(headers::FAULT, HeaderValue::from_static("stall"));
        h.insert(headers::ITL_MS, HeaderValue::from_static("7"));
        h.insert(headers::STALL_AFTER, HeaderValue::from_static("2"));
        let c = Controls::from_headers(&h).unwrap();
        assert_eq!(c.fault, Some(Fault::Stall));
        assert_eq!(c.itl, Some(Duration::from_millis(7)));
        assert_eq!(c.stall_after, Some(2));
        h.insert(headers::TTFT_MS, HeaderValue::from_static("soon"));
        let err = Controls::from_headers(&h).unwrap_err().to_string();
        assert!(
            err.contains("x-cadence-ttft-ms") && err.contains("soon"),
            "{err}"
        );
        h.remove(headers::TTFT_MS);
        h.insert(headers::FAULT, HeaderValue::from_static("bogus"));
        let err = Controls::from_headers(&h).unwrap_err().to_string();
        assert!(err.contains("bogus") && err.contains("split_utf8"), "{err}");
    }

    #[test]
    fn body_fields_and_prompt_estimate() {
        let r = ApiRequest::parse(
            br#"{"model":"fault/crlf","stream":true,"max_tokens":9,"max_completion_tokens":5,
                "stream_options":{"include_usage":true},
                "messages":[{"role":"system","content":"be brief"},
                            {"role":"user","content":[{"type":"text","text":"hello there  world"}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, Some(5));
        assert!(r.stream && r.include_usage && !r.continuous_usage && !r.token_ids);
        assert_eq!(r.prompt_tokens, 5);
        let ids = ApiRequest::parse(br#"{"prompt":"a","return_token_ids":true}"#).unwrap();
        assert!(ids.token_ids, "vLLM's return_token_ids is honoured");
        assert_eq!(r.model_fault().unwrap(), Some(Fault::Crlf));
        let p = ApiRequest::parse(br#"{"prompt":["a b", "c"],"stream":null}"#).unwrap();
        assert_eq!((p.prompt_tokens, p.stream), (3, false));
        assert_eq!(
            ApiRequest::parse(br#"{"prompt":[1,2,3,4]}"#)
                .unwrap()
                .prompt_tokens,
            4
        );
        assert!(ApiRequest::parse(b"{nope").is_err());
        assert_eq!(
            ApiRequest::parse(br#"{"max_tokens":0}"#),
            Err(RequestError::ZeroMaxTokens)
        );
        assert!(ApiRequest::parse(br#"{"model":"fault/x"}"#)
            .unwrap()
            .model_fault()
            .is_err());
    }
}
