//! A WebSocket upgrade (the OpenAI Realtime dialect): the handshake goes upstream with
//! its headers intact, then bytes are relayed both ways unchanged while a frame reader
//! follows a copy of each read. Each response (from the client's `response.create`, or
//! the server's `response.created` when the server started it, to its `response.done`,
//! error or cut) becomes one record, timed and measured as an HTTP stream is: a
//! message's time is the kernel's receive time of the upstream read that completed it
//! when the connection keeps one, else the proxy's clock when that read returned.

use super::{own_response, proxy_info, relay, relay_mismatch, secrets_of, send};
use super::{tracker, upstream_request, upstream_uri};
use super::{Job, ProxyBody};
use crate::metrics::{ActiveGuard, Route, StreamLabels};
use crate::shared::Shared;
use crate::slots::Busy;
use crate::ws_frames::{close_detail, FrameError, FrameReader, Message, Side};
use bytes::Bytes;
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, ProxyInfo, RequestRecord};
use cadence_transport::{RxStamps, Stamper};
use cadence_wire::{Flow, Framing, StreamTracker, MAX_EVENT_BYTES};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Read buffer per direction.
const BUF: usize = 16 * 1024;

/// An HTTP/1.1 `GET` asking for `Upgrade: websocket`.
pub(super) fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.method() == Method::GET
        && req
            .headers()
            .get_all(http::header::UPGRADE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
}

/// Forwards the handshake; on `101` answers the client with the upstream's headers and
/// relays the connection in a task of its own, else hands on the upstream's answer.
pub(super) async fn handle(
    shared: Arc<Shared>,
    busy: Busy,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (parts, _) = req.into_parts();
    let route = Route::of_path(parts.uri.path());
    let measured = shared.config.measures(parts.uri.path());
    let redactor = secrets_of(&parts.headers, parts.uri.query());
    let labels = StreamLabels {
        model: shared
            .models
            .label(query_model(parts.uri.query()).as_deref()),
        route: route.name().to_string(),
    };
    let uri = match upstream_uri(&shared.config.upstream, &parts.uri) {
        Ok(u) => u,
        Err(refusal) => return refusal.answer(&shared),
    };
    let (info, client_id) = proxy_info(&parts, &redactor);
    let upgrade = parts.headers.get(http::header::UPGRADE).cloned();
    let mut up = upstream_request(&shared.via_id, parts, uri, Bytes::new());
    // The two hop-by-hop headers the handshake is made of go on to the next hop.
    if let Some(u) = upgrade {
        up.headers_mut().insert(http::header::UPGRADE, u);
        up.headers_mut().insert(
            http::header::CONNECTION,
            HeaderValue::from_static("upgrade"),
        );
    }
    let mut job = Job::start(&shared, measured, labels.clone(), redactor, info, client_id);
    job.busy = Some(busy);
    let mut response = match send(&mut job, up).await {
        Ok(r) => r,
        Err((status, msg)) => return own_response(status, &msg, false),
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        if response.status().is_success() {
            // Asked for a WebSocket, answered with something else (plain SSE, JSON):
            // the bytes still go to the client, the record is a mismatch (FAULTS 106).
            let ct = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("no content type")
                .to_string();
            let msg = format!(
                "the upstream answered the WebSocket upgrade with HTTP {} ({ct}), not 101 \
                 Switching Protocols",
                response.status().as_u16()
            );
            return relay_mismatch(job, response, route, msg);
        }
        return relay(job, response, route, false);
    }
    let upstream_upgrade = hyper::upgrade::on(&mut response);
    let mut answer = Response::new(ProxyBody::Full(None));
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *answer.headers_mut() = response.headers().clone();
    // The upgraded connection is the same socket: its reads keep being stamped.
    let stamps = response.extensions().get::<RxStamps>().cloned();
    let session = Session::new(&shared, job, labels, stamps);
    tokio::spawn(session.run(client_upgrade, upstream_upgrade));
    answer
}

/// The Realtime URL names its model in the query (`?model=...`).
fn query_model(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == "model")
        .map(|(_, v)| v.to_string())
}

/// How the relay ended, for the response it left open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The upstream closed (or failed) first.
    Upstream,
    /// The client closed or went away first.
    Client,
    /// The proxy shut down and the drain timeout passed.
    Cut,
}

/// One response being measured.
struct Open {
    rec: RequestRecord,
    tracker: StreamTracker,
    stamper: Stamper,
    _active: ActiveGuard,
}

/// One read from the upstream: when it returned, on the proxy's clock.
#[derive(Debug, Clone, Copy)]
struct ReadAt {
    user: tokio::time::Instant,
    /// `user` in ns on the run clock.
    t: u64,
}

/// One WebSocket connection's measurement: the responses on it, one record each.
struct Session {
    shared: Arc<Shared>,
    labels: StreamLabels,
    redactor: Redactor,
    measured: bool,
    /// The handshake's record, reused for the first response (its index and id).
    first: Option<RequestRecord>,
    info: ProxyInfo,
    open: Option<Open>,
    responses: u32,
    line: Vec<u8>,
    /// The frame reader gave up: the rest is relayed unmeasured.
    blind: bool,
    /// The upstream connection's kernel receive stamps, when it keeps them.
    stamps: Option<RxStamps>,
    /// Shutdown waits for this to drop (every record handed over first).
    _in_flight: Option<tokio::sync::mpsc::Sender<()>>,
    /// The client connection's slot, held (and never closed to make room) while the
    /// session lasts.
    _busy: Option<Busy>,
}

/// What the client direction tells the upstream direction.
#[derive(Default)]
struct FromClient {
    /// When each `response.create` not yet answered came in.
    creates: Mutex<VecDeque<u64>>,
    /// The client sent a close frame or closed its side.
    closed: AtomicBool,
}

impl Session {
    fn new(
        shared: &Arc<Shared>,
        mut job: Job,
        labels: StreamLabels,
        stamps: Option<RxStamps>,
    ) -> Session {
        let measured = job.measured;
        let busy = job.busy.take();
        if !measured {
            shared.metrics.unmeasured();
        }
        let (rec, redactor, in_flight) = job.detach();
        let info = rec.proxy.as_deref().cloned().unwrap_or_default();
        Session {
            shared: shared.clone(),
            labels,
            redactor,
            measured,
            first: measured.then_some(rec),
            info,
            open: None,
            responses: 0,
            line: Vec::new(),
            blind: false,
            stamps,
            _in_flight: in_flight,
            _busy: busy,
        }
    }

    async fn run(mut self, client: OnUpgrade, upstream: OnUpgrade) {
        let (c, u) = match tokio::try_join!(client, upstream) {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("cadence proxy: a WebSocket upgrade failed: {e}");
                return;
            }
        };
        let (mut cr, mut cw) = tokio::io::split(TokioIo::new(c));
        let (mut ur, mut uw) = tokio::io::split(TokioIo::new(u));
        if !self.measured {
            let both = async {
                tokio::join!(relay_plain(&mut cr, &mut uw), relay_plain(&mut ur, &mut cw))
            };
            tokio::select! {
                _ = both => {}
                _ = cut_at_shutdown(&self.shared) => {}
            }
            return;
        }
        let from_client = FromClient::default();
        let (ending, at) = self
            .relay_measured(&mut cr, &mut cw, &mut ur, &mut uw, &from_client)
            .await;
        self.end_session(ending, at, &from_client);
    }

    /// Relays both ways until both sides are done (the other side gets a grace once
    /// one is: 1 s to answer an upstream's close, the idle timeout after a client's),
    /// or the proxy shuts down and the drain timeout passes. Returns how the relay
    /// ended and when the first side did.
    async fn relay_measured(
        &mut self,
        cr: &mut (impl AsyncRead + Unpin),
        cw: &mut (impl AsyncWrite + Unpin),
        ur: &mut (impl AsyncRead + Unpin),
        uw: &mut (impl AsyncWrite + Unpin),
        from_client: &FromClient,
    ) -> (Ending, u64) {
        let shared = self.shared.clone();
        let clock = shared.clock;
        let idle = shared.config.limits.idle_timeout;
        let up = self.upstream_to_client(ur, cw, from_client);
        let down = client_to_upstream(cr, uw, from_client, &shared);
        let cut = cut_at_shutdown(&shared);
        tokio::pin!(up, down, cut);
        let (mut up_done, mut down_done): (Option<(Ending, u64)>, Option<u64>) = (None, None);
        let mut grace = None;
        loop {
            let wait = async {
                match grace {
                    Some(g) => tokio::time::sleep_until(g).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                e = &mut up, if up_done.is_none() => {
                    up_done = Some((e, clock.now_ns()));
                    grace = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                }
                _ = &mut down, if down_done.is_none() => {
                    down_done = Some(clock.now_ns());
                    grace.get_or_insert(tokio::time::Instant::now() + idle);
                }
                _ = wait => break,
                _ = &mut cut => return (Ending::Cut, clock.now_ns()),
            }
            if up_done.is_some() && down_done.is_some() {
                break;
            }
        }
        match (up_done, down_done) {
            (Some(u), _) => u,
            (None, Some(at)) => (Ending::Client, at),
            (None, None) => (Ending::Client, clock.now_ns()),
        }
    }

    /// Relays the upstream's bytes to the client, timestamping each read before it is
    /// written on, and following its frames; ends when either side does.
    async fn upstream_to_client(
        &mut self,
        ur: &mut (impl AsyncRead + Unpin),
        cw: &mut (impl AsyncWrite + Unpin),
        from_client: &FromClient,
    ) -> Ending {
        let clock = self.shared.clock;
        let idle_ns = self.shared.config.limits.idle_timeout.as_nanos() as u64;
        let mut reader = FrameReader::new(Side::Server, MAX_EVENT_BYTES);
        let mut buf = vec![0u8; BUF];
        let mut last_read = clock.now_ns();
        loop {
            let waiting = self.waiting_since(from_client).map(|w| w.max(last_read));
            let wake = waiting.unwrap_or(last_read) + idle_ns;
            let wait = Duration::from_nanos(wake.saturating_sub(clock.now_ns()));
            let n = tokio::select! {
                r = ur.read(&mut buf) => match r {
                    Ok(0) | Err(_) => {
                        let _ = cw.shutdown().await;
                        return Ending::Upstream;
                    }
                    Ok(n) => n,
                },
                _ = tokio::time::sleep(wait) => {
                    if waiting.is_some_and(|w| clock.now_ns() >= w + idle_ns) {
                        self.time_out(clock.now_ns(), idle_ns, from_client);
                    }
                    continue;
                }
            };
            // Timestamp first: nothing may sit between the read and the clock.
            let user = tokio::time::Instant::now();
            let t = clock.ns_at(user);
            last_read = t;
            if cw.write_all(&buf[..n]).await.is_err() {
                return Ending::Client;
            }
            if !self.blind {
                let read = ReadAt { user, t };
                let res = reader.feed(&buf[..n], &mut |m| self.on_message(read, m, from_client));
                if let Err(e) = res {
                    self.unreadable(t, &e);
                }
            }
        }
    }

    /// Since when a response has been waited on (an open one's start, or the oldest
    /// unanswered `response.create`), if any; the last read counts too (the caller's).
    fn waiting_since(&self, from_client: &FromClient) -> Option<u64> {
        if let Some(o) = &self.open {
            return o.rec.sent_ns;
        }
        from_client.creates.lock().ok()?.front().copied()
    }

    /// The idle timeout passed with a response waited on: it ends as a TTFT or idle
    /// timeout. The connection stays (it is the client's); later events of that
    /// response are not measured.
    fn time_out(&mut self, now: u64, idle_ns: u64, from_client: &FromClient) {
        if self.open.is_none() {
            self.open_from_create(from_client);
        }
        let has_output = self.open.as_ref().is_some_and(|o| o.tracker.has_output());
        let (outcome, what) = if has_output {
            (Outcome::IdleTimeout, "no bytes from the upstream")
        } else {
            (Outcome::TtftTimeout, "no output from the upstream")
        };
        let idle = Duration::from_nanos(idle_ns);
        self.end_open(now, Some((outcome, format!("{what} for {idle:?}"))));
    }

    /// One message from the upstream, completed by the read `read`.
    fn on_message(&mut self, read: ReadAt, m: Message<'_>, from_client: &FromClient) {
        let t = read.t;
        let payload = match m {
            Message::Text(p) | Message::Binary(p) => p,
            Message::Close(payload) => {
                if self.open.is_some() {
                    if from_client.closed.load(Ordering::Relaxed) {
                        self.ended_by(Ending::Client, t);
                    } else {
                        // The code and reason (1011 and why) stay in the error (FAULTS 105).
                        let detail = close_detail(payload);
                        let msg = if detail.is_empty() {
                            "the server closed the WebSocket mid-response".to_string()
                        } else {
                            format!("the server closed the WebSocket mid-response ({detail})")
                        };
                        self.end_open(t, Some((Outcome::Truncated, msg)));
                    }
                }
                return;
            }
        };
        if self.open.is_none() && !self.open_from_create(from_client) {
            if event_type(payload).as_deref() != Some("response.created") {
                return; // session events, or a response this proxy is not measuring
            }
            // The server started it when `response.created` reached the proxy.
            self.open(self.arrival(t));
        }
        // One message is one event: a line for the NDJSON decoder (a raw newline can
        // only be whitespace between JSON tokens).
        self.line.clear();
        self.line.extend(payload.iter().map(|&b| match b {
            b'\n' | b'\r' => b' ',
            b => b,
        }));
        self.line.push(b'\n');
        let Some(o) = self.open.as_mut() else { return };
        // The message was completed by the latest read: an empty slice lies in no
        // read's bytes, so the stamper takes that read's kernel receive time.
        let clock = &self.shared.clock;
        let ft = o.stamper.frame_time(clock, read.user, &[], &o.rec);
        let before = o.rec.chunks.len();
        let flow = o.tracker.feed(ft.t_ns, &self.line, &mut o.rec);
        o.stamper.after_feed(ft, before, &mut o.rec);
        if flow == Flow::Stop || o.tracker.is_done() {
            self.end_open(ft.t_ns, None);
        }
    }

    /// When the latest upstream read's bytes reached the proxy: the kernel's receive
    /// time when the connection keeps one (never after `t`, the read's own time),
    /// else `t`.
    fn arrival(&self, t: u64) -> u64 {
        self.stamps
            .as_ref()
            .filter(|s| s.enabled())
            .and_then(|s| s.stamp_for(&[]))
            .map_or(t, |s| self.shared.clock.ns_at(s.arrived).min(t))
    }

    /// Opens a record for the oldest unanswered `response.create`, if there is one.
    fn open_from_create(&mut self, from_client: &FromClient) -> bool {
        let sent = from_client
            .creates
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front());
        match sent {
            Some(t) => {
                self.open(t);
                true
            }
            None => false,
        }
    }

    /// A response's record, its clock started at `sent` (the `response.create`).
    fn open(&mut self, sent: u64) {
        let mut rec = self.first.take().unwrap_or_else(|| {
            let index = self.shared.next_index.fetch_add(1, Ordering::Relaxed);
            let mut r = RequestRecord::new(index, Outcome::AbortedAtDeadline);
            r.source = cadence_core::RecordSource::Proxy;
            r.proxy = Some(Box::new(ProxyInfo {
                request_id: format!("{}-{}", self.info.request_id, self.responses),
                ..self.info.clone()
            }));
            r
        });
        self.responses += 1;
        rec.sent_ns = Some(sent);
        rec.headers_ns = Some(sent);
        rec.http_status = Some(101);
        let stamper = Stamper::new(self.stamps.as_ref(), &mut rec);
        self.open = Some(Open {
            stamper,
            rec,
            tracker: tracker(&self.shared, cadence_wire::Api::Websocket, Framing::Ndjson),
            _active: self.shared.metrics.stream_started(&self.labels),
        });
    }

    /// Ends the open response at `t`: as its stream says, or with the proxy's verdict.
    fn end_open(&mut self, t: u64, verdict: Option<(Outcome, String)>) {
        let Some(mut o) = self.open.take() else {
            return;
        };
        match verdict {
            None => o.tracker.end_stream(t, &mut o.rec),
            Some((outcome, msg)) => {
                o.tracker.finish(t, &mut o.rec);
                o.rec.outcome = outcome;
                o.rec.error = Some(msg);
            }
        }
        if let Some(e) = o.rec.error.take() {
            o.rec.error = Some(self.redactor.redact(&e));
        }
        self.shared.finish(o.rec, &self.labels);
    }

    /// The frames cannot be followed: the open response fails with why, nothing more
    /// is measured on this connection, and the bytes still go through unchanged.
    fn unreadable(&mut self, t: u64, e: &FrameError) {
        self.blind = true;
        tracing::warn!("cadence proxy: a WebSocket connection is no longer measured: {e}");
        let outcome = match e {
            FrameError::TooLarge(_) => Outcome::EventTooLarge,
            FrameError::Protocol(_) => Outcome::ProtocolMismatch,
        };
        self.end_open(t, Some((outcome, e.to_string())));
    }

    /// The response left open when the connection ended `ending`.
    fn ended_by(&mut self, ending: Ending, t: u64) {
        let when = self
            .open
            .as_ref()
            .map_or(0, |o| o.rec.chunk_count())
            .to_string();
        let verdict = match ending {
            Ending::Upstream => (
                Outcome::Truncated,
                format!("the WebSocket connection ended mid-response, after {when} chunks"),
            ),
            Ending::Client => {
                self.shared.metrics.client_disconnected();
                (
                    Outcome::ClientDisconnected,
                    format!("the client closed the WebSocket after {when} chunks"),
                )
            }
            Ending::Cut => (
                Outcome::AbortedAtDeadline,
                format!("the proxy shut down after {when} chunks; the WebSocket was cut"),
            ),
        };
        self.end_open(t, Some(verdict));
    }

    /// The connection is over (at `t`): the open response, and every `response.create`
    /// never answered, end as `ending` says.
    fn end_session(&mut self, ending: Ending, t: u64, from_client: &FromClient) {
        if self.open.is_some() {
            self.ended_by(ending, t);
        }
        while !self.blind && self.open_from_create(from_client) {
            self.ended_by(ending, t);
        }
    }
}

/// Relays the client's bytes upstream, noting each `response.create` (read before it
/// is written on, so it is known before any answer) and the client's close.
async fn client_to_upstream(
    cr: &mut (impl AsyncRead + Unpin),
    uw: &mut (impl AsyncWrite + Unpin),
    from_client: &FromClient,
    shared: &Shared,
) {
    let mut reader = FrameReader::new(Side::Client, MAX_EVENT_BYTES);
    let mut readable = true;
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let t = shared.clock.now_ns();
        if readable {
            readable = reader
                .feed(&buf[..n], &mut |m| match m {
                    Message::Text(p) if event_type(p).as_deref() == Some("response.create") => {
                        if let Ok(mut q) = from_client.creates.lock() {
                            q.push_back(t);
                        }
                    }
                    Message::Close(_) => from_client.closed.store(true, Ordering::Relaxed),
                    _ => {}
                })
                .is_ok();
        }
        if uw.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    from_client.closed.store(true, Ordering::Relaxed);
    let _ = uw.shutdown().await;
}

/// Resolves once the proxy is shutting down and the drain timeout has passed.
async fn cut_at_shutdown(shared: &Shared) {
    let mut stop = shared.stop.clone();
    let _ = stop.wait_for(|v| *v).await;
    tokio::time::sleep(shared.config.limits.drain_timeout).await;
}

/// An unmeasured direction: bytes through, then the half-close.
async fn relay_plain(r: &mut (impl AsyncRead + Unpin), w: &mut (impl AsyncWrite + Unpin)) {
    let _ = tokio::io::copy(r, w).await;
    let _ = w.shutdown().await;
}

/// A Realtime event's `type`.
fn event_type(payload: &[u8]) -> Option<Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<Cow<'a, str>>,
    }
    serde_json::from_slice::<Typed<'_>>(payload).ok()?.kind
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_and_query_models() {
        assert_eq!(
            event_type(br#"{"type":"response.create","response":{}}"#).as_deref(),
            Some("response.create")
        );
        assert_eq!(event_type(br#"{"type":7}"#), None);
        assert_eq!(event_type(b"not json"), None);
        assert_eq!(
            query_model(Some("a=1&model=gpt-realtime")).as_deref(),
            Some("gpt-realtime")
        );
        assert_eq!(query_model(Some("a=1")), None);
        assert_eq!(query_model(None), None);
    }
}
