//! A fake OTLP/HTTP collector for the end-to-end tests: on 127.0.0.1 port 0, it
//! answers every POST with one status and keeps each body with its path, so a test
//! reads the spans (`/v1/traces`) and the metrics (`/v1/metrics`) it was sent.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// What the collector was sent: (path, body) per POST.
pub type Bodies = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector answering every POST with `status`; its base URL and what it was sent.
pub fn collector(status: u16) -> (String, Bodies) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let bodies: Bodies = Arc::default();
    let keep = bodies.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let keep = keep.clone();
            std::thread::spawn(move || serve(conn, status, &keep));
        }
    });
    (url, bodies)
}

fn serve(conn: std::net::TcpStream, status: u16, keep: &Bodies) {
    let mut r = BufReader::new(conn);
    loop {
        let mut len = None;
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            let l = line.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; len.unwrap_or(0)];
        r.read_exact(&mut body).unwrap();
        keep.lock().unwrap().push((path, body));
        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
        r.get_mut().write_all(answer.as_bytes()).unwrap();
    }
}

/// The bodies sent to `path`.
pub fn sent_to(bodies: &Bodies, path: &str) -> Vec<Vec<u8>> {
    let b = bodies.lock().unwrap();
    b.iter()
        .filter(|(p, _)| p == path)
        .map(|(_, b)| b.clone())
        .collect()
}

/// Every span the collector was sent as OTLP/JSON (`/v1/traces`).
pub fn spans_of(bodies: &Bodies) -> Vec<serde_json::Value> {
    sent_to(bodies, "/v1/traces")
        .iter()
        .flat_map(|b| {
            let doc: serde_json::Value = serde_json::from_slice(b).unwrap();
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect()
}
