//! `--api websocket`: a message's timestamp is when the read that completed its frame
//! came off the socket. A server writes one frame in two pieces 80 ms apart: the chunk
//! is stamped at the second piece, not when the handshake ended or the first arrived.

use bytes::Bytes;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::Clock;
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
    };
    let cx = ExecContext {
        client: &client,
        clock: &clock,
        timeouts: &timeouts,
        api: Api::Websocket,
        strict: false,
        redactor: &redactor,
    };
    let body = r#"[{"type":"conversation.item.create"},{"type":"response.create"}]"#;
    let req = http::Request::get(format!("ws://{addr}/v1/realtime"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (_tx, mut cancel) = Cancel::new();
    let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
    let text = execute(&cx, req, &mut cancel, &mut rec).await;
    server.await.unwrap();
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
