//! The second hostile sweep, on bench's and report's side (FAULTS rows from 110): an
//! endless stream, fleet verdicts, secrets in bodies, server strings with escapes,
//! pipes and FIFOs. Servers are threads on 127.0.0.1 port 0; every run is bounded.

mod common;

use common::{cadence, read_records};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Reads one HTTP/1 request head and its `content-length` body; false when it is none.
fn read_request(s: &mut TcpStream) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut byte) {
            Ok(n) if n > 0 => buf.extend_from_slice(&byte[..n]),
            _ => return false,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < len {
        match s.read(&mut byte) {
            Ok(n) if n > 0 => have += n,
            _ => return false,
        }
    }
    true
}

/// A server on 127.0.0.1:0 that answers every request with `answer` on its own thread.
fn server(answer: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                if read_request(&mut s) {
                    answer(s)
                }
            });
        }
    });
    addr
}

/// Content events forever, until the client goes away.
fn endless(mut s: TcpStream) {
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    let event = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n";
    let block: Vec<u8> = event.repeat(64);
    while s.write_all(&block).is_ok() {}
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/v1")
}

/// `cadence bench URL --model m --api chat ARGS --quiet`, with records and a JSON
/// report in `dir`: the exit code, the records, the report and stderr.
fn bench(addr: SocketAddr, args: &[&str], dir: &Path) -> (Option<i32>, Vec<Value>, Value, String) {
    let records = dir.join("r.jsonl");
    let json = dir.join("r.json");
    let u = url(addr);
    let out = cadence()
        .args(["bench", &u, "--model", "m", "--api", "chat", "--quiet"])
        .args(args)
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    (
        out.status.code(),
        read_records(&records),
        report,
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

// ---- FAULTS 110 ----

#[test]
fn f110_an_endless_stream_is_cut_at_the_chunk_ceiling() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (code, recs, report, err) = bench(addr, &["-n", "1", "--max-chunks", "5000"], dir.path());
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(recs.len(), 1, "{err}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "response_too_large", "{r:?}");
    assert_eq!(r["chunks"].as_array().unwrap().len(), 5000);
    assert!(r["error"].as_str().unwrap().contains("--max-chunks"), "{r}");
    assert_eq!(
        report["levels"][0]["requests"]["failed"]["response_too_large"],
        1
    );
    assert_eq!(code, Some(4), "nothing succeeded: invalid; {err}");
}

#[test]
fn f110_an_endless_stream_is_cut_at_the_byte_ceiling() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let (_, recs, _, err) = bench(
        addr,
        &["-n", "1", "--max-response-bytes", "1MB", "--timeout", "60s"],
        dir.path(),
    );
    assert_eq!(recs.len(), 1, "{err}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "response_too_large", "{r:?}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("--max-response-bytes"),
        "{r}"
    );
    // About 60 bytes an event: 1 MB is some 17,000 of them.
    let n = r["chunks"].as_array().unwrap().len();
    assert!((10_000..20_000).contains(&n), "{n}");
}

#[test]
fn f110_by_default_an_endless_stream_ends_with_a_bounded_record() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let (_, recs, _, err) = bench(addr, &["-n", "1", "--timeout", "100s"], dir.path());
    assert_eq!(recs.len(), 1, "{err}");
    assert_eq!(recs[0]["outcome"], "response_too_large");
    assert_eq!(recs[0]["chunks"].as_array().unwrap().len(), 262_144);
    let text = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
    let longest = text.lines().map(str::len).max().unwrap();
    assert!(longest < 16 << 20, "a records line of {longest} bytes");
    // And the records read back into a report.
    let out = cadence()
        .arg("report")
        .arg(dir.path().join("r.jsonl"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
