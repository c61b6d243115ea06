//! Cause injection: extra requests no client sees, submitted to the engine at a set
//! time, sized from the engine's own spec so each drives it into one known cause of a
//! slow stream (a grown batch, a long prompt's prefill sharing steps with decode, a
//! full KV cache with pre-emptions, a queue). Tests name the cause, then check that
//! the server-metrics attribution names it back.

use std::str::FromStr;
use std::time::Duration;

use crate::spec::{EngineSpec, Prefill};

/// A cause a simulator can be driven into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Three quarters of the batch slots fill with short-prompt decoders.
    Batch,
    /// Two prompts of eight prefill chunks each arrive.
    LongPrompt,
    /// Two requests holding half the KV cache arrive, and grow to fill it.
    Kv,
    /// Every batch slot's worth of requests arrives at once, ahead of the clients.
    Queue,
}

impl Cause {
    /// The names `CAUSE@TIME` accepts, in variant order.
    pub const NAMES: &'static [&'static str] = &["batch", "long-prompt", "kv", "queue"];
}

/// `CAUSE@TIME`: the cause, from the engine's start (its first request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    /// What the injected requests drive the engine into.
    pub cause: Cause,
    /// When they are submitted, from the engine's start.
    pub at: Duration,
}

impl FromStr for Injection {
    type Err = String;

    fn from_str(s: &str) -> Result<Injection, String> {
        let (cause, at) = s
            .split_once('@')
            .ok_or_else(|| format!("'{s}' is not CAUSE@TIME (e.g. kv@2s)"))?;
        let cause = match cause.trim() {
            "batch" => Cause::Batch,
            "long-prompt" => Cause::LongPrompt,
            "kv" => Cause::Kv,
            "queue" => Cause::Queue,
            other => {
                return Err(format!(
                    "'{other}' is not a cause; one of {}",
                    Cause::NAMES.join(", ")
                ))
            }
        };
        let at = cadence_core::parse_duration(at.trim())
            .map_err(|e| format!("'{at}' is not a time ({e})"))?;
        Ok(Injection { cause, at })
    }
}

impl Injection {
    /// The requests injected, as (prompt tokens, max tokens), sized from `spec`.
    pub fn requests(&self, spec: &EngineSpec) -> Vec<(u32, u32)> {
        let batch = spec.serving.max_batch.max(1);
        let kv = spec.kv_capacity().min(u32::MAX as u64) as u32;
        match self.cause {
            Cause::Batch => vec![(1, 128); (batch * 3 / 4).max(1) as usize],
            Cause::LongPrompt => {
                let chunk = match spec.serving.prefill {
                    Prefill::Chunked { chunk_tokens } => chunk_tokens,
                    Prefill::Disaggregated { .. } => 512,
                };
                let prompt = (chunk * 8).min(kv / 4).max(1);
                vec![(prompt, 1); 2]
            }
            Cause::Kv => {
                let each = (kv / 4).max(1);
                vec![(each, each); 2]
            }
            Cause::Queue => vec![(1, 256); batch as usize],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sizes_from_the_spec() {
        let i: Injection = "kv@1500ms".parse().unwrap();
        assert_eq!(i.cause, Cause::Kv);
        assert_eq!(i.at, Duration::from_millis(1500));
        let spec = crate::preset("tiny@cpu").unwrap();
        // 32,768 KV tokens: two requests of 8,192 prompt + 8,192 output tokens.
        assert_eq!(i.requests(&spec), vec![(8192, 8192); 2]);
        let lp: Injection = "long-prompt@0s".parse().unwrap();
        assert_eq!(lp.requests(&spec), vec![(4096, 1); 2], "8 chunks of 512");
        let b: Injection = "batch@0s".parse().unwrap();
        assert_eq!(b.requests(&spec).len(), 48, "3/4 of 64 slots");
        let q: Injection = "queue@0s".parse().unwrap();
        assert_eq!(q.requests(&spec).len(), 64);
        assert!("heat@1s".parse::<Injection>().unwrap_err().contains("kv"));
        assert!("kv".parse::<Injection>().is_err());
        assert!("kv@soon".parse::<Injection>().is_err());
    }
}
