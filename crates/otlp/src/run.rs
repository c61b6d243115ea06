//! One command's export (bench, proxy, watch): the exporter started from a checked
//! configuration, its sink for the record thread, the wall-clock origin the sink waits
//! for, and what came of it at the end, with the report's warning when spans were lost.

use crate::export::Exporter;
use crate::proto::SpanKind;
use crate::sink::OtlpSink;
use crate::span::Shape;
use crate::Config;
use cadence_core::report::OtlpExport;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A running export: the exporter and the wall-clock origin its sink waits for.
#[derive(Debug)]
pub struct Export {
    exporter: Exporter,
    origin: Arc<OnceLock<u64>>,
}

/// What a command knows about the requests it measures, for the spans' attributes.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The endpoint requests go to (its host and port become `server.*`).
    pub endpoint: &'a http::Uri,
    /// `gen_ai.operation.name`: `chat`, `text_completion`.
    pub operation: &'static str,
    /// `gen_ai.request.model`.
    pub model: &'a str,
    /// Gaps longer than this are stalls.
    pub stall_threshold: Duration,
    /// An event for each of a span's first N chunks.
    pub chunk_events: u32,
    /// Client (bench, watch) or server (proxy).
    pub kind: SpanKind,
}

/// Starts the export thread for `config`; the sink to hand the record thread.
pub fn start(config: Config, target: Target<'_>) -> std::io::Result<(Export, OtlpSink)> {
    let exporter = Exporter::start(config)?;
    let origin = Arc::new(OnceLock::new());
    let server = target.endpoint.host().map(|h| {
        let port = target.endpoint.port_u16().unwrap_or(
            if target.endpoint.scheme_str() == Some("https") {
                443
            } else {
                80
            },
        );
        (h.trim_matches(['[', ']']).to_owned(), port)
    });
    let shape = Shape {
        origin_unix_ns: 0,
        operation: target.operation,
        model: target.model.to_owned(),
        server,
        stall_threshold_ns: target.stall_threshold.as_nanos() as u64,
        chunk_events: target.chunk_events,
        kind: target.kind,
    };
    let sink = OtlpSink::new(shape, exporter.queue()).with_origin(origin.clone());
    Ok((Export { exporter, origin }, sink))
}

impl Export {
    /// Sets the wall-clock time of the run clock's origin: call right after the run
    /// clock starts, before any record.
    pub fn set_origin_now(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let _ = self.origin.set(now);
    }

    /// The figures so far.
    pub fn summary(&self) -> OtlpExport {
        self.exporter.summary()
    }

    /// Sends what is queued, waiting at most the export timeout, and stops.
    pub fn finish(self) -> OtlpExport {
        self.exporter.finish()
    }
}

/// The report's warning when spans were dropped.
pub fn warning(s: &OtlpExport) -> Option<String> {
    (s.dropped > 0).then(|| {
        let why = s.error.as_deref().unwrap_or("the export queue was full");
        format!(
            "OTLP export: {} of {} spans dropped ({} queue full, {} failed, {} rejected; {why}); \
             the measurements are unaffected",
            s.dropped, s.spans, s.dropped_queue_full, s.dropped_failed, s.rejected
        )
    })
}
