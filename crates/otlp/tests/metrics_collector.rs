//! The metrics exporter against a fake collector on 127.0.0.1 port 0: what arrives at
//! `/v1/metrics` decodes to the records' histograms, a long run is exported each
//! interval, and a collector that answers 500 or is not there costs the export,
//! counted, and never more than the export timeout at the end.

mod common;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use cadence_core::{Chunk, Outcome, RecordSink, RequestRecord};
use cadence_otlp::config::Signal;
use cadence_otlp::metrics;
use cadence_otlp::metrics_proto::{self as mp, ExportMetricsServiceRequest};
use cadence_otlp::{Config, MetricsExporter, Protocol, Shape};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Seen = Arc<Mutex<Vec<Bytes>>>;

async fn collector(status: StatusCode) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/v1/metrics",
        post(move |body: Bytes| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(body);
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn config(url: &str) -> Config {
    let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_TIMEOUT").then(|| "1000".to_string());
    Config::resolve_for(
        Signal::Metrics,
        Some(url),
        Some(Protocol::HttpProtobuf),
        &env,
    )
    .unwrap()
    .unwrap()
}

fn shape() -> Shape {
    common::shape(0)
}

/// Request `i`: TTFT 20 µs + i ns, one gap of 1.5 µs.
fn record(i: u64) -> RequestRecord {
    let mut r = RequestRecord::new(i, Outcome::Succeeded);
    r.sent_ns = Some(0);
    r.chunks = vec![Chunk(20_000 + i, Some(1)), Chunk(21_500 + i, Some(1))];
    r.end_ns = Some(22_000 + i);
    r
}

fn histogram<'a>(req: &'a ExportMetricsServiceRequest, name: &str) -> &'a mp::HistogramDataPoint {
    let m = req.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap();
    match &m.data {
        Some(mp::Data::Histogram(h)) => &h.data_points[0],
        other => panic!("{other:?}"),
    }
}

fn last(seen: &Seen) -> ExportMetricsServiceRequest {
    let bodies = seen.lock().unwrap();
    <ExportMetricsServiceRequest as prost::Message>::decode(&bodies.last().unwrap()[..]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_export_holds_the_runs_histograms_and_a_long_run_is_exported_each_interval() {
    let (url, seen) = collector(StatusCode::OK).await;
    let cfg = config(&url);
    let (exporter, mut sink) =
        MetricsExporter::start(cfg, shape(), Duration::from_millis(100)).unwrap();
    exporter.set_origin_now();
    for i in 0..3 {
        sink.accept(&record(i));
    }
    // Three intervals pass with the same figures: each export is cumulative.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let periodic = seen.lock().unwrap().len();
    assert!(periodic >= 2, "{periodic} exports in 500 ms at 100 ms");
    for i in 3..5 {
        sink.accept(&record(i));
    }
    drop(sink);
    let summary = tokio::task::spawn_blocking(move || exporter.finish())
        .await
        .unwrap();
    assert!(summary.last_exported, "{summary:?}");
    assert_eq!(summary.failed, 0);
    assert_eq!(summary.exports, seen.lock().unwrap().len() as u64);
    let req = last(&seen);
    let ttft = histogram(&req, metrics::TIME_TO_FIRST_CHUNK);
    assert_eq!(ttft.count, 5);
    assert_eq!(ttft.sum, Some((5 * 20_000 + 10) as f64 / 1e9));
    let itl = histogram(&req, metrics::TIME_PER_OUTPUT_CHUNK);
    assert_eq!(
        (itl.count, itl.bucket_counts[0]),
        (5, 5),
        "1.5 µs gaps under 50 µs"
    );
    assert!(ttft.start_time_unix_nano > 0 && ttft.start_time_unix_nano <= ttft.time_unix_nano);
    // The series start where the run did, in every export.
    let first =
        <ExportMetricsServiceRequest as prost::Message>::decode(&seen.lock().unwrap()[0][..])
            .unwrap();
    assert_eq!(
        histogram(&first, metrics::TIME_TO_FIRST_CHUNK).start_time_unix_nano,
        ttft.start_time_unix_nano
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_answering_500_or_absent_costs_the_export_counted_within_the_timeout() {
    let (url, seen) = collector(StatusCode::INTERNAL_SERVER_ERROR).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for url in [url, closed] {
        let (exporter, mut sink) =
            MetricsExporter::start(config(&url), shape(), Duration::from_secs(3600)).unwrap();
        sink.accept(&record(0));
        drop(sink);
        let t = Instant::now();
        let s = tokio::task::spawn_blocking(move || exporter.finish())
            .await
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(1_500),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            (s.exports, s.failed, s.last_exported),
            (1, 1, false),
            "{s:?}"
        );
        let w = cadence_otlp::metrics_export::warning(&s).unwrap();
        assert!(w.contains("the measurements are unaffected"), "{w}");
        assert!(s.error.is_some());
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the 500 collector was sent the export"
    );
}
