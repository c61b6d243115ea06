//! The proxy's upstream reads on the kernel clock: an upstream on 127.0.0.1 (port 0,
//! its own thread) writes events 300 ms apart while the proxy's only runtime thread is
//! blocked across every odd one's arrival (from 120 ms before to 100 ms after), as a
//! saturated machine would. The records say `kernel`, are spaced like the upstream's
//! writes (as it made them, noted by the upstream) and carry each chunk's read delay;
//! with `--timestamps user` they say `user` and show the late reads. The client reads
//! on a thread of its own. Bounds are tolerant (40 ms around the writes' own gaps): the
//! machine may be busy.

mod common;

use cadence_core::{Outcome, RequestRecord, StampClock};
use cadence_transport::Timestamps;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When the upstream wrote each event, as it did.
type Writes = Arc<Mutex<Vec<Instant>>>;

/// How far a record's gap may be from the writes' own gap.
const SLACK_MS: f64 = 40.0;

const PERIOD_MS: u64 = 300;
const EVENTS: u64 = 6;

/// Every odd event's arrival, from 120 ms before to 100 ms after (ms from the start).
fn blocks() -> Vec<(u64, u64)> {
    (1..EVENTS)
        .step_by(2)
        .map(|k| (PERIOD_MS * k - 120, 220))
        .collect()
}

fn offsets() -> Vec<u64> {
    (0..EVENTS).map(|k| PERIOD_MS * k).collect()
}

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

fn content(t: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n")
}

/// Reads from `s` until `done` holds for what came; false if it closed first.
fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) -> bool {
    let mut buf = [0u8; 4096];
    while !done(got) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// Writes `bytes` at `offset_ms` after `t0`, noting when.
fn write_at(s: &mut TcpStream, t0: Instant, offset_ms: u64, bytes: &[u8], writes: &Writes) {
    let at = t0 + Duration::from_millis(offset_ms);
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
    writes.lock().unwrap().push(Instant::now());
    s.write_all(bytes).unwrap();
}

/// An SSE upstream on a thread: one event at each offset from when the request came,
/// then `[DONE]`.
fn sse_upstream(offsets_ms: Vec<u64>) -> (SocketAddr, Writes) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let writes = Writes::default();
    let w = writes.clone();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        s.set_nodelay(true).unwrap();
        let mut got = Vec::new();
        if !read_until(&mut s, &mut got, |g| g.ends_with(b"\"stream\":true}")) {
            return;
        }
        let t0 = Instant::now();
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        s.write_all(head.as_bytes()).unwrap();
        for (i, off) in offsets_ms.iter().enumerate() {
            write_at(&mut s, t0, *off, &chunk(&content(&i.to_string())), &w);
        }
        std::thread::sleep(Duration::from_millis(5));
        let _ = s.write_all(&chunk("data: [DONE]\n\n"));
        let _ = s.write_all(b"0\r\n\r\n");
        std::thread::sleep(Duration::from_millis(300));
    });
    (addr, writes)
}

/// An unmasked server text frame (payload under 126 bytes).
fn server_frame(text: &str) -> Vec<u8> {
    assert!(text.len() < 126);
    let mut f = vec![0x81, text.len() as u8];
    f.extend_from_slice(text.as_bytes());
    f
}

/// A masked client text frame (payload under 126 bytes).
fn client_frame(text: &str) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x81, 0x80 | text.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

const CREATE: &str = r#"{"type":"response.create"}"#;

/// A Realtime upstream on a thread: answers the upgrade, waits for the client's
/// `response.create` frame, then writes one text delta at each offset and
/// `response.done`.
fn realtime_upstream(offsets_ms: Vec<u64>) -> (SocketAddr, Writes) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let writes = Writes::default();
    let w = writes.clone();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        s.set_nodelay(true).unwrap();
        let mut got = Vec::new();
        if !read_until(&mut s, &mut got, |g| g.ends_with(b"\r\n\r\n")) {
            return;
        }
        let head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        s.write_all(head.as_bytes()).unwrap();
        let mut got = Vec::new();
        let frame_len = client_frame(CREATE).len();
        if !read_until(&mut s, &mut got, |g| g.len() >= frame_len) {
            return;
        }
        let t0 = Instant::now();
        for (i, off) in offsets_ms.iter().enumerate() {
            let delta = format!(r#"{{"type":"response.text.delta","delta":"t{i}"}}"#);
            write_at(&mut s, t0, *off, &server_frame(&delta), &w);
        }
        let done = r#"{"type":"response.done","response":{"status":"completed"}}"#;
        s.write_all(&server_frame(done)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    });
    (addr, writes)
}

/// A client on a thread of its own: sends `request` to the proxy and reads until
/// `done` holds for what came back (or the proxy closes).
fn client_thread(
    proxy: SocketAddr,
    request: Vec<u8>,
    done: fn(&[u8]) -> bool,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(proxy).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&request).unwrap();
        let mut got = Vec::new();
        read_until(&mut s, &mut got, done);
        got
    })
}

fn http_request() -> Vec<u8> {
    let body = r#"{"stream":true}"#;
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn realtime_request() -> Vec<u8> {
    let mut r = b"GET /v1/realtime?model=m HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\n\r\n"
        .to_vec();
    r.extend(client_frame(CREATE));
    r
}

/// A proxy (`mode`) in front of `upstream` on a current-thread runtime whose thread is
/// blocked as [`blocks`] says while one client's request is in flight; the records.
fn through_blocked_proxy(
    upstream: SocketAddr,
    mode: Timestamps,
    request: Vec<u8>,
    done: fn(&[u8]) -> bool,
) -> Vec<RequestRecord> {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let p = proxy(&format!("http://{upstream}"), |c| {
            c.records = Some(records_in(dir.path(), "records.jsonl", 1));
            c.timestamps = mode;
        })
        .await;
        let start = tokio::time::Instant::now();
        let client = client_thread(p.addr, request, done);
        // Blocks the runtime's only thread, as a saturated machine would.
        let hog = tokio::spawn(async move {
            for (from, len) in blocks() {
                tokio::time::sleep_until(start + Duration::from_millis(from)).await;
                std::thread::sleep(Duration::from_millis(len));
            }
        });
        while !client.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = client.join().unwrap();
        assert!(done(&got), "{}", String::from_utf8_lossy(&got));
        hog.abort();
        p.shutdown().await.unwrap();
    });
    let text = std::fs::read_to_string(dir.path().join("records.jsonl")).unwrap();
    cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records
}

/// Each record gap minus the upstream's own gap between the same two writes, ms.
fn gap_errors_ms(rec: &RequestRecord, writes: &Writes) -> Vec<f64> {
    let writes = writes.lock().unwrap();
    assert_eq!(writes.len(), rec.chunks.len(), "{rec:?}");
    rec.chunks
        .windows(2)
        .zip(writes.windows(2))
        .map(|(c, w)| {
            let got = (c[1].t_ns() as f64 - c[0].t_ns() as f64) / 1e6;
            got - (w[1] - w[0]).as_secs_f64() * 1e3
        })
        .collect()
}

/// The one record of a kernel-stamped run: spaced like the writes, with the late
/// reads in its read delays.
fn assert_kernel_spacing(recs: &[RequestRecord], writes: &Writes) {
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = &recs[0];
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::Kernel));
    assert_eq!(rec.chunks.len(), EVENTS as usize);
    assert_eq!(rec.read_delays_us.len(), EVENTS as usize);
    let err = gap_errors_ms(rec, writes);
    assert!(
        err.iter().all(|e| e.abs() < SLACK_MS),
        "gap errors {err:?} ms, read delays {:?} µs",
        rec.read_delays_us
    );
    // The proxy was late to some of them (it was blocked), yet the gaps held.
    assert!(
        rec.read_delays_us.iter().any(|&d| d > 40_000),
        "read delays {:?} µs",
        rec.read_delays_us
    );
    let s = rec.sent_ns.unwrap();
    assert!(rec.headers_ns.unwrap() >= s);
    assert!(rec.first_chunk_ns().unwrap() >= rec.headers_ns.unwrap());
}

/// The one record of a user-clock run: no delays, and a late read visible in a gap.
fn assert_user_late_reads(recs: &[RequestRecord], writes: &Writes) {
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = &recs[0];
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::User));
    assert!(rec.read_delays_us.is_empty());
    let err = gap_errors_ms(rec, writes);
    assert!(
        err.iter().any(|e| e.abs() > SLACK_MS),
        "gap errors {err:?} ms"
    );
}

fn sse_done(got: &[u8]) -> bool {
    got.windows(6).any(|w| w == b"[DONE]")
}

fn realtime_done(got: &[u8]) -> bool {
    got.windows(13).any(|w| w == b"response.done")
}

#[test]
fn proxied_sse_chunks_keep_the_upstream_spacing_while_the_proxy_is_blocked() {
    let (up, writes) = sse_upstream(offsets());
    let recs = through_blocked_proxy(up, Timestamps::Kernel, http_request(), sse_done);
    assert_kernel_spacing(&recs, &writes);
    let (up, writes) = sse_upstream(offsets());
    let recs = through_blocked_proxy(up, Timestamps::User, http_request(), sse_done);
    assert_user_late_reads(&recs, &writes);
}

#[test]
fn proxied_realtime_messages_keep_the_upstream_spacing_while_the_proxy_is_blocked() {
    let (up, writes) = realtime_upstream(offsets());
    let recs = through_blocked_proxy(up, Timestamps::Kernel, realtime_request(), realtime_done);
    assert_kernel_spacing(&recs, &writes);
    let (up, writes) = realtime_upstream(offsets());
    let recs = through_blocked_proxy(up, Timestamps::User, realtime_request(), realtime_done);
    assert_user_late_reads(&recs, &writes);
}
