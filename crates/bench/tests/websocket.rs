//! `--api websocket`: a message's timestamp is when the read that completed its frame
//! came off the socket. A server writes one frame in two pieces 80 ms apart: the chunk
//! is stamped at the second piece, not when the handshake ended or the first arrived.
//! With kernel stamps, a blocked client's late reads keep the server's spacing.

use bytes::Bytes;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord, StampClock};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::{Clock, Timestamps};
use cadence_wire::Api;
use futures_util::StreamExt;
use http_body_util::Full;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// An unmasked server text frame (payload under 126 bytes).
fn frame(text: &str) -> Vec<u8> {
    assert!(text.len() < 126);
    let mut f = vec![0x81, text.len() as u8];
    f.extend_from_slice(text.as_bytes());
    f
}

#[tokio::test]
async fn a_message_is_stamped_when_its_frame_is_complete() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        // The client's two events (conversation item, response.create).
        for _ in 0..2 {
            ws.next().await.unwrap().unwrap();
        }
        let tcp = ws.get_mut();
        let first = frame(r#"{"type":"response.text.delta","delta":"Hi"}"#);
        let (a, b) = first.split_at(10);
        tcp.write_all(a).await.unwrap();
        tcp.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        tcp.write_all(b).await.unwrap();
        let done = r#"{"type":"response.done","response":{"status":"completed","usage":{"input_tokens":1,"output_tokens":1}}}"#;
        tcp.write_all(&frame(done)).await.unwrap();
        tcp.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    let client = client::build(&ClientConfig {
        pool_size: 1,
        connect_timeout: Duration::from_secs(2),
        http2: false,
    });
    let clock = Clock::start();
    let redactor = Redactor::default();
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        header: Duration::from_secs(5),
        first_token: Duration::from_secs(5),
        idle: Duration::from_secs(5),
        total: Duration::from_secs(10),
        ..Timeouts::default()
    };
    let cx = ExecContext {
        client: &client,
        clock: &clock,
        timeouts: &timeouts,
        api: Api::Websocket,
        strict: false,
        redactor: &redactor,
        // Room for 256 chunks is made at the first, and given back at the end.
        max_tokens: Some(256),
        keep_text: true,
        keep_tool_calls: false,
    };
    let body = r#"[{"type":"conversation.item.create"},{"type":"response.create"}]"#;
    let req = http::Request::get(format!("ws://{addr}/v1/realtime"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (_tx, mut cancel) = Cancel::new();
    let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
    let text = execute(&cx, req, &mut cancel, &mut rec).await;
    server.await.unwrap();
    assert!(rec.chunks.capacity() <= rec.chunks.len() + cadence_core::CHUNK_SLACK);
    assert!(rec.read_delays_us.capacity() <= rec.read_delays_us.len() + cadence_core::CHUNK_SLACK);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(text.content, "Hi");
    assert_eq!(rec.http_status, Some(101));
    assert_eq!(rec.chunks.len(), 1);
    let waited = rec.chunks[0].t_ns() - rec.headers_ns.unwrap();
    assert!(
        waited >= 70_000_000,
        "stamped {waited} ns after the handshake: before its frame was complete"
    );
    assert_eq!(rec.output_tokens.map(|t| t.count), Some(1));
}

/// When the server wrote each delta, as it did.
type Writes = std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>;

/// A Realtime server on a thread (and runtime) of its own: after the client's two
/// events, one text delta at each offset (ms from when they came), then
/// `response.done`.
fn paced_server(offsets_ms: Vec<u64>) -> (std::net::SocketAddr, Writes) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    let writes = Writes::default();
    let w = writes.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(l).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            for _ in 0..2 {
                ws.next().await.unwrap().unwrap();
            }
            let t0 = tokio::time::Instant::now();
            let tcp = ws.get_mut();
            for (i, off) in offsets_ms.iter().enumerate() {
                tokio::time::sleep_until(t0 + Duration::from_millis(*off)).await;
                let delta = format!(r#"{{"type":"response.text.delta","delta":"t{i}"}}"#);
                w.lock().unwrap().push(std::time::Instant::now());
                tcp.write_all(&frame(&delta)).await.unwrap();
            }
            let done = r#"{"type":"response.done","response":{"status":"completed"}}"#;
            tcp.write_all(&frame(done)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
    });
    (addr, writes)
}

/// One WebSocket stream on a current-thread runtime whose only thread is blocked
/// (`blocks`: from ms after the start, for ms) while the stream is in flight.
fn run_blocked(
    addr: std::net::SocketAddr,
    mode: Timestamps,
    blocks: &[(u64, u64)],
) -> RequestRecord {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let blocks = blocks.to_vec();
    rt.block_on(async move {
        let config = ClientConfig {
            pool_size: 1,
            connect_timeout: Duration::from_secs(2),
            http2: false,
        };
        let client = client::build_with(&config, mode);
        let (clock, redactor) = (Clock::start(), Redactor::default());
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            header: Duration::from_secs(5),
            first_token: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(20),
            ..Timeouts::default()
        };
        let cx = ExecContext {
            client: &client,
            clock: &clock,
            timeouts: &timeouts,
            api: Api::Websocket,
            strict: false,
            redactor: &redactor,
            max_tokens: None,
            keep_text: true,
            keep_tool_calls: false,
        };
        let body = r#"[{"type":"conversation.item.create"},{"type":"response.create"}]"#;
        let req = http::Request::get(format!("ws://{addr}/v1/realtime"))
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let (_tx, mut cancel) = Cancel::new();
        let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
        let start = tokio::time::Instant::now();
        // Blocks the runtime's only thread, as a saturated machine would.
        let hog = tokio::spawn(async move {
            for (from, len) in blocks {
                tokio::time::sleep_until(start + Duration::from_millis(from)).await;
                std::thread::sleep(Duration::from_millis(len));
            }
        });
        execute(&cx, req, &mut cancel, &mut rec).await;
        hog.abort();
        rec
    })
}

/// Each record gap minus the server's own gap between the same two writes, ms.
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

/// Deltas 300 ms apart; the client is blocked across every odd one's arrival (from
/// 120 ms before to 100 ms after), so those are read late. Kernel stamps keep the
/// spacing of the server's writes (as it made them) and record the delay;
/// `--timestamps user` shows the late reads. Bounds are tolerant (40 ms around the
/// writes' own gaps): the machine may be busy.
#[test]
fn websocket_messages_carry_the_kernel_receive_time_under_a_blocked_client() {
    let offsets: Vec<u64> = (0..6).map(|k| 300 * k).collect();
    let blocks: Vec<(u64, u64)> = [1u64, 3, 5].iter().map(|k| (300 * k - 120, 220)).collect();

    let (addr, writes) = paced_server(offsets.clone());
    let rec = run_blocked(addr, Timestamps::Kernel, &blocks);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::Kernel));
    assert_eq!(rec.chunks.len(), 6);
    assert_eq!(rec.read_delays_us.len(), 6);
    let err = gap_errors_ms(&rec, &writes);
    assert!(
        err.iter().all(|e| e.abs() < 40.0),
        "gap errors {err:?} ms, read delays {:?} µs",
        rec.read_delays_us
    );
    // The client was late to some of them (it was blocked), yet the gaps held.
    assert!(
        rec.read_delays_us.iter().any(|&d| d > 40_000),
        "read delays {:?} µs",
        rec.read_delays_us
    );

    let (addr, writes) = paced_server(offsets);
    let rec = run_blocked(addr, Timestamps::User, &blocks);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::User));
    assert!(rec.read_delays_us.is_empty());
    let err = gap_errors_ms(&rec, &writes);
    assert!(err.iter().any(|e| e.abs() > 40.0), "gap errors {err:?} ms");
}
