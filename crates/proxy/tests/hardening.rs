//! The proxy's own hostile-input parts: only inference routes are measured, a slow
//! client's back-pressure is not an upstream gap, a proxy pointed at itself refuses,
//! records say which request they were, and non-streaming answers' usage counts.

mod common;

use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::*;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn records_lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("index").is_some())
        .collect()
}

fn window(p: &cadence_proxy::Proxy) -> serde_json::Value {
    p.stats()["windows"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_models_hits_are_forwarded_but_not_measured() {
    let s = sim(fast_sim_config()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&format!("http://{}", s.addr), |c| {
        c.records = Some(records_in(dir.path(), "records.jsonl", 1))
    })
    .await;
    let c = client();
    for path in ["/health", "/v1/models", "/health"] {
        let f = fetch(&c, "GET", &format!("{}{path}", p.url()), &[], "").await;
        assert_eq!(f.status, 200, "{path} is still forwarded");
    }
    let f = fetch(
        &c,
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(4, true),
    )
    .await;
    assert_eq!(f.status, 200);
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            != 0)
        .await
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let w = window(&p);
    assert_eq!(w["requests"]["sent"], 1, "only the stream is measured: {w}");
    p.shutdown().await.unwrap();
    let recs = records_lines(dir.path());
    assert_eq!(recs.len(), 1, "{recs:?}");
}

/// Streams `n` chunks of `size` bytes, one every `every`, then `[DONE]`.
async fn bulk_upstream(n: usize, size: usize, every: Duration) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || async move {
            let pad = "x".repeat(size);
            let s = futures_util::stream::unfold(0usize, move |i| {
                let pad = pad.clone();
                async move {
                    if i > n {
                        return None;
                    }
                    tokio::time::sleep(every).await;
                    let line = if i == n {
                        "data: [DONE]\n\n".to_string()
                    } else {
                        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{pad}\"}}}}]}}\n\n")
                    };
                    Some((Ok::<_, std::io::Error>(Bytes::from(line)), i + 1))
                }
            });
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

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_not_an_upstream_itl_gap() {
    // 100 chunks of 64 KiB every 2 ms: far more than the socket buffers hold.
    let up = bulk_upstream(100, 64 << 10, Duration::from_millis(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "records.jsonl", 1))
    })
    .await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(p.addr).await.unwrap();
    let body = chat_body(100, true);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    // The client reads nothing for 1.5 s, then everything.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all))
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(String::from_utf8_lossy(&all).contains("[DONE]"));
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 1)
        .await
    );
    let text = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    let count = metric(&text, "cadence_itl_seconds_count");
    let under = metric(&text, "cadence_itl_seconds_bucket{le=\"0.5\"")
        + metric(
            &text,
            "cadence_itl_seconds_bucket{model=\"other\",route=\"chat\",le=\"0.5\"",
        );
    assert!(count > 0.0, "{text}");
    assert_eq!(
        under, count,
        "an ITL gap above 500 ms that the upstream never made (it sent every 2 ms)"
    );
    p.shutdown().await.unwrap();
    // The record says so: the wait on the client, and which gaps hold it.
    let recs = records_lines(dir.path());
    let info = &recs[0]["proxy"];
    let waited = info["downstream_wait_ns"].as_u64().unwrap_or(0);
    assert!(waited > 500_000_000, "{info}");
    assert!(
        !info["downstream_gaps"].as_array().unwrap().is_empty(),
        "{info}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_routes_are_configurable() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&format!("http://{}", s.addr), |c| {
        c.measured_routes = vec!["/v1/models".into()]
    })
    .await;
    let c = client();
    fetch(&c, "GET", &format!("{}/v1/models", p.url()), &[], "").await;
    fetch(&c, "GET", &format!("{}/health", p.url()), &[], "").await;
    let f = fetch(
        &c,
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(2, true),
    )
    .await;
    assert_eq!(f.status, 200);
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            != 0)
        .await
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(window(&p)["requests"]["sent"], 1, "{}", window(&p));
    let text = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(
        text.contains("cadence_unmeasured_requests_total 2"),
        "{text}"
    );
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_pointed_at_itself_refuses() {
    // Listening on the port its upstream names: refused at start.
    let port = std::net::TcpListener::bind(LOCAL)
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = cadence_proxy::ProxyConfig::new(
        format!("127.0.0.1:{port}").parse().unwrap(),
        cadence_proxy::parse_upstream(&format!("http://127.0.0.1:{port}")).unwrap(),
    );
    c.metrics_listen = None;
    let e = cadence_proxy::spawn(c).await;
    let msg = e
        .as_ref()
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string());
    assert!(e.is_err() && msg.contains("itself"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_pointed_at_each_other_answer_508() {
    let port = std::net::TcpListener::bind(LOCAL)
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = proxy(&format!("http://127.0.0.1:{port}"), |_| {}).await;
    let a_url = a.url();
    let b = proxy(&a_url, |c| {
        c.listen = format!("127.0.0.1:{port}").parse().unwrap()
    })
    .await;
    let f = tokio::time::timeout(
        Duration::from_secs(3),
        fetch(
            &client(),
            "POST",
            &format!("{a_url}/v1/chat/completions"),
            &[],
            &chat_body(2, true),
        ),
    )
    .await
    .expect("a loop is refused, not followed");
    assert_eq!(f.status, 508, "{}", f.text());
    assert!(f.text().contains("loop"), "{}", f.text());
    drop(b);
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_request_id_method_and_path() {
    let s = sim(fast_sim_config()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&format!("http://{}", s.addr), |c| {
        c.records = Some(records_in(dir.path(), "records.jsonl", 1))
    })
    .await;
    let c = client();
    let url = format!("{}/v1/chat/completions?api-version=1", p.url());
    fetch(
        &c,
        "POST",
        &url,
        &[("x-request-id", "req-abc")],
        &chat_body(3, true),
    )
    .await;
    fetch(&c, "POST", &url, &[], &chat_body(3, true)).await;
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 2)
        .await
    );
    p.shutdown().await.unwrap();
    let recs = records_lines(dir.path());
    assert_eq!(recs.len(), 2);
    let mut ids = Vec::new();
    for r in &recs {
        let proxy = &r["proxy"];
        assert_eq!(proxy["method"], "POST", "{r}");
        assert_eq!(proxy["path"], "/v1/chat/completions", "no query: {r}");
        ids.push(proxy["request_id"].as_str().unwrap_or_default().to_string());
    }
    assert!(ids.contains(&"req-abc".to_string()), "{ids:?}");
    assert!(
        ids.iter().all(|i| !i.is_empty()) && ids[0] != ids[1],
        "{ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_answer_in_another_dialect_counts_its_tokens() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |_| {}).await;
    let c = client();
    for (path, body) in [
        (
            "/api/chat",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":5}}"#,
        ),
        (
            "/completion",
            r#"{"prompt":"hi","n_predict":5,"stream":false}"#,
        ),
        (
            "/v1/responses",
            r#"{"model":"m","input":"hi","max_output_tokens":5,"stream":false}"#,
        ),
    ] {
        let f = fetch(&c, "POST", &format!("{}{path}", p.url()), &[], body).await;
        assert_eq!(f.status, 200, "{path}: {}", f.text());
    }
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 3)
        .await
    );
    let w = window(&p);
    assert_eq!(w["output_tokens"]["total"], 15, "{w}");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_answer_counts_its_usage() {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            (
                [(http::header::CONTENT_TYPE, "application/json")],
                r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#,
            )
        }),
    );
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let up = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    let p = proxy(&up, |_| {}).await;
    let f = fetch(
        &client(),
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(7, false),
    )
    .await;
    assert_eq!(f.status, 200);
    assert!(f.text().contains("hi there"));
    assert!(
        eventually(Duration::from_secs(2), || window(&p)["requests"]["sent"]
            == 1)
        .await
    );
    let w = window(&p);
    assert_eq!(w["output_tokens"]["total"], 7, "{w}");
    assert_eq!(w["output_tokens"]["source"], "usage", "{w}");
    p.shutdown().await.unwrap();
}

/// Reads until the peer closes (Ok(true)) or `within` passes (Ok(false)); bytes read
/// are appended to `got`.
async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration, got: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_closes_a_trickled_head_and_an_idle_connection() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&format!("http://{}", s.addr), |c| {
        c.limits.header_read_timeout = Duration::from_millis(300);
    })
    .await;
    let addr = p.metrics_addr.unwrap();
    // Half a request head, then a byte every 50 ms: closed near the 300 ms bound,
    // with no answer.
    let mut trickle = tokio::net::TcpStream::connect(addr).await.unwrap();
    trickle
        .write_all(b"GET /metrics HTTP/1.1\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut closed = false;
    for _ in 0..60 {
        if trickle.write_all(b"X").await.is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut trickle, Duration::from_millis(50), &mut got).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled head still open after 3 s");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // A whole request is answered, then the idle keep-alive connection is closed.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    assert!(closed_within(&mut idle, Duration::from_secs(5), &mut got).await);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n"),
        "{text}"
    );
    p.shutdown().await.unwrap();
}
