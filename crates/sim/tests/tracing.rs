//! `cadence sim --otlp`: each request on the flat schedule is the server's span at the
//! collector (vLLM's `llm_request`), a child of the `traceparent` it came with, its
//! queue, prefill and decode the schedule the sim served. The collector reads the
//! default protocol, protobuf.

mod common;

use std::sync::{Arc, Mutex};

use axum::extract::State;
use cadence_base::trace::{hex, Propagation};
use cadence_otlp::proto::{ExportTraceServiceRequest, Span, SpanKind, Value};
use cadence_sim::trace::Tracer;
use cadence_sim::SimState;
use common::*;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

type Kept = Arc<Mutex<Vec<Span>>>;

/// A collector on port 0 reading the default protocol (OTLP/HTTP protobuf).
async fn collector() -> (String, Kept) {
    let kept: Kept = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(
                |State(k): State<Kept>, body: axum::body::Bytes| async move {
                    let spans = ExportTraceServiceRequest::spans_of(&body).unwrap();
                    k.lock().unwrap().extend(spans);
                },
            ),
        )
        .with_state(kept.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, kept)
}

fn attr(span: &Span, key: &str) -> Value {
    let kv = span.attributes.iter().find(|kv| kv.key == key).unwrap();
    kv.value.clone().and_then(|v| v.value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_a_server_span_under_its_traceparent_with_its_schedule() {
    let (url, kept) = collector().await;
    let none = |_: &str| None;
    let config = cadence_otlp::Config::resolve(Some(&url), None, &none)
        .unwrap()
        .unwrap();
    let exporter = cadence_otlp::Exporter::start(config).unwrap();
    let state = SimState::new(fixed_config());
    // Traces the sim starts itself are not sampled: only the caller's is exported.
    state.trace_with(Tracer::new(exporter.queue(), Propagation::new(1, 0.0)));
    let traced = send(
        &state,
        "/v1/chat/completions",
        &[("traceparent", CALLER)],
        chat(4),
    )
    .await;
    assert_eq!(traced.status, 200);
    let fresh = send(&state, "/v1/chat/completions", &[], chat(4)).await;
    assert_eq!(fresh.status, 200);
    let s = exporter.finish();
    assert_eq!((s.spans, s.exported), (1, 1), "{s:?}");
    let spans = kept.lock().unwrap().clone();
    let span = &spans[0];
    assert_eq!(span.name, "llm_request");
    assert_eq!(span.kind, SpanKind::Server as i32);
    assert_eq!(hex(&span.trace_id), &CALLER[3..35]);
    assert_eq!(hex(&span.parent_span_id), &CALLER[36..52]);
    assert_ne!(hex(&span.span_id), &CALLER[36..52]);
    // TTFT 50 ms, then 3 gaps of 10 ms: the schedule it served.
    assert_eq!(
        attr(span, "gen_ai.latency.time_in_queue"),
        Value::Double(0.0)
    );
    assert_eq!(
        attr(span, "gen_ai.latency.time_to_first_token"),
        Value::Double(0.05)
    );
    assert_eq!(
        attr(span, "gen_ai.latency.time_in_model_decode"),
        Value::Double(0.03)
    );
    assert_eq!(attr(span, "gen_ai.latency.e2e"), Value::Double(0.08));
    assert_eq!(attr(span, "gen_ai.usage.completion_tokens"), Value::Int(4));
    let took = span.end_time_unix_nano - span.start_time_unix_nano;
    assert_eq!(took, 80_000_000);
    // The client saw the schedule the span says (its first content 50 ms in, or later).
    let first = traced.content_times()[0].0;
    assert!(first >= ms(50), "{first:?}");
}
