//! The proxy reads a response as a stream by `cadence_wire::stream_framing`, the rule
//! the load generator uses: an upstream that streams SSE without a content type is
//! measured as a stream when the client asked for one, and as a plain answer when not.

mod common;

use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::*;
use std::time::Duration;

fn content(t: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n")
}

/// An upstream streaming three chunks and `[DONE]` with no content-type header.
async fn untyped_upstream() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            let events: Vec<Result<Bytes, std::io::Error>> = ["a", "b", "c"]
                .iter()
                .map(|t| Ok(Bytes::from(content(t))))
                .chain([Ok(Bytes::from_static(b"data: [DONE]\n\n"))])
                .collect();
            Body::from_stream(futures_util::stream::iter(events))
        }),
    );
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

/// The proxy's one-minute window after one request with `stream` asked or not.
async fn window_after(stream: bool) -> serde_json::Value {
    let up = untyped_upstream().await;
    let p = proxy(&up, |_| {}).await;
    let f = fetch(
        &client(),
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(3, stream),
    )
    .await;
    assert_eq!(f.status, 200);
    assert!(
        f.headers.get(http::header::CONTENT_TYPE).is_none(),
        "the upstream sends no content type: {:?}",
        f.headers
    );
    assert!(f.text().ends_with("data: [DONE]\n\n"), "{}", f.text());
    let window = |p: &cadence_proxy::Proxy| p.stats()["windows"][0].clone();
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 1)
        .await,
        "{}",
        window(&p)
    );
    let w = window(&p);
    p.shutdown().await.unwrap();
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_answer_to_a_streamed_request_is_measured_as_sse() {
    let w = window_after(true).await;
    assert_eq!(w["requests"]["succeeded"], 1, "{w}");
    assert!(!w["ttft"].is_null(), "TTFT measured: {w}");
    assert!(!w["itl"].is_null(), "gaps measured: {w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_answer_to_a_plain_request_is_not_read_as_a_stream() {
    let w = window_after(false).await;
    assert!(w["ttft"].is_null(), "no stream was asked for: {w}");
}
