//! Speculative decoding's counters on the sim's `/metrics` (`--spec-accept-len`),
//! named as vLLM (`vllm:spec_decode_*`, accepted tokens per draft position) and SGLang
//! (`sglang:spec_accept_length`, `sglang:spec_accept_rate`) name theirs, counted as
//! each step's chunk leaves, so a scraper reads the acceptance the stream showed.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;

/// The speculation families, shared by every stream (clones share the counts).
#[derive(Clone)]
pub struct SpecMetrics {
    drafts: Counter,
    draft_tokens: Counter,
    accepted: Counter,
    per_position: Family<Labels, Counter>,
    accept_length: Gauge<f64, AtomicU64>,
    accept_rate: Gauge<f64, AtomicU64>,
}

impl std::fmt::Debug for SpecMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecMetrics").finish_non_exhaustive()
    }
}

fn position(p: u32) -> Labels {
    vec![("position".to_owned(), p.to_string())]
}

impl SpecMetrics {
    /// The families in `registry`, each of the `draft` positions listed from zero.
    pub fn register(registry: &mut Registry, draft: u32) -> SpecMetrics {
        let m = SpecMetrics {
            drafts: Counter::default(),
            draft_tokens: Counter::default(),
            accepted: Counter::default(),
            per_position: Family::default(),
            accept_length: Gauge::default(),
            accept_rate: Gauge::default(),
        };
        for p in 0..draft {
            let _ = m.per_position.get_or_create(&position(p));
        }
        let r = registry;
        r.register(
            "vllm:spec_decode_num_drafts",
            "Speculative decoding's verification steps",
            m.drafts.clone(),
        );
        r.register(
            "vllm:spec_decode_num_draft_tokens",
            "Draft tokens proposed",
            m.draft_tokens.clone(),
        );
        r.register(
            "vllm:spec_decode_num_accepted_tokens",
            "Draft tokens accepted",
            m.accepted.clone(),
        );
        r.register(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Draft tokens accepted at each draft position",
            m.per_position.clone(),
        );
        r.register(
            "sglang:spec_accept_length",
            "Mean tokens a step, the bonus token included",
            m.accept_length.clone(),
        );
        r.register(
            "sglang:spec_accept_rate",
            "Draft tokens accepted over proposed",
            m.accept_rate.clone(),
        );
        m
    }

    /// One verification step that proposed `draft` tokens and sent `tokens` (its
    /// accepted drafts and the bonus token).
    pub fn step(&self, tokens: u32, draft: u32) {
        let accepted = tokens.saturating_sub(1).min(draft);
        self.drafts.inc();
        self.draft_tokens.inc_by(u64::from(draft));
        self.accepted.inc_by(u64::from(accepted));
        for p in 0..accepted {
            self.per_position.get_or_create(&position(p)).inc();
        }
        let (steps, acc) = (self.drafts.get() as f64, self.accepted.get() as f64);
        self.accept_length.set(1.0 + acc / steps);
        let proposed = self.draft_tokens.get() as f64;
        if proposed > 0.0 {
            self.accept_rate.set(acc / proposed);
        }
    }

    /// Every step of a stream whose chunks carried `tokens` each (the first, the
    /// prefill's, is no step).
    pub fn stream(&self, tokens: impl IntoIterator<Item = u32>, draft: u32) {
        for t in tokens.into_iter().skip(1) {
            self.step(t, draft);
        }
    }
}

/// One stream's steps counted as its chunks leave: the first chunk is the prefill's.
#[derive(Debug)]
pub(crate) struct Tally {
    metrics: SpecMetrics,
    draft: u32,
    first_sent: bool,
}

impl Tally {
    pub(crate) fn new(metrics: SpecMetrics, draft: u32) -> Tally {
        Tally {
            metrics,
            draft,
            first_sent: false,
        }
    }

    /// A chunk of `tokens` left.
    pub(crate) fn sent(&mut self, tokens: u32) {
        if std::mem::replace(&mut self.first_sent, true) {
            self.metrics.step(tokens, self.draft);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_count_as_vllm_and_sglang_do() {
        let mut r = Registry::default();
        let m = SpecMetrics::register(&mut r, 2);
        // 2.5 a step: 1, then 2, 3, 2, 3 tokens; 4 steps of 2 drafts, 6 accepted.
        m.stream([1, 2, 3, 2, 3], 2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "vllm:spec_decode_num_drafts_total 4",
            "vllm:spec_decode_num_draft_tokens_total 8",
            "vllm:spec_decode_num_accepted_tokens_total 6",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 4",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 2",
            "sglang:spec_accept_length 2.5",
            "sglang:spec_accept_rate 0.75",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // A tally skips the prefill's chunk.
        let mut t = Tally::new(m.clone(), 2);
        t.sent(1);
        t.sent(3);
        assert_eq!(m.drafts.get(), 5);
        assert_eq!(m.accepted.get(), 8);
    }
}
