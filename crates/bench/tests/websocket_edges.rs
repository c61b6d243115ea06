//! `--api websocket` against servers at the edges of the protocol: a message over the
//! event limit, a close with an error code, pretty-printed JSON messages. Each message is
//! one event, whatever its size or newlines, and the proxy classifies them the same way
//! (FAULTS 104, 105, 109).

use bytes::Bytes;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::Clock;
use cadence_wire::Api;
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;

/// Runs one `--api websocket` request against a server that, after the client's two
/// events, sends `script` and then waits; returns the record and the streamed text.
async fn run(script: Vec<Message>) -> (RequestRecord, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let mut ws = tokio_tungstenite::accept_async_with_config(tcp, Some(config))
            .await
            .unwrap();
        for _ in 0..2 {
            ws.next().await.unwrap().unwrap();
        }
        for m in script {
            if ws.send(m).await.is_err() {
                return;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), ws.next()).await;
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
        max_tokens: Some(16),
        keep_text: true,
        keep_tool_calls: false,
    };
    let body = r#"[{"type":"conversation.item.create"},{"type":"response.create"}]"#;
    let req = http::Request::get(format!("ws://{addr}/v1/realtime"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (_tx, mut cancel) = Cancel::new();
    let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
    let started = std::time::Instant::now();
    let text = execute(&cx, req, &mut cancel, &mut rec).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "ended by its outcome, not a timeout: {:?}",
        started.elapsed()
    );
    server.abort();
    (rec, text.content)
}

const DONE: &str = r#"{"type":"response.done","response":{"status":"completed","usage":{"input_tokens":1,"output_tokens":2}}}"#;

fn delta(text: &str) -> Message {
    Message::text(format!(
        r#"{{"type":"response.text.delta","delta":"{text}"}}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f104_an_oversized_websocket_message_is_event_too_large() {
    // Past tungstenite's own default frame limit (16 MiB) as well as the event limit.
    let big = format!(
        r#"{{"type":"response.text.delta","delta":"{}"}}"#,
        "x".repeat(20 << 20)
    );
    let (rec, _) = run(vec![delta("a"), Message::text(big), Message::text(DONE)]).await;
    assert_eq!(rec.outcome, Outcome::EventTooLarge, "{:?}", rec.error);
    let e = rec.error.as_deref().unwrap_or("");
    assert!(
        e.contains(&cadence_wire::MAX_EVENT_BYTES.to_string()),
        "{e}"
    );
    assert_eq!(rec.chunks.len(), 1, "the chunk before it is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f105_a_1011_close_keeps_its_reason() {
    let close = Message::Close(Some(CloseFrame {
        code: CloseCode::Error,
        reason: "engine overloaded, retry".into(),
    }));
    let (rec, text) = run(vec![delta("a"), close]).await;
    assert_eq!(rec.outcome, Outcome::Truncated, "{:?}", rec.error);
    assert_eq!(text, "a");
    let e = rec.error.as_deref().unwrap_or("");
    assert!(
        e.contains("1011") && e.contains("engine overloaded, retry"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f109_a_pretty_printed_websocket_message_is_one_event() {
    let pretty = |v: &str| {
        let v: serde_json::Value = serde_json::from_str(v).unwrap();
        Message::text(serde_json::to_string_pretty(&v).unwrap())
    };
    let d1 = r#"{"type":"response.text.delta","delta":"Hi"}"#;
    let d2 = r#"{"type":"response.text.delta","delta":" there"}"#;
    let (rec, text) = run(vec![pretty(d1), pretty(d2), pretty(DONE)]).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{:?}", rec.error);
    assert_eq!(text, "Hi there");
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.counters.malformed, 0);
    assert_eq!(rec.output_tokens.map(|t| t.count), Some(2));
}
