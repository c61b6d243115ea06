//! The lean HTTP/1.1 client against raw servers on 127.0.0.1: keep-alive reuse up to the
//! pool's size, each framing (chunked across reads, content-length, close-delimited,
//! interim 1xx heads), one timestamp per socket read, and the error classes.

use bytes::Bytes;
use cadence_base::Outcome;
use cadence_transport::classify_h1_error;
use cadence_transport::h1::{Body, Pool};
use http_body_util::Full;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Reads one request head and its Content-Length body; false at EOF.
fn read_request(s: &mut TcpStream) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
    }
    let len: usize = String::from_utf8_lossy(&head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
        .unwrap_or(0);
    s.read_exact(&mut vec![0u8; len]).is_ok()
}

/// A server that answers every request on every connection with `reply(n)` (the
/// connection's n-th request) written in the given pieces, `gap` apart; it counts
/// connections. After the last piece of a reply marked `close`, it closes.
fn server<F>(reply: F, gap: Duration) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(usize) -> (Vec<&'static [u8]>, bool) + Send + Sync + 'static,
{
    server_on(TcpListener::bind("127.0.0.1:0").unwrap(), reply, gap)
}

/// [`server`] on a listener of the caller's.
fn server_on<F>(listener: TcpListener, reply: F, gap: Duration) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(usize) -> (Vec<&'static [u8]>, bool) + Send + Sync + 'static,
{
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    let reply = Arc::new(reply);
    std::thread::spawn(move || {
        for conn in listener.incoming().take(32) {
            let Ok(mut s) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let reply = reply.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while read_request(&mut s) {
                    let (pieces, close) = reply(n);
                    n += 1;
                    for p in pieces {
                        if s.write_all(p).is_err() {
                            return;
                        }
                        std::thread::sleep(gap);
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (addr, conns)
}

fn post(addr: SocketAddr) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap()
}

/// Every read of a body: its bytes and when it arrived.
async fn drain(body: &mut Body) -> Result<Vec<(tokio::time::Instant, Vec<u8>)>, String> {
    let mut reads = Vec::new();
    while let Some(r) = body.read().await {
        let (t, data) = r.map_err(|e| cadence_transport::error_chain(&e))?;
        reads.push((t, data.to_vec()));
    }
    Ok(reads)
}

const CHUNKED_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

#[tokio::test]
async fn chunked_stream_reads_are_timed_apart_and_the_connection_is_reused() {
    let (addr, conns) = server(
        |_| {
            (
                vec![
                    CHUNKED_HEAD,
                    // Two chunks in one read.
                    b"3\r\ndat\r\n4\r\na: 1\r\n",
                    b"7\r\n",
                    b"data: 2\r\n0\r\n\r\n",
                ],
                false,
            )
        },
        Duration::from_millis(60),
    );
    let pool = Pool::new(2, Duration::from_secs(2));
    for _ in 0..3 {
        let (r, resent) = pool.send(&post(addr)).await;
        assert!(resent.is_none());
        let (head, mut body) = r.expect("a response");
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["content-type"], "text/event-stream");
        let reads = drain(&mut body).await.unwrap();
        let bytes: Vec<u8> = reads.iter().flat_map(|(_, d)| d.clone()).collect();
        assert_eq!(bytes, b"data: 1data: 2");
        // The middle piece carried only framing: two reads with data.
        assert_eq!(reads.len(), 2, "{reads:?}");
        for w in reads.windows(2) {
            assert!(
                w[1].0 - w[0].0 >= Duration::from_millis(40),
                "each read has its own time: {reads:?}"
            );
        }
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1, "one keep-alive connection");
}

#[tokio::test]
async fn content_length_close_delimited_and_interim_heads() {
    let (addr, conns) = server(
        |n| {
            match n {
            0 => (
                vec![b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"],
                false,
            ),
            _ => (vec![b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"eof"], true),
        }
        },
        Duration::from_millis(5),
    );
    let pool = Pool::new(4, Duration::from_secs(2));
    let (head, mut body) = pool.send(&post(addr)).await.0.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(drain(&mut body).await.unwrap()[0].1, b"hello");
    let (_, mut body) = pool.send(&post(addr)).await.0.unwrap();
    let all: Vec<u8> = drain(&mut body)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, d)| d)
        .collect();
    assert_eq!(all, b"until eof");
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "content-length keeps it open"
    );
    // The close-delimited one is not pooled: the next request opens a connection.
    let _ = pool.send(&post(addr)).await.0.unwrap();
    assert_eq!(conns.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn idle_connections_are_kept_up_to_the_pool_size() {
    let (addr, conns) = server(
        |_| {
            (
                vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
                false,
            )
        },
        Duration::ZERO,
    );
    let pool = Pool::new(1, Duration::from_secs(2));
    let a = pool.send(&post(addr)).await.0.unwrap().1;
    let b = pool.send(&post(addr)).await.0.unwrap().1;
    for mut body in [a, b] {
        drain(&mut body).await.unwrap();
    }
    assert_eq!(conns.load(Ordering::SeqCst), 2, "two in flight at once");
    for _ in 0..2 {
        let (_, mut body) = pool.send(&post(addr)).await.0.unwrap();
        drain(&mut body).await.unwrap();
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "one of them was kept and reused"
    );
}

#[tokio::test]
async fn truncated_bodies_refusals_and_garbage_are_classified() {
    let (addr, _) = server(
        |_| (vec![CHUNKED_HEAD, b"6\r\ndata: "], true),
        Duration::from_millis(5),
    );
    let pool = Pool::new(1, Duration::from_secs(2));
    let (_, mut body) = pool.send(&post(addr)).await.0.unwrap();
    let err = drain(&mut body).await.unwrap_err();
    assert!(err.contains("closed before the body was complete"), "{err}");

    let refused = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = pool.send(&post(refused)).await.0.unwrap_err();
    let (outcome, msg) = classify_h1_error(&e);
    assert_eq!(outcome, Outcome::ConnectError);
    assert!(msg.to_lowercase().contains("refused"), "{msg}");

    let (addr, _) = server(|_| (vec![b"SSH-2.0-OpenSSH\r\n\r\n"], true), Duration::ZERO);
    let e = pool.send(&post(addr)).await.0.unwrap_err();
    assert_eq!(classify_h1_error(&e).0, Outcome::TransportError, "{e}");
}

#[tokio::test]
async fn an_ipv6_literal_url_connects() {
    let Ok(listener) = TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback on this machine: nothing to check");
        return;
    };
    let (addr, _) = server_on(
        listener,
        |_| {
            (
                vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
                false,
            )
        },
        Duration::ZERO,
    );
    assert!(addr.to_string().starts_with("[::1]:"), "{addr}");
    let pool = Pool::new(1, Duration::from_secs(2));
    let (head, mut body) = pool.send(&post(addr)).await.0.expect("connects to [::1]");
    assert_eq!(head.status, 200);
    assert_eq!(drain(&mut body).await.unwrap()[0].1, b"ok");
}
