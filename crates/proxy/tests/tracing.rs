//! `--otlp` on the proxy: a measured request continues its caller's trace (its span a
//! child of the client's), goes upstream with the proxy's span as the server's parent,
//! keeps the ids in its record and is exported as a server span whose figures are the
//! record's; a collector that is down costs spans, counted in `/metrics`, never a stream.

mod common;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use cadence_core::trace::hex;
use cadence_core::RequestRecord;
use common::*;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

type Kept = Arc<Mutex<Vec<Value>>>;

async fn serve(app: axum::Router) -> String {
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

/// An upstream that keeps each request's `traceparent` and streams three chunks 5 ms
/// apart.
async fn upstream() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    async fn chat(
        State(seen): State<Arc<Mutex<Vec<Option<String>>>>>,
        h: HeaderMap,
    ) -> axum::response::Response {
        let tp = h.get("traceparent").map(|v| v.to_str().unwrap().to_owned());
        seen.lock().unwrap().push(tp);
        let events = futures_util::stream::unfold(0, |i| async move {
            let data = match i {
                0..=2 => format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"
                ),
                3 => "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".into(),
                _ => return None,
            };
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((Ok::<_, std::io::Error>(data), i + 1))
        });
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(events))
            .unwrap()
    }
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .route("/v1/completions", axum::routing::post(chat))
        .with_state(seen.clone());
    (serve(app).await, seen)
}

/// A collector on port 0 keeping every span POSTed to it (OTLP/JSON).
async fn collector() -> (String, Kept) {
    let kept: Kept = Arc::default();
    async fn take(State(kept): State<Kept>, body: axum::body::Bytes) -> &'static str {
        let doc: Value = serde_json::from_slice(&body).unwrap();
        let spans = &doc["resourceSpans"][0]["scopeSpans"][0]["spans"];
        kept.lock()
            .unwrap()
            .extend(spans.as_array().unwrap().iter().cloned());
        "{}"
    }
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(take))
        .with_state(kept.clone());
    (serve(app).await, kept)
}

fn tracing_to(url: &str) -> cadence_proxy::Tracing {
    let none = |_: &str| None;
    let proto = Some(cadence_otlp::Protocol::HttpJson);
    let mut otlp = cadence_otlp::Config::resolve(Some(url), proto, &none)
        .unwrap()
        .unwrap();
    otlp.timeout = Duration::from_secs(2);
    cadence_proxy::Tracing {
        otlp,
        sample: 1.0,
        chunk_events: 0,
    }
}

/// The metrics' export to `url` (OTLP/JSON, 2 s timeout).
fn metrics_to(url: &str) -> cadence_otlp::Config {
    let none = |_: &str| None;
    let proto = Some(cadence_otlp::Protocol::HttpJson);
    let signal = cadence_otlp::Signal::Metrics;
    let mut c = cadence_otlp::Config::resolve_for(signal, Some(url), proto, &none)
        .unwrap()
        .unwrap();
    c.timeout = Duration::from_secs(2);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_span_names_the_operation_its_path_asks_for() {
    let (up, _) = upstream().await;
    let (col, kept) = collector().await;
    let p = proxy(&up, |c| c.tracing = Some(tracing_to(&col))).await;
    let c = client();
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let url = format!("{}{path}", p.url());
        let got = fetch(&c, "POST", &url, &[], &chat_body(3, true)).await;
        assert_eq!(got.status, 200, "{path}");
    }
    p.stop().await;
    let spans = kept.lock().unwrap().clone();
    let mut ops: Vec<String> = spans
        .iter()
        .map(|s| {
            let op = attr(s, "gen_ai.operation.name")["stringValue"]
                .as_str()
                .unwrap();
            let name = s["name"].as_str().unwrap();
            assert!(name.starts_with(&format!("{op} ")), "{name}");
            op.to_string()
        })
        .collect();
    ops.sort();
    assert_eq!(ops, ["chat", "text_completion"]);
}

/// `/metrics` of `p` once it holds `line` (within 3 s), else what it last said.
async fn metrics_with(p: &cadence_proxy::Proxy, line: &str) -> String {
    let url = format!("http://{}/metrics", p.metrics_addr.unwrap());
    let mut text = String::new();
    for _ in 0..300 {
        text = get_text(&url).await;
        if text.contains(line) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    text
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    let a = span["attributes"].as_array().unwrap();
    &a.iter().find(|kv| kv["key"] == key).unwrap()["value"]
}

fn ns(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn records(path: &std::path::Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("{\"cadence_"))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_span_is_the_clients_child_and_the_servers_parent() {
    let (up, seen) = upstream().await;
    let (col, kept) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "r.jsonl", 1));
        c.tracing = Some(tracing_to(&col));
    })
    .await;
    let c = client();
    let url = format!("{}/v1/chat/completions", p.url());
    let traced = fetch(
        &c,
        "POST",
        &url,
        &[("traceparent", CALLER)],
        &chat_body(3, true),
    )
    .await;
    assert!(traced.text().contains("[DONE]"), "{}", traced.text());
    let fresh = fetch(&c, "POST", &url, &[], &chat_body(3, true)).await;
    assert_eq!(fresh.status, 200);
    let exported = "cadence_otlp_spans_total{result=\"exported\"} 2";
    let text = metrics_with(&p, exported).await;
    assert!(text.contains(exported), "{text}");
    let stopped = p.stop().await;
    let otlp = stopped.otlp.unwrap();
    assert_eq!((otlp.spans, otlp.exported, otlp.dropped), (2, 2, 0));
    assert_eq!(stopped.records.unwrap(), 2);

    let recs = records(&dir.path().join("r.jsonl"));
    let spans = kept.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    assert_eq!((recs.len(), spans.len(), seen.len()), (2, 2, 2));
    for (r, forwarded) in recs.iter().zip(&seen) {
        let ids = r.trace.expect("the record keeps its ids");
        let s = spans
            .iter()
            .find(|s| s["spanId"] == hex(&ids.span_id))
            .expect("the record's span");
        assert_eq!(s["traceId"], hex(&ids.trace_id));
        assert_eq!(s["kind"], 2, "a server span");
        // The server's parent is the proxy's span.
        let want = format!("00-{}-{}-01", hex(&ids.trace_id), hex(&ids.span_id));
        assert_eq!(forwarded.as_deref(), Some(want.as_str()));
        // The span's figures are the record's.
        let mut bad = 0;
        let ttft = cadence_core::per_request::ttft_ms(r, &mut bad).unwrap();
        assert_eq!(attr(s, "cadence.ttft_ms")["doubleValue"], ttft);
        assert_eq!(attr(s, "cadence.chunks")["intValue"], "3");
        let (start, end) = (ns(&s["startTimeUnixNano"]), ns(&s["endTimeUnixNano"]));
        assert_eq!(end - start, r.end_ns.unwrap() - r.sent_ns.unwrap());
    }
    // The first continued the caller's trace; the second started one of its own.
    let first = recs[0].trace.unwrap();
    assert_eq!(hex(&first.trace_id), &CALLER[3..35]);
    assert_eq!(
        first.parent.map(|p| hex(&p)).as_deref(),
        Some(&CALLER[36..52])
    );
    let span = spans
        .iter()
        .find(|s| s["spanId"] == hex(&first.span_id))
        .unwrap();
    assert_eq!(span["parentSpanId"], &CALLER[36..52]);
    let second = recs[1].trace.unwrap();
    assert_eq!(second.parent, None);
    assert_ne!(hex(&second.trace_id), &CALLER[3..35]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_spans_counted_in_metrics_never_a_stream() {
    let (up, seen) = upstream().await;
    // A port nothing listens on.
    let down = {
        let l = std::net::TcpListener::bind(LOCAL).unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let p = proxy(&up, |c| {
        c.tracing = Some(tracing_to(&down));
        c.otlp_metrics = Some((metrics_to(&down), Duration::from_millis(100)));
    })
    .await;
    let url = format!("{}/v1/chat/completions", p.url());
    let got = fetch(&client(), "POST", &url, &[], &chat_body(3, true)).await;
    assert!(got.text().contains("[DONE]"), "{}", got.text());
    let failed = "cadence_otlp_spans_total{result=\"dropped_failed\"} 1";
    let text = metrics_with(&p, failed).await;
    assert!(text.contains(failed), "{text}");
    // The metrics' exports failed too, each counted beside the spans.
    let exports = "cadence_otlp_metric_exports_total{result=\"failed\"}";
    let text = metrics_with(&p, exports).await;
    assert!(text.contains(exports), "{text}");
    assert!(
        text.contains("cadence_otlp_metric_exports_total{result=\"exported\"} 0"),
        "{text}"
    );
    let otlp = p.stop().await.otlp.unwrap();
    assert_eq!((otlp.spans, otlp.exported, otlp.dropped_failed), (1, 0, 1));
    assert!(seen.lock().unwrap()[0].is_some(), "still traced upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_otlp_trace_headers_pass_through_untouched_and_records_carry_no_ids() {
    let (up, seen) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "r.jsonl", 1))
    })
    .await;
    let url = format!("{}/v1/chat/completions", p.url());
    fetch(
        &client(),
        "POST",
        &url,
        &[("traceparent", CALLER)],
        &chat_body(3, true),
    )
    .await;
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(!metrics.contains("otlp"), "{metrics}");
    assert!(p.stop().await.otlp.is_none());
    assert_eq!(seen.lock().unwrap()[0].as_deref(), Some(CALLER));
    assert!(records(&dir.path().join("r.jsonl"))[0].trace.is_none());
}
