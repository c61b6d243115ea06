//! `--api websocket`: a stream over WebSocket. The request body is a JSON list of client
//! events (the OpenAI Realtime `conversation.item.create` and `response.create`), sent
//! as text messages after the handshake; each server message is one event for the same
//! tracker the HTTP streams use. A message's timestamp is when the read that completed
//! its frame came off the socket, as for an HTTP body read: the kernel's receive time
//! of that read ([`StampedTcp`]) unless `--timestamps user` or the platform gives none,
//! else the client's clock when the read returned. `wss://` runs TLS over that socket
//! with the HTTP client's trust (the public roots, `--ca-file`).

use super::{
    end, new_tracker, past_ceiling, stop_at_deadline, stop_at_run_end, Cancel, Deadlines,
    ExecContext,
};
use bytes::Bytes;
use cadence_core::{Outcome, RequestRecord};
use cadence_transport::rxstamp::StampedTcp;
use cadence_transport::{Clock, RxStamps, Stamper};
use cadence_wire::{Flow, Framing, StreamText, StreamTracker, MAX_EVENT_BYTES};
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// The connection under the WebSocket: the stamped TCP socket, or TLS over it
/// (`wss://`; the kernel still stamps the socket's reads, each TLS record's).
enum Io {
    Plain(StampedTcp),
    Tls(Box<tokio_rustls::client::TlsStream<StampedTcp>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A socket that notes when its last read returned bytes (and, through its
/// [`StampedTcp`], when the kernel received them).
struct Stamped {
    inner: Io,
    clock: Clock,
    last_read_ns: Arc<AtomicU64>,
}

impl AsyncRead for Stamped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // Timestamp first: nothing may sit between the read and the clock.
            let t = self.clock.now_ns();
            self.last_read_ns.store(t, Ordering::Relaxed);
        }
        poll
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Socket = tokio_tungstenite::WebSocketStream<Stamped>;

/// Connects and shakes hands; an error is the outcome and its message. Gives back the
/// socket's kernel receive stamps too.
async fn connect(
    cx: &ExecContext<'_>,
    req: &http::Request<Full<Bytes>>,
    stamp: Arc<AtomicU64>,
) -> Result<(Socket, RxStamps), (Outcome, String)> {
    let uri = req.uri();
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => {
            let msg = format!("a WebSocket stream needs ws:// or wss://, not {uri}");
            return Err((Outcome::ProtocolMismatch, msg));
        }
    };
    let host = uri.host().unwrap_or("127.0.0.1");
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::time::timeout(cx.timeouts.connect, TcpStream::connect((host, port)))
        .await
        .map_err(|_| {
            let msg = format!("no connection within {:?}", cx.timeouts.connect);
            (Outcome::ConnectError, msg)
        })?
        .map_err(|e| (Outcome::ConnectError, format!("cannot connect: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let mut hs = uri
        .to_string()
        .into_client_request()
        .map_err(|e| (Outcome::ProtocolMismatch, e.to_string()))?;
    for (k, v) in req.headers() {
        if k != http::header::CONTENT_TYPE && k != http::header::ACCEPT {
            hs.headers_mut().insert(k.clone(), v.clone());
        }
    }
    let tcp = StampedTcp::new(tcp, cx.client.timestamps());
    let stamps = tcp.stamps();
    let inner = if tls {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(
            host.trim_matches(['[', ']']).to_string(),
        )
        .map_err(|e| (Outcome::TlsError, format!("{host}: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(cx.client.tls());
        let stream = tokio::time::timeout(cx.timeouts.connect, connector.connect(name, tcp))
            .await
            .map_err(|_| {
                let msg = format!("no TLS session within {:?}", cx.timeouts.connect);
                (Outcome::TlsError, msg)
            })?
            .map_err(|e| (Outcome::TlsError, format!("TLS: {e}")))?;
        Io::Tls(Box::new(stream))
    } else {
        Io::Plain(tcp)
    };
    let stream = Stamped {
        inner,
        clock: *cx.clock,
        last_read_ns: stamp,
    };
    // A message over the event limit is `event_too_large`, as in the proxy (FAULTS
    // 104): tungstenite refuses it, before buffering it whole, at the same limit.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_EVENT_BYTES))
        .max_frame_size(Some(MAX_EVENT_BYTES));
    let (socket, _) = tokio_tungstenite::client_async_with_config(hs, stream, Some(config))
        .await
        .map_err(|e| {
            (
                Outcome::ProtocolMismatch,
                format!("WebSocket handshake: {e}"),
            )
        })?;
    Ok((socket, stamps))
}

/// The client events of the body (a JSON list; anything else is sent as one message).
fn client_events(body: &[u8]) -> Vec<String> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(events)) => events.iter().map(|e| e.to_string()).collect(),
        _ => vec![String::from_utf8_lossy(body).into_owned()],
    }
}

/// [`crate::exec::execute`] for a WebSocket endpoint.
pub(crate) async fn execute(
    cx: &ExecContext<'_>,
    req: http::Request<Full<Bytes>>,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
) -> StreamText {
    let sent_at = Instant::now();
    rec.sent_ns = Some(cx.clock.ns_at(sent_at));
    let d = Deadlines::new(sent_at, cx.timeouts);
    let stamp = Arc::new(AtomicU64::new(0));
    let handshake = tokio::select! {
        biased;
        _ = cancel.cancelled() => Err((Outcome::AbortedAtDeadline, "run ended before the handshake".into())),
        _ = sleep_until(d.header) => Err((d.outcome(d.header, Outcome::HeaderTimeout), "no WebSocket handshake in time".into())),
        r = connect(cx, &req, stamp.clone()) => r,
    };
    let (mut socket, stamps) = match handshake {
        Ok(s) => s,
        Err((outcome, msg)) => return end(cx, rec, outcome, Some(msg)),
    };
    rec.headers_ns = Some(cx.clock.now_ns());
    let stamper = Stamper::new(Some(&stamps), rec);
    rec.http_status = Some(101);
    let body = http_body_util::BodyExt::collect(req.into_body()).await;
    let body = body.map(|b| b.to_bytes()).unwrap_or_default();
    for event in client_events(&body) {
        if let Err(e) = socket.send(Message::text(event)).await {
            return end(cx, rec, Outcome::TransportError, Some(e.to_string()));
        }
    }
    let text = read_messages(cx, &mut socket, (&stamp, stamper), cancel, rec, &d).await;
    let _ = socket.close(None).await;
    if let Some(e) = rec.error.take() {
        rec.error = Some(cx.redactor.redact(&e));
    }
    text
}

/// Feeds each message to the tracker until the stream ends, fails or times out. The
/// pair is when the socket's last read returned (ns) and the request's stamper.
async fn read_messages(
    cx: &ExecContext<'_>,
    socket: &mut Socket,
    (stamp, mut stamper): (&AtomicU64, Stamper),
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
    d: &Deadlines,
) -> StreamText {
    let mut tracker = new_tracker(cx, Framing::Ndjson);
    let mut last_read = Instant::now();
    let mut line = Vec::new();
    // Message bytes read, for the size ceiling.
    let mut bytes = 0u64;
    loop {
        let (deadline, outcome) = d.streaming(tracker.has_output(), last_read, cx.timeouts.idle);
        tokio::select! {
            biased;
            msg = socket.next() => {
                let t = stamp.load(Ordering::Relaxed);
                let payload = match msg {
                    Some(Ok(Message::Text(s))) => Bytes::from(s),
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(Message::Close(frame))) => {
                        closed(cx, &mut tracker, rec, frame);
                        break;
                    }
                    None => {
                        tracker.end_stream(cx.clock.now_ns(), rec);
                        break;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        failed(cx, &mut tracker, rec, &e);
                        break;
                    }
                };
                last_read = Instant::now();
                // The read that completed the message's frame is the socket's latest:
                // an empty slice lies in no read's bytes, so the latest read's kernel
                // receive time is taken (the payload's first bytes may have come in an
                // earlier read).
                let user = cx.clock.origin() + Duration::from_nanos(t);
                let ft = stamper.frame_time(cx.clock, user, &[], rec);
                // One message is one event: a line for the NDJSON decoder.
                line.clear();
                // One message is one event whatever its newlines (pretty-printed JSON,
                // FAULTS 109): a raw newline can only be whitespace between JSON tokens.
                line.extend(payload.iter().map(|&b| match b {
                    b'\n' | b'\r' => b' ',
                    b => b,
                }));
                line.push(b'\n');
                let before = rec.chunks.len();
                let flow = tracker.feed(ft.t_ns, &line, rec);
                stamper.after_feed(ft, before, rec);
                if flow == Flow::Stop {
                    rec.end_ns = Some(ft.t_ns);
                    break;
                }
                bytes = bytes.saturating_add(payload.len() as u64);
                if !tracker.is_done() && past_ceiling(cx.timeouts, rec, bytes) {
                    rec.end_ns = Some(ft.t_ns);
                    break;
                }
                if tracker.is_done() {
                    tracker.end_stream(ft.t_ns, rec);
                    break;
                }
            }
            _ = cancel.cancelled() => {
                stop_at_run_end(cx, &mut tracker, rec);
                break;
            }
            _ = sleep_until(deadline) => {
                stop_at_deadline(cx, &mut tracker, rec, outcome);
                break;
            }
        }
    }
    // Every way out of the loop: room reserved for chunks that never came goes back.
    rec.fit_chunks();
    tracker.take_text()
}

/// The server closed the WebSocket: the stream ends, and a close that cut it keeps its
/// code and reason (1011 and why) in the error (FAULTS 105).
fn closed(
    cx: &ExecContext<'_>,
    tracker: &mut StreamTracker,
    rec: &mut RequestRecord,
    frame: Option<CloseFrame>,
) {
    tracker.end_stream(cx.clock.now_ns(), rec);
    if let (Some(f), Outcome::Truncated) = (frame, rec.outcome) {
        let reason = cadence_wire::truncate_str(f.reason.trim(), 256);
        let base = rec.error.take().unwrap_or_default();
        rec.error = Some(format!(
            "{base} (the server closed the WebSocket with code {}{}{reason})",
            u16::from(f.code),
            if reason.is_empty() { "" } else { ": " },
        ));
    }
}

/// Reading the next message failed: a message over the event limit, else the
/// connection ended mid-stream.
fn failed(cx: &ExecContext<'_>, tracker: &mut StreamTracker, rec: &mut RequestRecord, e: &WsError) {
    if let WsError::Capacity(e) = e {
        let now = cx.clock.now_ns();
        tracker.finish(now, rec);
        rec.end_ns = Some(now);
        rec.outcome = Outcome::EventTooLarge;
        rec.error = Some(format!(
            "a WebSocket message over the {MAX_EVENT_BYTES}-byte event limit ({e})"
        ));
        return;
    }
    tracker.end_stream(cx.clock.now_ns(), rec);
    if rec.outcome == Outcome::Truncated {
        rec.error = Some(format!("the WebSocket ended mid-stream: {e}"));
    }
}
