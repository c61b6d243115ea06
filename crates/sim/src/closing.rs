//! A raw HTTP/1.1 server that drops keep-alive connections the way some real servers
//! do (llama.cpp's `llama-server` closes after every stream without saying so): it
//! answers the first request of a connection, then reads the next and closes without
//! a response. Clients and the proxy are tested against it for the stale pooled
//! connection race, which the HTTP simulator cannot produce on demand. Blocking I/O on
//! plain threads: it needs no runtime.

use std::net::SocketAddr;

/// Reads one HTTP/1.1 request (headers and a Content-Length body); false at EOF.
fn read_request(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return false,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).is_ok()
}

/// A server that answers the first request of each connection, then reads the next
/// and closes without a response: a pooled connection the server already gave up on.
/// With `answer_first == false` it never answers at all. It serves `connections`
/// connections on 127.0.0.1 (port 0), then stops accepting.
///
/// # Panics
/// When it cannot bind a loopback port (it is a test fixture).
pub fn closing_server(answer_first: bool, connections: usize) -> SocketAddr {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    std::thread::spawn(move || {
        for _ in 0..connections {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            std::thread::spawn(move || {
                if !read_request(&mut s) {
                    return;
                }
                if answer_first {
                    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n\
                                data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nkeep-alive: timeout=5\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                    let _ = read_request(&mut s);
                }
                // Close without answering.
            });
        }
    });
    addr
}
