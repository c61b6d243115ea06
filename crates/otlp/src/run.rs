//! One command's export (bench, proxy, sim, watch), started one way: the flags and the
//! `OTEL_EXPORTER_OTLP_*` variables read into a checked configuration, the exporter
//! started with its sink for the record thread, the wall-clock origin the sink waits
//! for, the trace context's salt, and what came of it at the end, said the same way.

use crate::export::Exporter;
use crate::proto::SpanKind;
use crate::sink::OtlpSink;
use crate::span::Shape;
use crate::{Config, Protocol};
use cadence_core::report::{OtlpExport, Report};
use cadence_core::trace::Propagation;
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

/// Why a command's export could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--otlp`, `--otlp-protocol` or an `OTEL_EXPORTER_OTLP_*` variable is not usable
    /// (a usage error; the text names the flag or variable, never a header's value).
    #[error("{0}")]
    Config(String),
    /// The export thread could not be spawned.
    #[error("cannot start the OTLP export thread: {0}")]
    Spawn(#[from] std::io::Error),
}

impl StartError {
    /// Whether the command was asked wrongly (exit code 2), not failed.
    pub fn is_usage(&self) -> bool {
        matches!(self, StartError::Config(_))
    }
}

/// The export's configuration from `--otlp` (`flag`), `--otlp-protocol` and this
/// process's `OTEL_EXPORTER_OTLP_*` variables; `None` when none asks for export.
pub fn config(
    flag: Option<&str>,
    protocol: Option<Protocol>,
) -> Result<Option<Config>, StartError> {
    let env = |k: &str| std::env::var(k).ok();
    Config::resolve(flag, protocol, &env).map_err(StartError::Config)
}

/// Starts the export when `--otlp` (`flag`) or an `OTEL_EXPORTER_OTLP_*` endpoint
/// variable asks for one: the exporter and the sink for the record thread.
pub fn start_if_asked(
    flag: Option<&str>,
    protocol: Option<Protocol>,
    target: Target<'_>,
) -> Result<Option<(Export, OtlpSink)>, StartError> {
    match config(flag, protocol)? {
        Some(c) => Ok(Some(start(c, target)?)),
        None => Ok(None),
    }
}

pub use crate::span::operation;

/// A command's trace context (`--otlp-sample`'s `ratio`), salted by the clock and the
/// process id so two runs' ids differ.
pub fn propagation(ratio: f64) -> Propagation {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Propagation::new(t ^ u64::from(std::process::id()) << 40, ratio)
}

/// Starts the export thread for `config`; the sink to hand the record thread.
pub fn start(config: Config, target: Target<'_>) -> std::io::Result<(Export, OtlpSink)> {
    start_shaped(config, shape(&target))
}

/// [`start`] with the spans' shape given whole (a watch's, whose targets each have
/// their own).
pub fn start_shaped(config: Config, shape: Shape) -> std::io::Result<(Export, OtlpSink)> {
    let exporter = Exporter::start(config)?;
    let origin = Arc::new(OnceLock::new());
    let sink = OtlpSink::new(shape, exporter.queue()).with_origin(origin.clone());
    Ok((Export { exporter, origin }, sink))
}

/// What every span and metric series of a command's requests to `target` shares (its
/// wall-clock origin still 0).
pub fn shape(target: &Target<'_>) -> Shape {
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
    Shape {
        origin_unix_ns: 0,
        operation: target.operation,
        model: target.model.to_owned(),
        server,
        stall_threshold_ns: target.stall_threshold.as_nanos() as u64,
        chunk_events: target.chunk_events,
        kind: target.kind,
        target: None,
    }
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

    /// [`Export::finish`] into `report` (its figures, and its warning when spans were
    /// dropped): the line to say on stderr ([`said`]).
    pub fn finish_into(self, report: &mut Report, quiet: bool) -> Option<String> {
        let s = self.finish();
        let (line, warning) = said(&s, quiet);
        report.warnings.extend(warning);
        report.otlp = Some(s);
        line
    }
}

/// What a command says of its export at its end: the line for stderr (the warning
/// when spans were dropped, said even when `quiet`; else how many were exported) and
/// the warning a report carries.
pub fn said(s: &OtlpExport, quiet: bool) -> (Option<String>, Option<String>) {
    match warning(s) {
        Some(w) => (Some(format!("cadence: {w}")), Some(w)),
        None if quiet => (None, None),
        None => {
            let line = format!("OTLP: {} spans exported to {}.", s.exported, s.endpoint);
            (Some(line), None)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_wire::Api;

    #[test]
    fn the_operation_follows_the_dialect_and_ollamas_path() {
        assert_eq!(operation(Api::Chat, "/v1/chat/completions"), "chat");
        assert_eq!(operation(Api::Anthropic, "/v1/messages"), "chat");
        assert_eq!(operation(Api::Responses, "/v1/responses"), "chat");
        assert_eq!(
            operation(Api::Completions, "/v1/completions"),
            "text_completion"
        );
        assert_eq!(
            operation(Api::Generate, "/generate_stream"),
            "text_completion"
        );
        assert_eq!(operation(Api::Llamacpp, "/completion"), "text_completion");
        assert_eq!(operation(Api::Ollama, "/api/chat"), "chat");
        assert_eq!(operation(Api::Ollama, "/api/generate"), "text_completion");
    }

    #[test]
    fn a_drop_is_said_even_when_quiet_and_a_clean_export_only_when_not() {
        let clean = OtlpExport {
            endpoint: "http://c:4318/v1/traces".into(),
            spans: 3,
            exported: 3,
            ..OtlpExport::default()
        };
        assert_eq!(
            said(&clean, false),
            (
                Some("OTLP: 3 spans exported to http://c:4318/v1/traces.".into()),
                None
            )
        );
        assert_eq!(said(&clean, true), (None, None));
        let lossy = OtlpExport {
            exported: 1,
            dropped: 2,
            dropped_failed: 2,
            ..clean
        };
        let (line, warning) = said(&lossy, true);
        let w = warning.unwrap();
        assert!(w.starts_with("OTLP export: 2 of 3 spans dropped"), "{w}");
        assert_eq!(line, Some(format!("cadence: {w}")));
    }
}
