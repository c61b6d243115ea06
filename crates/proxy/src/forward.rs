//! One proxied request: read the (small) request body to learn the model, send it
//! upstream unchanged, and hand the response to the client frame by frame as it
//! arrives, while a copy of each frame's bytes goes to the wire tracker with the time
//! it was read. Whatever way the request ends, its record is finished once.

use crate::body::BodyError;
use crate::metrics::{ActiveGuard, Route, StreamLabels};
use crate::shared::Shared;
use crate::slots::{Busy, Slot};
use bytes::Bytes;
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, ProxyInfo, RecordSource, RequestRecord};
use cadence_transport::{RxStamps, Stamper};
use cadence_wire::{stream_framing, Flow, Framing, StreamTracker, TrackerConfig, AFTER_DONE_GRACE};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

mod websocket;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body the client receives: a fixed one, or the upstream's, tapped.
pub enum ProxyBody {
    Full(Option<Bytes>),
    Tap(Box<TapBody>),
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Tap(t) => t.poll(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ProxyBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Tap(_) => SizeHint::default(),
        }
    }
}

/// The upstream's response body, polled by the client connection itself: each frame
/// is timestamped and handed on in the same poll (no task hop, no queue), and only
/// a copy of its bytes goes to the tracker. hyper polls the body only when it can
/// write to the client, so a slow client stops the reads from the upstream (the
/// buffer per stream is hyper's write buffer plus the kernel's socket buffers).
/// Dropping it (client gone) drops the upstream body, which cancels the upstream
/// request.
pub struct TapBody {
    upstream: Incoming,
    /// `None` once the request was accounted for.
    job: Option<Job>,
    parsing: bool,
    /// Fires at most once per idle period; re-armed lazily to `last_frame + idle`.
    idle: Pin<Box<tokio::time::Sleep>>,
    idle_for: std::time::Duration,
    last_frame: tokio::time::Instant,
    /// An error held back for one poll: hyper aborts the connection on a body error
    /// without flushing what it buffered, so the `Pending` first lets it write out
    /// every byte the upstream sent before it failed.
    held: Option<BoxError>,
    /// When the tracker saw `[DONE]`: the request is accounted for at the body's end
    /// or [`AFTER_DONE_GRACE`] later, whichever comes first.
    done_at: Option<tokio::time::Instant>,
    /// Accounted for after `[DONE]`, the upstream's remaining bytes still go to the
    /// client, untapped.
    passthrough: bool,
    /// When the last frame was handed to hyper: hyper polls again only once the client
    /// took the bytes, so the time until the next poll is downstream back-pressure.
    handed_at: Option<tokio::time::Instant>,
    /// Each frame's time: the kernel's receive time of the upstream read that carried
    /// it, when the connection keeps one, else the proxy's clock.
    stamper: Stamper,
}

/// A wait on the client at least this long is recorded as back-pressure.
const DOWNSTREAM_WAIT_MIN: std::time::Duration = std::time::Duration::from_millis(1);

/// Waits on the client remembered until a chunk comes (frames that complete no chunk
/// can each follow one); beyond this the later ones fold into the oldest.
const MAX_WAITS_PENDING: usize = 64;

impl TapBody {
    fn new(upstream: Incoming, stamps: Option<&RxStamps>, mut job: Job) -> Self {
        let stamper = Stamper::new(stamps, &mut job.rec);
        let idle_for = job.shared.config.limits.idle_timeout;
        let now = tokio::time::Instant::now();
        TapBody {
            upstream,
            job: Some(job),
            parsing: true,
            idle: Box::pin(tokio::time::sleep_until(now + idle_for)),
            idle_for,
            last_frame: now,
            held: None,
            done_at: None,
            passthrough: false,
            handed_at: None,
            stamper,
        }
    }

    /// Ends the request with an error the client must see as one (not a clean end).
    fn fail(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Outcome,
        msg: String,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut job = self.job.take().expect("called while the job is live");
        job.end(outcome, Some(msg));
        let text = job.rec.error.clone().unwrap_or_default();
        drop(job);
        self.held = Some(text.into());
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(e) = self.held.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if self.passthrough {
            return self.poll_passthrough(cx);
        }
        let Some(job) = self.job.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(handed) = self.handed_at.take() {
            job.waited_on_client(handed.elapsed());
        }
        match Pin::new(&mut self.upstream).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                // Timestamp first: nothing may sit between the read and the clock.
                let user = tokio::time::Instant::now();
                self.last_frame = user;
                self.handed_at = Some(self.last_frame);
                if let (Some(data), Some(copy)) = (frame.data_ref(), job.body_copy.as_mut()) {
                    if copy.len() + data.len() <= cadence_wire::MAX_EVENT_BYTES {
                        copy.extend_from_slice(data);
                    }
                }
                if let (Some(data), Some(tr)) = (frame.data_ref(), job.tracker.as_mut()) {
                    if self.parsing {
                        let clock = &job.shared.clock;
                        let ft = self.stamper.frame_time(clock, user, data, &job.rec);
                        let before = job.rec.chunks.len();
                        self.parsing = tr.feed(ft.t_ns, data, &mut job.rec) == Flow::Continue;
                        let done = tr.is_done();
                        self.stamper.after_feed(ft, before, &mut job.rec);
                        if before == 0 {
                            job.rec.head_no_later_than_first_chunk();
                        }
                        job.mark_downstream_gap(before, ft.t_ns);
                        if self.done_at.is_none() && done {
                            let end = self.last_frame + AFTER_DONE_GRACE;
                            self.done_at = Some(self.last_frame);
                            self.idle.as_mut().reset(end);
                        }
                    } else {
                        job.rec.counters.reads = job.rec.counters.reads.saturating_add(1);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if self.done_at.is_some() {
                    // After [DONE] the request succeeded; the client still sees the error.
                    self.account_done();
                    return Poll::Ready(Some(Err(e.into())));
                }
                let msg = format!("the upstream connection failed mid-response: {e}");
                self.fail(cx, Outcome::Truncated, msg)
            }
            Poll::Ready(None) => {
                if let Some(mut job) = self.job.take() {
                    job.end_clean();
                }
                Poll::Ready(None)
            }
            Poll::Pending => self.poll_idle(cx),
        }
    }

    /// Decides whether a quiet upstream ends the request: the grace after `[DONE]`
    /// passed (accounted for, then passthrough), or the idle timeout (TTFT or idle).
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // The idle timer is re-armed only when it fires, not on every frame.
        while self.idle.as_mut().poll(cx).is_ready() {
            if let Some(d) = self.done_at {
                if tokio::time::Instant::now() >= d + AFTER_DONE_GRACE {
                    self.account_done();
                    return self.poll_passthrough(cx);
                }
            }
            let deadline = self.last_frame + self.idle_for;
            if tokio::time::Instant::now() >= deadline {
                let has_output = self
                    .job
                    .as_ref()
                    .and_then(|j| j.tracker.as_ref().map(StreamTracker::has_output));
                let (outcome, what) = match has_output {
                    Some(false) => (Outcome::TtftTimeout, "no output from the upstream"),
                    _ => (Outcome::IdleTimeout, "no bytes from the upstream"),
                };
                let msg = format!("{what} for {:?}; the stream was ended", self.idle_for);
                return self.fail(cx, outcome, msg);
            }
            self.idle.as_mut().reset(deadline);
        }
        Poll::Pending
    }

    /// `[DONE]` was seen and the grace after it passed (or the upstream failed after
    /// it): the request is accounted for now, ending at `[DONE]`; what the upstream
    /// still sends goes to the client untapped.
    fn account_done(&mut self) {
        if let Some(mut job) = self.job.take() {
            job.end_clean();
        }
        self.passthrough = true;
        self.idle
            .as_mut()
            .reset(tokio::time::Instant::now() + self.idle_for);
    }

    /// Forwards the upstream's bytes after the request was accounted for; the idle
    /// timeout still bounds the connection.
    fn poll_passthrough(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.upstream).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.last_frame = tokio::time::Instant::now();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                while self.idle.as_mut().poll(cx).is_ready() {
                    let deadline = self.last_frame + self.idle_for;
                    if tokio::time::Instant::now() >= deadline {
                        let msg = format!(
                            "no bytes from the upstream for {:?} after [DONE]; the stream was ended",
                            self.idle_for
                        );
                        return Poll::Ready(Some(Err(msg.into())));
                    }
                    self.idle.as_mut().reset(deadline);
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for TapBody {
    fn drop(&mut self) {
        if let Some(mut job) = self.job.take() {
            if self.upstream.is_end_stream() {
                // Nothing was left to send (e.g. the answer to HEAD, never polled).
                job.end_clean();
            } else {
                job.client_gone();
            }
        }
    }
}

/// A response the proxy writes itself (the request was not forwarded, or failed).
fn own_response(status: StatusCode, msg: &str, close: bool) -> Response<ProxyBody> {
    let body = format!(
        "{{\"error\":{{\"message\":{},\"type\":\"cadence_proxy\"}}}}\n",
        serde_json::Value::String(msg.to_string())
    );
    let mut r = Response::new(ProxyBody::Full(Some(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if close {
        r.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), plus the
/// ones named by `Connection`.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// Header and query values that are secrets, so any text that leaves the proxy can be
/// scrubbed of them (FAULTS 46).
pub(crate) fn secrets_of(headers: &HeaderMap, query: Option<&str>) -> Redactor {
    let mut s = Vec::new();
    for name in [
        "authorization",
        "x-api-key",
        "api-key",
        "proxy-authorization",
    ] {
        for v in headers.get_all(name) {
            if let Ok(v) = v.to_str() {
                s.push(v.trim().to_string());
                if let Some((_, token)) = v.trim().split_once(' ') {
                    s.push(token.trim().to_string());
                }
            }
        }
    }
    for pair in query.unwrap_or("").split('&') {
        if let Some((k, v)) = pair.split_once('=') {
            let k = k.to_ascii_lowercase();
            if ["key", "token", "secret", "sig", "password"]
                .iter()
                .any(|w| k.contains(w))
            {
                s.push(v.to_string());
            }
        }
    }
    Redactor::new(s)
}

#[derive(serde::Deserialize)]
struct Peek {
    model: Option<String>,
    stream: Option<bool>,
}

/// One proxied request, from the client's request to the response it is handed.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    conflicting_length: bool,
    slot: Arc<Slot>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    if let Some(refusal) = refuse_early(&shared, conflicting_length, &req) {
        return refusal.answer(&shared);
    }
    if websocket::is_upgrade(&req) {
        return websocket::handle(shared, slot.busy(), req).await;
    }
    let (parts, body) = req.into_parts();
    let route = Route::of_path(parts.uri.path());
    let measured = shared.config.measures(parts.uri.path());
    let redactor = secrets_of(&parts.headers, parts.uri.query());
    let body = match read_body(&shared, &parts.headers, body).await {
        Ok(b) => b,
        Err(refusal) => return refusal.answer(&shared),
    };
    // Sent whole: the connection is forwarding, never closed to make room, until the
    // answer is done (the job holds this).
    let busy = slot.busy();
    let (labels, asked_stream, model) = peek(&shared, measured, route, &body);
    let uri = match upstream_uri(&shared.config.upstream, &parts.uri) {
        Ok(u) => u,
        Err(refusal) => return refusal.answer(&shared),
    };
    let (mut info, client_id) = proxy_info(&parts, &redactor);
    info.model = model.map(|m| redactor.redact(cadence_wire::truncate_str(&m, 128)));
    let mut up = upstream_request(&shared.via_id, parts, uri, body);
    let mut job = Job::start(&shared, measured, labels, redactor, info, client_id);
    if let (true, Some(p)) = (measured, &shared.propagation) {
        crate::trace::continue_trace(p, up.headers_mut(), &mut job.rec);
    }
    job.busy = Some(busy);
    let response = match send(&mut job, up).await {
        Ok(r) => r,
        Err((status, msg)) => return own_response(status, &msg, false),
    };
    relay(job, response, route, asked_stream)
}

/// A request the proxy answers itself without forwarding it, counted by `reason`.
struct Refusal {
    reason: &'static str,
    status: StatusCode,
    msg: Cow<'static, str>,
}

impl Refusal {
    /// Counts the refusal and writes its answer, closing the connection after it.
    fn answer(self, shared: &Shared) -> Response<ProxyBody> {
        shared.metrics.rejected(self.reason);
        own_response(self.status, &self.msg, true)
    }
}

/// Decides whether the request is refused before its body is read: conflicting
/// lengths (a smuggling attempt), `CONNECT` (a tunnel is no inference request,
/// FAULTS 103), a path with dot segments (it would climb out of the upstream's base
/// path, FAULTS 102), or a loop back through this proxy.
fn refuse_early<B>(shared: &Shared, conflicting_length: bool, req: &Request<B>) -> Option<Refusal> {
    if conflicting_length {
        return Some(Refusal {
            reason: "conflicting_length",
            status: StatusCode::BAD_REQUEST,
            msg: "the request has both Content-Length and Transfer-Encoding".into(),
        });
    }
    if req.method() == http::Method::CONNECT {
        return Some(Refusal {
            reason: "method_not_allowed",
            status: StatusCode::METHOD_NOT_ALLOWED,
            msg: "CONNECT is not forwarded: this proxy forwards HTTP requests to its upstream only"
                .into(),
        });
    }
    if has_dot_segment(req.uri().path()) {
        return Some(Refusal {
            reason: "bad_target",
            status: StatusCode::BAD_REQUEST,
            msg: "the request path has a `.` or `..` segment".into(),
        });
    }
    passed_here(req.headers(), &shared.via_id).then(|| Refusal {
        reason: "loop",
        status: StatusCode::LOOP_DETECTED,
        msg: "request loop: this request already passed through this cadence proxy; its \
              --upstream leads back to it"
            .into(),
    })
}

/// Whether a path has a `.` or `..` segment, percent-encoded dots (`%2e`) included.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| {
        let mut rest = seg;
        let mut dots = 0;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                rest = r;
            } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case("%2e") {
                rest = &rest[3..];
            } else {
                return false;
            }
            dots += 1;
        }
        dots == 1 || dots == 2
    })
}

/// Decides whether the request body is taken: read whole within the size limit and the
/// body read timeout, into one buffer (FAULTS 97, 98), or refused as too large, too
/// slow or unreadable.
async fn read_body(shared: &Shared, headers: &HeaderMap, body: Incoming) -> Result<Bytes, Refusal> {
    let limits = &shared.config.limits;
    let limit = limits.max_request_body;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match crate::body::read(body, declared, limit, limits.body_read_timeout).await {
        Ok(b) => Ok(b),
        Err(BodyError::TooLarge) => Err(Refusal {
            reason: "body_too_large",
            status: StatusCode::PAYLOAD_TOO_LARGE,
            msg: format!("the request body is larger than {limit} bytes").into(),
        }),
        Err(BodyError::TimedOut) => Err(Refusal {
            reason: "body_timeout",
            status: StatusCode::REQUEST_TIMEOUT,
            msg: format!(
                "the request body did not arrive within {:?}",
                limits.body_read_timeout
            )
            .into(),
        }),
        Err(BodyError::Failed) => Err(Refusal {
            reason: "body_read_failed",
            status: StatusCode::BAD_REQUEST,
            msg: "the request body could not be read".into(),
        }),
    }
}

/// Decides the stream's labels (model, route), whether the client asked for a stream
/// and the model it named; only a measured route's body is parsed.
fn peek(
    shared: &Shared,
    measured: bool,
    route: Route,
    body: &[u8],
) -> (StreamLabels, bool, Option<String>) {
    let peek: Option<Peek> = if measured {
        serde_json::from_slice(body).ok()
    } else {
        None
    };
    let labels = StreamLabels {
        model: shared
            .models
            .label(peek.as_ref().and_then(|p| p.model.as_deref())),
        route: route.name().to_string(),
    };
    let asked_stream = peek.as_ref().and_then(|p| p.stream).unwrap_or(false);
    (labels, asked_stream, peek.and_then(|p| p.model))
}

/// Decides where the request goes upstream: the upstream's scheme, authority and path
/// prefix, then the client's path and query; a target that makes no URI is refused.
fn upstream_uri(upstream: &http::Uri, client: &http::Uri) -> Result<http::Uri, Refusal> {
    let prefix = upstream.path().trim_end_matches('/');
    let pq = client.path_and_query().map_or("/", |p| p.as_str());
    http::Uri::builder()
        .scheme(upstream.scheme_str().unwrap_or("http"))
        .authority(upstream.authority().map_or("", |a| a.as_str()))
        .path_and_query(format!("{prefix}{pq}"))
        .build()
        .map_err(|_| Refusal {
            reason: "bad_target",
            status: StatusCode::BAD_REQUEST,
            msg: "the request target is not valid".into(),
        })
}

/// Decides what the record says about the request line, and the client's own
/// request id (trimmed, capped, redacted), read before any header is stripped.
fn proxy_info(parts: &http::request::Parts, redactor: &Redactor) -> (ProxyInfo, Option<String>) {
    let info = ProxyInfo {
        request_id: String::new(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        ..ProxyInfo::default()
    };
    let client_id = parts
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| redactor.redact(cadence_wire::truncate_str(v.trim(), 128)));
    (info, client_id)
}

/// Decides what is sent upstream: the same method, headers and body, less the
/// hop-by-hop headers and `Host`, plus this proxy's `Via`.
fn upstream_request(
    via_id: &str,
    mut parts: http::request::Parts,
    uri: http::Uri,
    body: Bytes,
) -> Request<Full<Bytes>> {
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(http::header::HOST);
    if let Ok(v) = HeaderValue::from_str(&format!("1.1 {via_id}")) {
        parts.headers.append(http::header::VIA, v);
    }
    let mut up = Request::new(Full::new(body));
    *up.method_mut() = parts.method;
    *up.uri_mut() = uri;
    *up.headers_mut() = parts.headers;
    up
}

/// Sends the request within the header timeout, once more on a fresh connection if the
/// pooled one was stale; decides the gateway answer (status, message) when it fails.
async fn send(
    job: &mut Job,
    up: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, (StatusCode, String)> {
    let shared = job.shared.clone();
    job.rec.sent_ns = Some(shared.clock.now_ns());
    let timeout = shared.config.limits.upstream_header_timeout;
    // An upstream that closes its keep-alive connections unannounced (llama.cpp's
    // server does, after every stream) leaves a dead pooled connection: the request is
    // sent once more on a fresh one, as `bench` does, and counted.
    let sending = cadence_transport::send_resending_if_stale(&shared.client, up);
    let (response, resent) = match tokio::time::timeout(timeout, sending).await {
        Err(_) => (None, None),
        Ok((r, resent)) => (Some(r), resent),
    };
    if let Some(t) = resent {
        // As in `bench`: timings run from the send that was answered.
        job.rec.sent_ns = Some(shared.clock.ns_at(t));
        job.rec.counters.stale_connection_retries += 1;
        shared.metrics.upstream_resent();
    }
    match response {
        None => {
            let msg = format!("no response headers from the upstream within {timeout:?}");
            job.end(Outcome::HeaderTimeout, Some(msg.clone()));
            Err((StatusCode::GATEWAY_TIMEOUT, msg))
        }
        Some(Err(e)) => {
            let (outcome, msg) = cadence_transport::classify_client_error(&e);
            let msg = job.redactor.redact(&msg);
            job.end(outcome, Some(msg.clone()));
            Err((StatusCode::BAD_GATEWAY, msg))
        }
        Some(Ok(r)) => Ok(r),
    }
}

/// Hands the upstream's response to the client through the tap, once the job knows
/// how to measure its body.
fn relay(
    mut job: Job,
    response: Response<Incoming>,
    route: Route,
    asked_stream: bool,
) -> Response<ProxyBody> {
    job.rec.headers_ns = Some(job.now());
    let (mut parts, body) = response.into_parts();
    job.watch(parts.status, &parts.headers, route, asked_stream);
    strip_hop_by_hop(&mut parts.headers);
    let stamps = parts.extensions.get::<RxStamps>().cloned();
    let tap = TapBody::new(body, stamps.as_ref(), job);
    Response::from_parts(parts, ProxyBody::Tap(Box::new(tap)))
}

/// Hands the upstream's response to the client unchanged when it is not the kind of
/// answer the request asked for: the request ends as `protocol_mismatch` with `msg`,
/// whatever the body holds.
fn relay_mismatch(
    mut job: Job,
    response: Response<Incoming>,
    route: Route,
    msg: String,
) -> Response<ProxyBody> {
    job.rec.headers_ns = Some(job.now());
    let (mut parts, body) = response.into_parts();
    job.watch(parts.status, &parts.headers, route, false);
    job.tracker = None;
    job.body_copy = None;
    job.plain_outcome = Outcome::ProtocolMismatch;
    job.rec.error = Some(msg);
    strip_hop_by_hop(&mut parts.headers);
    let stamps = parts.extensions.get::<RxStamps>().cloned();
    let tap = TapBody::new(body, stamps.as_ref(), job);
    Response::from_parts(parts, ProxyBody::Tap(Box::new(tap)))
}

/// Whether the request already passed through this proxy (its `Via` names it).
fn passed_here(headers: &HeaderMap, via_id: &str) -> bool {
    headers
        .get_all(http::header::VIA)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains(via_id)))
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Counts the usage a non-streaming answer reports, as a stream's final usage would:
/// what the route's dialect reads in its whole answer (OpenAI's or Anthropic's `usage`,
/// Ollama's `eval_count`, TGI's `details`, llama.cpp's `tokens_predicted`, with the
/// server's own timing and cached prompt tokens where it gives them), else OpenAI's or
/// Anthropic's `usage` for a route of no known dialect.
fn count_plain_usage(body: &[u8], api: Option<cadence_wire::Api>, rec: &mut RequestRecord) {
    use cadence_wire::dialect::{parse_data, StreamEvent};
    use cadence_wire::Api;
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let usage =
        api.into_iter()
            .chain([Api::Chat, Api::Anthropic])
            .find_map(|api| match parse_data(api, text) {
                StreamEvent::Chunk(c) => {
                    if let Some(t) = &c.server_timing {
                        rec.counters.server_timing = Some(**t);
                    }
                    c.usage
                        .filter(|u| u.prompt_tokens.is_some() || u.completion_tokens.is_some())
                }
                _ => None,
            });
    let Some(u) = usage else {
        return;
    };
    if let Some(ct) = u.completion_tokens {
        rec.token_sources.usage = Some(ct);
        rec.output_tokens = Some(cadence_core::TokenCount {
            count: ct,
            source: cadence_core::TokenSource::Usage,
        });
    }
    if let Some(pt) = u.prompt_tokens {
        rec.input_tokens = Some(pt);
        rec.input_tokens_source = Some(cadence_core::InputTokenSource::Usage);
    }
    rec.cached_input_tokens = u.cached_prompt_tokens.or(rec.cached_input_tokens);
}

/// The tracker of one measured stream: lenient (a malformed event is counted, never
/// fatal), keeping no output text (the proxy counts no tokens of its own) and at most
/// `--max-chunks` chunks, so what a stream costs stays bounded however long it runs.
fn tracker(shared: &Shared, api: cadence_wire::Api, framing: Framing) -> StreamTracker {
    let mut tr = StreamTracker::new(TrackerConfig {
        api,
        framing,
        strict: false,
    });
    tr.discard_text();
    tr.keep_chunks(shared.config.limits.max_chunks);
    tr
}

/// Whether chunks stamped `t` hold a wait on the client: `t` is at or after the time
/// the proxy came back from one of the waits in `resumed` (oldest first), which are
/// then matched (dropped); waits it came back from later stay for later chunks.
fn takes_wait(resumed: &mut Vec<u64>, t: u64) -> bool {
    if resumed.first().is_none_or(|&r| t < r) {
        return false;
    }
    resumed.retain(|&r| r > t);
    true
}

/// One request's measurement state; finishing it (or dropping it unfinished, when the
/// client went away before the response) accounts for the request exactly once.
struct Job {
    rec: RequestRecord,
    tracker: Option<StreamTracker>,
    /// A copy of a non-streaming JSON answer (capped at 1 MiB), for its usage.
    body_copy: Option<Vec<u8>>,
    /// The route's dialect, which reads a non-streaming answer's counts.
    api: Option<cadence_wire::Api>,
    /// When the proxy came back from each wait on its client not yet matched to a
    /// chunk (ns, oldest first): the first chunk stamped at or after one of them holds
    /// the wait in its gap, and is marked as downstream back-pressure.
    resumed: Vec<u64>,
    /// An inference route: recorded. Others are only forwarded.
    measured: bool,
    labels: StreamLabels,
    redactor: Redactor,
    ended: bool,
    /// Handed over to a WebSocket session, which records each response itself.
    detached: bool,
    /// The outcome of a clean end when there is no tracker (plain or error bodies).
    plain_outcome: Outcome,
    _active: Option<ActiveGuard>,
    /// Its connection's slot, marked as forwarding while the job lives.
    busy: Option<Busy>,
    shared: Arc<Shared>,
    /// Dropped last, after the record was handed over (shutdown waits for it).
    _in_flight: Option<tokio::sync::mpsc::Sender<()>>,
}

impl Job {
    /// Opens the request's record: a measured request takes the next index and
    /// counts as an active stream; others are forwarded only.
    fn start(
        shared: &Arc<Shared>,
        measured: bool,
        labels: StreamLabels,
        redactor: Redactor,
        info: ProxyInfo,
        client_id: Option<String>,
    ) -> Job {
        let index = if measured {
            shared
                .next_index
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        } else {
            0
        };
        let mut rec = RequestRecord::new(index, Outcome::AbortedAtDeadline);
        rec.source = RecordSource::Proxy;
        rec.proxy = Some(Box::new(ProxyInfo {
            request_id: client_id.unwrap_or_else(|| format!("{}-{index}", shared.via_id)),
            ..info
        }));
        let active = measured.then(|| shared.metrics.stream_started(&labels));
        Job {
            rec,
            tracker: None,
            body_copy: None,
            api: None,
            resumed: Vec::new(),
            measured,
            labels,
            redactor,
            ended: false,
            detached: false,
            plain_outcome: Outcome::Succeeded,
            _active: active,
            busy: None,
            shared: shared.clone(),
            _in_flight: shared.in_flight_token(),
        }
    }

    /// Decides how the response body is measured: a stream tracker for a streamed
    /// answer on an inference route, a copy of a measured non-streaming JSON answer
    /// (for its usage), or, for an error status, the outcome and error it ends with.
    fn watch(&mut self, status: StatusCode, headers: &HeaderMap, route: Route, asked_stream: bool) {
        self.rec.http_status = Some(status.as_u16());
        if !status.is_success() {
            self.plain_outcome = Outcome::from_status(status.as_u16());
            self.rec.error = Some(format!("HTTP {}", status.as_u16()));
            return;
        }
        let ct = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let api = route.api();
        self.api = api;
        // TGI's whole `/generate` answer says its timing in headers (a body's own
        // timing, read at the end, comes first).
        if let Some(api) = api.filter(|_| self.measured) {
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            self.rec.counters.server_timing = cadence_wire::tgi_headers::of_answer(api, ct, header);
        }
        if let (Some(api), Some(framing)) = (api, stream_framing(ct, asked_stream)) {
            self.tracker = Some(tracker(&self.shared, api, framing));
        } else if self.measured && is_json(ct) {
            // A non-streaming answer: its usage is read at the end.
            self.body_copy = Some(Vec::new());
        }
    }

    fn now(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    /// hyper took `waited` to come back for more: the client was not taking bytes.
    fn waited_on_client(&mut self, waited: std::time::Duration) {
        if waited < DOWNSTREAM_WAIT_MIN {
            return;
        }
        if let Some(p) = self.rec.proxy.as_mut() {
            p.downstream_wait_ns = p
                .downstream_wait_ns
                .saturating_add(waited.as_nanos() as u64);
        }
        if self.resumed.len() < MAX_WAITS_PENDING {
            self.resumed.push(self.now());
        }
    }

    /// A frame stamped `t` added chunks from index `before` on: the gap before the
    /// first of them is the client's when the frame came after the proxy came back
    /// from a wait on the client. On the user clock that is the first frame after the
    /// wait. On the kernel clock, frames that had arrived during the wait (queued in
    /// the socket) keep their own gaps: the upstream sent them on time; the wait shows
    /// where the upstream, stalled by TCP flow control, could send again, after the
    /// proxy resumed reading (FAULTS: a slow client under kernel stamps).
    fn mark_downstream_gap(&mut self, before: usize, t: u64) {
        if self.rec.chunks.len() <= before || !takes_wait(&mut self.resumed, t) {
            return;
        }
        if let Some(p) = self.rec.proxy.as_mut() {
            p.downstream_gaps.push(before as u32);
        }
    }

    /// Ends with `outcome` decided by the proxy (not the stream's own ending).
    fn end(&mut self, outcome: Outcome, error: Option<String>) {
        let t = self.now();
        if let Some(tr) = self.tracker.as_mut() {
            tr.finish(t, &mut self.rec);
        }
        self.rec.end_ns = Some(t);
        self.rec.outcome = outcome;
        if let Some(e) = error {
            self.rec.error = Some(self.redactor.redact(&e));
        }
        self.ended = true;
    }

    /// The upstream body ended cleanly.
    fn end_clean(&mut self) {
        let t = self.now();
        match self.tracker.as_mut() {
            Some(tr) => tr.end_stream(t, &mut self.rec),
            None => {
                self.rec.end_ns = Some(t);
                self.rec.outcome = self.plain_outcome;
                if let Some(body) = self.body_copy.take() {
                    count_plain_usage(&body, self.api, &mut self.rec);
                }
            }
        }
        if let Some(e) = self.rec.error.take() {
            self.rec.error = Some(self.redactor.redact(&e));
        }
        self.ended = true;
    }

    /// Hands the request over to a WebSocket session once the upgrade was accepted:
    /// its record (index, request id, times so far), redactor and in-flight token.
    fn detach(
        mut self,
    ) -> (
        RequestRecord,
        Redactor,
        Option<tokio::sync::mpsc::Sender<()>>,
    ) {
        self.detached = true;
        let rec = std::mem::replace(&mut self.rec, RequestRecord::new(0, Outcome::Succeeded));
        let redactor = std::mem::replace(&mut self.redactor, Redactor::new(Vec::new()));
        (rec, redactor, self._in_flight.take())
    }

    fn client_gone(&mut self) {
        if !self.measured {
            self.ended = true;
            return;
        }
        if self.tracker.as_ref().is_some_and(StreamTracker::is_done) {
            // The stream had ended ([DONE]); the client leaving after it changes nothing.
            self.end_clean();
            return;
        }
        let when = format!("after {} chunks", self.rec.chunk_count());
        self.left_unfinished(&when);
    }

    /// The response was dropped before it ended: the client hung up, or the proxy cut
    /// the stream at shutdown once the drain timeout had passed.
    fn left_unfinished(&mut self, when: &str) {
        if self.shared.cut.load(std::sync::atomic::Ordering::Relaxed) {
            let msg = format!("the proxy shut down {when}; the stream was cut");
            self.end(Outcome::AbortedAtDeadline, Some(msg));
        } else {
            self.shared.metrics.client_disconnected();
            let msg = format!("the client disconnected {when}; the upstream request was cancelled");
            self.end(Outcome::ClientDisconnected, Some(msg));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        if !self.measured {
            // Not an inference route (`/health`, `/v1/models`, …): forwarded only.
            self.shared.metrics.unmeasured();
            return;
        }
        if !self.ended {
            // The handler was dropped before the response headers.
            self.left_unfinished("before the response headers");
        }
        let rec = std::mem::replace(&mut self.rec, RequestRecord::new(0, Outcome::Succeeded));
        // `error` was redacted when it was set; nothing else here can carry a secret.
        tracing::debug!(
            request = rec.index,
            route = %self.labels.route,
            outcome = rec.outcome.name(),
            chunks = rec.chunks.len(),
            chunks_not_kept = rec.counters.chunks_not_kept,
            error = rec.error.as_deref().unwrap_or(""),
            "cadence proxy: request finished"
        );
        self.shared.finish(rec, &self.labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_from_auth_headers_and_key_like_query_params() {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer tok-aaaa1111"),
        );
        h.insert("x-api-key", HeaderValue::from_static("xk-bbbb2222"));
        h.insert("api-key", HeaderValue::from_static("ak-cccc3333"));
        let r = secrets_of(&h, Some("a=1&key=qk-dddd4444&access_token=at-eeee5555"));
        let text = "tok-aaaa1111 xk-bbbb2222 ak-cccc3333 qk-dddd4444 at-eeee5555 a=1";
        let out = r.redact(text);
        for s in ["aaaa1111", "bbbb2222", "cccc3333", "dddd4444", "eeee5555"] {
            assert!(!out.contains(s), "{out}");
        }
        assert!(out.ends_with("a=1"));
    }

    #[test]
    fn a_wait_on_the_client_goes_to_the_first_chunk_stamped_after_it() {
        let mut resumed = vec![100, 200];
        // Queued during the waits (the kernel stamped it before the proxy came back).
        assert!(!takes_wait(&mut resumed, 50));
        assert_eq!(resumed, [100, 200]);
        // After the first wait, before the second: holds the first.
        assert!(takes_wait(&mut resumed, 150));
        assert_eq!(resumed, [200]);
        assert!(!takes_wait(&mut resumed, 199));
        // At the moment the proxy came back: holds it.
        assert!(takes_wait(&mut resumed, 200));
        assert!(resumed.is_empty());
        assert!(!takes_wait(&mut resumed, 300));
        // The user clock stamps every frame after its read: the first chunk after a
        // wait always holds it, and holds every wait before it.
        let mut resumed = vec![10, 20, 30];
        assert!(takes_wait(&mut resumed, 31));
        assert!(resumed.is_empty());
    }

    #[test]
    fn dot_segments_are_found_encoded_or_not() {
        for p in ["/..", "/../a", "/a/./b", "/a/%2E%2e/b", "/a/.%2e", "/a/%2e"] {
            assert!(has_dot_segment(p), "{p}");
        }
        for p in [
            "/",
            "/a/b",
            "/a/..b",
            "/a/.../b",
            "/a.b/c.",
            "/%2e%2e%2e",
            "/%2",
        ] {
            assert!(!has_dot_segment(p), "{p}");
        }
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, x-trace"));
        h.insert("x-trace", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }
}
