//! What the exporter tests share: the shape of a run's spans and a few hand-built
//! records with exact times.
#![allow(dead_code)]

use cadence_core::{Chunk, Outcome, RequestRecord};
use cadence_otlp::proto::SpanKind;
use cadence_otlp::Shape;

/// A client's spans of model `sim`, the run clock started at `origin_unix_ns`.
pub fn shape(origin_unix_ns: u64) -> Shape {
    Shape {
        origin_unix_ns,
        operation: "chat",
        model: "sim".into(),
        server: None,
        stall_threshold_ns: 500_000_000,
        chunk_events: 0,
        kind: SpanKind::Client,
        target: None,
    }
}

/// `n` requests 1 ms apart, each a TTFT of 20.001 µs and one gap of 1.499 µs.
pub fn records(n: u64) -> Vec<RequestRecord> {
    (0..n)
        .map(|i| {
            let mut r = RequestRecord::new(i, Outcome::Succeeded);
            r.sent_ns = Some(i * 1_000_000);
            r.chunks = vec![
                Chunk(i * 1_000_000 + 20_001, Some(1)),
                Chunk(i * 1_000_000 + 21_500, None),
            ];
            r.end_ns = Some(i * 1_000_000 + 22_000);
            r
        })
        .collect()
}
