//! The shipping of a run's metrics, off the measuring path: the record thread adds
//! each record to the instruments (a lock it shares with no request), and a thread of
//! its own POSTs their cumulative snapshot to `/v1/metrics` every interval and once at
//! the end. A failed export is counted and made good by the next, never retried.

use crate::config::{Config, Protocol};
use crate::metrics::Instruments;
use crate::metrics_proto as mp;
use crate::span::Shape;
use cadence_core::report::OtlpMetricsExport;
use cadence_core::{RecordSink, RequestRecord};
use cadence_transport::client::HyperClient;
use serde_json::{json, Value as Json};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How often a long run's metrics are exported unless `OTEL_METRIC_EXPORT_INTERVAL`
/// says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// The export interval from `OTEL_METRIC_EXPORT_INTERVAL` (ms, 100 to 3,600,000), else
/// [`DEFAULT_INTERVAL`].
pub fn interval(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration, String> {
    match env("OTEL_METRIC_EXPORT_INTERVAL").filter(|v| !v.trim().is_empty()) {
        None => Ok(DEFAULT_INTERVAL),
        Some(ms) => match ms.trim().parse::<u64>() {
            Ok(ms) if (100..=3_600_000).contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(format!(
                "OTEL_METRIC_EXPORT_INTERVAL must be milliseconds from 100 to 3600000, got '{ms}'"
            )),
        },
    }
}

#[derive(Debug, Default)]
struct Counters {
    exports: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    data_points: AtomicU64,
    last_exported: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn note_error(&self, e: String) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(cadence_core::secret::redact_patterns(&e));
        }
    }
}

/// What the record thread's sink and the export thread share.
#[derive(Debug)]
struct Shared {
    instruments: Mutex<Instruments>,
    shape: Shape,
    /// The wall-clock time the run clock started (the series' start), once known.
    origin: OnceLock<u64>,
    /// When the exporter started: the series' start until `origin` is set.
    started: u64,
    counters: Counters,
    stop: tokio::sync::Notify,
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The instruments as a record sink: each finished record added under a lock the
/// export thread takes once an interval.
#[derive(Debug)]
pub struct MetricsSink {
    shared: Arc<Shared>,
}

impl MetricsSink {
    /// Adds `record` to the series of `shape` (a watch target's: its model, server and
    /// name) rather than the run's.
    pub fn accept_as(&mut self, record: &RequestRecord, shape: &Shape) {
        if let Ok(mut i) = self.shared.instruments.lock() {
            i.push_as(record, shape);
        }
    }
}

impl RecordSink for MetricsSink {
    fn accept(&mut self, record: &RequestRecord) {
        if let Ok(mut i) = self.shared.instruments.lock() {
            i.push(record);
        }
    }
}

/// The metrics export thread and its counters.
#[derive(Debug)]
pub struct MetricsExporter {
    shared: Arc<Shared>,
    config: Arc<Config>,
    done: std::sync::mpsc::Receiver<()>,
}

impl MetricsExporter {
    /// Starts the export thread (`cadence-otlp-metrics`), exporting every `interval`.
    /// `shape` names the run's series (its origin is not read: see
    /// [`MetricsExporter::set_origin_now`]) and holds the stall threshold.
    pub fn start(
        config: Config,
        shape: Shape,
        interval: Duration,
    ) -> std::io::Result<(MetricsExporter, MetricsSink)> {
        let shared = Arc::new(Shared {
            instruments: Mutex::new(Instruments::new(shape.stall_threshold_ns)),
            shape,
            origin: OnceLock::new(),
            started: now_unix_ns(),
            counters: Counters::default(),
            stop: tokio::sync::Notify::new(),
        });
        let config = Arc::new(config);
        let (s, cfg, on_fail) = (shared.clone(), config.clone(), shared.clone());
        let task = move || async move { ship_every(interval, &s, &cfg).await };
        let done = crate::export::spawn("cadence-otlp-metrics", task, move |e| {
            on_fail.counters.note_error(e)
        })?;
        let sink = MetricsSink {
            shared: shared.clone(),
        };
        Ok((
            MetricsExporter {
                shared,
                config,
                done,
            },
            sink,
        ))
    }

    /// The series start now (call when the run clock starts): each export's
    /// `start_time_unix_nano`.
    pub fn set_origin_now(&self) {
        let _ = self.shared.origin.set(now_unix_ns());
    }

    /// The figures so far.
    pub fn summary(&self) -> OtlpMetricsExport {
        let c = &self.shared.counters;
        OtlpMetricsExport {
            endpoint: self.config.display(),
            protocol: self.config.protocol.name().into(),
            exports: c.exports.load(Relaxed),
            failed: c.failed.load(Relaxed),
            rejected_data_points: c.rejected.load(Relaxed),
            data_points: c.data_points.load(Relaxed),
            last_exported: c.last_exported.load(Relaxed),
            error: c.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// Starts the last export (call once the record thread has handed every record on)
    /// without waiting for it.
    pub fn stop(&self) {
        self.shared.stop.notify_one();
    }

    /// Sends the last export (call once the record thread has handed every record on)
    /// and stops, waiting at most the export timeout.
    pub fn finish(self) -> OtlpMetricsExport {
        self.stop();
        let waited = self.done.recv_timeout(self.config.timeout);
        let mut s = self.summary();
        if waited.is_err() && s.error.is_none() {
            s.error = Some(format!(
                "the collector took more than {:?}; the last export was not sent",
                self.config.timeout
            ));
        }
        s
    }
}

/// The report's warning when the run's last export did not reach the collector.
pub fn warning(s: &OtlpMetricsExport) -> Option<String> {
    (!s.last_exported).then(|| {
        let why = s.error.as_deref().unwrap_or("no answer");
        format!(
            "OTLP metrics: the last export to {} failed ({why}); {} of {} exports failed, so \
             the collector holds at most an earlier snapshot (a receiver that takes no \
             metrics, such as Phoenix: --otlp-signals traces); the measurements are unaffected",
            s.endpoint, s.failed, s.exports
        )
    })
}

/// The export thread: a snapshot every `interval`, and the last when asked to stop.
async fn ship_every(interval: Duration, s: &Shared, config: &Config) {
    let http = crate::export::http_client(config);
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {
                next += interval;
                ship(&http, s, config, false).await;
            }
            () = s.stop.notified() => {
                ship(&http, s, config, true).await;
                return;
            }
        }
    }
}

/// One export of the instruments' snapshot; `last` marks the run's final one.
async fn ship(http: &HyperClient, s: &Shared, config: &Config, last: bool) {
    let start = s.origin.get().copied().unwrap_or(s.started);
    let (metrics, points) = match s.instruments.lock() {
        Ok(i) => (i.snapshot(&s.shape, start, now_unix_ns()), i.data_points()),
        Err(_) => return,
    };
    if metrics.is_empty() && !last {
        return;
    }
    let c = &s.counters;
    let body = encode(config, metrics);
    match crate::export::post(http, config, body).await {
        Ok(body) => {
            let rejected = crate::export::partial_success(
                config.protocol,
                &body,
                "rejectedDataPoints",
                |r: mp::ExportMetricsServiceResponse| {
                    r.partial_success.map(|p| p.rejected_data_points)
                },
            );
            if rejected > 0 {
                c.rejected.fetch_add(rejected, Relaxed);
                c.note_error(format!("the collector rejected {rejected} data points"));
            }
            c.data_points.store(points as u64, Relaxed);
            c.last_exported.store(true, Relaxed);
        }
        Err(e) => {
            c.failed.fetch_add(1, Relaxed);
            c.last_exported.store(false, Relaxed);
            c.note_error(format!("{}: {e}", config.display()));
        }
    }
    // Counted once its answer is in (after `failed`), so exports less failures is
    // never more than the exports that arrived, even read mid-export.
    c.exports.fetch_add(1, Relaxed);
}

/// `metrics` wrapped in the request's resource (`service.name`) and scope (`cadence`).
pub fn export_request(service: &str, metrics: Vec<mp::Metric>) -> mp::ExportMetricsServiceRequest {
    mp::ExportMetricsServiceRequest {
        resource_metrics: vec![mp::ResourceMetrics {
            resource: Some(crate::export::resource(service)),
            scope_metrics: vec![mp::ScopeMetrics {
                scope: Some(crate::export::scope()),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The body of one export in the configured protocol.
pub fn encode(config: &Config, metrics: Vec<mp::Metric>) -> Vec<u8> {
    let request = export_request(&config.service, metrics);
    match config.protocol {
        Protocol::HttpProtobuf | Protocol::Grpc => prost::Message::encode_to_vec(&request),
        Protocol::HttpJson => json(&request).to_string().into_bytes(),
    }
}

/// The request as OTLP/JSON (64-bit integers as decimal strings, enums as numbers).
pub fn json(r: &mp::ExportMetricsServiceRequest) -> Json {
    let resources: Vec<Json> = r
        .resource_metrics
        .iter()
        .map(|rm| {
            let resource = rm
                .resource
                .as_ref()
                .map(|r| json!({"attributes": crate::json::attrs(&r.attributes)}));
            let scopes: Vec<Json> = rm
                .scope_metrics
                .iter()
                .map(|sm| {
                    let scope = sm
                        .scope
                        .as_ref()
                        .map(|s| json!({"name": s.name, "version": s.version}));
                    json!({"scope": scope, "metrics": sm.metrics.iter().map(metric).collect::<Vec<_>>()})
                })
                .collect();
            json!({"resource": resource, "scopeMetrics": scopes})
        })
        .collect();
    json!({ "resourceMetrics": resources })
}

fn metric(m: &mp::Metric) -> Json {
    let mut o = json!({"name": m.name, "description": m.description, "unit": m.unit});
    match &m.data {
        Some(mp::Data::Histogram(h)) => {
            let points: Vec<Json> = h.data_points.iter().map(histogram_point).collect();
            o["histogram"] =
                json!({"dataPoints": points, "aggregationTemporality": h.aggregation_temporality});
        }
        Some(mp::Data::Sum(s)) => {
            let points: Vec<Json> = s
                .data_points
                .iter()
                .map(|p| {
                    json!({"attributes": crate::json::attrs(&p.attributes),
                           "startTimeUnixNano": p.start_time_unix_nano.to_string(),
                           "timeUnixNano": p.time_unix_nano.to_string(),
                           "asInt": p.as_int.to_string()})
                })
                .collect();
            o["sum"] = json!({"dataPoints": points,
                              "aggregationTemporality": s.aggregation_temporality,
                              "isMonotonic": s.is_monotonic});
        }
        None => {}
    }
    o
}

fn histogram_point(p: &mp::HistogramDataPoint) -> Json {
    let mut o = json!({
        "attributes": crate::json::attrs(&p.attributes),
        "startTimeUnixNano": p.start_time_unix_nano.to_string(),
        "timeUnixNano": p.time_unix_nano.to_string(),
        "count": p.count.to_string(),
        "bucketCounts": p.bucket_counts.iter().map(u64::to_string).collect::<Vec<_>>(),
        "explicitBounds": p.explicit_bounds,
    });
    for (k, v) in [("sum", p.sum), ("min", p.min), ("max", p.max)] {
        if let Some(v) = v {
            o[k] = json!(v);
        }
    }
    o
}
