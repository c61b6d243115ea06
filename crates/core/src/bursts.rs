//! Bursts: chunks that carry several tokens (speculative decoding accepts a few draft
//! tokens a step, and a step takes about as long whatever it accepted). A level's
//! acceptance length as the client sees it (tokens per chunk after the first) beside
//! the one the server reports (vLLM's per-request `speculative_decoding`), and the
//! gap before a chunk by the tokens it carried, so no gap is divided by its tokens.

use crate::{Outcome, RequestRecord, TokenSource};
use serde::{Deserialize, Serialize};

/// Chunk sizes told apart in the ITL by chunk size; larger chunks share the last class.
pub const SIZE_CLASSES: usize = 8;

/// A level's bursts, accumulated one record at a time (bounded: sums and counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BurstsAcc {
    /// Requests with two chunks or more and a token count that is not the chunks'.
    requests: u64,
    /// Their tokens after the first chunk's one, and their chunks after the first.
    tokens_after_first: u64,
    chunks_after_first: u64,
    /// Requests whose server reported its speculation.
    server_requests: u64,
    steps: u64,
    accepted: u64,
    drafted: u64,
    /// Per chunk size (1 to [`SIZE_CLASSES`], the last holding larger): the gaps
    /// before chunks of that size and their sum, ns.
    by_size: [(u64, u128); SIZE_CLASSES],
}

impl BurstsAcc {
    /// Takes one record.
    pub fn push(&mut self, r: &RequestRecord) {
        if r.warmup || r.outcome != Outcome::Succeeded {
            return;
        }
        let n = r.chunk_count();
        let tokens = r.output_token_count();
        if n > 1 && tokens.source != TokenSource::Chunks && tokens.count >= n {
            self.requests = self.requests.saturating_add(1);
            self.tokens_after_first = self.tokens_after_first.saturating_add(tokens.count - 1);
            self.chunks_after_first = self.chunks_after_first.saturating_add(n - 1);
        }
        if let Some(t) = r.counters.server_timing {
            if let (Some(steps), Some(accepted)) = (t.spec_steps, t.spec_accepted) {
                self.server_requests = self.server_requests.saturating_add(1);
                self.steps = self.steps.saturating_add(steps);
                self.accepted = self.accepted.saturating_add(accepted);
                self.drafted = self.drafted.saturating_add(t.spec_drafted.unwrap_or(0));
            }
        }
        for w in r.chunks.windows(2) {
            let (Some(k), Some(gap)) = (w[1].tokens(), w[1].t_ns().checked_sub(w[0].t_ns())) else {
                continue;
            };
            let class = (k.max(1) as usize).min(SIZE_CLASSES) - 1;
            let c = &mut self.by_size[class];
            *c = (c.0.saturating_add(1), c.1.saturating_add(u128::from(gap)));
        }
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &BurstsAcc) {
        // Sums saturate: a hostile record's counts cannot overflow them.
        self.requests = self.requests.saturating_add(o.requests);
        self.tokens_after_first = self.tokens_after_first.saturating_add(o.tokens_after_first);
        self.chunks_after_first = self.chunks_after_first.saturating_add(o.chunks_after_first);
        self.server_requests = self.server_requests.saturating_add(o.server_requests);
        self.steps = self.steps.saturating_add(o.steps);
        self.accepted = self.accepted.saturating_add(o.accepted);
        self.drafted = self.drafted.saturating_add(o.drafted);
        for (a, b) in self.by_size.iter_mut().zip(o.by_size) {
            *a = (a.0.saturating_add(b.0), a.1.saturating_add(b.1));
        }
    }

    /// The level's bursts; `None` when no chunk carried more than one token and the
    /// server reported no speculation.
    pub fn finish(&self) -> Option<Bursts> {
        let bursty = self.tokens_after_first > self.chunks_after_first
            || self.by_size[1..].iter().any(|c| c.0 > 0);
        if !bursty && self.server_requests == 0 {
            return None;
        }
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        Some(Bursts {
            requests: self.requests,
            client_acceptance_length: ratio(self.tokens_after_first, self.chunks_after_first),
            server_requests: self.server_requests,
            server_acceptance_length: ratio(self.steps.saturating_add(self.accepted), self.steps),
            draft_acceptance_rate: ratio(self.accepted, self.drafted),
            metrics_acceptance_length: None,
            metrics_draft_acceptance_rate: None,
            itl_by_chunk_tokens: self
                .by_size
                .iter()
                .enumerate()
                .filter(|(_, c)| c.0 > 0)
                .map(|(i, &(gaps, sum))| ChunkSize {
                    tokens: i as u32 + 1,
                    gaps,
                    mean_ms: sum as f64 / gaps as f64 / 1e6,
                })
                .collect(),
        })
    }
}

/// A level's bursts: the acceptance length from both sides and the gap by chunk size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bursts {
    /// Requests the client's acceptance length is taken over (two chunks or more, a
    /// token count from the server or a tokenizer).
    pub requests: u64,
    /// Tokens per chunk after the first (whose one token is the prefill's), pooled:
    /// `Σ(tokens − 1) ÷ Σ(chunks − 1)`.
    pub client_acceptance_length: Option<f64>,
    /// Requests whose server reported its speculation.
    pub server_requests: u64,
    /// The server's: `1 + Σ accepted ÷ Σ steps`.
    pub server_acceptance_length: Option<f64>,
    /// The server's draft tokens accepted ÷ proposed.
    pub draft_acceptance_rate: Option<f64>,
    /// The acceptance length the server's `/metrics` gave over the level
    /// (`--server-metrics`: vLLM's `1 + Δaccepted ÷ Δdrafts`, else SGLang's gauge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_acceptance_length: Option<f64>,
    /// Draft tokens accepted ÷ proposed by the server's `/metrics` over the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_draft_acceptance_rate: Option<f64>,
    /// The gap before a chunk by the tokens it carried (where the stream said), the
    /// last class holding larger chunks.
    pub itl_by_chunk_tokens: Vec<ChunkSize>,
}

/// Puts the server's `/metrics` speculation beside the records' (a level whose records
/// showed none gets bursts of its own when the metrics did).
pub fn with_metrics(
    bursts: Option<Bursts>,
    spec: Option<&crate::server::speculation::SpecCounters>,
) -> Option<Bursts> {
    let Some(spec) = spec.filter(|s| s.acceptance_length.is_some()) else {
        return bursts;
    };
    let mut b = bursts.unwrap_or_default();
    b.metrics_acceptance_length = spec.acceptance_length;
    b.metrics_draft_acceptance_rate = spec.draft_acceptance_rate;
    Some(b)
}

/// The gaps before chunks of one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkSize {
    /// Tokens the chunk carried ([`SIZE_CLASSES`]: that many or more).
    pub tokens: u32,
    /// Gaps counted.
    pub gaps: u64,
    /// Their mean, ms.
    pub mean_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, ServerTiming, TokenCount};

    fn rec(
        chunks: &[(u64, Option<u32>)],
        tokens: u64,
        spec: Option<(u64, u64, u64)>,
    ) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.chunks = chunks.iter().map(|&(t, k)| Chunk(t, k)).collect();
        r.output_tokens = Some(TokenCount {
            count: tokens,
            source: TokenSource::Usage,
        });
        r.counters.server_timing = spec.map(|(s, a, d)| ServerTiming {
            spec_steps: Some(s),
            spec_accepted: Some(a),
            spec_drafted: Some(d),
            ..ServerTiming::default()
        });
        r
    }

    #[test]
    fn the_clients_acceptance_length_is_tokens_per_chunk_after_the_first() {
        let mut acc = BurstsAcc::default();
        // 1 + 2 + 3 + 2 + 3 tokens: 10 after the first over 4 steps, 2.5 a step; the
        // server says 4 steps accepted 6 of 8 drafts: 1 + 6/4 = 2.5.
        let chunks = [
            (0, Some(1)),
            (10, Some(2)),
            (20, Some(3)),
            (31, Some(2)),
            (40, Some(3)),
        ];
        acc.push(&rec(&chunks, 11, Some((4, 6, 8))));
        let b = acc.finish().unwrap();
        assert_eq!(b.client_acceptance_length, Some(2.5));
        assert_eq!(b.server_acceptance_length, Some(2.5));
        assert_eq!(b.draft_acceptance_rate, Some(0.75));
        // The gaps stay whole by the chunk's size: never divided by its tokens.
        let sizes: Vec<(u32, u64, f64)> = b
            .itl_by_chunk_tokens
            .iter()
            .map(|c| (c.tokens, c.gaps, c.mean_ms))
            .collect();
        assert_eq!(sizes, [(2, 2, 10.5e-6), (3, 2, 9.5e-6)]);
        // One token a chunk and no speculation: nothing to say.
        let mut flat = BurstsAcc::default();
        flat.push(&rec(&[(0, Some(1)), (5, Some(1))], 2, None));
        assert_eq!(flat.finish(), None);
        // Merged halves are the whole.
        let mut a = BurstsAcc::default();
        a.push(&rec(&chunks, 11, Some((4, 6, 8))));
        a.merge(&flat);
        acc.push(&rec(&[(0, Some(1)), (5, Some(1))], 2, None));
        assert_eq!(a, acc);
    }

    #[test]
    fn counts_no_request_can_have_saturate_instead_of_overflowing() {
        // A hostile records file: token and speculation counts at u64::MAX, twice.
        let huge = rec(
            &[(0, Some(1)), (10, Some(2))],
            u64::MAX,
            Some((u64::MAX, u64::MAX, 1)),
        );
        let mut acc = BurstsAcc::default();
        acc.push(&huge);
        acc.push(&huge);
        let mut merged = acc.clone();
        merged.merge(&acc);
        let b = merged.finish().unwrap();
        assert_eq!(b.requests, 4);
        assert!(b.client_acceptance_length.unwrap().is_finite());
        assert_eq!(b.server_acceptance_length, Some(1.0));
    }
}
