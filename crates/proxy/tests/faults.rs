//! FAULTS.md rows 40–48 and 124 (the proxy), one test each, on 127.0.0.1 port 0 with
//! the sim or a purpose-built upstream.

mod common;

use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use cadence_core::{Outcome, RecordSource, RequestRecord};
use cadence_proxy::RecordsConfig;
use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

fn records_config(dir: &Path) -> RecordsConfig {
    records_in(dir, "records.jsonl", 1)
}

fn read_records(dir: &Path) -> Vec<RequestRecord> {
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records
}

/// An upstream whose SSE stream sends `data: {i}` every `every`, forever (or `count`
/// events then `[DONE]`), noting when the stream was dropped and how many bytes it
/// produced.
#[derive(Clone, Default)]
struct Ticker {
    dropped_at: Arc<Mutex<Option<Instant>>>,
    produced: Arc<AtomicU64>,
    /// When each event was handed to the upstream's response body.
    yielded: Arc<Mutex<Vec<Instant>>>,
}

struct DropNote(Arc<Mutex<Option<Instant>>>);
impl Drop for DropNote {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

async fn ticker_upstream(
    every: Duration,
    count: Option<u64>,
    chunk_bytes: usize,
) -> (String, Ticker) {
    let t = Ticker::default();
    let st = t.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let st = st.clone();
            async move {
                let note = DropNote(st.dropped_at.clone());
                let produced = st.produced.clone();
                let yielded = st.yielded.clone();
                let pad = "x".repeat(chunk_bytes);
                let s = futures_util::stream::unfold((0u64, note), move |(i, note)| {
                    let produced = produced.clone();
                    let yielded = yielded.clone();
                    let pad = pad.clone();
                    async move {
                        if count.is_some_and(|c| i > c) {
                            return None;
                        }
                        if !every.is_zero() {
                            tokio::time::sleep(every).await;
                        }
                        let line = if count == Some(i) {
                            "data: [DONE]\n\n".to_string()
                        } else {
                            format!(
                                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}{pad}\"}}}}]}}\n\n"
                            )
                        };
                        produced.fetch_add(line.len() as u64, Ordering::SeqCst);
                        yielded.lock().unwrap().push(Instant::now());
                        Some((Ok::<_, std::io::Error>(Bytes::from(line)), (i + 1, note)))
                    }
                });
                (
                    [(http::header::CONTENT_TYPE, "text/event-stream")],
                    Body::from_stream(s),
                )
            }
        }),
    );
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, t)
}

fn raw_request(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

/// FAULTS 36 for the proxy: a stream still open when shutdown's drain timeout passes
/// is cut by the proxy, recorded as aborted, not as a client that hung up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f36_shutdown_cuts_open_streams_as_aborted() {
    let (up, _ticker) = ticker_upstream(Duration::from_millis(10), None, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&up, |c| {
        c.records = Some(records_config(dir.path()));
        c.limits.drain_timeout = Duration::from_millis(200);
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(raw_request("/v1/chat/completions", &chat_body(10, true), "").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < 300 {
        got += s.read(&mut buf).await.unwrap();
    }
    p.shutdown().await.unwrap();
    let recs = read_records(dir.path());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, Outcome::AbortedAtDeadline);
    let error = recs[0].error.as_deref().unwrap();
    assert!(error.contains("proxy shut down"), "{error}");
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f40_client_disconnect_cancels_upstream() {
    let (up, ticker) = ticker_upstream(Duration::from_millis(10), None, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&up, |c| c.records = Some(records_config(dir.path()))).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(raw_request("/v1/chat/completions", &chat_body(10, true), "").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < 300 {
        got += s.read(&mut buf).await.unwrap();
    }
    assert!(
        ticker.dropped_at.lock().unwrap().is_none(),
        "upstream still streaming"
    );
    let closed = Instant::now();
    drop(s);
    let cancelled = eventually(Duration::from_secs(2), || {
        ticker.dropped_at.lock().unwrap().is_some()
    })
    .await;
    assert!(cancelled, "the upstream stream was never cancelled");
    let after = ticker.dropped_at.lock().unwrap().unwrap() - closed;
    assert!(
        after < Duration::from_millis(100),
        "upstream cancelled {after:?} after the client left"
    );
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(
        metrics.contains("cadence_client_disconnects_total 1"),
        "{metrics}"
    );
    p.shutdown().await.unwrap();
    let recs = read_records(dir.path());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, Outcome::ClientDisconnected);
    assert!(recs[0]
        .error
        .as_deref()
        .unwrap()
        .contains("client disconnected"));
    assert!(
        !recs[0].chunks.is_empty(),
        "the chunks before the disconnect are kept"
    );
    assert_eq!(recs[0].source, RecordSource::Proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f41_upstream_dies_mid_stream_ends_the_client_stream_with_an_error() {
    // 20 ms between tokens, so the tokens before the cut were read before the reset
    // (a TCP reset discards data still unread in the receiver's kernel buffer).
    let s = sim(cadence_sim::SimConfig {
        itl: cadence_sim::Dist::Fixed(Duration::from_millis(20)),
        ..fast_sim_config()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&s.url(), |c| c.records = Some(records_config(dir.path()))).await;
    let got = fetch(
        &client(),
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[("x-cadence-fault", "reset"), ("x-cadence-fault-after", "3")],
        &chat_body(10, true),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(
        got.error.is_some(),
        "the client saw a clean end: {}",
        got.text()
    );
    assert!(
        got.text().contains("\"content\""),
        "tokens before the cut arrived"
    );
    assert!(
        !got.text().contains("[DONE]"),
        "never a fake [DONE]: {}",
        got.text()
    );
    p.shutdown().await.unwrap();
    let recs = read_records(dir.path());
    assert_eq!(recs[0].outcome, Outcome::Truncated, "{:?}", recs[0]);
    // The record holds exactly the complete content events the client received.
    let text = got.text();
    let mut events: Vec<&str> = text.split("\n\n").collect();
    events.pop(); // an incomplete tail, or "" after the last complete event
    let content = events
        .iter()
        .filter(|e| e.contains(r#""content":" "#))
        .count();
    assert!(content >= 1, "{text}\n{:?}\n{:?}", recs[0], got.error);
    assert_eq!(recs[0].chunks.len(), content, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f42_slow_client_back_pressures_the_upstream() {
    // As fast as the upstream can go, 16 KiB per event.
    let (up, ticker) = ticker_upstream(Duration::ZERO, None, 16 * 1024).await;
    let p = proxy(&up, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(raw_request("/v1/chat/completions", &chat_body(10, true), "").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let _ = s.read(&mut buf).await.unwrap();
    // The client stops reading. Production must stall, not grow without bound.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p1 = ticker.produced.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let p2 = ticker.produced.load(Ordering::SeqCst);
    assert_eq!(
        p1, p2,
        "the upstream kept producing while the client did not read"
    );
    // What is held between the two sockets is bounded: the kernel buffers plus hyper's
    // write buffer, far below what an unbounded buffer would hold.
    assert!(
        p1 < 64 << 20,
        "{p1} bytes produced for a client that read 1 KiB"
    );
    // Reading again resumes the upstream.
    let mut read = 0usize;
    while read < 8 << 20 {
        read += s.read(&mut buf).await.unwrap();
    }
    assert!(
        ticker.produced.load(Ordering::SeqCst) > p2,
        "the upstream resumed"
    );
    drop(s);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f43_every_chunk_is_forwarded_at_once_and_unchanged() {
    let (up, t) = ticker_upstream(Duration::from_millis(100), Some(5), 0).await;
    let p = proxy(&up, |_| {}).await;
    let c = client();
    let req = http::Request::post(format!("{}/v1/chat/completions", p.url()))
        .body(http_body_util::Full::new(Bytes::from(chat_body(5, true))))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let mut body = resp.into_body();
    let mut arrivals = Vec::new();
    let mut all = Vec::new();
    use http_body_util::BodyExt;
    while let Some(f) = body.frame().await {
        let f = f.unwrap();
        if let Some(d) = f.data_ref() {
            arrivals.push(Instant::now());
            all.extend_from_slice(d);
        }
    }
    let mut expected = String::new();
    for i in 0..5 {
        expected.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}}}}]}}\n\n"
        ));
    }
    expected.push_str("data: [DONE]\n\n");
    assert_eq!(String::from_utf8(all).unwrap(), expected, "bytes unchanged");
    assert_eq!(arrivals.len(), 6, "one frame per upstream write");
    // Each frame reaches the client right after the upstream wrote it: well under the
    // 100 ms to the next one, so no frame waited for a later one (no buffering).
    let yielded = t.yielded.lock().unwrap().clone();
    assert_eq!(yielded.len(), 6);
    for (i, (arrived, wrote)) in arrivals.iter().zip(&yielded).enumerate() {
        let delay = arrived.saturating_duration_since(*wrote);
        assert!(
            delay < Duration::from_millis(80),
            "frame {i} arrived {delay:?} after the upstream wrote it"
        );
    }
    p.shutdown().await.unwrap();
}

/// FAULTS 124: a stream with more chunks than `--max-chunks` is relayed whole, byte for
/// byte; its record keeps the first chunks' times, counts the rest, and the stream is
/// counted in `cadence_truncated_measurements_total`. A stream of exactly the ceiling is
/// not truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f124_a_stream_past_the_chunk_ceiling_is_relayed_whole_and_its_record_is_bounded() {
    const EVENTS: u64 = 2_000;
    const CEILING: usize = 100;
    let (up, ticker) = ticker_upstream(Duration::ZERO, Some(EVENTS), 16).await;
    let pad = "x".repeat(16);
    let mut expected = String::new();
    for i in 0..EVENTS {
        expected.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}{pad}\"}}}}]}}\n\n"
        ));
    }
    expected.push_str("data: [DONE]\n\n");
    for (ceiling, truncated) in [(CEILING, true), (EVENTS as usize, false)] {
        let dir = tempfile::tempdir().unwrap();
        let p = proxy(&up, |c| {
            c.records = Some(records_config(dir.path()));
            c.limits.max_chunks = ceiling;
        })
        .await;
        let before = ticker.produced.load(Ordering::SeqCst);
        let url = format!("{}/v1/chat/completions", p.url());
        let f = fetch(&client(), "POST", &url, &[], &chat_body(10, true)).await;
        assert_eq!(f.status, 200);
        assert_eq!(f.error, None, "the stream ends cleanly");
        assert_eq!(
            f.body.len() as u64,
            ticker.produced.load(Ordering::SeqCst) - before
        );
        assert!(f.text() == expected, "every byte relayed unchanged");
        let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
        let line = "cadence_truncated_measurements_total{model=\"other\",route=\"chat\"} 1";
        assert_eq!(metrics.contains(line), truncated, "{metrics}");
        assert!(metrics.contains(
            "cadence_requests_total{model=\"other\",route=\"chat\",outcome=\"succeeded\"} 1"
        ));
        p.shutdown().await.unwrap();
        let recs = read_records(dir.path());
        assert_eq!(recs.len(), 1);
        let r = &recs[0];
        assert_eq!(r.outcome, Outcome::Succeeded, "{:?}", r.error);
        assert_eq!(r.chunks.len(), ceiling.min(EVENTS as usize));
        assert_eq!(r.counters.chunks_not_kept, EVENTS - r.chunks.len() as u64);
        assert_eq!(r.chunks_truncated(), truncated);
        assert_eq!(r.output_token_count().count, EVENTS, "every chunk counted");
        // The figures cover the kept chunks: one gap fewer than them, less the gaps that
        // held a wait on this test's client (the client's, not the server's: a loaded
        // machine reads late); no TPOT when cut.
        let mut bad = 0;
        let gaps = cadence_core::per_request::itl_gaps(r, &mut bad).count();
        let client_waits = (1..r.chunks.len())
            .filter(|&i| cadence_core::per_request::client_wait_before(r, i))
            .count();
        assert_eq!(gaps, r.chunks.len() - 1 - client_waits);
        let tpot = cadence_core::per_request::tpot_and_speed(r, &mut bad);
        assert_eq!(tpot.is_none(), truncated);
    }
}

async fn read_all(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f44_huge_or_too_many_headers_get_431_and_nothing_is_forwarded() {
    let s = sim(fast_sim_config()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&s.url(), |c| c.records = Some(records_config(dir.path()))).await;
    let huge = format!("X-Big: {}\r\n", "a".repeat(100 * 1024));
    let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    for extra in [huge, many] {
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        let req = raw_request("/v1/chat/completions", &chat_body(4, true), &extra);
        let _ = c.write_all(req.as_bytes()).await;
        let got = read_all(&mut c, Duration::from_secs(5)).await;
        let head = String::from_utf8_lossy(&got[..got.len().min(40)]).into_owned();
        assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    }
    assert_eq!(s.state().requests(), 0, "nothing reached the upstream");
    p.shutdown().await.unwrap();
    assert!(
        read_records(dir.path()).is_empty(),
        "and nothing was recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f45_slowloris_is_closed_at_the_header_timeout() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |c| {
        c.limits.header_read_timeout = Duration::from_millis(300)
    })
    .await;
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    let start = Instant::now();
    c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One header byte every 50 ms, never finishing the head.
    let closed_at = loop {
        if c.write_all(b"X").await.is_err() {
            break Instant::now();
        }
        let mut b = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(50), c.read(&mut b)).await {
            Ok(Ok(_)) | Ok(Err(_)) => break Instant::now(), // closed (maybe after a 408)
            Err(_) => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "still open after 3 s"
        );
    };
    let after = closed_at - start;
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_millis(1500),
        "closed after {after:?}"
    );
    assert_eq!(s.state().requests(), 0);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f47_model_label_comes_from_an_allow_list() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |c| c.models = vec!["llama".into()]).await;
    let c = client();
    let url = format!("{}/v1/chat/completions", p.url());
    for m in ["llama", "m-1", "m-2", "m-3", "llama"] {
        let body = chat_body(2, true).replace("cadence-sim", m);
        assert_eq!(fetch(&c, "POST", &url, &[], &body).await.status, 200);
    }
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(
        metrics.contains(
            r#"cadence_requests_total{model="llama",route="chat",outcome="succeeded"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"cadence_requests_total{model="other",route="chat",outcome="succeeded"} 3"#
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains("m-1") && !metrics.contains("m-2"),
        "{metrics}"
    );
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f48_conflicting_content_length_and_transfer_encoding_is_400() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |_| {}).await;
    let body = chat_body(2, true);
    for headers in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ] {
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{headers}\r\n{:x}\r\n{body}\r\n0\r\n\r\n\
             POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len(),
            body.len()
        );
        c.write_all(req.as_bytes()).await.unwrap();
        let got =
            String::from_utf8_lossy(&read_all(&mut c, Duration::from_secs(5)).await).into_owned();
        assert!(got.starts_with("HTTP/1.1 400"), "{got}");
        assert_eq!(
            got.matches("HTTP/1.1").count(),
            1,
            "the connection closed after the 400: {got}"
        );
    }
    assert_eq!(
        s.state().requests(),
        0,
        "nothing was smuggled to the upstream"
    );
    // A clean chunked request still passes.
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let got = String::from_utf8_lossy(&read_all(&mut c, Duration::from_secs(5)).await).into_owned();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("[DONE]"));
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(
        metrics.contains(r#"cadence_rejected_requests_total{reason="conflicting_length"} 2"#),
        "{metrics}"
    );
    p.shutdown().await.unwrap();
}

/// Found against llama.cpp's server, which closes its connection after every stream
/// without saying so: the proxy's next request on that pooled upstream connection
/// meets a closed socket before any response byte. The proxy sends it once more on a
/// fresh connection (as `bench` does), so the client sees no 502, and counts it.
#[tokio::test]
async fn an_upstream_that_drops_keep_alive_connections_costs_the_client_nothing() {
    let upstream = cadence_sim::closing::closing_server(true, 64);
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(&format!("http://{upstream}"), |c| {
        c.records = Some(records_config(dir.path()))
    })
    .await;
    let c = client();
    let url = format!("{}/v1/chat/completions", p.url());
    let body = chat_body(4, true);
    // Two at once first: the proxy's pool then holds two upstream connections, both
    // dead, so a resend that drew from the pool again would fail too.
    let (a, b) = tokio::join!(
        fetch(&c, "POST", &url, &[], &body),
        fetch(&c, "POST", &url, &[], &body)
    );
    assert_eq!((a.status, b.status), (200, 200));
    for i in 0..4 {
        let got = fetch(&c, "POST", &url, &[], &body).await;
        assert_eq!(got.status, 200, "request {i}: {}", got.text());
        assert!(got.text().ends_with("data: [DONE]\n\n"), "request {i}");
    }
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    p.shutdown().await.unwrap();
    let recs = read_records(dir.path());
    assert_eq!(recs.len(), 6);
    assert!(recs.iter().all(|r| r.outcome == Outcome::Succeeded));
    // Both pooled connections were dead when requests 3 and 4 drew them (how many later
    // requests find a dead one depends on the pool, not on the proxy).
    let resent: u32 = recs
        .iter()
        .map(|r| r.counters.stale_connection_retries)
        .sum();
    assert!(resent >= 2, "{recs:?}");
    assert!(
        metrics.contains(&format!("cadence_upstream_resends_total {resent}\n")),
        "{metrics}"
    );
}
