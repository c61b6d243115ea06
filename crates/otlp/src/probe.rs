//! A watch probe as one trace: the probe's own span (its target, its verdict and
//! figures) and each of its requests' spans, by the span builder bench uses, as its
//! children, so a tracing UI draws each probe as the waterfall of its requests.

use crate::proto::{self, KeyValue, SpanKind};
use crate::sink::IdGen;
use crate::span::{request_span, Shape, SpanIds};
use cadence_core::RequestRecord;

/// The spans of one probe of `shape`'s target that ran from `start` to `end` (ns since
/// the Unix epoch, as the probe's row has them), with `attributes` on its own span
/// (`probe TARGET`, `INTERNAL`); each record's span is its child, in a new trace.
pub fn probe_spans(
    ids: &mut IdGen,
    shape: &Shape,
    (start, end): (u64, u64),
    mut attributes: Vec<KeyValue>,
    records: &[RequestRecord],
) -> Vec<proto::Span> {
    let (trace_id, parent) = (ids.trace_id(), ids.span_id());
    let target = shape.target.as_deref().unwrap_or("");
    let mut own = vec![
        crate::span::string("cadence.target", target),
        crate::span::string("gen_ai.request.model", &shape.model),
    ];
    if let Some((host, port)) = &shape.server {
        own.push(crate::span::string("server.address", host));
        own.push(crate::span::int("server.port", u64::from(*port)));
    }
    own.append(&mut attributes);
    let mut out = vec![crate::session::span(
        (trace_id, parent, None),
        format!("probe {target}"),
        (start, end),
        own,
        SpanKind::Internal,
    )];
    for r in records {
        let ids = SpanIds {
            trace_id,
            span_id: ids.span_id(),
            parent: Some(parent),
        };
        out.extend(request_span(r, shape, ids));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome};

    const MS: u64 = 1_000_000;

    #[test]
    fn a_probe_is_a_trace_its_span_the_parent_of_each_requests() {
        let shape = Shape {
            origin_unix_ns: 1_000 * MS,
            operation: "chat",
            model: "m".into(),
            server: Some(("10.0.0.1".into(), 8000)),
            stall_threshold_ns: 500 * MS,
            chunk_events: 0,
            kind: SpanKind::Client,
            target: Some("east".into()),
        };
        let records: Vec<RequestRecord> = (0..2)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(10 * MS);
                r.chunks = vec![Chunk(40 * MS, Some(1))];
                r.end_ns = Some(41 * MS);
                r
            })
            .collect();
        let probe = (1_005 * MS, 1_060 * MS);
        let spans = probe_spans(&mut IdGen::default(), &shape, probe, Vec::new(), &records);
        assert_eq!(spans.len(), 3);
        let own = &spans[0];
        assert_eq!(own.name, "probe east");
        assert_eq!(
            (own.start_time_unix_nano, own.end_time_unix_nano),
            probe,
            "the probe's own times"
        );
        assert!(own.parent_span_id.is_empty());
        for s in &spans[1..] {
            assert_eq!(s.trace_id, own.trace_id);
            assert_eq!(s.parent_span_id, own.span_id);
            assert_eq!(s.start_time_unix_nano, 1_010 * MS, "origin + sent");
            assert!(s.attributes.iter().any(|a| a.key == "cadence.target"));
        }
        assert_ne!(spans[1].span_id, spans[2].span_id);
    }
}
