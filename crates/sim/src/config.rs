//! The knobs of the simulated server: how fast it "thinks" and "types".
//! Plain data with a realistic default, validated once before serving.

use std::time::Duration;

use crate::dist::Dist;

/// `tool_call_probability` by default: most steps of an agent call a tool.
pub const DEFAULT_TOOL_CALL_PROBABILITY: f64 = 0.7;

/// How the simulated model behaves. Every field can also be overridden per
/// request with `x-cadence-*` headers (see the crate docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Seeds every per-request generator: same seed and request index ⇒ same
    /// timings and text.
    pub seed: u64,
    /// Time from receiving the request to the first content chunk.
    pub ttft: Dist,
    /// Time between consecutive content chunks.
    pub itl: Dist,
    /// Tokens per content chunk (values below 1 are treated as 1).
    pub burst: u32,
    /// Per gap between chunks, the chance of an extra stall drawn from `stall`.
    pub stall_probability: f64,
    /// Duration of a random stall.
    pub stall: Dist,
    /// Output tokens when the request names neither `max_tokens` nor
    /// `max_completion_tokens`.
    pub default_max_tokens: u32,
    /// The name listed by `/v1/models` (any name is accepted in requests).
    pub model: String,
    /// On shutdown, how long in-flight streams may run before they are cut.
    pub drain_timeout: Duration,
    /// A window in which the whole server stalls (FAULTS 34), from the sim's start.
    pub freeze: Option<Freeze>,
    /// A window in which the whole server runs `factor` times slower, from the sim's start.
    pub slow: Option<Slow>,
    /// Time tokens with this engine model (continuous batching, KV cache, roofline
    /// steps) instead of the flat `ttft`/`itl` cadence. Requests with a fault or a
    /// per-request timing header still follow the flat plan.
    pub engine: Option<cadence_engine::EngineSpec>,
    /// An endpoint's twin answers instead of the engine model (`engine` then names it
    /// and sets its seed; `cadence sim --twin`).
    pub twin: Option<std::sync::Arc<cadence_engine::twin::Twin>>,
    /// Extra requests no client sees, sent to the engine at set times from its first
    /// request, to drive it into a known cause of slow streams (engine mode only).
    pub inject: Vec<cadence_engine::Injection>,
    /// When a request declares tools and leaves the choice to the model
    /// (`tool_choice` auto or absent), the chance that its reply is tool calls
    /// (drawn per request from the seed).
    pub tool_call_probability: f64,
    /// Tool calls per tool-calling reply (parallel calls), unless the request
    /// turns parallel calls off.
    pub parallel_tool_calls: u32,
    /// Speculative decoding: the mean tokens per decode step (the acceptance length,
    /// the bonus token included), from 1 to [`MAX_SPEC_ACCEPT_LEN`]. The first chunk
    /// carries one token (the prefill's), each later one `floor(s·L) − floor((s−1)·L)`
    /// at step `s`, on the usual gap: a step's time does not grow with its tokens.
    /// Overrides `burst` (flat cadence; engine mode does not speculate).
    pub spec_accept_len: Option<f64>,
    /// Prefill/decode disaggregation (`--pd-transfer`): each flat-timed request's KV
    /// cache moves from the prefill worker to the decode worker before its first
    /// token, taking this (fixed plus per prompt token); every chunk comes that much
    /// later, and `/metrics` counts the transfer in vLLM's NIXL and SGLang's names.
    pub pd_transfer: Option<cadence_engine::PdTransfer>,
}

/// The longest mean acceptance length the sim takes (16 tokens a step).
pub const MAX_SPEC_ACCEPT_LEN: f64 = 16.0;

/// The server stops producing tokens from `at` (after the sim starts) for `duration`:
/// streams already running resume where they were, one freeze later; requests that
/// arrive during it start when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freeze {
    /// When the freeze begins, from the sim's start.
    pub at: Duration,
    /// How long no token leaves.
    pub duration: Duration,
}

/// The server runs `factor` times slower from `at` (after the sim starts) for
/// `duration`: every gap of a stream that falls inside the window (the gaps between
/// tokens, and the wait for the first) takes `factor` times as long; a gap that straddles
/// an edge is stretched for its part inside. In engine mode the engine's steps slow
/// down alike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slow {
    /// When the slow-down begins, from the sim's start.
    pub at: Duration,
    /// How long it lasts.
    pub duration: Duration,
    /// Above zero and finite; 2.0 doubles the gaps, 0.5 halves them.
    pub factor: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            ttft: Dist::Uniform(Duration::from_millis(20), Duration::from_millis(60)),
            itl: Dist::Normal {
                mean: Duration::from_millis(10),
                stddev: Duration::from_millis(1),
            },
            burst: 1,
            stall_probability: 0.0,
            stall: Dist::Fixed(Duration::from_millis(250)),
            inject: Vec::new(),
            twin: None,
            default_max_tokens: 128,
            model: "cadence-sim".to_owned(),
            drain_timeout: Duration::from_secs(5),
            freeze: None,
            slow: None,
            engine: None,
            tool_call_probability: DEFAULT_TOOL_CALL_PROBABILITY,
            parallel_tool_calls: 1,
            spec_accept_len: None,
            pd_transfer: None,
        }
    }
}

/// A configuration the server refuses to start with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The speculation's acceptance length is outside 1 to 16 (the value given).
    #[error("--spec-accept-len must be from 1 to 16 tokens a step (got {0})")]
    SpecAcceptLen(f64),
    /// `burst` is 0 (the value given).
    #[error("burst must be at least 1 token per chunk (got {0})")]
    Burst(u32),
    /// `stall_probability` is outside [0, 1] (the value given).
    #[error("stall probability must be between 0 and 1 (got {0})")]
    StallProbability(f64),
    /// `default_max_tokens` is 0.
    #[error("default max tokens must be at least 1")]
    MaxTokens,
    /// `model` is empty or blank.
    #[error("model name must not be empty")]
    Model,
    /// `tool_call_probability` is outside [0, 1] (the value given).
    #[error("tool-call probability must be between 0 and 1 (got {0})")]
    ToolCallProbability(f64),
    /// `parallel_tool_calls` is 0.
    #[error("parallel tool calls must be at least 1")]
    ParallelToolCalls,
    /// `slow.factor` is zero, negative or not finite (the value given).
    #[error("slow-down factor must be above zero and finite (got {0})")]
    SlowFactor(f64),
    /// The engine spec cannot be simulated.
    #[error("engine: {0}")]
    Engine(cadence_engine::SpecError),
}

impl SimConfig {
    /// Checks the values that have no sensible meaning when out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.burst == 0 {
            return Err(ConfigError::Burst(self.burst));
        }
        if !(0.0..=1.0).contains(&self.stall_probability) {
            return Err(ConfigError::StallProbability(self.stall_probability));
        }
        if !(0.0..=1.0).contains(&self.tool_call_probability) {
            return Err(ConfigError::ToolCallProbability(self.tool_call_probability));
        }
        if self.parallel_tool_calls == 0 {
            return Err(ConfigError::ParallelToolCalls);
        }
        if let Some(l) = self
            .spec_accept_len
            .filter(|l| !(1.0..=MAX_SPEC_ACCEPT_LEN).contains(l))
        {
            return Err(ConfigError::SpecAcceptLen(l));
        }
        if self.default_max_tokens == 0 {
            return Err(ConfigError::MaxTokens);
        }
        if self.model.trim().is_empty() {
            return Err(ConfigError::Model);
        }
        if let Some(s) = self
            .slow
            .filter(|s| !(s.factor.is_finite() && s.factor > 0.0))
        {
            return Err(ConfigError::SlowFactor(s.factor));
        }
        if let Some(e) = &self.engine {
            e.validate().map_err(ConfigError::Engine)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_validation_names_the_field() {
        SimConfig::default().validate().unwrap();
        let bad = SimConfig {
            stall_probability: 1.5,
            ..SimConfig::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("stall probability"));
        let bad = SimConfig {
            burst: 0,
            ..SimConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("burst"));
        for factor in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let bad = SimConfig {
                slow: Some(Slow {
                    at: Duration::ZERO,
                    duration: Duration::from_secs(1),
                    factor,
                }),
                ..SimConfig::default()
            };
            assert!(
                matches!(bad.validate(), Err(ConfigError::SlowFactor(_))),
                "{factor}"
            );
        }
    }
}
