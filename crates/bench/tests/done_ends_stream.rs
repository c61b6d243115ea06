//! `[DONE]` ends the stream. A server that keeps the connection open
//! after `[DONE]`, or sends bytes after it, must not stretch the request: E2E is the
//! `[DONE]` time, later bytes are counted, and the request does not wait for the
//! connection. A hand-written HTTP/1.1 server on 127.0.0.1 port 0 plays the server.

use bytes::Bytes;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::Clock;
use cadence_wire::Api;
use http_body_util::Full;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// What the server does once it has sent `[DONE]`.
#[derive(Clone, Copy)]
enum Tail {
    /// Keeps the connection open, silent, for a minute.
    HoldOpen,
    /// Sends `n` more small chunks (the first at once, then one every `every`), then
    /// ends the body.
    Trickle { n: usize, every: Duration },
}

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

fn content(t: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n")
}

async fn read_request(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = s.read(&mut tmp).await.unwrap();
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

async fn server(tail: Tail) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                read_request(&mut s).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                s.write_all(head.as_bytes()).await.unwrap();
                for t in ["a", "b", "c"] {
                    s.write_all(&chunk(&content(t))).await.unwrap();
                }
                s.write_all(&chunk("data: [DONE]\n\n")).await.unwrap();
                match tail {
                    Tail::HoldOpen => tokio::time::sleep(Duration::from_secs(60)).await,
                    Tail::Trickle { n, every } => {
                        for i in 0..n {
                            if i > 0 {
                                tokio::time::sleep(every).await;
                            }
                            if s.write_all(&chunk(": late\n\n")).await.is_err() {
                                return;
                            }
                        }
                        let _ = s.write_all(b"0\r\n\r\n").await;
                    }
                }
            });
        }
    });
    addr
}

async fn run(addr: SocketAddr, idle: Duration) -> (RequestRecord, Duration) {
    let http = client::build(&ClientConfig {
        pool_size: 2,
        connect_timeout: Duration::from_secs(2),
        http2: false,
    });
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        header: Duration::from_secs(5),
        first_token: Duration::from_secs(5),
        idle,
        total: Duration::from_secs(120),
        ..Timeouts::default()
    };
    let clock = Clock::start();
    let redactor = Redactor::default();
    let cx = ExecContext {
        client: &http,
        clock: &clock,
        timeouts: &timeouts,
        api: Api::Chat,
        strict: false,
        redactor: &redactor,
        max_tokens: None,
        keep_text: true,
        keep_tool_calls: false,
    };
    let req = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"stream\":true}")))
        .unwrap();
    let (_tx, mut cancel) = Cancel::new();
    let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
    let started = Instant::now();
    // Bounded: a regression waits for the idle timeout, which this outlasts.
    tokio::time::timeout(
        idle + Duration::from_secs(5),
        execute(&cx, req, &mut cancel, &mut rec),
    )
    .await
    .expect("the request ends");
    (rec, started.elapsed())
}

fn e2e_ms(rec: &RequestRecord) -> f64 {
    (rec.end_ns.unwrap() - rec.sent_ns.unwrap()) as f64 / 1e6
}

#[tokio::test]
async fn done_then_connection_held_open_ends_at_done() {
    let addr = server(Tail::HoldOpen).await;
    let idle = Duration::from_secs(3);
    let (rec, took) = run(addr, idle).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 3);
    assert!(
        took < Duration::from_secs(1),
        "the request waited for the connection: {took:?}"
    );
    assert!(e2e_ms(&rec) < 1000.0, "E2E {} ms", e2e_ms(&rec));
}

#[tokio::test]
async fn bytes_after_done_are_counted_not_timed() {
    let every = Duration::from_millis(100);
    let addr = server(Tail::Trickle { n: 10, every }).await;
    let (rec, took) = run(addr, Duration::from_secs(5)).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 3);
    // The last content chunk and [DONE] arrive together; the trickle lasts 1 s.
    let last_chunk = rec.chunks.last().unwrap().t_ns();
    let end = rec.end_ns.unwrap();
    assert!(
        end - last_chunk < 50_000_000,
        "E2E stretched past [DONE] by {} ms",
        (end - last_chunk) as f64 / 1e6
    );
    assert!(
        took < Duration::from_millis(900),
        "waited for the trickle: {took:?}"
    );
}
