//! The side requests' GET against a server on 127.0.0.1 (port 0, a thread of its own
//! writing raw HTTP/1.1): the body of a 2xx, the headers sent, a non-2xx status, a
//! server that never answers or stalls mid-body (the timeout covers the whole
//! exchange), a body over the cap (declared or chunked) and nothing listening.

use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::get::{get, GetError};
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CAP: usize = 1024;

fn http() -> HyperClient {
    client::build(&ClientConfig {
        pool_size: 1,
        connect_timeout: Duration::from_secs(2),
        http2: false,
    })
}

/// A server for one connection: reads the request head, sends it on the channel, then
/// lets `answer` write (or not write) the response.
fn serve(answer: impl FnOnce(&mut TcpStream) + Send + 'static) -> (Uri, mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
        answer(&mut s);
    });
    (format!("http://{addr}/metrics").parse().unwrap(), rx)
}

fn respond(s: &mut TcpStream, text: &str) {
    let _ = s.write_all(text.as_bytes());
    let _ = s.flush();
    // Keep the connection open a moment so the client reads it whole.
    std::thread::sleep(Duration::from_millis(200));
}

#[tokio::test]
async fn a_2xx_body_comes_back_and_the_headers_go_out() {
    let (url, heads) = serve(|s| {
        respond(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello",
        )
    });
    let mut headers = HeaderMap::new();
    headers.insert("x-probe", HeaderValue::from_static("p1"));
    let body = get(&http(), &url, &headers, Duration::from_secs(5), CAP)
        .await
        .unwrap();
    assert_eq!(&body[..], b"hello");
    let head = heads.recv().unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /metrics http/1.1\r\n"), "{head}");
    assert!(head.contains("x-probe: p1\r\n"), "{head}");
}

#[tokio::test]
async fn a_chunked_body_under_the_cap_is_read_whole() {
    let (url, _heads) = serve(|s| {
        respond(
            s,
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
        )
    });
    let body = get(&http(), &url, &HeaderMap::new(), Duration::from_secs(5), 6)
        .await
        .unwrap();
    assert_eq!(&body[..], b"abcdef");
}

#[tokio::test]
async fn a_status_other_than_2xx_is_an_error() {
    for (line, code) in [
        ("404 Not Found", StatusCode::NOT_FOUND),
        ("503 Service Unavailable", StatusCode::SERVICE_UNAVAILABLE),
        ("301 Moved Permanently", StatusCode::MOVED_PERMANENTLY),
    ] {
        let (url, _heads) = serve(move |s| {
            respond(
                s,
                &format!("HTTP/1.1 {line}\r\ncontent-length: 4\r\n\r\nnope"),
            )
        });
        let e = get(
            &http(),
            &url,
            &HeaderMap::new(),
            Duration::from_secs(5),
            CAP,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, GetError::Status(c) if c == code), "{e:?}");
        assert_eq!(e.to_string(), format!("HTTP {code}"));
    }
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let (url, _heads) = serve(|_s| std::thread::sleep(Duration::from_secs(3)));
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let e = get(&http(), &url, &HeaderMap::new(), timeout, CAP)
        .await
        .unwrap_err();
    assert!(matches!(e, GetError::Timeout(t) if t == timeout), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(e.to_string(), "no answer within 300ms");
}

#[tokio::test]
async fn the_timeout_covers_a_body_that_stalls() {
    let (url, _heads) = serve(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhalf");
        std::thread::sleep(Duration::from_secs(3));
    });
    let started = Instant::now();
    let e = get(
        &http(),
        &url,
        &HeaderMap::new(),
        Duration::from_millis(300),
        CAP,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, GetError::Timeout(_)), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused() {
    // Declared: refused from the head, before the body is read.
    let (url, _heads) = serve(|s| {
        let _ = s.write_all(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", CAP + 1).as_bytes(),
        );
        std::thread::sleep(Duration::from_secs(3));
    });
    let started = Instant::now();
    let e = get(
        &http(),
        &url,
        &HeaderMap::new(),
        Duration::from_secs(5),
        CAP,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, GetError::TooLarge(CAP)), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        e.to_string(),
        format!("the answer is larger than {CAP} bytes")
    );

    // Chunked, with no length said: refused once the bytes pass the cap, while the
    // server would go on sending.
    let (url, _heads) = serve(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        let chunk = format!("{:x}\r\n{}\r\n", 512, "x".repeat(512));
        for _ in 0..10_000 {
            if s.write_all(chunk.as_bytes()).is_err() {
                return;
            }
        }
    });
    let e = get(
        &http(),
        &url,
        &HeaderMap::new(),
        Duration::from_secs(5),
        CAP,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, GetError::TooLarge(CAP)), "{e:?}");
}

#[tokio::test]
async fn nothing_listening_is_unreachable() {
    let addr: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let url: Uri = format!("http://{addr}/v1/models").parse().unwrap();
    let e = get(
        &http(),
        &url,
        &HeaderMap::new(),
        Duration::from_secs(5),
        CAP,
    )
    .await
    .unwrap_err();
    let GetError::Unreachable(u) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(u.address, addr.to_string());
    // Its text is the Unreachable's, which says the cause; it names no source, so an
    // error chain says the cause once.
    assert!(std::error::Error::source(&e).is_none(), "{e:?}");
    let text = e.to_string();
    assert_eq!(text.matches("connection refused").count(), 1, "{text}");
}
