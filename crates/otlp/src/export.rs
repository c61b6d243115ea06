//! The shipping of spans, off the measuring path: a bounded queue the record thread
//! offers spans to without waiting (a full queue drops the span and counts it), and a
//! thread of its own with a one-thread runtime that POSTs them in batches. A slow,
//! absent or refusing collector costs spans, counted, never a request's time.

use crate::config::{Config, Protocol};
use crate::proto;
use cadence_core::report::OtlpExport;
use cadence_transport::client::{self, ClientConfig, HyperClient};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often a partial batch is sent.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Default)]
struct Counters {
    offered: AtomicU64,
    exported: AtomicU64,
    queue_full: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    closing: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn note_error(&self, e: String) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(cadence_core::secret::redact_patterns(&e));
        }
    }
}

/// What offers spans: cheap to clone, `Send`, never waits.
#[derive(Debug, Clone)]
pub struct SpanQueue {
    tx: mpsc::Sender<proto::Span>,
    counters: Arc<Counters>,
}

impl SpanQueue {
    /// Queues `span` for export, or drops it (counted) when the queue is full.
    pub fn offer(&self, span: proto::Span) {
        self.counters.offered.fetch_add(1, Relaxed);
        if self.tx.try_send(span).is_err() {
            self.counters.queue_full.fetch_add(1, Relaxed);
        }
    }
}

/// The export thread and its counters.
#[derive(Debug)]
pub struct Exporter {
    queue: SpanQueue,
    config: Arc<Config>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Exporter {
    /// Starts the export thread (`cadence-otlp`).
    pub fn start(config: Config) -> std::io::Result<Exporter> {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let counters = Arc::new(Counters::default());
        let config = Arc::new(config);
        let (c, cfg, on_fail) = (counters.clone(), config.clone(), counters.clone());
        let task = move || async move { ship_all(rx, &cfg, &c).await };
        let done = spawn("cadence-otlp", task, move |e| on_fail.note_error(e))?;
        Ok(Exporter {
            queue: SpanQueue { tx, counters },
            config,
            done,
        })
    }

    /// A queue to offer spans to (the record thread's sink holds one).
    pub fn queue(&self) -> SpanQueue {
        self.queue.clone()
    }

    /// The figures so far.
    pub fn summary(&self) -> OtlpExport {
        let c = &self.queue.counters;
        let (spans, exported) = (c.offered.load(Relaxed), c.exported.load(Relaxed));
        OtlpExport {
            endpoint: self.config.display(),
            protocol: self.config.protocol.name().into(),
            spans,
            exported,
            dropped: spans.saturating_sub(exported),
            dropped_queue_full: c.queue_full.load(Relaxed),
            dropped_failed: c.failed.load(Relaxed),
            rejected: c.rejected.load(Relaxed),
            error: c.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// Sends what is queued and stops, waiting at most the export timeout: the spans
    /// not exported by then count as dropped.
    pub fn finish(self) -> OtlpExport {
        self.queue.counters.closing.store(true, Relaxed);
        let waited = self.done.recv_timeout(self.config.timeout);
        let mut s = self.summary();
        if waited.is_err() && s.error.is_none() {
            s.error = Some(format!(
                "the collector took more than {:?}; spans still queued were dropped",
                self.config.timeout
            ));
        }
        s
    }
}

/// Starts thread `name` running `task` on a one-thread runtime of its own (`fail` hears
/// why when the runtime cannot start); the receiver hears when the thread has ended.
pub(crate) fn spawn<F, Fut>(
    name: &str,
    task: F,
    fail: impl FnOnce(String) + Send + 'static,
) -> std::io::Result<std::sync::mpsc::Receiver<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(task()),
                Err(e) => fail(format!("cannot start the export thread: {e}")),
            }
            let _ = done_tx.send(());
        })?;
    Ok(done)
}

/// An export thread's client: one connection of its own (HTTP/2 for gRPC).
pub(crate) fn http_client(config: &Config) -> HyperClient {
    client::build(&ClientConfig {
        pool_size: 1,
        connect_timeout: config.timeout.min(Duration::from_secs(5)),
        http2: config.protocol == Protocol::Grpc,
    })
}

/// One export of `body` to the configured endpoint, with its headers, within its
/// timeout: a POST over OTLP/HTTP, a unary call over gRPC. The answer's body (gRPC's
/// message unframed), or why there was none in words.
pub(crate) async fn post(
    http: &HyperClient,
    config: &Config,
    body: Vec<u8>,
) -> Result<Vec<u8>, String> {
    if config.protocol == Protocol::Grpc {
        let (uri, headers) = (&config.endpoint, &config.headers);
        return crate::grpc::call(http, uri, headers, &body, config.timeout)
            .await
            .map_err(|e| e.to_string());
    }
    cadence_transport::get::post_with(
        http,
        &config.endpoint,
        &config.headers,
        config.protocol.content_type(),
        body,
        config.timeout,
    )
    .await
    .map(|b| b.to_vec())
    .map_err(|e| e.to_string())
}

/// The export thread: batches of up to `config.batch` spans, sent when full or every
/// [`FLUSH_EVERY`]; at close, what is queued.
async fn ship_all(mut rx: mpsc::Receiver<proto::Span>, config: &Config, c: &Counters) {
    let http = http_client(config);
    let mut batch = Vec::new();
    loop {
        let until = tokio::time::Instant::now() + FLUSH_EVERY;
        let closed = loop {
            if batch.len() >= config.batch {
                break false;
            }
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(s)) => batch.push(s),
                Ok(None) => break true,
                Err(_) => break c.closing.load(Relaxed),
            }
        };
        if closed {
            while let Ok(s) = rx.try_recv() {
                batch.push(s);
            }
            for chunk in batch.chunks(config.batch.max(1)) {
                ship(&http, config, c, chunk.to_vec()).await;
            }
            return;
        }
        if !batch.is_empty() {
            ship(&http, config, c, std::mem::take(&mut batch)).await;
        }
    }
}

/// One POST of `spans`; its spans count as exported on a 2xx (less any the collector
/// says it rejected), else as dropped.
async fn ship(http: &HyperClient, config: &Config, c: &Counters, spans: Vec<proto::Span>) {
    let n = spans.len() as u64;
    let body = encode(config, spans);
    match post(http, config, body).await {
        Ok(body) => {
            let rejected = rejected(config.protocol, &body).min(n);
            c.exported.fetch_add(n - rejected, Relaxed);
            if rejected > 0 {
                c.rejected.fetch_add(rejected, Relaxed);
                c.note_error(format!("the collector rejected {rejected} spans"));
            }
        }
        Err(e) => {
            c.failed.fetch_add(n, Relaxed);
            c.note_error(format!("{}: {e}", config.display()));
        }
    }
}

/// The body of one export: one resource (`service.name`), one scope (`cadence`).
pub fn encode(config: &Config, spans: Vec<proto::Span>) -> Vec<u8> {
    let request = export_request(&config.service, spans);
    match config.protocol {
        Protocol::HttpProtobuf | Protocol::Grpc => prost::Message::encode_to_vec(&request),
        Protocol::HttpJson => crate::json::request(&request).to_string().into_bytes(),
    }
}

/// `spans` wrapped in the request's resource and scope.
pub fn export_request(service: &str, spans: Vec<proto::Span>) -> proto::ExportTraceServiceRequest {
    proto::ExportTraceServiceRequest {
        resource_spans: vec![proto::ResourceSpans {
            resource: Some(resource(service)),
            scope_spans: vec![proto::ScopeSpans {
                scope: Some(scope()),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The resource every export names: `service.name` and the SDK, Cadence.
pub(crate) fn resource(service: &str) -> proto::Resource {
    proto::Resource {
        attributes: vec![
            proto::KeyValue::new("service.name", proto::Value::String(service.into())),
            proto::KeyValue::new("telemetry.sdk.name", proto::Value::String("cadence".into())),
        ],
        dropped_attributes_count: 0,
    }
}

/// The instrumentation scope: `cadence` and its version.
pub(crate) fn scope() -> proto::InstrumentationScope {
    proto::InstrumentationScope {
        name: "cadence".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// Spans a collector's answer says it rejected (a partial success), 0 when it says none
/// or its body cannot be read.
fn rejected(protocol: Protocol, body: &[u8]) -> u64 {
    partial_success(
        protocol,
        body,
        "rejectedSpans",
        |r: proto::ExportTraceServiceResponse| r.partial_success.map(|p| p.rejected_spans),
    )
}

/// The count a collector's partial success names (`json_key` in OTLP/JSON, `pick` of
/// the protobuf answer `R`); 0 when it names none or its body cannot be read.
pub(crate) fn partial_success<R: prost::Message + Default>(
    protocol: Protocol,
    body: &[u8],
    json_key: &str,
    pick: fn(R) -> Option<i64>,
) -> u64 {
    let n = match protocol {
        Protocol::HttpProtobuf | Protocol::Grpc => R::decode(body).ok().and_then(pick).unwrap_or(0),
        Protocol::HttpJson => serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                let r = v.get("partialSuccess")?.get(json_key)?;
                r.as_i64().or_else(|| r.as_str()?.parse().ok())
            })
            .unwrap_or(0),
    };
    u64::try_from(n).unwrap_or(0)
}
