//! Speculative decoding as the server's `/metrics` counted it over a level (vLLM's
//! `spec_decode_*` counters, SGLang's acceptance gauges), so the acceptance length the
//! server's counters give sits beside the client's and the per-request one.

use super::ServerSample;
use serde::{Deserialize, Serialize};

/// A level's speculation from the server's metrics: counters as changes from the
/// level's first sample to its last, gauges as its last sample read them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecCounters {
    /// Verification steps (vLLM's drafts) over the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafts: Option<f64>,
    /// Draft tokens proposed over the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_tokens: Option<f64>,
    /// Draft tokens accepted over the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<f64>,
    /// Draft tokens accepted at each draft position over the level, from the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_by_position: Vec<f64>,
    /// Tokens a step, the bonus token included: `1 + accepted ÷ drafts` from the
    /// counters, else SGLang's gauge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_length: Option<f64>,
    /// Draft tokens accepted ÷ proposed from the counters, else SGLang's gauge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_acceptance_rate: Option<f64>,
}

/// A counter's change from `a` to `b` (a restart reads as the later value).
fn change(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let (x, y) = (a?, b?);
    Some(if y >= x { y - x } else { y })
}

/// The level's speculation from its samples; `None` when no sample read any of it.
pub fn spec_counters(samples: &[ServerSample]) -> Option<SpecCounters> {
    let (a, b) = (&samples.first()?.figures, &samples.last()?.figures);
    let drafts = change(a.spec_drafts, b.spec_drafts);
    let draft_tokens = change(a.spec_draft_tokens, b.spec_draft_tokens);
    let accepted = change(a.spec_accepted, b.spec_accepted);
    let accepted_by_position = b
        .spec_accepted_by_position
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            let x = a.spec_accepted_by_position.get(i).copied().unwrap_or(0.0);
            change(Some(x), Some(y)).unwrap_or(0.0)
        })
        .collect();
    let ratio = |n: Option<f64>, d: Option<f64>| Some((n?, d?)).filter(|(_, d)| *d > 0.0);
    let acceptance_length = ratio(accepted, drafts)
        .map(|(n, d)| 1.0 + n / d)
        .or(b.spec_accept_length);
    let draft_acceptance_rate = ratio(accepted, draft_tokens)
        .map(|(n, d)| n / d)
        .or(b.spec_accept_rate);
    let out = SpecCounters {
        drafts,
        draft_tokens,
        accepted,
        accepted_by_position,
        acceptance_length,
        draft_acceptance_rate,
    };
    (out != SpecCounters::default()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::ServerFigures;

    fn sample(t_ns: u64, figures: ServerFigures) -> ServerSample {
        ServerSample {
            t_ns,
            figures,
            raw: Default::default(),
        }
    }

    #[test]
    fn vllms_counters_give_the_acceptance_over_the_level() {
        let at = |drafts: f64, tokens: f64, accepted: f64, by: Vec<f64>| ServerFigures {
            spec_drafts: Some(drafts),
            spec_draft_tokens: Some(tokens),
            spec_accepted: Some(accepted),
            spec_accepted_by_position: by,
            ..ServerFigures::default()
        };
        // 8 steps of 2 drafts, 12 accepted (8 at the first position, 4 at the second):
        // 1 + 12/8 = 2.5 tokens a step, 12/16 of the drafts.
        let s = [
            sample(0, at(10.0, 20.0, 5.0, vec![4.0])),
            sample(1, at(18.0, 36.0, 17.0, vec![12.0, 4.0])),
        ];
        let c = spec_counters(&s).unwrap();
        assert_eq!(
            (c.drafts, c.draft_tokens, c.accepted),
            (Some(8.0), Some(16.0), Some(12.0))
        );
        assert_eq!(c.accepted_by_position, [8.0, 4.0]);
        assert_eq!(c.acceptance_length, Some(2.5));
        assert_eq!(c.draft_acceptance_rate, Some(0.75));
        // No step over the level: the counters say nothing of a length.
        let idle = [s[1].clone(), s[1].clone()];
        assert_eq!(spec_counters(&idle).unwrap().acceptance_length, None);
    }

    #[test]
    fn sglangs_gauges_are_read_as_the_last_sample_says_and_nothing_is_none() {
        let g = |len: f64| ServerFigures {
            spec_accept_length: Some(len),
            spec_accept_rate: Some(len / 4.0),
            ..ServerFigures::default()
        };
        let c = spec_counters(&[sample(0, g(2.0)), sample(1, g(3.0))]).unwrap();
        assert_eq!(c.acceptance_length, Some(3.0));
        assert_eq!(c.draft_acceptance_rate, Some(0.75));
        let none = [sample(0, ServerFigures::default())];
        assert_eq!(spec_counters(&none), None);
        assert_eq!(spec_counters(&[]), None);
    }
}
