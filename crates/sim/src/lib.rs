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

pub mod closing;
pub mod config;
pub mod dialects;
pub mod dist;
pub mod engine_mode;
pub mod fault;
pub mod openai;
pub mod plan;
mod realtime;
pub mod request;
mod rng;
pub mod script;
pub mod send_log;
pub mod server;
mod state;
mod stream;
pub mod text;
pub mod tools;

pub use config::{ConfigError, Freeze, SimConfig};
pub use dist::{Dist, DistParseError};
pub use engine_mode::EngineMetrics;
pub use fault::{Fault, UnknownFault};
pub use plan::{plan, planned_delays, Overrides, PlannedChunk, Stall, StreamPlan};
pub use send_log::{SendLog, SentStream};
pub use server::{app, serve, spawn, spawn_with_state, SimServer};
pub use state::SimState;
