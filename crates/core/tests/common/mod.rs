//! Helpers the core integration tests share (`mod common;` in each): hand-built
//! records in whole milliseconds and a tolerant float comparison.

use cadence_core::{Chunk, Outcome, RequestRecord};

pub const MS: u64 = 1_000_000;

/// Request `index`, sent at `sent` ms with chunks `(t_ms, tokens)`, ended at `end` ms.
#[allow(dead_code)]
pub fn record(
    index: u64,
    outcome: Outcome,
    sent: u64,
    chunks: &[(u64, Option<u32>)],
    end: u64,
) -> RequestRecord {
    let mut r = RequestRecord::new(index, outcome);
    r.sent_ns = Some(sent * MS);
    r.chunks = chunks.iter().map(|&(t, k)| Chunk(t * MS, k)).collect();
    r.end_ns = Some(end * MS);
    r
}

/// [`record`] number 0.
#[allow(dead_code)]
pub fn rec(outcome: Outcome, sent: u64, chunks: &[(u64, Option<u32>)], end: u64) -> RequestRecord {
    record(0, outcome, sent, chunks, end)
}

/// `a == b` within 1e-9 relative (absolute below 1).
#[track_caller]
pub fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} != {b}");
}
