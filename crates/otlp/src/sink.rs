//! The exporter as a record sink: on the record thread (never a request's task), each
//! finished record becomes a span and is offered to the export queue.

use crate::export::SpanQueue;
use crate::session::Sessions;
use crate::span::{request_span, Shape, SpanIds};
use cadence_core::rng::SplitMix64;
use cadence_core::{RecordSink, RequestRecord};
use std::sync::{Arc, OnceLock};

/// Makes trace and span ids: random 64-bit words, never all zero (W3C's invalid id),
/// from a generator seeded by the clock and the process.
#[derive(Debug, Clone)]
pub struct IdGen(SplitMix64);

impl Default for IdGen {
    fn default() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        IdGen(SplitMix64::new(
            t ^ u64::from(std::process::id()).rotate_left(32),
        ))
    }
}

impl IdGen {
    fn word(&mut self) -> u64 {
        loop {
            let w = self.0.next_u64();
            if w != 0 {
                return w;
            }
        }
    }

    /// A new trace id.
    pub fn trace_id(&mut self) -> [u8; 16] {
        let mut id = [0; 16];
        id[..8].copy_from_slice(&self.word().to_be_bytes());
        id[8..].copy_from_slice(&self.word().to_be_bytes());
        id
    }

    /// A new span id.
    pub fn span_id(&mut self) -> [u8; 8] {
        self.word().to_be_bytes()
    }
}

/// Each record a span, offered to the export queue.
#[derive(Debug)]
pub struct OtlpSink {
    shape: Shape,
    queue: SpanQueue,
    ids: IdGen,
    origin: Option<Arc<OnceLock<u64>>>,
    sessions: Sessions,
    spans: Vec<crate::proto::Span>,
}

impl OtlpSink {
    /// Spans shaped by `shape`, offered to `queue`.
    pub fn new(shape: Shape, queue: SpanQueue) -> OtlpSink {
        OtlpSink {
            shape,
            queue,
            ids: IdGen::default(),
            origin: None,
            sessions: Sessions::default(),
            spans: Vec::new(),
        }
    }

    /// Takes the wall-clock origin from `origin` when its first record comes (it is
    /// set when the run clock starts, after the sink was made).
    pub fn with_origin(mut self, origin: Arc<OnceLock<u64>>) -> OtlpSink {
        self.origin = Some(origin);
        self
    }
}

impl OtlpSink {
    /// Offers the spans `make` builds with this sink's ids (a watch probe's trace).
    pub fn offer_with(&mut self, make: impl FnOnce(&mut IdGen) -> Vec<crate::proto::Span>) {
        for s in make(&mut self.ids) {
            self.queue.offer(s);
        }
    }
}

impl RecordSink for OtlpSink {
    fn accept(&mut self, record: &RequestRecord) {
        if let Some(o) = self.origin.as_ref().and_then(|o| o.get()) {
            self.shape.origin_unix_ns = *o;
        }
        // A request the run traced keeps the ids its traceparent carried; one it did
        // not sample is not exported.
        let ids = match record.trace {
            Some(t) if !t.sampled => return,
            Some(t) => SpanIds {
                trace_id: t.trace_id,
                span_id: t.span_id,
                parent: t.parent,
            },
            None => SpanIds {
                trace_id: self.ids.trace_id(),
                span_id: self.ids.span_id(),
                parent: None,
            },
        };
        if let Some(span) = request_span(record, &self.shape, ids) {
            self.queue.offer(span);
        }
        self.sessions.step(record, &self.shape, &mut self.spans);
        for span in self.spans.drain(..) {
            self.queue.offer(span);
        }
    }
}

/// The sessions still open when the record thread lets go of the sink (the run's end)
/// get their parent spans then.
impl Drop for OtlpSink {
    fn drop(&mut self) {
        for span in self.sessions.close_all(&self.shape) {
            self.queue.offer(span);
        }
    }
}
