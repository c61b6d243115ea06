//! A request is never sent twice unasked. Only a request that went out
//! on a reused pooled connection, which the server had already closed, is resent; a
//! fresh connection that closes before answering ends the request, once.

use bytes::Bytes;
use cadence_transport::client::{build, ClientConfig};
use cadence_transport::send_resending_if_stale;
use http_body_util::{BodyExt, Full};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Reads one HTTP/1.1 request (headers and a Content-Length body); false at EOF.
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

/// A server on 127.0.0.1 (port 0) that counts the requests it reads. On each
/// connection it answers the first `answered` requests, then reads one more and closes
/// without a response.
fn counting_server(answered: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(16) {
            let Ok(mut s) = conn else { return };
            let count = count.clone();
            std::thread::spawn(move || {
                for _ in 0..answered {
                    if !read_request(&mut s) {
                        return;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let body = "{}";
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
                if read_request(&mut s) {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                // Close without answering.
            });
        }
    });
    (addr, seen)
}

fn post(addr: SocketAddr) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap()
}

fn client() -> cadence_transport::HyperClient {
    build(&ClientConfig {
        pool_size: 4,
        connect_timeout: Duration::from_secs(5),
        http2: false,
    })
}

#[tokio::test]
async fn a_fresh_connection_that_closes_before_answering_is_not_resent() {
    let (addr, seen) = counting_server(0);
    let (response, resent) = send_resending_if_stale(&client(), post(addr)).await;
    assert!(response.is_err(), "the server never answers");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the server saw the POST exactly once"
    );
    assert_eq!(resent, None, "nothing was resent");
}

#[tokio::test]
async fn a_reused_pooled_connection_the_server_closed_is_resent_once() {
    let (addr, seen) = counting_server(1);
    let c = client();
    // The first request opens a connection and is answered; it goes back to the pool.
    let (first, resent) = send_resending_if_stale(&c, post(addr)).await;
    let first = first.expect("answered");
    first.into_body().collect().await.unwrap();
    assert_eq!(resent, None);
    // Let the connection return to the pool before the next request draws it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The second draws the pooled connection, which the server closes unanswered: the
    // request is sent once more on a connection of its own, and answered there.
    let (second, resent) = send_resending_if_stale(&c, post(addr)).await;
    assert_eq!(second.expect("answered on the resend").status(), 200);
    assert!(resent.is_some(), "resent after the stale pooled connection");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "first, stale second, resend"
    );
}
