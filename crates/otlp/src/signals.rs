//! One command's export of both signals: spans and metrics from the same `--otlp`
//! (either left out by `--otlp-signals`), one sink for the record thread that feeds
//! both, one origin set for both, and both ended together so the end of a run waits at
//! most one export timeout.

use crate::config::{Config, Protocol, Signal, Signals};
use crate::metrics_export::{self, MetricsExporter, MetricsSink};
use crate::proto::KeyValue;
use crate::run::{self, Export, StartError, Target};
use crate::sink::OtlpSink;
use crate::span::Shape;
use cadence_core::report::{OtlpExport, OtlpMetricsExport, Report};
use cadence_core::{RecordSink, RequestRecord};
use std::time::Duration;

/// The metrics' configuration and their export interval.
pub type MetricsConfig = (Config, Duration);

/// The signals' configurations from `--otlp` (`flag`), `--otlp-protocol`,
/// `--otlp-signals` and the environment: spans', and metrics' with their export
/// interval; each `None` when not asked for.
pub fn configs(
    flag: Option<&str>,
    protocol: Option<Protocol>,
    signals: Signals,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<Config>, Option<MetricsConfig>), String> {
    let spans = match signals.traces {
        true => Config::resolve_for(Signal::Traces, flag, protocol, env)?,
        false => None,
    };
    let metrics = match signals.metrics {
        true => match Config::resolve_for(Signal::Metrics, flag, protocol, env)? {
            Some(c) => Some((c, metrics_export::interval(env)?)),
            None => None,
        },
        false => None,
    };
    Ok((spans, metrics))
}

/// A command's `--otlp*` flags, as every command that exports takes them.
#[derive(Debug, Clone, Copy)]
pub struct Flags<'a> {
    /// `--otlp URL`.
    pub otlp: Option<&'a str>,
    /// `--otlp-protocol`.
    pub protocol: Option<Protocol>,
    /// `--otlp-signals`.
    pub signals: Signals,
    /// `--otlp-sample`: the share of the traces it starts that are exported.
    pub sample: f64,
    /// `--otlp-chunk-events`.
    pub chunk_events: u32,
}

impl Flags<'_> {
    /// [`configs_here`] of these flags.
    pub fn configs(&self) -> Result<(Option<Config>, Option<MetricsConfig>), StartError> {
        configs_here(self.otlp, self.protocol, self.signals)
    }
}

/// [`configs`] from this process's `OTEL_EXPORTER_OTLP_*` variables (a usage error
/// when one is not usable).
pub fn configs_here(
    flag: Option<&str>,
    protocol: Option<Protocol>,
    signals: Signals,
) -> Result<(Option<Config>, Option<MetricsConfig>), StartError> {
    let env = |k: &str| std::env::var(k).ok();
    configs(flag, protocol, signals, &env).map_err(StartError::Config)
}

/// Starts the exports `--otlp` (`flag`), `--otlp-protocol`, `--otlp-signals` and this
/// process's `OTEL_EXPORTER_OTLP_*` variables ask for; `None` when none is.
pub fn start_if_asked(
    flag: Option<&str>,
    protocol: Option<Protocol>,
    signals: Signals,
    target: Target<'_>,
) -> Result<Option<(Exports, Sinks)>, StartError> {
    let (spans, metrics) = configs_here(flag, protocol, signals)?;
    Ok(start(spans, metrics, target)?)
}

/// A command's running exports.
#[derive(Debug)]
pub struct Exports {
    spans: Option<Export>,
    metrics: Option<MetricsExporter>,
}

/// The record thread's sink: each record to the span exporter and to the metrics.
#[derive(Debug)]
pub struct Sinks {
    spans: Option<OtlpSink>,
    metrics: Option<MetricsSink>,
}

impl Sinks {
    /// One watch probe of the target `shape` names, run from `start` to `end` (ns since
    /// the Unix epoch): its trace (the probe's span with `attributes`, each record's
    /// span its child) offered to the span queue, and each record added to the
    /// target's own metric series. Never waits on the collector.
    pub fn probe(
        &mut self,
        shape: &Shape,
        (start, end): (u64, u64),
        attributes: Vec<KeyValue>,
        records: &[RequestRecord],
    ) {
        if let Some(s) = self.spans.as_mut() {
            s.offer_with(|ids| {
                crate::probe::probe_spans(ids, shape, (start, end), attributes, records)
            });
        }
        if let Some(m) = self.metrics.as_mut() {
            for r in records {
                m.accept_as(r, shape);
            }
        }
    }
}

impl RecordSink for Sinks {
    fn accept(&mut self, record: &RequestRecord) {
        if let Some(s) = self.spans.as_mut() {
            s.accept(record);
        }
        if let Some(m) = self.metrics.as_mut() {
            m.accept(record);
        }
    }
}

/// Starts the exports configured (`configs`) for requests to `target`; `None` when
/// neither is.
pub fn start(
    spans: Option<Config>,
    metrics: Option<MetricsConfig>,
    target: Target<'_>,
) -> std::io::Result<Option<(Exports, Sinks)>> {
    start_shaped(spans, metrics, run::shape(&target))
}

/// [`start`] with what the spans and series share given whole (a watch's: no server or
/// model of its own, each target's in [`Sinks::probe`]).
pub fn start_shaped(
    spans: Option<Config>,
    metrics: Option<MetricsConfig>,
    shape: Shape,
) -> std::io::Result<Option<(Exports, Sinks)>> {
    if spans.is_none() && metrics.is_none() {
        return Ok(None);
    }
    let (m, m_sink) = match metrics {
        Some((config, every)) => {
            let (m, sink) = MetricsExporter::start(config, shape.clone(), every)?;
            (Some(m), Some(sink))
        }
        None => (None, None),
    };
    let (s, s_sink) = match spans {
        Some(config) => {
            let (s, sink) = run::start_shaped(config, shape)?;
            (Some(s), Some(sink))
        }
        None => (None, None),
    };
    let exports = Exports {
        spans: s,
        metrics: m,
    };
    let sinks = Sinks {
        spans: s_sink,
        metrics: m_sink,
    };
    Ok(Some((exports, sinks)))
}

impl Exports {
    /// Whether spans are exported (and so requests carry a `traceparent`).
    pub fn traces(&self) -> bool {
        self.spans.is_some()
    }

    /// The span export's figures so far (`None`: spans are not exported).
    pub fn spans_summary(&self) -> Option<OtlpExport> {
        self.spans.as_ref().map(Export::summary)
    }

    /// The metrics export's figures so far (`None`: metrics are not exported).
    pub fn metrics_summary(&self) -> Option<OtlpMetricsExport> {
        self.metrics.as_ref().map(MetricsExporter::summary)
    }

    /// Sets the wall-clock time of the run clock's origin: call right after the run
    /// clock starts, before any record.
    pub fn set_origin_now(&self) {
        if let Some(s) = &self.spans {
            s.set_origin_now();
        }
        if let Some(m) = &self.metrics {
            m.set_origin_now();
        }
    }

    /// [`Exports::finish`] into `report` (each signal's figures, and a warning when
    /// spans were dropped or the last metrics export was lost): the lines to say on
    /// stderr (a loss even when `quiet`).
    pub fn finish_into(self, report: &mut Report, quiet: bool) -> Vec<String> {
        let (spans, metrics) = self.finish();
        let (lines, warnings) = said(spans.as_ref(), metrics.as_ref(), quiet);
        report.warnings.extend(warnings);
        report.otlp = spans;
        report.otlp_metrics = metrics;
        lines
    }

    /// Sends what is left (the metrics' last export beside the queued spans, at once)
    /// and stops; what came of each signal.
    pub fn finish(self) -> (Option<OtlpExport>, Option<OtlpMetricsExport>) {
        if let Some(m) = &self.metrics {
            m.stop();
        }
        let spans = self.spans.map(Export::finish);
        (spans, self.metrics.map(MetricsExporter::finish))
    }
}

/// What a command says of its exports at its end: the lines for stderr (a loss even
/// when `quiet`, else what was exported) and the warnings a report carries.
pub fn said(
    spans: Option<&OtlpExport>,
    metrics: Option<&OtlpMetricsExport>,
    quiet: bool,
) -> (Vec<String>, Vec<String>) {
    let (mut lines, mut warnings) = (Vec::new(), Vec::new());
    if let Some(s) = spans {
        let (line, warning) = run::said(s, quiet);
        lines.extend(line);
        warnings.extend(warning);
    }
    if let Some(m) = metrics {
        match metrics_export::warning(m) {
            Some(w) => {
                lines.push(format!("cadence: {w}"));
                warnings.push(w);
            }
            None if quiet => {}
            None => lines.push(format!(
                "OTLP: metrics exported to {} ({} exports).",
                m.endpoint, m.exports
            )),
        }
    }
    (lines, warnings)
}

/// Which of a command's `/metrics` OTLP counters a figure goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Spans, by result: `exported`, `dropped_queue_full`, `dropped_failed`, `rejected`.
    Spans,
    /// Metrics exports, by result: `exported`, `failed` (each a snapshot the next one
    /// makes good).
    MetricExports,
}

/// Each figure of the exports so far as a `/metrics` counts them (the proxy's, the
/// watch's): `f(counter, result, count)`, the counts only growing.
pub fn each_result(
    spans: Option<&OtlpExport>,
    metrics: Option<&OtlpMetricsExport>,
    mut f: impl FnMut(Counted, &'static str, u64),
) {
    if let Some(s) = spans {
        for (result, n) in [
            ("exported", s.exported),
            ("dropped_queue_full", s.dropped_queue_full),
            ("dropped_failed", s.dropped_failed),
            ("rejected", s.rejected),
        ] {
            f(Counted::Spans, result, n);
        }
    }
    if let Some(m) = metrics {
        f(
            Counted::MetricExports,
            "exported",
            m.exports.saturating_sub(m.failed),
        );
        f(Counted::MetricExports, "failed", m.failed);
    }
}
