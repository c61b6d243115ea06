//! The exporter against a fake collector on 127.0.0.1 port 0: what arrives decodes to
//! the records' spans; a collector that answers 500 or 429, takes too long or is not
//! there costs spans, counted, and never more than the export timeout at the end.

mod common;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use cadence_core::{RecordSink, RequestRecord};
use cadence_otlp::proto::{self, ExportTraceServiceRequest};
use cadence_otlp::{Config, Exporter, OtlpSink, Protocol, Shape};
use common::records;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A collector answering `status` after `delay`; what it was sent is kept.
async fn collector(status: StatusCode, delay: Duration) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push((headers, body));
                tokio::time::sleep(delay).await;
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn config(url: &str, protocol: Protocol, timeout_ms: &str) -> Config {
    let env = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_TIMEOUT" => Some(timeout_ms.to_string()),
        "OTEL_EXPORTER_OTLP_HEADERS" => Some("x-api-key=s3cret".to_string()),
        _ => None,
    };
    Config::resolve(Some(url), Some(protocol), &env)
        .unwrap()
        .unwrap()
}

fn shape() -> Shape {
    common::shape(1_800_000_000_000_000_000)
}

/// Every record through the sink, then the exporter finished; the wall time the
/// finish took.
fn export(config: Config, recs: &[RequestRecord]) -> (cadence_core::report::OtlpExport, Duration) {
    let exporter = Exporter::start(config).unwrap();
    let mut sink = OtlpSink::new(shape(), exporter.queue());
    for r in recs {
        sink.accept(r);
    }
    drop(sink);
    let t = Instant::now();
    let summary = exporter.finish();
    (summary, t.elapsed())
}

fn decode(seen: &Seen) -> Vec<proto::Span> {
    seen.lock()
        .unwrap()
        .iter()
        .flat_map(|(_, b)| {
            let req = <ExportTraceServiceRequest as prost::Message>::decode(&b[..]).unwrap();
            req.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_as_protobuf_with_the_records_times_and_the_headers() {
    let (url, seen) = collector(StatusCode::OK, Duration::ZERO).await;
    let recs = records(5);
    let cfg = config(&url, Protocol::HttpProtobuf, "5000");
    let (summary, _) = tokio::task::spawn_blocking(move || export(cfg, &recs))
        .await
        .unwrap();
    assert_eq!(
        (summary.spans, summary.exported, summary.dropped),
        (5, 5, 0),
        "{summary:?}"
    );
    let got = seen.lock().unwrap().clone();
    assert!(got
        .iter()
        .all(|(h, _)| h["content-type"] == "application/x-protobuf"));
    assert!(got.iter().all(|(h, _)| h["x-api-key"] == "s3cret"));
    let mut spans = decode(&seen);
    spans.sort_by_key(|s| s.start_time_unix_nano);
    let o = shape().origin_unix_ns;
    for (i, (s, r)) in spans.iter().zip(records(5)).enumerate() {
        assert_eq!(s.start_time_unix_nano, o + r.sent_ns.unwrap(), "span {i}");
        assert_eq!(s.end_time_unix_nano, o + r.end_ns.unwrap(), "span {i}");
        assert_eq!(s.events[0].time_unix_nano, o + r.chunks[0].t_ns());
        let ttft = s
            .attributes
            .iter()
            .find(|a| a.key == "cadence.ttft_ms")
            .unwrap();
        assert_eq!(ttft.value(), Some(&proto::Value::Double(0.020001)));
        assert_eq!(s.trace_id.len(), 16);
        // No attribute carries the header's value.
        assert!(!format!("{s:?}").contains("s3cret"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_as_json_when_asked() {
    let (url, seen) = collector(StatusCode::OK, Duration::ZERO).await;
    let cfg = config(&url, Protocol::HttpJson, "5000");
    let (summary, _) = tokio::task::spawn_blocking(move || export(cfg, &records(3)))
        .await
        .unwrap();
    assert_eq!(
        (summary.exported, summary.protocol.as_str()),
        (3, "http/json")
    );
    let got = seen.lock().unwrap().clone();
    assert_eq!(got[0].0["content-type"], "application/json");
    let doc: serde_json::Value = serde_json::from_slice(&got[0].1).unwrap();
    let spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    assert_eq!(spans.len(), 3);
    assert_eq!(spans[0]["name"], "chat sim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_answering_500_or_429_costs_the_spans_counted() {
    for status in [
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        let (url, seen) = collector(status, Duration::ZERO).await;
        let cfg = config(&url, Protocol::HttpProtobuf, "5000");
        let (s, _) = tokio::task::spawn_blocking(move || export(cfg, &records(4)))
            .await
            .unwrap();
        assert_eq!(
            (s.spans, s.exported, s.dropped, s.dropped_failed),
            (4, 0, 4, 4),
            "{status}: {s:?}"
        );
        let e = s.error.unwrap();
        assert!(e.contains(status.as_str()), "{e}");
        assert!(!seen.lock().unwrap().is_empty(), "it was asked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_absent_collector_holds_the_end_no_longer_than_the_timeout() {
    let (url, _) = collector(StatusCode::OK, Duration::from_secs(30)).await;
    let cfg = config(&url, Protocol::HttpProtobuf, "300");
    let (s, took) = tokio::task::spawn_blocking(move || export(cfg, &records(4)))
        .await
        .unwrap();
    assert_eq!((s.exported, s.dropped), (0, 4), "{s:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let cfg = config(&url, Protocol::HttpProtobuf, "2000");
    let (s, took) = tokio::task::spawn_blocking(move || export(cfg, &records(2)))
        .await
        .unwrap();
    assert_eq!(
        (s.exported, s.dropped, s.dropped_failed),
        (0, 2, 2),
        "{s:?}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_full_queue_drops_new_spans_at_once_and_counts_them() {
    // Nothing listens and every POST waits out a long timeout: the queue fills.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    let mut cfg = config(&url, Protocol::HttpProtobuf, "200");
    cfg.queue = 4;
    cfg.batch = 2;
    let exporter = Exporter::start(cfg).unwrap();
    let mut sink = OtlpSink::new(shape(), exporter.queue());
    let t = Instant::now();
    for r in &records(1_000) {
        sink.accept(r);
    }
    let offered_in = t.elapsed();
    assert!(
        offered_in < Duration::from_secs(1),
        "offering never waits: {offered_in:?}"
    );
    let s = exporter.finish();
    assert_eq!((s.spans, s.exported, s.dropped), (1_000, 0, 1_000), "{s:?}");
    assert!(s.dropped_queue_full >= 990, "{s:?}");
}
