//! The schedule of one simulated stream, computed up front by a pure function
//! of (config, request index, max tokens, overrides). The streaming task only
//! follows it, so determinism is testable without a clock or a socket.

use std::time::Duration;

use rand::Rng;

use crate::config::SimConfig;
use crate::rng::SimRng;
use crate::text::VOCAB;

/// Per-request overrides of the configured cadence (from `x-cadence-*` headers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Fixed time to first content chunk.
    pub ttft: Option<Duration>,
    /// Fixed gap between content chunks.
    pub itl: Option<Duration>,
    /// Tokens per chunk.
    pub burst: Option<u32>,
    /// One extra pause in the stream.
    pub stall: Option<Stall>,
}

/// One pause of `duration` after `after` content chunks have been sent
/// (`after = 0` delays the first content chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Content chunks sent before the pause.
    pub after: u32,
    /// How long the pause lasts, on top of the usual gap.
    pub duration: Duration,
}

/// One content chunk: when it is due, measured from the moment the request
/// was received, and the token ids it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChunk {
    /// When the chunk is due, from the request's receipt.
    pub at: Duration,
    /// The ids of the tokens it carries (indices into [`crate::text::VOCAB`]).
    pub tokens: Vec<u32>,
}

/// Every content chunk of one stream, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    /// The request's index, which seeded the plan.
    pub request: u64,
    /// The content chunks in send order.
    pub chunks: Vec<PlannedChunk>,
    /// Speculative decoding: the draft tokens proposed each step after the first
    /// chunk (`ceil(L) − 1` for an acceptance length `L`); `None` without speculation.
    pub spec_tokens: Option<u32>,
    /// Disaggregation: the KV transfer between the prefill and the first token,
    /// included in every chunk's `at`; `None` without one.
    pub kv_transfer: Option<Duration>,
}

impl StreamPlan {
    /// The first entry is the TTFT, then the gap before each later chunk.
    pub fn delays(&self) -> Vec<Duration> {
        let mut prev = Duration::ZERO;
        self.chunks
            .iter()
            .map(|c| {
                let d = c.at - prev;
                prev = c.at;
                d
            })
            .collect()
    }

    /// Tokens over all chunks.
    pub fn token_count(&self) -> u32 {
        self.chunks.iter().map(|c| c.tokens.len() as u32).sum()
    }

    /// The plan with a KV transfer of `d` before its first token: every chunk `d` later.
    pub fn transferred(mut self, d: Duration) -> StreamPlan {
        for c in &mut self.chunks {
            c.at = c.at.saturating_add(d);
        }
        self.kv_transfer = Some(d);
        self
    }

    /// When the last chunk is due (zero for an empty plan).
    pub fn last_at(&self) -> Duration {
        self.chunks.last().map_or(Duration::ZERO, |c| c.at)
    }
}

/// The draft tokens proposed a step for an acceptance length `l`: `ceil(l) − 1`.
pub fn draft_tokens(l: f64) -> u32 {
    (l.ceil() as u32).saturating_sub(1)
}

/// Random streams derived from the seed; timing and text are independent, so
/// changing the cadence never changes the words.
const TIMING: u64 = 1;
pub(crate) const TEXT: u64 = 2;

/// Plans one stream of `max_tokens` tokens for request number `request`.
///
/// Chunk `i` (0-based) is due at `ttft + itl₁ + … + itlᵢ`, plus any random
/// stalls (`config.stall_probability` per gap) and the override stall. Every
/// chunk carries `burst` tokens except possibly the last.
pub fn plan(
    config: &SimConfig,
    request: u64,
    max_tokens: u32,
    overrides: &Overrides,
) -> StreamPlan {
    let mut time_rng = SimRng::for_request(config.seed, request, TIMING);
    let mut text_rng = SimRng::for_request(config.seed, request, TEXT);
    let burst = overrides.burst.unwrap_or(config.burst).max(1);
    let spec = config.spec_accept_len.filter(|_| overrides.burst.is_none());
    let mut chunks = Vec::with_capacity(max_tokens.div_ceil(burst) as usize);
    let mut at = Duration::ZERO;
    let mut left = max_tokens;
    let mut i = 0;
    while left > 0 {
        at += if i == 0 {
            overrides
                .ttft
                .unwrap_or_else(|| config.ttft.sample(&mut time_rng))
        } else {
            let gap = overrides
                .itl
                .unwrap_or_else(|| config.itl.sample(&mut time_rng));
            let p = config.stall_probability;
            if p > 0.0 && time_rng.random::<f64>() < p {
                gap + config.stall.sample(&mut time_rng)
            } else {
                gap
            }
        };
        if let Some(stall) = overrides.stall {
            if stall.after == i {
                at += stall.duration;
            }
        }
        let take = left.min(spec.map_or(burst, |l| spec_step(l, i)));
        left -= take;
        let tokens = (0..take)
            .map(|_| text_rng.random_range(0..VOCAB.len() as u32))
            .collect();
        chunks.push(PlannedChunk { at, tokens });
        i += 1;
    }
    StreamPlan {
        request,
        chunks,
        spec_tokens: spec.map(draft_tokens),
        kv_transfer: None,
    }
}

/// The tokens chunk `i` carries under speculation of mean acceptance length `l`: one
/// for the first (the prefill's token), then `floor(s·l) − floor((s−1)·l)` at step
/// `s = i`, so every run of steps averages `l` as closely as whole tokens can.
fn spec_step(l: f64, i: u32) -> u32 {
    if i == 0 {
        return 1;
    }
    let at = |s: u32| (f64::from(s) * l).floor() as u32;
    (at(i) - at(i - 1)).max(1)
}

/// The planned delays of request `request` with no overrides: TTFT first, then
/// the gap before each later content chunk.
pub fn planned_delays(config: &SimConfig, request: u64, max_tokens: u32) -> Vec<Duration> {
    plan(config, request, max_tokens, &Overrides::default()).delays()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::Dist;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn speculation_sends_its_acceptance_length_a_step_on_the_usual_gap() {
        let config = SimConfig {
            ttft: Dist::Fixed(ms(50)),
            itl: Dist::Fixed(ms(10)),
            burst: 4,
            spec_accept_len: Some(2.5),
            ..SimConfig::default()
        };
        let p = plan(&config, 0, 12, &Overrides::default());
        let tokens: Vec<usize> = p.chunks.iter().map(|c| c.tokens.len()).collect();
        // The prefill's one token, then 2, 3, 2, 3 (10 over 4 steps), the last cut.
        assert_eq!(tokens, [1, 2, 3, 2, 3, 1]);
        assert_eq!(p.delays(), [ms(50), ms(10), ms(10), ms(10), ms(10), ms(10)]);
        assert_eq!(p.spec_tokens, Some(2));
        // A whole-number length: every step the same.
        let three = SimConfig {
            spec_accept_len: Some(3.0),
            ..config
        };
        let p = plan(&three, 0, 7, &Overrides::default());
        let tokens: Vec<usize> = p.chunks.iter().map(|c| c.tokens.len()).collect();
        assert_eq!(tokens, [1, 3, 3]);
    }

    #[test]
    fn a_kv_transfer_holds_every_chunk_back_by_its_time() {
        let config = SimConfig {
            ttft: Dist::Fixed(ms(10)),
            itl: Dist::Fixed(ms(5)),
            ..SimConfig::default()
        };
        let p = plan(&config, 0, 3, &Overrides::default()).transferred(ms(40));
        assert_eq!(p.delays(), [ms(50), ms(5), ms(5)]);
        assert_eq!(p.kv_transfer, Some(ms(40)));
    }

    #[test]
    fn fixed_cadence_is_exact() {
        let config = SimConfig {
            ttft: Dist::Fixed(ms(50)),
            itl: Dist::Fixed(ms(10)),
            burst: 3,
            ..SimConfig::default()
        };
        let p = plan(&config, 0, 10, &Overrides::default());
        let tokens: Vec<usize> = p.chunks.iter().map(|c| c.tokens.len()).collect();
        assert_eq!(tokens, [3, 3, 3, 1]);
        assert_eq!(p.delays(), [ms(50), ms(10), ms(10), ms(10)]);
        assert_eq!(p.token_count(), 10);
        assert_eq!(p.last_at(), ms(80));
    }

    #[test]
    fn same_seed_same_plan_other_seed_other_plan() {
        let config = SimConfig {
            seed: 42,
            ..SimConfig::default()
        };
        let a = plan(&config, 3, 64, &Overrides::default());
        assert_eq!(a, plan(&config, 3, 64, &Overrides::default()));
        assert_ne!(a, plan(&config, 4, 64, &Overrides::default()));
        let other = SimConfig {
            seed: 43,
            ..config.clone()
        };
        assert_ne!(a, plan(&other, 3, 64, &Overrides::default()));
        assert_eq!(planned_delays(&config, 3, 64), a.delays());
    }

    #[test]
    fn cadence_changes_never_change_the_words() {
        let slow = SimConfig {
            itl: Dist::Fixed(ms(100)),
            ..SimConfig::default()
        };
        let a = plan(&SimConfig::default(), 0, 32, &Overrides::default());
        let b = plan(&slow, 0, 32, &Overrides::default());
        let words = |p: &StreamPlan| {
            p.chunks
                .iter()
                .flat_map(|c| c.tokens.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(words(&a), words(&b));
        assert_ne!(a.delays(), b.delays());
    }

    #[test]
    fn overrides_and_the_stall_land_where_asked() {
        let o = Overrides {
            ttft: Some(ms(5)),
            itl: Some(ms(2)),
            burst: Some(2),
            stall: Some(Stall {
                after: 2,
                duration: ms(1000),
            }),
        };
        let p = plan(&SimConfig::default(), 0, 8, &o);
        assert_eq!(p.delays(), [ms(5), ms(2), ms(1002), ms(2)]);
        let first = Overrides {
            stall: Some(Stall {
                after: 0,
                duration: ms(1000),
            }),
            ttft: Some(ms(5)),
            ..Overrides::default()
        };
        assert_eq!(
            plan(&SimConfig::default(), 0, 1, &first).delays(),
            [ms(1005)]
        );
    }

    #[test]
    fn random_stalls_follow_the_probability() {
        let config = SimConfig {
            itl: Dist::Fixed(ms(10)),
            stall_probability: 1.0,
            stall: Dist::Fixed(ms(90)),
            ..SimConfig::default()
        };
        let d = planned_delays(&config, 0, 4);
        assert_eq!(&d[1..], [ms(100), ms(100), ms(100)]);
    }
}
