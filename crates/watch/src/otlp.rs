//! `cadence watch --otlp`: each probe as one trace (its own span, each request's span a
//! child) and its requests in its target's own OTLP metric series, started through
//! `cadence_otlp`'s one start-up and fed once the probe has ended, so export never
//! delays a probe: spans go to a bounded queue (a full one drops them, counted), the
//! metrics to instruments the export thread snapshots.

use crate::store::ProbeRow;
use cadence_core::report::{OtlpExport, OtlpMetricsExport};
use cadence_core::RequestRecord;
use cadence_otlp::proto::{KeyValue, SpanKind, Value};
use cadence_otlp::run::StartError;
use cadence_otlp::signals::{self, Exports, Flags, Sinks};
use cadence_otlp::span::Shape;
use std::sync::Mutex;

/// The watch's running export: the exporters, and the sink each probe is handed to.
pub struct Otlp {
    exports: Mutex<Option<Exports>>,
    sinks: Mutex<Sinks>,
    chunk_events: u32,
}

impl std::fmt::Debug for Otlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Otlp")
    }
}

/// What every series shares before a target's own attributes: nothing of a target's
/// (each probe names its own model, server and name), the default stall threshold the
/// probes' figures use.
fn watch_shape(chunk_events: u32) -> Shape {
    Shape {
        origin_unix_ns: 0,
        operation: "chat",
        model: String::new(),
        server: None,
        stall_threshold_ns: cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS,
        chunk_events,
        kind: SpanKind::Client,
        target: None,
    }
}

impl Otlp {
    /// Starts the exports `--otlp`, `--otlp-protocol`, `--otlp-signals` and the
    /// `OTEL_EXPORTER_OTLP_*` variables ask for; `None` when none does. A setting that
    /// is not usable is a usage error naming the flag or variable.
    pub fn start(flags: &Flags<'_>) -> Result<Option<Otlp>, StartError> {
        let (spans, metrics) = flags.configs()?;
        let started = signals::start_shaped(spans, metrics, watch_shape(flags.chunk_events))?;
        Ok(started.map(|(exports, sinks)| {
            exports.set_origin_now();
            Otlp {
                exports: Mutex::new(Some(exports)),
                sinks: Mutex::new(sinks),
                chunk_events: flags.chunk_events,
            }
        }))
    }

    /// `--otlp-chunk-events`: the chunk events each request span carries.
    pub fn chunk_events(&self) -> u32 {
        self.chunk_events
    }

    /// A probe of `shape`'s target that ran from `span.0` to `span.1` (ns since the
    /// Unix epoch) and made `row` from `records`: its trace queued and its records
    /// added to the target's series. Waits for no collector.
    pub fn probe(
        &self,
        shape: &Shape,
        span: (u64, u64),
        row: &ProbeRow,
        records: &[RequestRecord],
    ) {
        if let Ok(mut s) = self.sinks.lock() {
            s.probe(shape, span, probe_attributes(row), records);
        }
    }

    /// Each signal's figures so far (`None`: not exported, or finished).
    pub fn summaries(&self) -> (Option<OtlpExport>, Option<OtlpMetricsExport>) {
        match self.exports.lock().ok().as_ref().and_then(|e| e.as_ref()) {
            Some(e) => (e.spans_summary(), e.metrics_summary()),
            None => (None, None),
        }
    }

    /// Sends what is queued and the metrics' last export, waiting at most the export
    /// timeout (blocking: call off the async workers), and stops: what came of each
    /// signal (`None` when already finished).
    pub fn finish(&self) -> (Option<OtlpExport>, Option<OtlpMetricsExport>) {
        let exports = self.exports.lock().ok().and_then(|mut e| e.take());
        exports.map_or((None, None), Exports::finish)
    }
}

/// The probe's own span's attributes: its verdict and the figures its row keeps.
fn probe_attributes(row: &ProbeRow) -> Vec<KeyValue> {
    let int = |k: &str, v: u64| KeyValue::new(k, Value::Int(i64::try_from(v).unwrap_or(i64::MAX)));
    let mut a = vec![
        KeyValue::new("cadence.probe.slo_ok", Value::Bool(row.slo_ok)),
        int("cadence.probe.sent", row.sent),
        int("cadence.probe.succeeded", row.succeeded),
        int("cadence.probe.failed", row.failed),
        int("cadence.probe.aborted", row.aborted),
    ];
    for (k, v) in [
        ("cadence.probe.ttft_p50_ms", row.ttft_p50_ms),
        ("cadence.probe.ttft_p99_ms", row.ttft_p99_ms),
        ("cadence.probe.itl_p50_ms", row.itl_p50_ms),
        ("cadence.probe.itl_p99_ms", row.itl_p99_ms),
    ] {
        a.extend(v.map(|v| KeyValue::new(k, Value::Double(v))));
    }
    if !row.slo_ok {
        let detail = row.slo_detail.join("; ");
        a.push(KeyValue::new(
            "cadence.probe.slo_detail",
            Value::String(detail),
        ));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probes_span_says_its_verdict_and_figures_and_why_it_breached() {
        let mut row = crate::rows::tests::probe("api", 1_000, false);
        row.slo_detail = vec!["ttft.p50<=1us: 9.000 ms BREACH".into()];
        let a = probe_attributes(&row);
        let get = |k: &str| a.iter().find(|kv| kv.key == k).cloned();
        assert_eq!(
            get("cadence.probe.slo_ok"),
            Some(KeyValue::new("cadence.probe.slo_ok", Value::Bool(false)))
        );
        assert!(get("cadence.probe.slo_detail").is_some());
        assert!(get("cadence.probe.itl_p50_ms").is_some());
        row.slo_ok = true;
        let a = probe_attributes(&row);
        assert!(!a.iter().any(|kv| kv.key == "cadence.probe.slo_detail"));
    }
}
