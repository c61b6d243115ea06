//! The sim over real TCP on 127.0.0.1, port 0: what a client on the wire
//! sees (chunked frames, a cut connection on `reset`), the send log, and
//! graceful shutdown with its drain timeout. Real time, generous bounds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cadence_sim::{spawn, Dist, SimConfig};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(itl_ms: u64) -> SimConfig {
    SimConfig {
        ttft: Dist::Fixed(Duration::from_millis(20)),
        itl: Dist::Fixed(Duration::from_millis(itl_ms)),
        drain_timeout: Duration::from_secs(10),
        ..SimConfig::default()
    }
}

fn request(url: &str, fault: Option<&str>, max_tokens: u32) -> http::Request<Full<Bytes>> {
    let body = json!({"model": "m", "stream": true, "max_tokens": max_tokens,
                      "messages": [{"role": "user", "content": "hello"}]});
    let mut req = http::Request::post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json");
    if let Some(f) = fault {
        req = req.header("x-cadence-fault", f);
    }
    req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// Reads a whole body: (frames with their arrival time, the error if any).
async fn read_body(body: hyper::body::Incoming) -> (Vec<(Instant, Bytes)>, Option<String>) {
    let mut body = body;
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    frames.push((Instant::now(), d));
                }
            }
            Err(e) => return (frames, Some(e.to_string())),
        }
    }
    (frames, None)
}

#[tokio::test]
async fn spawn_serves_streams_over_tcp_and_logs_them() {
    let server = spawn(config(15), local()).await.unwrap();
    assert_ne!(server.addr.port(), 0);
    let http = client();
    let resp = http.request(request(&server.url(), None, 8)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let (frames, error) = read_body(resp.into_body()).await;
    assert!(error.is_none());
    let text: String = frames
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b))
        .collect();
    assert_eq!(text.matches("\"content\":\" ").count(), 8);
    assert!(text.ends_with("data: [DONE]\n\n"));

    let log = server.send_log.snapshot();
    assert_eq!(log.len(), 1);
    let s = &log[0];
    assert!(s.finished);
    assert_eq!(s.tokens, [1; 8]);
    // Frames are flushed one by one: the client sees the 15 ms cadence too.
    let content: Vec<Instant> = frames
        .iter()
        .filter(|(_, b)| String::from_utf8_lossy(b).contains("\"content\":\" "))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(content.len(), 8);
    // Nominally 7 x 15 = 105 ms; half of it still tells one-by-one from buffered-
    // to-the-end (~0), with room for a late first chunk on a loaded machine (the
    // sim keeps to its schedule, so later chunks catch up).
    let span = content[7] - content[0];
    assert!(
        span >= Duration::from_millis(50),
        "chunks arrived together: {span:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn reset_cuts_the_connection_mid_body() {
    // A TCP reset discards what the receiver has not read yet: tokens 30 ms apart
    // give the reader time to take each one before the cut, even on a loaded machine.
    let server = spawn(config(30), local()).await.unwrap();
    let resp = client()
        .request(request(&server.url(), Some("reset"), 6))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (frames, error) = read_body(resp.into_body()).await;
    assert!(
        error.is_some(),
        "the body must end in an error, not cleanly"
    );
    let text: String = frames
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b))
        .collect();
    assert_eq!(text.matches("\"content\":\" ").count(), 3);
    assert!(!text.contains("[DONE]"));
    server.shutdown().await;
}

#[tokio::test]
async fn status_faults_over_tcp() {
    let server = spawn(config(5), local()).await.unwrap();
    let resp = client()
        .request(request(&server.url(), Some("status_503"), 6))
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_short_streams_finish() {
    let server = spawn(config(20), local()).await.unwrap();
    let resp = client()
        .request(request(&server.url(), None, 10))
        .await
        .unwrap();
    let reader = tokio::spawn(read_body(resp.into_body()));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let log = server.send_log.clone();
    server.shutdown().await;
    let (frames, error) = reader.await.unwrap();
    assert!(error.is_none(), "{error:?}");
    let text: String = frames
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b))
        .collect();
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(log.snapshot()[0].finished);
}

#[tokio::test]
async fn shutdown_cuts_streams_still_running_after_the_drain_timeout() {
    let server = spawn(
        SimConfig {
            drain_timeout: Duration::from_millis(200),
            ..config(5)
        },
        local(),
    )
    .await
    .unwrap();
    // `no_tokens` would stay silent for an hour.
    let resp = client()
        .request(request(&server.url(), Some("no_tokens"), 6))
        .await
        .unwrap();
    let reader = tokio::spawn(read_body(resp.into_body()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let log = server.send_log.clone();
    let t0 = Instant::now();
    server.shutdown().await;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(150), "drained for {took:?}");
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    let (_, error) = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the client sees the end")
        .unwrap();
    assert!(error.is_some(), "a cut stream must not look complete");
    let s = &log.snapshot()[0];
    assert!(!s.finished);
    assert_eq!(s.fault.as_deref(), Some("no_tokens"));
}

#[tokio::test]
async fn invalid_config_is_refused_at_spawn() {
    let err = spawn(
        SimConfig {
            burst: 0,
            ..SimConfig::default()
        },
        local(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("burst"));
}

#[tokio::test]
async fn send_log_file_gets_one_line_per_stream() {
    let path =
        std::env::temp_dir().join(format!("cadence-sim-socket-{}.jsonl", std::process::id()));
    let log = cadence_sim::SendLog::new().with_file(&path).unwrap();
    let state = cadence_sim::SimState::with_send_log(config(2), log);
    let server = cadence_sim::spawn_with_state(state, local()).await.unwrap();
    for _ in 0..2 {
        let resp = client()
            .request(request(&server.url(), None, 3))
            .await
            .unwrap();
        read_body(resp.into_body()).await;
    }
    server.shutdown().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<cadence_sim::SentStream> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1].request, 1);
    assert_eq!(lines[1].tokens, [1, 1, 1]);
}
