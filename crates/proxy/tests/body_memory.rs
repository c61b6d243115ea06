//! FAULTS 97: request bodies dripped one byte per TCP segment cost the proxy bounded
//! memory, given back when the clients leave. Alone in its file so the test process's
//! resident size is this test's alone.

mod common;

use common::*;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The process's resident set size in bytes (Linux `/proc`).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

/// Sends a head declaring `declared` body bytes, then `sent` of them one per segment
/// (a pause after each so the proxy reads each alone); keeps the connection open.
async fn drip(addr: std::net::SocketAddr, declared: usize, sent: usize) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..sent {
        s.write_all(b" ").await.unwrap();
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    s
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f97_dripped_bodies_cost_bounded_memory_and_give_it_back() {
    const CLIENTS: usize = 40;
    const BYTES: usize = 1500;
    // Nothing listens upstream: no body here is ever complete.
    let p = proxy("http://127.0.0.1:9", |_| {}).await;
    // Warm up the runtime's threads and the allocator before the baseline.
    let warm: Vec<_> = (0..CLIENTS).map(|_| drip(p.addr, 10, 1)).collect();
    drop(futures_util::future::join_all(warm).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_bytes();
    let conns: Vec<_> = (0..CLIENTS)
        .map(|_| drip(p.addr, 60 << 20, BYTES))
        .collect();
    let conns = futures_util::future::join_all(conns).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = rss_bytes().saturating_sub(before);
    let dripped = (CLIENTS * BYTES) as u64;
    drop(conns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes().saturating_sub(before);
    eprintln!(
        "{dripped} body bytes dripped by {CLIENTS} clients: RSS +{} KiB while held \
         ({} bytes per body byte), +{} KiB after they left",
        held >> 10,
        held / dripped,
        after >> 10
    );
    // One read buffer kept per 1-byte frame was ~4 KiB per body byte (~240 MiB here);
    // a buffer per request of at most twice its bytes is well under 16 MiB.
    assert!(
        held < 16 << 20,
        "RSS grew by {} KiB for {dripped} dripped body bytes",
        held >> 10
    );
    assert!(
        after < 16 << 20,
        "RSS still {} KiB above the baseline after the clients left",
        after >> 10
    );
    p.shutdown().await.unwrap();
}
