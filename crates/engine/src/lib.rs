//! `cadence-engine`: a deterministic, discrete-event model of an LLM serving engine in
//! virtual nanoseconds. No sockets, no clocks: the same code drives `cadence plan`
//! (pure virtual time) and the real-time `cadence sim --preset` (tokio timers).
//!
//! # The model
//! One decode loop runs *steps*. Before each step the scheduler admits waiting
//! requests while a batch slot and KV-cache room allow, then one step serves every
//! running sequence: decoding ones produce 1 token (or, with speculation, 1..=k+1),
//! prefilling ones advance their prompt by a chunk from the step's token budget.
//! A step lasts
//!
//! ```text
//! max(bytes_read / (bandwidth · gpus · mbu), flops / (peak · gpus · mfu))
//!     + tensor-parallel all-reduces + step, per-layer and per-sequence overheads
//!     + the draft model's passes (speculation)
//! bytes_read = weight bytes read + Σ kv_bytes_per_token · context of each sequence
//! flops      = 2 · active_params · tokens_in_step + 4 · layers · hidden · Σ attended positions
//! ```
//!
//! times a seeded jitter factor. With disaggregated prefill, prompts are processed
//! by separate prefill workers and reach the decode loop after a KV-transfer delay
//! (the first token with them), so long prompts no longer stretch decode steps. A request may name a prefix (shared prompt or session history) whose
//! computed part it does not prefill again. See [`EngineSpec`] for every parameter,
//! [`presets`] for real ones and docs/src/CALIBRATION.md for how they compare with
//! published measurements.

#![warn(missing_docs)]

pub mod calibrate;
pub mod drive;
pub mod engine;
pub mod fit;
pub mod inject;
pub mod measured;
mod notes;
pub mod pd;
mod prefix_cache;
pub mod presets;
pub mod reach;
pub mod rng;
pub mod spec;
pub mod twin;

pub use drive::{
    plan_level, plan_level_on, Arrivals, Backend, PlanLevel, Sessions, Start, Workload,
};
pub use engine::{Engine, Event, Prefix, StepInfo};
pub use inject::{Cause, Injection};
pub use pd::PdTransfer;
pub use presets::{preset, PRESETS};
pub use spec::{
    EngineSpec, HardwareSpec, KvPolicy, ModelSpec, Prefill, ServingSpec, SpecError, Speculation,
    StepWork,
};
