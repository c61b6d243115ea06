//! WebSocket upgrades through the proxy: the handshake goes upstream, bytes come back
//! unchanged both ways, and each Realtime response on the connection is one record
//! with its chunks timed as an HTTP stream's are.

mod common;

use cadence_core::{Outcome, RequestRecord};
use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// A masked client text frame (fixed mask, so two connections send the same bytes).
fn client_frame(text: &str) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x81];
    match text.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// An unmasked server frame.
fn server_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut f = vec![(fin as u8) << 7 | opcode, payload.len() as u8];
    f.extend_from_slice(payload);
    f
}

const CREATE: &str = r#"{"type":"response.create","response":{"max_output_tokens":6}}"#;
const ITEM: &str = r#"{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"say something"}]}}"#;

/// Opens a WebSocket on `addr` by hand; returns the socket and the handshake answer.
async fn handshake(addr: &str, extra: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/realtime?model=m HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "{head:?}");
        head.push(b[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

/// Asks for `responses` responses in turn, reading each to its `response.done`, then
/// closes; returns every byte the server sent after the handshake.
async fn converse(addr: &str, request: u64, responses: usize) -> Vec<u8> {
    let extra = format!("x-cadence-request: {request}\r\nAuthorization: Bearer sk-secret-77\r\n");
    let (mut s, head) = handshake(addr, &extra).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
    let mut got = Vec::new();
    for n in 1..=responses {
        s.write_all(&client_frame(ITEM)).await.unwrap();
        s.write_all(&client_frame(CREATE)).await.unwrap();
        while count(&got, b"response.done") < n {
            let mut b = [0u8; 4096];
            let k = s.read(&mut b).await.unwrap();
            assert!(k > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&b[..k]);
        }
    }
    // A close frame (masked, empty), then everything up to the server's close.
    s.write_all(&[0x88, 0x80, 1, 2, 3, 4]).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    got
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// The records the proxy wrote, once it has shut down.
async fn records_after(p: cadence_proxy::Proxy, dir: &std::path::Path) -> Vec<RequestRecord> {
    p.shutdown().await.unwrap();
    let text = std::fs::read_to_string(dir.join("live.jsonl")).unwrap();
    cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_through_the_proxy_is_byte_identical_and_each_response_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let direct = s.url().trim_start_matches("http://").to_string();
    let proxied = p.url().trim_start_matches("http://").to_string();
    let (want, got) = tokio::join!(converse(&direct, 40, 2), converse(&proxied, 40, 2));
    assert_eq!(count(&want, b"response.text.delta"), 12);
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&got));
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    assert!(metrics.contains("route=\"websocket\""), "{metrics}");
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 2, "{recs:?}");
    for r in &recs {
        assert_eq!(r.outcome, Outcome::Succeeded, "{r:?}");
        assert_eq!(r.chunks.len(), 6);
        assert_eq!(r.output_tokens.map(|t| t.count), Some(6));
        assert_eq!(r.http_status, Some(101));
        let mut bad = 0;
        assert_eq!(cadence_core::per_request::itl_gaps(r, &mut bad).count(), 5);
        assert_eq!(bad, 0);
        let ttft = cadence_core::per_request::ttft_content_ms(r, &mut bad).unwrap();
        assert!(ttft >= 1.5, "TTFT {ttft} ms from the response.create");
        let line = serde_json::to_string(r).unwrap();
        assert!(!line.contains("sk-secret-77"));
    }
    assert_ne!(recs[0].index, recs[1].index);
    let ids: Vec<&str> = recs
        .iter()
        .map(|r| r.proxy.as_ref().unwrap().request_id.as_str())
        .collect();
    assert_ne!(ids[0], ids[1]);
}

/// A scripted upstream: accepts one WebSocket, waits for the client's
/// `response.create`, then writes `script` one byte per write, `gap` apart.
async fn scripted_upstream(
    script: Vec<u8>,
    gap: Duration,
) -> (String, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            if s.read(&mut b).await.unwrap() == 0 {
                return;
            }
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(
            head.to_ascii_lowercase().contains("upgrade: websocket"),
            "{head}"
        );
        assert!(head.contains("Bearer sk-secret-77"), "{head}");
        s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        )
        .await
        .unwrap();
        // The client's create (two frames, masked) before any answer.
        let mut seen = Vec::new();
        while seen.len() < client_frame(ITEM).len() + client_frame(CREATE).len() {
            let mut b = [0u8; 1024];
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0);
            seen.extend_from_slice(&b[..n]);
        }
        for b in script {
            // A client that left ends the script (the proxy cut the upstream too).
            if s.write_all(&[b]).await.is_err() || s.flush().await.is_err() {
                return;
            }
            if !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    (url, task)
}

fn delta(text: &str) -> Vec<u8> {
    let e = format!(r#"{{"type":"response.text.delta","delta":"{text}"}}"#);
    server_frame(true, 1, e.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_split_at_every_byte_fragmented_and_cut_mid_response() {
    let dir = tempfile::tempdir().unwrap();
    // One complete response (a fragmented delta with a ping inside), then a second cut
    // after one delta (the server closes with no response.done).
    let mut script = server_frame(true, 1, br#"{"type":"response.created"}"#);
    script.extend(delta("a"));
    script.extend(server_frame(false, 1, br#"{"type":"response.text.delta","#));
    script.extend(server_frame(true, 9, b"p"));
    script.extend(server_frame(true, 0, br#""delta":"b"}"#));
    script.extend(server_frame(
        true,
        1,
        br#"{"type":"response.done","response":{"status":"completed","usage":{"output_tokens":2}}}"#,
    ));
    script.extend(server_frame(true, 1, br#"{"type":"response.created"}"#));
    script.extend(delta("c"));
    script.extend(server_frame(true, 8, &[3, 232]));
    let (up, task) = scripted_upstream(script.clone(), Duration::ZERO).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, head) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    let mut got = Vec::new();
    while got.len() < script.len() {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(
            n > 0,
            "closed after {} of {} bytes",
            got.len(),
            script.len()
        );
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, script);
    drop(s);
    task.await.unwrap();
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::Succeeded, "{:?}", recs[0]);
    assert_eq!(recs[0].chunks.len(), 2);
    assert_eq!(recs[0].output_tokens.map(|t| t.count), Some(2));
    assert_eq!(recs[1].outcome, Outcome::Truncated, "{:?}", recs[1]);
    assert_eq!(recs[1].chunks.len(), 1);
    assert!(recs[1]
        .error
        .as_deref()
        .unwrap()
        .contains("closed the WebSocket mid-response"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_response_is_recorded_as_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let mut script = server_frame(true, 1, br#"{"type":"response.created"}"#);
    for t in ["a", "b", "c", "d"] {
        script.extend(delta(t));
    }
    let (up, task) = scripted_upstream(script, Duration::from_millis(2)).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, _) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    let mut got = Vec::new();
    // The whole first delta frame (its payload ends the frame).
    while count(&got, br#""delta":"a"}"#) < 1 {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    drop(s);
    let _ = task.await;
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        recs[0].outcome,
        Outcome::ClientDisconnected,
        "{:?}",
        recs[0]
    );
    assert!(!recs[0].chunks.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_stream_is_relayed_unchanged_and_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    // RSV1 set: permessage-deflate, which the frame reader cannot follow.
    let mut script = server_frame(true, 1, br#"{"type":"response.created"}"#);
    let mut compressed = server_frame(true, 1, b"\x01\x02garbage");
    compressed[0] |= 0x40;
    script.extend(compressed);
    script.extend(delta("never read"));
    let (up, task) = scripted_upstream(script.clone(), Duration::ZERO).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, _) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    let mut got = Vec::new();
    while got.len() < script.len() {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, script);
    drop(s);
    let _ = task.await;
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::ProtocolMismatch);
    assert!(recs[0].chunks.is_empty());
    assert!(recs[0].error.as_deref().unwrap().contains("reserved bits"));
}

/// Opens a session through `p`, sends a create and returns the socket.
async fn open_and_create(p: &cadence_proxy::Proxy) -> TcpStream {
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, head) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_is_a_ttft_timeout_and_shutdown_cuts_an_open_response() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing at all for longer than the idle timeout (the upstream holds 200 ms).
    let (up, task) = scripted_upstream(Vec::new(), Duration::ZERO).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1));
        c.limits.idle_timeout = Duration::from_millis(80);
    })
    .await;
    let s = open_and_create(&p).await;
    let _ = task.await;
    let recs = records_after(p, dir.path()).await;
    drop(s);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::TtftTimeout, "{:?}", recs[0]);

    // A response still streaming when the proxy shuts down is cut at the drain timeout.
    let dir = tempfile::tempdir().unwrap();
    let mut script = server_frame(true, 1, br#"{"type":"response.created"}"#);
    for t in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        script.extend(delta(t));
    }
    let (up, _task) = scripted_upstream(script, Duration::from_millis(20)).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1));
        c.limits.drain_timeout = Duration::from_millis(100);
    })
    .await;
    let mut s = open_and_create(&p).await;
    let mut got = Vec::new();
    while count(&got, br#""delta":"a"}"#) < 1 {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    let started = std::time::Instant::now();
    let recs = records_after(p, dir.path()).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::AbortedAtDeadline, "{:?}", recs[0]);
    assert!(!recs[0].chunks.is_empty());
}

/// FAULTS 105: a server closing with 1011 mid-response: the record keeps the code and
/// the reason in its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f105_a_1011_close_keeps_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut script = server_frame(true, 1, br#"{"type":"response.created"}"#);
    script.extend(delta("a"));
    let mut close = vec![0x03, 0xf3];
    close.extend_from_slice(b"engine overloaded, retry");
    script.extend(server_frame(true, 8, &close));
    let (up, task) = scripted_upstream(script.clone(), Duration::ZERO).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, head) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    let mut got = Vec::new();
    while got.len() < script.len() {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, script, "relayed unchanged");
    drop(s);
    task.await.unwrap();
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::Truncated, "{:?}", recs[0]);
    let e = recs[0].error.as_deref().unwrap();
    assert!(
        e.contains("1011") && e.contains("engine overloaded, retry"),
        "{e}"
    );
}

/// FAULTS 106: an upgrade the upstream answers with a plain SSE stream (200, no 101)
/// reaches the client unchanged and is recorded as a protocol mismatch, not a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f106_an_upgrade_answered_by_sse_is_a_protocol_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let up = format!("http://{}", l.local_addr().unwrap());
    let sse =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}",
        sse.len()
    );
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            if s.read(&mut b).await.unwrap() == 0 {
                return;
            }
            head.push(b[0]);
        }
        s.write_all(answer.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, head) = handshake(&addr, "Connection: close\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = vec![0u8; sse.len()];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(body, sse.as_bytes());
    drop(s);
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::ProtocolMismatch, "{:?}", recs[0]);
    let e = recs[0].error.as_deref().unwrap();
    assert!(e.contains("200") && e.contains("text/event-stream"), "{e}");
}

/// FAULTS 109 on the proxy's side: a pretty-printed message (newlines inside) is one
/// event, as in bench.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f109_a_pretty_printed_websocket_message_is_one_event_in_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let mut script = server_frame(true, 1, b"{\n  \"type\": \"response.created\"\n}");
    script.extend(server_frame(
        true,
        1,
        b"{\n  \"type\": \"response.text.delta\",\n  \"delta\": \"Hi\"\n}",
    ));
    script.extend(server_frame(
        true,
        1,
        b"{\n  \"type\": \"response.done\",\n  \"response\": {\"status\": \"completed\"}\n}",
    ));
    let (up, task) = scripted_upstream(script.clone(), Duration::ZERO).await;
    let p = proxy(&up, |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1))
    })
    .await;
    let addr = p.url().trim_start_matches("http://").to_string();
    let (mut s, head) = handshake(&addr, "Authorization: Bearer sk-secret-77\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&client_frame(ITEM)).await.unwrap();
    s.write_all(&client_frame(CREATE)).await.unwrap();
    let mut got = Vec::new();
    while got.len() < script.len() {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    drop(s);
    task.await.unwrap();
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, Outcome::Succeeded, "{:?}", recs[0]);
    assert_eq!(recs[0].chunks.len(), 1);
    assert_eq!(recs[0].counters.malformed, 0);
}

/// FAULTS 124 over a WebSocket: responses longer than `--max-chunks` are relayed byte
/// for byte; each record keeps the first chunks, counts the rest, and takes its tokens
/// from the whole response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f124_websocket_responses_past_the_chunk_ceiling_are_relayed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1));
        c.limits.max_chunks = 4;
    })
    .await;
    let direct = s.url().trim_start_matches("http://").to_string();
    let proxied = p.url().trim_start_matches("http://").to_string();
    let (want, got) = tokio::join!(converse(&direct, 41, 2), converse(&proxied, 41, 2));
    assert_eq!(count(&want, b"response.text.delta"), 12);
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&got));
    let metrics = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    let line = "cadence_truncated_measurements_total{model=\"other\",route=\"websocket\"} 2";
    assert!(metrics.contains(line), "{metrics}");
    let recs = records_after(p, dir.path()).await;
    assert_eq!(recs.len(), 2, "{recs:?}");
    for r in &recs {
        assert_eq!(r.outcome, Outcome::Succeeded, "{r:?}");
        assert_eq!(r.chunks.len(), 4);
        assert_eq!(r.counters.chunks_not_kept, 2);
        assert_eq!(r.output_tokens.map(|t| t.count), Some(6));
    }
}
