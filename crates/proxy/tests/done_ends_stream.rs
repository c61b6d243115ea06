//! In the proxy's tap: `[DONE]` ends the measured request even when the
//! upstream keeps the connection open or sends bytes after it; the client still gets
//! every byte the upstream sends.

mod common;

use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::Instant;

const DONE: &str = "data: [DONE]\n\n";
const LATE: &str = ": late\n\n";

fn content(t: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n")
}

/// An upstream that streams three chunks and `[DONE]`, then `late` more comments (the
/// first at once, then one every 100 ms), then ends the body, or (`late == None`) holds the connection open.
async fn upstream(late: Option<usize>) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || async move {
            let head: Vec<Result<Bytes, std::io::Error>> = ["a", "b", "c"]
                .iter()
                .map(|t| Ok(Bytes::from(content(t))))
                .chain([Ok(Bytes::from_static(DONE.as_bytes()))])
                .collect();
            let tail = futures_util::stream::unfold(0usize, move |i| async move {
                match late {
                    None => {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        None
                    }
                    Some(n) if i < n => {
                        if i > 0 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Some((Ok(Bytes::from_static(LATE.as_bytes())), i + 1))
                    }
                    Some(_) => None,
                }
            });
            let s = futures_util::StreamExt::chain(futures_util::stream::iter(head), tail);
            (
                [(http::header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(s),
            )
        }),
    );
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

fn window(p: &cadence_proxy::Proxy) -> serde_json::Value {
    p.stats()["windows"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_then_upstream_held_open_is_recorded_at_done() {
    let up = upstream(None).await;
    let p = proxy(&up, |c| c.limits.idle_timeout = Duration::from_secs(4)).await;
    let url = format!("{}/v1/chat/completions", p.url());
    let c = client();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(chat_body(3, true))))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("[DONE]") {
        let f = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("bytes before [DONE] arrive")
            .unwrap()
            .unwrap();
        got.extend_from_slice(f.data_ref().unwrap());
    }
    let started = Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 1)
        .await,
        "the request was not accounted for within 2 s of [DONE]: {}",
        window(&p)
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let w = window(&p);
    assert_eq!(w["requests"]["succeeded"], 1, "{w}");
    assert!(w["e2e"]["max_ms"].as_f64().unwrap() < 1000.0, "{w}");
    drop(body);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_done_reach_the_client_and_are_not_timed() {
    let up = upstream(Some(10)).await;
    let p = proxy(&up, |_| {}).await;
    let f = fetch(
        &client(),
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(3, true),
    )
    .await;
    assert_eq!(f.status, 200);
    assert!(f.error.is_none(), "{f:?}");
    let want = ["a", "b", "c"].map(content).concat() + DONE + &LATE.repeat(10);
    assert_eq!(f.text(), want, "the client gets every byte");
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 1)
        .await,
        "{}",
        window(&p)
    );
    let w = window(&p);
    assert_eq!(w["requests"]["succeeded"], 1, "{w}");
    let e2e = w["e2e"]["max_ms"].as_f64().unwrap_or_else(|| panic!("{w}"));
    assert!(
        e2e < 500.0,
        "E2E {e2e} ms stretched by the bytes after [DONE]"
    );
    assert!(
        w["counters"]["bytes_after_done"].as_u64().unwrap() > 0,
        "{w}"
    );
    p.shutdown().await.unwrap();
}
