//! Clients that send what no client should: bodies that stop coming, dot segments that
//! climb out of the upstream's base path, `CONNECT`, heads hyper refuses itself. Each
//! is answered by the proxy, not forwarded, and counted (FAULTS 98, 102, 103, 108).

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers every request `200 ok` and sends each request line it got
/// down the channel.
async fn recording_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let _ = tx.send(head.lines().next().unwrap_or("").to_string());
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (url, rx)
}

/// Writes `raw` on a fresh connection and reads the answer until the proxy closes.
async fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

async fn metrics(p: &cadence_proxy::Proxy) -> String {
    get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f98_a_body_that_stops_coming_is_answered_408() {
    let (up, mut seen) = recording_upstream().await;
    let p = proxy(&up, |c| {
        c.limits.body_read_timeout = Duration::from_millis(400)
    })
    .await;
    let start = Instant::now();
    let got = raw_exchange(
        p.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\":",
    )
    .await;
    let took = start.elapsed();
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(seen.try_recv().is_err(), "nothing was forwarded");
    let m = metrics(&p).await;
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="body_timeout"} 1"#),
        "{m}"
    );
    // A body that comes in time is forwarded as before.
    let f = fetch(
        &client(),
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(2, false),
    )
    .await;
    assert_eq!(f.status, 200, "{}", f.text());
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f102_dot_segments_are_refused_not_forwarded() {
    let (up, mut seen) = recording_upstream().await;
    let p = proxy(&format!("{up}/base"), |_| {}).await;
    for path in [
        "/../admin",
        "/v1/../../admin",
        "/./v1/models",
        "/v1/%2e%2e/%2E%2e/admin",
        "/v1/..",
        "/v1/.%2e/x",
    ] {
        let raw = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        let got = raw_exchange(p.addr, raw.as_bytes()).await;
        assert!(got.starts_with("HTTP/1.1 400"), "{path}: {got}");
    }
    assert!(seen.try_recv().is_err(), "a dot segment went upstream");
    // Dots inside a segment are only names.
    let got = raw_exchange(
        p.addr,
        b"GET /v1/..x/a.b/...? HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert_eq!(
        seen.recv().await.unwrap(),
        "GET /base/v1/..x/a.b/...? HTTP/1.1"
    );
    let m = metrics(&p).await;
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="bad_target"} 6"#),
        "{m}"
    );
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f103_connect_is_refused() {
    let (up, mut seen) = recording_upstream().await;
    let p = proxy(&up, |_| {}).await;
    let got = raw_exchange(
        p.addr,
        b"CONNECT internal.example:22 HTTP/1.1\r\nhost: internal.example:22\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 405"), "{got}");
    assert!(seen.try_recv().is_err(), "CONNECT went upstream");
    let m = metrics(&p).await;
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="method_not_allowed"} 1"#),
        "{m}"
    );
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f108_heads_hyper_refuses_are_counted() {
    let (up, _seen) = recording_upstream().await;
    let p = proxy(&up, |c| c.limits.max_header_bytes = 4096).await;
    let got = raw_exchange(p.addr, b"GET / HTTP/1.1\r\nbad header line\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    let got = raw_exchange(p.addr, b"\x01\x02 nonsense\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    let big = format!(
        "GET / HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let got = raw_exchange(p.addr, big.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    let m = metrics(&p).await;
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="malformed_head"} 2"#),
        "{m}"
    );
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="head_too_large"} 1"#),
        "{m}"
    );
    p.shutdown().await.unwrap();
}

/// An upstream that accepts connections and never answers.
async fn silent_upstream() -> String {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    url
}

/// FAULTS 99: with every connection taken, a new one closes the client that has
/// waited longest on an unfinished body; once every connection is forwarding, a new
/// one is answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f99_a_full_proxy_closes_slow_clients_for_new_ones_and_refuses_when_all_forward() {
    let up = silent_upstream().await;
    let p = proxy(&up, |c| c.limits.max_connections = 2).await;
    let slow_head =
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{";
    let mut slow1 = TcpStream::connect(p.addr).await.unwrap();
    slow1.write_all(slow_head).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut slow2 = TcpStream::connect(p.addr).await.unwrap();
    slow2.write_all(slow_head).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Two requests sent whole take the slow clients' places, the oldest first.
    let body = chat_body(2, true);
    let whole = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut fast1 = TcpStream::connect(p.addr).await.unwrap();
    fast1.write_all(whole.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), slow1.read_to_end(&mut got)).await;
    assert!(
        matches!(n, Ok(Ok(_)) | Ok(Err(_))),
        "the oldest slow client was closed"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut fast2 = TcpStream::connect(p.addr).await.unwrap();
    fast2.write_all(whole.as_bytes()).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), slow2.read_to_end(&mut got)).await;
    assert!(
        matches!(n, Ok(Ok(_)) | Ok(Err(_))),
        "the other slow client was closed"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Both forwarding (the upstream never answers): a third is refused.
    let got = raw_exchange(p.addr, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    let m = metrics(&p).await;
    assert!(
        m.contains(r#"cadence_rejected_requests_total{reason="connection_limit"} 1"#),
        "{m}"
    );
    drop((fast1, fast2));
    p.shutdown().await.unwrap();
}
