//! The exporters over OTLP/gRPC against a fake gRPC collector (hyper's HTTP/2 server
//! under axum, h2c on 127.0.0.1 port 0): the calls are unary gRPC (method path,
//! content type, `te: trailers`, a 5-byte prefix), the spans decode to the records'
//! own, and a status other than OK in the trailers or a trailers-only answer costs the
//! batch, counted, named with its class.

mod common;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use cadence_core::{Chunk, RecordSink, RequestRecord};
use cadence_otlp::config::Signal;
use cadence_otlp::grpc::{frame, unframe};
use cadence_otlp::metrics_proto::ExportMetricsServiceRequest;
use cadence_otlp::proto::{self, ExportTraceServiceRequest};
use cadence_otlp::SpanIds;
use cadence_otlp::{request_span, Config, Exporter, MetricsExporter, OtlpSink, Protocol, Shape};
use http_body_util::BodyExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the collector was sent: (path, headers, the message unframed).
type Seen = Arc<Mutex<Vec<(String, HeaderMap, Vec<u8>)>>>;

/// How the collector answers.
#[derive(Clone, Copy)]
enum Answer {
    /// OK in the trailers, after a response naming `rejected` spans rejected.
    Ok { rejected: i64 },
    /// A trailers-only answer: the status in the headers, no body.
    TrailersOnly(u32),
    /// A body, then this status in the trailers.
    InTrailers(u32),
}

async fn collector(answer: Answer) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        let keep = keep.clone();
        async move {
            let message = unframe(&body).unwrap().to_vec();
            keep.lock()
                .unwrap()
                .push((uri.path().to_owned(), headers, message));
            respond(answer)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn respond(answer: Answer) -> Response {
    let builder = Response::builder().header("content-type", "application/grpc");
    let (status, message) = match answer {
        Answer::TrailersOnly(code) => {
            let r = builder
                .header("grpc-status", code.to_string())
                .header("grpc-message", "collector%20down");
            return r.body(Body::empty()).unwrap();
        }
        Answer::Ok { rejected } => {
            let partial = proto::ExportTracePartialSuccess {
                rejected_spans: rejected,
                error_message: String::new(),
            };
            let r = proto::ExportTraceServiceResponse {
                partial_success: Some(partial),
            };
            (0, prost::Message::encode_to_vec(&r))
        }
        Answer::InTrailers(code) => (code, Vec::new()),
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", status.to_string().parse().unwrap());
    let body = http_body_util::Full::new(Bytes::from(frame(&message)))
        .with_trailers(async move { Some(Ok::<_, std::convert::Infallible>(trailers)) });
    builder.body(Body::new(body)).unwrap()
}

fn config(url: &str, signal: Signal) -> Config {
    let env = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("3000".to_string()),
        "OTEL_EXPORTER_OTLP_HEADERS" => Some("x-api-key=s3cret".to_string()),
        _ => None,
    };
    Config::resolve_for(signal, Some(url), Some(Protocol::Grpc), &env)
        .unwrap()
        .unwrap()
}

fn shape() -> Shape {
    common::shape(1_800_000_000_000_000_000)
}

/// `n` records, each ending on a gap over the stall threshold (a stall event).
fn records(n: u64) -> Vec<RequestRecord> {
    let mut recs = common::records(n);
    for r in &mut recs {
        let end = r.end_ns.unwrap() + 700_000_000;
        r.chunks.push(Chunk(end - 100, None));
        r.end_ns = Some(end);
    }
    recs
}

/// Every record through a sink of a started exporter, which is then finished.
fn export(config: Config, recs: &[RequestRecord]) -> cadence_core::report::OtlpExport {
    let exporter = Exporter::start(config).unwrap();
    let mut sink = OtlpSink::new(shape(), exporter.queue());
    for r in recs {
        sink.accept(r);
    }
    drop(sink);
    exporter.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_as_unary_grpc_calls_and_equal_the_records_spans() {
    let (url, seen) = collector(Answer::Ok { rejected: 1 }).await;
    let cfg = config(&url, Signal::Traces);
    let s = tokio::task::spawn_blocking(move || export(cfg, &records(5)))
        .await
        .unwrap();
    assert_eq!(s.protocol, "grpc");
    assert!(s
        .endpoint
        .ends_with("/opentelemetry.proto.collector.trace.v1.TraceService/Export"));
    // The collector's partial success is read from the framed answer.
    assert_eq!(
        (s.spans, s.exported, s.rejected, s.dropped),
        (5, 4, 1, 1),
        "{s:?}"
    );
    let got = seen.lock().unwrap().clone();
    let mut spans = Vec::new();
    for (path, h, message) in &got {
        assert_eq!(
            path,
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        );
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["x-api-key"], "s3cret");
        assert_eq!(h["grpc-timeout"], "3000m");
        spans.extend(ExportTraceServiceRequest::spans_of(message).unwrap());
    }
    spans.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(spans.len(), 5);
    for (span, r) in spans.iter().zip(records(5)) {
        let ids = SpanIds {
            trace_id: span.trace_id.clone().try_into().unwrap(),
            span_id: span.span_id.clone().try_into().unwrap(),
            parent: None,
        };
        // The span the collector decoded is the record's span, stall event and all.
        assert_eq!(Some(span), request_span(&r, &shape(), ids).as_ref());
        assert!(span.events.iter().any(|e| e.name == "cadence.stall"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_costs_the_spans_counted_and_named_retryable() {
    for answer in [Answer::TrailersOnly(14), Answer::InTrailers(14)] {
        let (url, seen) = collector(answer).await;
        let cfg = config(&url, Signal::Traces);
        let s = tokio::task::spawn_blocking(move || export(cfg, &records(4)))
            .await
            .unwrap();
        assert_eq!(
            (s.spans, s.exported, s.dropped, s.dropped_failed),
            (4, 0, 4, 4),
            "{s:?}"
        );
        let e = s.error.unwrap();
        assert!(
            e.contains("UNAVAILABLE (14)") && e.contains("retryable"),
            "{e}"
        );
        assert!(!seen.lock().unwrap().is_empty(), "it was called");
    }
    // A permanent status is said so.
    let (url, _) = collector(Answer::TrailersOnly(3)).await;
    let cfg = config(&url, Signal::Traces);
    let s = tokio::task::spawn_blocking(move || export(cfg, &records(2)))
        .await
        .unwrap();
    let e = s.error.unwrap();
    assert!(
        e.contains("INVALID_ARGUMENT (3): collector down; permanent"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_go_to_the_metrics_service() {
    let (url, seen) = collector(Answer::Ok { rejected: 0 }).await;
    let cfg = config(&url, Signal::Metrics);
    let s = tokio::task::spawn_blocking(move || {
        let (exporter, mut sink) =
            MetricsExporter::start(cfg, shape(), Duration::from_secs(60)).unwrap();
        for r in &records(3) {
            sink.accept(r);
        }
        exporter.finish()
    })
    .await
    .unwrap();
    assert!(s.last_exported && s.failed == 0, "{s:?}");
    let got = seen.lock().unwrap().clone();
    let (path, _, message) = &got[0];
    assert_eq!(
        path,
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
    );
    let m = <ExportMetricsServiceRequest as prost::Message>::decode(&message[..]).unwrap();
    let names: Vec<_> = m.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(
        names.contains(&"gen_ai.client.operation.time_to_first_chunk"),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_only_collector_costs_the_spans_within_the_timeout() {
    // A server that speaks HTTP/1.1 only (answers the HTTP/2 preface with garbage).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in listener.incoming().flatten() {
            let mut buf = [0; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let cfg = config(&url, Signal::Traces);
    let t = std::time::Instant::now();
    let s = tokio::task::spawn_blocking(move || export(cfg, &records(3)))
        .await
        .unwrap();
    assert_eq!((s.exported, s.dropped_failed), (0, 3), "{s:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
