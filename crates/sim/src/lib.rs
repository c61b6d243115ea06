//! `cadence-sim`: a seeded, deterministic OpenAI-compatible streaming server.
//! It is Cadence's default benchmark target and the test suite's fault
//! injector; its send log is the ground truth a fidelity check compares the
//! client's timestamps against.
//!
//! # Endpoints
//! `POST /v1/chat/completions`, `POST /v1/completions` (SSE when
//! `"stream": true`, else one JSON completion after the whole planned delay),
//! `GET /v1/models`, `GET /health`, `GET /metrics` (OpenMetrics text; with an
//! engine model, vLLM's metric names: queue, prefill and decode time, batch size
//! per step, running/waiting, KV-cache usage, token counters).
//!
//! # Engine timing
//! With [`SimConfig::engine`] set, streams are timed by the engine model of
//! `cadence-engine` (see [`engine_mode`]): requests share batched decode steps, so
//! ITL grows with load, long prompts stall decode, speculation sends multi-token
//! chunks. A request with a fault or a per-request timing header is served by the
//! flat plan instead (its fault applies exactly as without an engine).
//!
//! # What a stream looks like
//! Chat: a role chunk (`delta: {"role":"assistant","content":""}`) at once,
//! then one content chunk per `burst` tokens on the planned cadence, the last
//! with `finish_reason: "length"`, then (with `stream_options.include_usage`)
//! a `choices: []` usage chunk, then `data: [DONE]`. With
//! `stream_options.continuous_usage_stats` every chunk carries running usage;
//! with `return_token_ids: true` every content chunk carries its `token_ids`.
//! Completions: the same without the role chunk, `text` instead of `delta`.
//! A token is one word with a leading space from a small vocabulary
//! ([`text::VOCAB`]). The prompt-token count is the number of
//! whitespace-separated words in the messages' text or the prompt
//! ([`request::prompt_tokens`]).
//!
//! # Tool calls
//! A chat, Responses or Anthropic Messages request that declares tools gets tool
//! calls instead of text when `tool_choice` requires one (`required`, `any`, a
//! named tool), never with `none`, and under `auto` (or none given) with
//! [`SimConfig::tool_call_probability`], drawn per request from the seed.
//! [`SimConfig::parallel_tool_calls`] calls per reply (one when the request turns
//! parallel calls off); the reply's tokens are shared out over them, one argument
//! fragment per token on the usual schedule, the fragments of a call joining into a
//! JSON object whose fields are the tool's `parameters` (`input_schema`)
//! properties (else `query`), with string values. See [`tools`] for the events of
//! each dialect. Earlier tool traffic in the history counts as prompt (the words of
//! the arguments' values and of the results), and a result that answers no call made
//! earlier in the request (in chat and Anthropic: in the turn right after it) is
//! a 400.
//!
//! # Prefix cache
//! In engine mode the prompt's messages are hashed message by message
//! ([`history`]); the part up to the last message boundary an earlier request (or
//! the reply the sim gave it) reached is the prefix the engine's prefix cache skips,
//! so a later step of a session, which resends the earlier prompt and reply, has
//! the TTFT of its new turn only. The flat mode's TTFT does not depend on the
//! prompt, so it has nothing to skip.
//!
//! # Determinism
//! Request `i` (arrival order, or the `x-cadence-request` header) of a sim
//! with seed `s` always gets the same schedule and text: [`plan()`] is a pure
//! function of `(config, i, max_tokens, overrides)` and the stream sleeps to
//! absolute deadlines from the moment the request arrived (tokio's timer has
//! 1 ms resolution, so a chunk leaves within 1 ms after its planned time).
//! Only `created` (wall-clock seconds) varies between runs.
//!
//! # Per-request controls (headers)
//! `x-cadence-fault: NAME` (or model `fault/NAME`), `x-cadence-ttft-ms`,
//! `x-cadence-itl-ms`, `x-cadence-burst`, `x-cadence-stall-ms` with
//! `x-cadence-stall-after: K` (one pause after K content chunks),
//! `x-cadence-fault-after: K` (where truncating faults cut),
//! `x-cadence-request: N`. Every response carries `x-cadence-request`.
//! See [`Fault`] for the fault names. Non-streamed requests honour only
//! `status_429`, `status_503`, `html_200` and `header_delay`; the other
//! faults shape streams.

#![warn(missing_docs)]

pub mod closing;
pub mod config;
pub mod dialects;
pub mod dist;
pub mod engine_mode;
pub mod fault;
pub mod history;
pub mod openai;
pub mod pd_metrics;
pub mod plan;
mod realtime;
pub mod request;
mod rng;
pub mod script;
pub mod send_log;
pub mod server;
pub mod spec_metrics;
mod state;
mod stream;
pub mod text;
pub mod tools;
pub mod trace;
pub mod twin_metrics;
mod warp;

pub use config::{ConfigError, Freeze, SimConfig, Slow};
pub use dist::{Dist, DistParseError};
pub use engine_mode::EngineMetrics;
pub use fault::{Fault, UnknownFault};
pub use plan::{plan, planned_delays, Overrides, PlannedChunk, Stall, StreamPlan};
pub use send_log::{SendLog, SentStream};
pub use server::{app, serve, spawn, spawn_with_state, SimServer};
pub use state::SimState;
