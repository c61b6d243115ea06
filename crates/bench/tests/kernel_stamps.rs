//! Kernel receive timestamps under a blocked client: a server on 127.0.0.1 (port 0, its
//! own thread) writes events on a schedule while the client's only runtime thread is
//! blocked by `std::thread::sleep`. The kernel's stamps keep the server's spacing; the
//! user clock sees the reads when the client got the CPU back. Bounds are tolerant
//! (tens of ms around 200 ms periods): the machine may be busy.

use bytes::Bytes;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord, StampClock};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::{Clock, Timestamps};
use cadence_wire::Api;
use http_body_util::Full;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;
use tokio::time::Instant;

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

fn content(t: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n")
}

/// A server thread answering each connection with the response headers at once, then
/// one event at each offset (from when the request arrived), then `[DONE]`.
fn server(offsets_ms: Vec<u64>) -> SocketAddr {
    server_with_head(0, offsets_ms)
}

/// [`server`], with the response headers written `head_ms` after the request arrived.
fn server_with_head(head_ms: u64, offsets_ms: Vec<u64>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let offsets = offsets_ms.clone();
            std::thread::spawn(move || {
                s.set_nodelay(true).unwrap();
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                // The request: headers and a small body in one or two segments.
                while !String::from_utf8_lossy(&got).contains("\"stream\":true}") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let t0 = std::time::Instant::now();
                std::thread::sleep(Duration::from_millis(head_ms));
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                s.write_all(head.as_bytes()).unwrap();
                for (i, off) in offsets.iter().enumerate() {
                    let at = t0 + Duration::from_millis(*off);
                    std::thread::sleep(at.saturating_duration_since(std::time::Instant::now()));
                    s.write_all(&chunk(&content(&i.to_string()))).unwrap();
                }
                std::thread::sleep(Duration::from_millis(5));
                let _ = s.write_all(&chunk("data: [DONE]\n\n"));
                let _ = s.write_all(b"0\r\n\r\n");
                std::thread::sleep(Duration::from_millis(200));
            });
        }
    });
    addr
}

/// One request on a current-thread runtime whose thread is blocked (`blocks`: from
/// ms after the send, for ms) while the stream is in flight.
fn run(addr: SocketAddr, mode: Timestamps, blocks: &[(u64, u64)]) -> RequestRecord {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let blocks = blocks.to_vec();
    rt.block_on(async move {
        let http = client::build_with(
            &ClientConfig {
                pool_size: 1,
                connect_timeout: Duration::from_secs(2),
                http2: false,
            },
            mode,
        );
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            header: Duration::from_secs(5),
            first_token: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(20),
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
        let start = Instant::now();
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

fn gaps_ms(times_ns: &[u64]) -> Vec<f64> {
    times_ns
        .windows(2)
        .map(|w| (w[1] as f64 - w[0] as f64) / 1e6)
        .collect()
}

/// Events 200 ms apart; the client is blocked across every odd one's arrival, from 60 ms
/// before to 80 ms after, so each of those is read ~80 ms late, alone.
#[test]
fn kernel_stamps_keep_the_server_spacing_while_user_stamps_bunch() {
    let offsets: Vec<u64> = (0..6).map(|k| 200 * k).collect();
    let blocks: Vec<(u64, u64)> = [1u64, 3, 5].iter().map(|k| (200 * k - 60, 140)).collect();
    let addr = server(offsets);

    let rec = run(addr, Timestamps::Kernel, &blocks);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::Kernel));
    assert_eq!(rec.chunks.len(), 6);
    assert_eq!(rec.read_delays_us.len(), 6);
    let kernel: Vec<u64> = rec.chunks.iter().map(|c| c.t_ns()).collect();
    let user: Vec<u64> = kernel
        .iter()
        .zip(&rec.read_delays_us)
        .map(|(k, d)| k + u64::from(*d) * 1_000)
        .collect();
    let (kg, ug) = (gaps_ms(&kernel), gaps_ms(&user));
    for g in &kg {
        assert!(
            (150.0..250.0).contains(g),
            "kernel gaps {kg:?}, user {ug:?}"
        );
    }
    // The user clock saw late reads: gaps stretched before them and squeezed after.
    assert!(ug.iter().any(|g| *g > 250.0), "user gaps {ug:?}");
    assert!(ug.iter().any(|g| *g < 150.0), "user gaps {ug:?}");
    // The odd events waited for the client; the even ones did not.
    for (i, d) in rec.read_delays_us.iter().enumerate() {
        if i % 2 == 1 {
            assert!(*d > 40_000, "delays {:?}", rec.read_delays_us);
        } else {
            assert!(*d < 40_000, "delays {:?}", rec.read_delays_us);
        }
    }

    // The same blocked client on the user clock: the stretched gaps are in the record.
    let rec = run(addr, Timestamps::User, &blocks);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.clock, Some(StampClock::User));
    assert!(rec.read_delays_us.is_empty());
    let t: Vec<u64> = rec.chunks.iter().map(|c| c.t_ns()).collect();
    let g = gaps_ms(&t);
    assert!(g.iter().any(|g| *g > 250.0), "user gaps {g:?}");
}

/// Three events written 5 ms apart while the client is blocked arrive in one read:
/// counted as one multi-event read, and all three carry that read's stamp (the kernel
/// gives the last segment's), as the user clock would. FAULTS 92.
#[test]
fn events_queued_behind_a_blocked_client_are_one_multi_event_read() {
    let addr = server(vec![20, 25, 30, 300]);
    let rec = run(addr, Timestamps::Kernel, &[(10, 150)]);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(rec.chunks.len(), 4);
    assert_eq!(rec.counters.multi_event_reads, 1, "{:?}", rec.counters);
    let t: Vec<u64> = rec.chunks.iter().map(|c| c.t_ns()).collect();
    assert_eq!(t[0], t[1]);
    assert_eq!(t[1], t[2]);
    // The fourth came alone, ~270 ms after the third was written.
    let last_gap = (t[3] - t[2]) as f64 / 1e6;
    assert!((200.0..340.0).contains(&last_gap), "{t:?}");
}

/// The head and the first event wait together behind a blocked client: the event keeps
/// its kernel receive time, ~100 ms before the client parsed the head, and the head's
/// time is lowered to it (the head came no later than the bytes after it).
#[test]
fn a_head_read_with_the_first_event_is_no_later_than_it() {
    // Head and first event at 40 ms, the client blocked from 10 to 160 ms.
    let addr = server_with_head(40, vec![40, 300]);
    let rec = run(addr, Timestamps::Kernel, &[(10, 150)]);
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    let (sent, head, first) = (
        rec.sent_ns.unwrap(),
        rec.headers_ns.unwrap(),
        rec.first_chunk_ns().unwrap(),
    );
    assert!(
        sent <= head && head <= first,
        "sent {sent}, head {head}, first {first}"
    );
    if rec.clock == Some(StampClock::Kernel) {
        // The first event was read ~150 ms late but is timed at its arrival.
        assert!(rec.read_delays_us[0] > 40_000, "{:?}", rec.read_delays_us);
        assert!(
            first - sent < 100_000_000,
            "first chunk {} ms after the send",
            (first - sent) / 1_000_000
        );
    }
}
