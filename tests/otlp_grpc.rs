//! `cadence bench --otlp-protocol grpc`: each request a span at a gRPC collector (a fake
//! one on 127.0.0.1 port 0, hyper's HTTP/2 server under axum), its times the record's
//! own; a collector answering UNAVAILABLE costs spans, counted in the report, never the
//! run's figures or exit code.

mod common;

use axum::body::{Body, Bytes};
use axum::http::Uri;
use axum::response::Response;
use cadence_otlp::grpc::unframe;
use cadence_otlp::proto::{self, ExportTraceServiceRequest};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// What the collector was sent: (method path, message unframed).
type Calls = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A gRPC collector answering every call with `code` in its trailers (an empty
/// response message before them); its base URL and the calls it took.
fn grpc_collector(code: u32) -> (String, Calls) {
    let calls: Calls = Arc::default();
    let keep = calls.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, body: Bytes| {
        let keep = keep.clone();
        async move {
            let message = unframe(&body).unwrap().to_vec();
            keep.lock().unwrap().push((uri.path().to_owned(), message));
            let mut trailers = axum::http::HeaderMap::new();
            trailers.insert("grpc-status", code.to_string().parse().unwrap());
            let body = http_body_util::Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
                .with_trailers(async move { Some(Ok::<_, std::convert::Infallible>(trailers)) });
            Response::builder()
                .header("content-type", "application/grpc")
                .body(Body::new(body))
                .unwrap()
        }
    });
    let addr = common::serve_on_own_thread(|listener| async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), calls)
}

/// Every span the collector was sent over the traces service.
fn spans_of(calls: &Calls) -> Vec<proto::Span> {
    let calls = calls.lock().unwrap();
    calls
        .iter()
        .filter(|(p, _)| p == "/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        .flat_map(|(_, m)| ExportTraceServiceRequest::spans_of(m).unwrap())
        .collect()
}

fn bench(url: &str, dir: &std::path::Path) -> (Option<i32>, Value, Vec<Value>) {
    let args = [
        "-n",
        "6",
        "-c",
        "2",
        "--otlp",
        url,
        "--otlp-protocol",
        "grpc",
    ];
    let env = [("OTEL_EXPORTER_OTLP_TIMEOUT", "3000")];
    common::bench_report(&args, &env, dir)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr<'a>(s: &'a proto::Span, key: &str) -> &'a proto::Value {
    let kv = s.attributes.iter().find(|a| a.key == key);
    kv.and_then(|kv| kv.value())
        .unwrap_or_else(|| panic!("{key}"))
}

#[test]
fn every_request_is_a_span_at_the_grpc_collector_with_its_records_times() {
    let (url, calls) = grpc_collector(0);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(&url, dir.path());
    assert_eq!(code, Some(0));
    let otlp = &report["otlp"];
    assert_eq!(
        (&otlp["protocol"], &otlp["exported"], &otlp["dropped"]),
        (&"grpc".into(), &6.into(), &0.into()),
        "{otlp}"
    );
    assert_eq!(
        report["otlp_metrics"]["last_exported"], true,
        "{}",
        report["otlp_metrics"]
    );
    let spans = spans_of(&calls);
    assert_eq!(spans.len(), records.len());
    for r in &records {
        let s = spans
            .iter()
            .find(|s| hex(&s.span_id) == r["trace"]["span_id"])
            .unwrap_or_else(|| panic!("the span of {}", r["index"]));
        assert_eq!(hex(&s.trace_id), r["trace"]["trace_id"]);
        let (sent, end) = (
            r["sent_ns"].as_u64().unwrap(),
            r["end_ns"].as_u64().unwrap(),
        );
        let first = r["chunks"][0][0].as_u64().unwrap();
        assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, end - sent);
        assert_eq!(
            s.events[0].time_unix_nano - s.start_time_unix_nano,
            first - sent
        );
        let ttft = (first - sent) as f64 / 1e6;
        assert_eq!(attr(s, "cadence.ttft_ms"), &proto::Value::Double(ttft));
        let index = r["index"].as_i64().unwrap();
        assert_eq!(attr(s, "cadence.request.index"), &proto::Value::Int(index));
    }
    let metrics = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p.contains("MetricsService"))
        .count();
    assert!(
        metrics >= 1,
        "the run's metrics went to the metrics service"
    );
}

#[test]
fn a_collector_answering_unavailable_costs_spans_not_the_run() {
    let (ok_url, _) = grpc_collector(0);
    let dir = tempfile::tempdir().unwrap();
    let (_, clean, _) = bench(&ok_url, dir.path());
    let (url, calls) = grpc_collector(14);
    let (code, report, records) = bench(&url, dir.path());
    assert_eq!(code, Some(0), "the run's own exit code");
    assert_eq!(records.len(), 6);
    let requests = &report["levels"][0]["requests"];
    assert_eq!(requests["succeeded"], 6);
    // The simulator's seeded figures are the clean run's.
    assert_eq!(requests, &clean["levels"][0]["requests"]);
    let otlp = &report["otlp"];
    assert_eq!(
        (&otlp["dropped"], &otlp["dropped_failed"]),
        (&6.into(), &6.into()),
        "{otlp}"
    );
    let error = otlp["error"].as_str().unwrap();
    assert!(
        error.contains("UNAVAILABLE (14)") && error.contains("retryable"),
        "{error}"
    );
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("6 of 6 spans dropped"), "{warnings}");
    assert!(!spans_of(&calls).is_empty(), "the collector was called");
}
