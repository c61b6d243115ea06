//! Runs one streaming request and fills its record: the timestamp of each body read is
//! taken the moment the bytes are read (under hyper: handed over), before any parsing;
//! every way a request can end (timeouts per phase, HTTP errors, resets, the run's
//! deadline) has its outcome. A WebSocket stream is one more way of running a request
//! (`ws`), with the same context, cancellation, deadlines and endings.

mod ws;

use bytes::Bytes;
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord};
use cadence_transport::{
    classify_client_error, classify_h1_error, error_chain, send_resending_if_stale,
};
use cadence_transport::{Clock, HyperClient, RxStamp, RxStamps, Stamper};
use cadence_wire::{
    stream_framing, Api, Flow, Framing, StreamText, StreamTracker, TrackerConfig, AFTER_DONE_GRACE,
};
use futures_util::task::AtomicWaker;
use http_body_util::Full;
use hyper::body::Body as _;
use hyper::body::Incoming;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// One timeout per phase, each its own outcome (FAULTS 27–30).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP (and TLS) connect; enforced by the connector.
    pub connect: Duration,
    /// From send to the response headers.
    pub header: Duration,
    /// From send to the first output chunk.
    pub first_token: Duration,
    /// Longest silence between body reads once output has started.
    pub idle: Duration,
    /// The whole request.
    pub total: Duration,
    /// The ceilings on one response's size (FAULTS 110): body bytes read
    /// (`--max-response-bytes`) and content-bearing chunks kept (`--max-chunks`). A
    /// stream past either ends `response_too_large`, its record cut at the ceiling.
    pub max_response_bytes: u64,
    /// The most content-bearing chunks kept (`--max-chunks`).
    pub max_chunks: usize,
}

/// Default `--max-response-bytes`: 256 MiB, far past any real answer.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 256 << 20;
/// Default `--max-chunks`: 262,144, twice the longest output a model offers today; a
/// record that long is about 4 MiB in memory and 6 MiB as a records line.
pub const DEFAULT_MAX_CHUNKS: usize = 1 << 18;

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            header: Duration::from_secs(60),
            first_token: Duration::from_secs(120),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(600),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_chunks: DEFAULT_MAX_CHUNKS,
        }
    }
}

/// A run-wide "stop now" signal: in-flight requests end as `aborted_at_deadline`,
/// keeping what they received.
///
/// Every request's read loop polls it once per chunk, so a poll costs two atomic loads
/// and an [`AtomicWaker`] update (a `watch` or `Notify` waiter took a shared lock on
/// every poll and on every drop); each clone registers its waker slot once.
#[derive(Debug)]
pub struct Cancel {
    shared: Arc<CancelShared>,
    waker: Arc<AtomicWaker>,
    /// This clone's slot in `shared.wakers`.
    slot: usize,
    /// The waker last registered: a poll from the same task (every poll of a read
    /// loop) need not register it again.
    registered: Option<std::task::Waker>,
}

/// Fires the [`Cancel`]s made with it: on [`send`](CancelSender::send)`(true)`, or when
/// dropped (no sender left also means stop).
#[derive(Debug)]
pub struct CancelSender(Arc<CancelShared>);

#[derive(Debug, Default)]
struct CancelShared {
    fired: AtomicBool,
    wakers: Mutex<WakerSlots>,
}

/// One slot per live `Cancel`; a dropped clone's slot is reused, so there are never
/// more than the most requests ever in flight at once.
#[derive(Debug, Default)]
struct WakerSlots {
    slots: Vec<Option<Arc<AtomicWaker>>>,
    free: Vec<usize>,
}

impl CancelShared {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        let wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        for w in wakers.slots.iter().flatten() {
            w.wake();
        }
    }

    fn register(self: &Arc<Self>) -> Cancel {
        let waker = Arc::new(AtomicWaker::new());
        let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = match wakers.free.pop() {
            Some(i) => i,
            None => {
                wakers.slots.push(None);
                wakers.slots.len() - 1
            }
        };
        wakers.slots[slot] = Some(waker.clone());
        Cancel {
            shared: self.clone(),
            waker,
            slot,
            registered: None,
        }
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let mut wakers = self
            .shared
            .wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        wakers.slots[self.slot] = None;
        wakers.free.push(self.slot);
    }
}

impl CancelSender {
    /// `true` fires the signal; `false` does nothing. Never fails (the `Result` keeps
    /// the shape of a channel's send).
    pub fn send(&self, stop: bool) -> Result<(), std::convert::Infallible> {
        if stop {
            self.0.fire();
        }
        Ok(())
    }
}

impl Drop for CancelSender {
    fn drop(&mut self) {
        self.0.fire();
    }
}

impl Clone for Cancel {
    fn clone(&self) -> Self {
        self.shared.register()
    }
}

impl Cancel {
    /// A signal and its first receiver (clone it for more).
    pub fn new() -> (CancelSender, Cancel) {
        let shared = Arc::new(CancelShared::default());
        (CancelSender(shared.clone()), shared.register())
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.shared.fired.load(Ordering::Acquire)
    }

    /// Waits until the signal fires.
    pub async fn cancelled(&mut self) {
        std::future::poll_fn(|cx| self.poll_cancelled(cx)).await
    }

    /// [`Cancel::cancelled`] as a poll.
    pub fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        // Registered once per task: the signal fires once, and the flag is read
        // before the waker is ever needed again.
        if !self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.waker.register(cx.waker());
            self.registered = Some(cx.waker().clone());
        }
        // Fired between the check and the registration: the wake may have missed us.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// What the executor needs besides the request.
pub struct ExecContext<'a> {
    /// The HTTP client the request goes through.
    pub client: &'a HyperClient,
    /// The run clock the record's times are read on.
    pub clock: &'a Clock,
    /// The request's time limits.
    pub timeouts: &'a Timeouts,
    /// The dialect the response is read in.
    pub api: Api,
    /// A malformed event fails the request instead of being counted (`--strict`).
    pub strict: bool,
    /// What secrets are masked in the record's error.
    pub redactor: &'a Redactor,
    /// The request's `max_tokens`, when it sends one: the tracker makes room for that
    /// many chunks at the first one ([`StreamTracker::expect_chunks`]).
    pub max_tokens: Option<u64>,
    /// Whether the output text is wanted (a tokenizer counts it, a later turn quotes
    /// it); without, [`execute`] gives back empty text and copies none.
    pub keep_text: bool,
    /// Whether the reply's tool calls are wanted (an agent's next step sends them back):
    /// the text then carries the tool-call events ([`StreamTracker::keep_tool_events`]).
    pub keep_tool_calls: bool,
}

/// The first bytes of a non-stream body kept for the report (FAULTS 26).
const DETAIL_BYTES: usize = 1024;

/// Sends `req` and streams its response into `rec`. `rec` arrives with identity fields
/// (index, level, worker, warm-up, scheduled) set; this sets the times, chunks, tokens,
/// status and outcome. Always returns with `rec.outcome` and `rec.end_ns` decided, and
/// gives back the output text so a tokenizer can count it after the stream.
///
/// Plain `http://` over HTTP/1.1 goes through the lean client, whose socket is read in
/// this task; HTTP/2 and TLS through hyper's pooled client.
///
/// Only the lean path's state is kept inline: the WebSocket and hyper paths are boxed,
/// so every request's task (spawned, moved and read back by the runtime) is a few KiB
/// smaller (the WebSocket exchange alone was ~5.7 KiB of a 9.4 KiB task).
pub async fn execute(
    cx: &ExecContext<'_>,
    req: http::Request<Full<Bytes>>,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
) -> StreamText {
    if cx.api == Api::Websocket {
        return Box::pin(ws::execute(cx, req, cancel, rec)).await;
    }
    let sent_at = Instant::now();
    rec.sent_ns = Some(cx.clock.ns_at(sent_at));
    let deadlines = Deadlines::new(sent_at, cx.timeouts);
    let Some(h1) = cx.client.h1_for(req.uri()) else {
        return Box::pin(execute_on_hyper(cx, req, cancel, rec, &deadlines)).await;
    };
    let sent = h1.send(&req);
    match await_headers(cx, sent, classify_h1_error, cancel, rec, &deadlines).await {
        Ok((head, body)) => {
            read_response(
                cx,
                head.status,
                &head.headers,
                body,
                cancel,
                rec,
                &deadlines,
            )
            .await
        }
        Err((outcome, msg)) => end(cx, rec, outcome, Some(msg)),
    }
}

/// [`execute`] through hyper's pooled client (HTTP/2, TLS).
async fn execute_on_hyper(
    cx: &ExecContext<'_>,
    req: http::Request<Full<Bytes>>,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
    deadlines: &Deadlines,
) -> StreamText {
    let sent = send_resending_if_stale(cx.client, req);
    let response = match await_headers(cx, sent, classify_client_error, cancel, rec, deadlines)
        .await
    {
        Ok(r) => r,
        Err((outcome, mut msg)) => {
            if cx.client.is_http2() && outcome == Outcome::TransportError {
                msg = format!("the server does not speak HTTP/2 with prior knowledge on this port (an HTTP/1.1-only server?): drop --http2 ({msg})");
            }
            return end(cx, rec, outcome, Some(msg));
        }
    };
    let (parts, body) = response.into_parts();
    let body = HyperReads {
        stamps: parts.extensions.get::<RxStamps>().cloned(),
        body,
        last: Bytes::new(),
    };
    read_response(
        cx,
        parts.status,
        &parts.headers,
        body,
        cancel,
        rec,
        deadlines,
    )
    .await
}

/// One read as the read loop sees it: when it returned (taken before any parsing), the
/// kernel's stamp of the socket read that carried it when known, and its bytes.
type Read<'a> = (Instant, Option<RxStamp>, &'a [u8]);

/// A response body as the read loop sees it: each read; `None` at the end, an error
/// chain when the connection failed. Polled, so the read loop is one state machine
/// per stream rather than a new future for every read.
trait Reads {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Read<'_>, String>>>;
    /// The connection's kernel receive stamps, when it keeps them.
    fn stamps(&self) -> Option<RxStamps>;
}

impl Reads for cadence_transport::h1::Body {
    /// Each read is decoded before the next, so its stamp is the connection's latest.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Read<'_>, String>>> {
        match std::task::ready!(self.poll_read_stamped(cx)) {
            None => Poll::Ready(None),
            Some(read) => Poll::Ready(Some(read.map_err(|e| error_chain(&e)))),
        }
    }

    fn stamps(&self) -> Option<RxStamps> {
        cadence_transport::h1::Body::stamps(self)
    }
}

/// hyper's body: one frame per HTTP chunk, timed when hyper hands it over.
struct HyperReads {
    body: Incoming,
    last: Bytes,
    stamps: Option<RxStamps>,
}

impl Reads for HyperReads {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Read<'_>, String>>> {
        loop {
            let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
            // Timestamp first: nothing may sit between the read and the clock.
            let now = Instant::now();
            let Some(frame) = frame else {
                return Poll::Ready(None);
            };
            match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => {
                        self.last = data;
                        // The frame's own read, found by the address of its bytes.
                        let stamp = self.stamps.as_ref().and_then(|s| s.stamp_for(&self.last));
                        return Poll::Ready(Some(Ok((now, stamp, &self.last))));
                    }
                    _ => {}
                },
                Err(e) => return Poll::Ready(Some(Err(error_chain(&e)))),
            }
        }
    }

    fn stamps(&self) -> Option<RxStamps> {
        self.stamps.clone()
    }
}

/// The response once its head arrived: the status and content checks, then the stream.
async fn read_response(
    cx: &ExecContext<'_>,
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: impl Reads,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
    deadlines: &Deadlines,
) -> StreamText {
    rec.headers_ns = Some(cx.clock.now_ns());
    let stamper = Stamper::new(body.stamps().as_ref(), rec);
    rec.http_status = Some(status.as_u16());

    if !status.is_success() {
        let msg = http_error_detail(status, headers, body, deadlines.header).await;
        return end(cx, rec, Outcome::from_status(status.as_u16()), Some(msg));
    }

    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    // Every answer is read as the stream measured: the bodies ask for one, and an answer
    // an `--extra-body` `"stream": false` made plain is one chunk (TTFT = E2E).
    let Some(framing) = stream_framing(content_type, true) else {
        let body = read_prefix(body, DETAIL_BYTES, Instant::now() + Duration::from_secs(2)).await;
        let msg = format!(
            "HTTP 200 with content type '{}', not a stream; body begins: {body}",
            content_type.unwrap_or("")
        );
        return end(cx, rec, Outcome::ProtocolMismatch, Some(msg));
    };
    if let Some(msg) = compressed(headers) {
        return end(cx, rec, Outcome::ProtocolMismatch, Some(msg));
    }

    let text = read_stream(cx, body, stamper, framing, cancel, rec, deadlines).await;
    // TGI's whole `/generate` answer says its timing in headers, its body nothing.
    if rec.counters.server_timing.is_none() {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        rec.counters.server_timing =
            cadence_wire::tgi_headers::of_answer(cx.api, content_type, header);
    }
    rec.head_no_later_than_first_chunk();
    if let Some(e) = rec.error.take() {
        rec.error = Some(cx.redactor.redact(&e));
    }
    text
}

/// A request's deadlines, each counted from the send and none past the total.
pub(crate) struct Deadlines {
    pub(crate) sent_at: Instant,
    pub(crate) header: Instant,
    first_token: Instant,
    pub(crate) total: Instant,
}

impl Deadlines {
    pub(crate) fn new(sent_at: Instant, timeouts: &Timeouts) -> Self {
        let total = sent_at + timeouts.total;
        Deadlines {
            sent_at,
            header: (sent_at + timeouts.header).min(total),
            first_token: (sent_at + timeouts.first_token).min(total),
            total,
        }
    }

    /// The outcome when `deadline` passes: the phase's own, or the total timeout's
    /// when the total comes first.
    pub(crate) fn outcome(&self, deadline: Instant, phase: Outcome) -> Outcome {
        if deadline == self.total {
            Outcome::TotalTimeout
        } else {
            phase
        }
    }

    /// The next deadline while streaming: first token, then the idle gap after the
    /// last read, never past the total.
    pub(crate) fn streaming(
        &self,
        has_output: bool,
        last_read: Instant,
        idle: Duration,
    ) -> (Instant, Outcome) {
        let (deadline, phase) = if has_output {
            ((last_read + idle).min(self.total), Outcome::IdleTimeout)
        } else {
            (self.first_token, Outcome::TtftTimeout)
        };
        (deadline, self.outcome(deadline, phase))
    }
}

/// Waits for `send` (which sends once more after a stale pooled connection, and says
/// when: that moves the send time) until the header deadline or the run's end. An
/// error is the outcome and its message.
async fn await_headers<T, E>(
    cx: &ExecContext<'_>,
    send: impl std::future::Future<Output = (Result<T, E>, Option<Instant>)>,
    classify: fn(&E) -> (Outcome, String),
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
    d: &Deadlines,
) -> Result<T, (Outcome, String)> {
    let (response, resent) = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err((Outcome::AbortedAtDeadline, "run ended before the response headers".into())),
        _ = sleep_until(d.header) => {
            let msg = format!("no response headers within {:?}", d.header - d.sent_at);
            return Err((d.outcome(d.header, Outcome::HeaderTimeout), msg));
        }
        r = send => r,
    };
    if let Some(t) = resent {
        rec.sent_ns = Some(cx.clock.ns_at(t));
        rec.counters.stale_connection_retries += 1;
    }
    response.map_err(|e| classify(&e))
}

/// What a non-success answer said: `HTTP 503 (Retry-After: 5): <first body bytes>`.
async fn http_error_detail(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: impl Reads,
    header_deadline: Instant,
) -> String {
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = read_prefix(
        body,
        DETAIL_BYTES,
        header_deadline.max(Instant::now() + Duration::from_secs(2)),
    )
    .await;
    let mut msg = format!("HTTP {status}");
    if let Some(ra) = retry_after {
        msg.push_str(&format!(" (Retry-After: {ra})"));
    }
    if !body.is_empty() {
        msg.push_str(": ");
        msg.push_str(&body);
    }
    msg
}

/// How a stream's read loop ended.
enum Ended {
    /// The tracker stopped the stream (a terminal failure in it).
    Stopped,
    /// The connection failed: its error chain.
    Failed(String),
    /// The body ended.
    Eof,
    /// The run ended.
    RunEnd,
    /// A deadline passed: the outcome it gives.
    Deadline(Outcome),
    /// The response passed a size ceiling ([`Timeouts::max_chunks`]).
    TooLarge,
}

/// Whether a response of `bytes` body bytes so far, and `rec`'s chunks, passed the
/// ceilings of `t` (FAULTS 110). If so `rec` is cut: its chunks (and their read delays)
/// end at the ceiling, its outcome is `response_too_large` and its error says which
/// ceiling and that the rest of the stream was not read.
pub(crate) fn past_ceiling(t: &Timeouts, rec: &mut RequestRecord, bytes: u64) -> bool {
    let why = if rec.chunks.len() > t.max_chunks {
        format!(
            "the response passed the ceiling of {} chunks a request may keep (--max-chunks): the stream was cut there, its chunk times end at the ceiling and the rest was not read",
            t.max_chunks
        )
    } else if bytes > t.max_response_bytes {
        format!(
            "the response passed the ceiling of {} bytes a request may read (--max-response-bytes): the stream was cut there and the rest was not read",
            t.max_response_bytes
        )
    } else {
        return false;
    };
    rec.chunks.truncate(t.max_chunks);
    rec.read_delays_us.truncate(t.max_chunks);
    rec.outcome = Outcome::ResponseTooLarge;
    rec.error = Some(why);
    rec.fit_chunks();
    true
}

/// Reads the stream into `rec` until it ends, a deadline passes or the run ends;
/// gives back the output text.
async fn read_stream(
    cx: &ExecContext<'_>,
    mut body: impl Reads,
    mut stamper: Stamper,
    framing: Framing,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
    d: &Deadlines,
) -> StreamText {
    let mut tracker = new_tracker(cx, framing);
    let mut p = Progress {
        last_read: Instant::now(),
        done_at: None,
        last_content: None,
        body_bytes: 0,
    };
    let timer = tokio::time::sleep_until(d.first_token);
    tokio::pin!(timer);
    // The deadline of the phase the stream is in (first token, idle, after [DONE]).
    let deadline = |has_output: bool, last_read: Instant, done_at: Option<Instant>| match done_at {
        Some(done) => ((done + AFTER_DONE_GRACE).min(d.total), Outcome::Succeeded),
        None => d.streaming(has_output, last_read, cx.timeouts.idle),
    };
    let mut phase = None;

    // One poll reads every read that is ready, then looks at the run's end and the
    // deadline: the same order as a biased select over the three, without a new future
    // for each read.
    // The timer is polled when it was armed anew (so it holds this task's waker) or
    // when its deadline may have come: a wake-up that brought a read before the
    // deadline needs no look at it (about a hundred instructions a chunk), since a
    // registered timer wakes the task itself.
    let mut armed = true;
    let ended = std::future::poll_fn(|task| {
        let mut read_here = false;
        loop {
            // The idle deadline moves with every read; re-arming the timer per chunk would
            // put a timer-wheel update on the hot path. Within a phase the deadline only
            // moves later, so it is moved earlier here when the phase changes, and later
            // only when it fires too soon (below).
            let now_in = (tracker.has_output(), p.done_at.is_some());
            if phase != Some(now_in) {
                phase = Some(now_in);
                let (due, _) = deadline(now_in.0, p.last_read, p.done_at);
                if due < timer.deadline() {
                    timer.as_mut().reset(due);
                    armed = true;
                }
            }
            match body.poll_next(task) {
                Poll::Ready(Some(Ok(read))) => {
                    read_here = true;
                    match take_read(cx, &mut tracker, &mut stamper, rec, &mut p, read) {
                        Some(ended) => return Poll::Ready(ended),
                        None => continue,
                    }
                }
                Poll::Ready(Some(Err(chain))) => return Poll::Ready(Ended::Failed(chain)),
                Poll::Ready(None) => return Poll::Ready(Ended::Eof),
                Poll::Pending => {}
            }
            if cancel.poll_cancelled(task).is_ready() {
                return Poll::Ready(Ended::RunEnd);
            }
            let look = armed || !read_here || p.last_read >= timer.deadline();
            if look && timer.as_mut().poll(task).is_ready() {
                let (due, outcome) = deadline(tracker.has_output(), p.last_read, p.done_at);
                if Instant::now() < due {
                    // Bytes arrived since the timer was armed: not idle yet.
                    timer.as_mut().reset(due);
                    armed = true;
                    continue;
                }
                return Poll::Ready(Ended::Deadline(outcome));
            }
            armed &= !look;
            return Poll::Pending;
        }
    })
    .await;
    end_read(cx, ended, &mut tracker, rec);
    // Every way out of the loop: room reserved for chunks that never came goes back.
    rec.fit_chunks();
    tracker.take_text()
}

/// What a stream's read loop keeps from one read to the next.
struct Progress {
    /// When the latest read returned.
    last_read: Instant,
    /// When `[DONE]` was read: the request then ends at EOF or after a short grace.
    done_at: Option<Instant>,
    /// The latest read that carried content: its gap to the next tells the runtime's
    /// wake-up coalescing how far apart this stream's chunks are.
    last_content: Option<Instant>,
    /// Body bytes read, for the size ceiling.
    body_bytes: u64,
}

/// One read taken in: its bytes fed to the tracker at the read's time (the kernel's
/// receive time when known), the gap noted for wake-up coalescing, the size ceiling and
/// `[DONE]` looked at. The way the stream ends when this read ends it.
#[inline]
fn take_read(
    cx: &ExecContext<'_>,
    tracker: &mut StreamTracker,
    stamper: &mut Stamper,
    rec: &mut RequestRecord,
    p: &mut Progress,
    (now, stamp, data): Read<'_>,
) -> Option<Ended> {
    p.last_read = now;
    let ft = stamper.frame_time_of(cx.clock, now, stamp, rec);
    let before = rec.chunks.len();
    let flow = tracker.feed(ft.t_ns, data, rec);
    stamper.after_feed(ft, before, rec);
    if rec.chunks.len() > before {
        let gap = p.last_content.map(|last| now - last);
        crate::coalesce::note_read(gap, rec.chunks.len() - before);
        p.last_content = Some(now);
    }
    if flow == Flow::Stop {
        rec.end_ns = Some(ft.t_ns);
        return Some(Ended::Stopped);
    }
    p.body_bytes = p.body_bytes.saturating_add(data.len() as u64);
    if p.done_at.is_none() && past_ceiling(cx.timeouts, rec, p.body_bytes) {
        rec.end_ns = Some(ft.t_ns);
        return Some(Ended::TooLarge);
    }
    if p.done_at.is_none() && tracker.is_done() {
        p.done_at = Some(now);
    }
    None
}

/// What the way a stream's read loop `ended` says about the request.
fn end_read(
    cx: &ExecContext<'_>,
    ended: Ended,
    tracker: &mut StreamTracker,
    rec: &mut RequestRecord,
) {
    match ended {
        Ended::Stopped | Ended::TooLarge => {}
        Ended::Failed(chain) => {
            tracker.end_stream(cx.clock.now_ns(), rec);
            if rec.outcome == Outcome::Truncated {
                rec.error = Some(format!("the connection ended mid-stream: {chain}"));
            }
        }
        Ended::Eof => {
            tracker.end_stream(cx.clock.now_ns(), rec);
            if rec.outcome == Outcome::Truncated && rec.error.is_none() {
                rec.error = Some("the stream ended without [DONE] or a finish reason".into());
            }
        }
        Ended::RunEnd => stop_at_run_end(cx, tracker, rec),
        Ended::Deadline(outcome) => stop_at_deadline(cx, tracker, rec, outcome),
    }
}

/// The tracker for one response, told how many chunks the request allows.
pub(crate) fn new_tracker(cx: &ExecContext<'_>, framing: Framing) -> StreamTracker {
    let mut tracker = StreamTracker::new(TrackerConfig {
        api: cx.api,
        framing,
        strict: cx.strict,
    });
    if let Some(n) = cx.max_tokens {
        tracker.expect_chunks(u32::try_from(n).unwrap_or(u32::MAX));
    }
    if !cx.keep_text {
        tracker.discard_text();
    }
    if cx.keep_tool_calls {
        tracker.keep_tool_events();
    }
    tracker
}

/// The run ended while the stream was in flight: aborted, unless it had said [DONE].
pub(crate) fn stop_at_run_end(
    cx: &ExecContext<'_>,
    tracker: &mut StreamTracker,
    rec: &mut RequestRecord,
) {
    let t = cx.clock.now_ns();
    if tracker.is_done() {
        tracker.end_stream(t, rec);
    } else {
        rec.outcome = Outcome::AbortedAtDeadline;
        rec.end_ns = Some(t);
        rec.error = Some("run ended while the stream was in flight".into());
    }
}

/// A deadline passed mid-stream: `outcome` (TTFT, idle or total timeout), unless the
/// stream had said [DONE].
pub(crate) fn stop_at_deadline(
    cx: &ExecContext<'_>,
    tracker: &mut StreamTracker,
    rec: &mut RequestRecord,
    outcome: Outcome,
) {
    let t = cx.clock.now_ns();
    if tracker.is_done() {
        // The stream said [DONE] but the connection stayed open: done is done.
        tracker.end_stream(t, rec);
    } else {
        rec.outcome = outcome;
        rec.end_ns = Some(t);
        rec.error = Some(match outcome {
            Outcome::TtftTimeout => format!(
                "no output token within {:?} of sending",
                cx.timeouts.first_token
            ),
            Outcome::IdleTimeout => {
                format!("no bytes for {:?} after output started", cx.timeouts.idle)
            }
            _ => format!(
                "request exceeded the total timeout of {:?}",
                cx.timeouts.total
            ),
        });
    }
}

pub(crate) fn end(
    cx: &ExecContext<'_>,
    rec: &mut RequestRecord,
    outcome: Outcome,
    error: Option<String>,
) -> StreamText {
    rec.outcome = outcome;
    rec.end_ns = Some(cx.clock.now_ns());
    rec.error = error.map(|e| cx.redactor.redact(&e));
    StreamText::default()
}

/// Reads at most `limit` bytes of a body (lossy UTF-8), giving up at `deadline`.
async fn read_prefix(mut body: impl Reads, limit: usize, deadline: Instant) -> String {
    let mut buf = Vec::new();
    let read = std::future::poll_fn(|cx| {
        while buf.len() < limit {
            match std::task::ready!(body.poll_next(cx)) {
                Some(Ok((_, _, data))) => buf.extend_from_slice(data),
                _ => break,
            }
        }
        Poll::Ready(())
    });
    let _ = tokio::time::timeout_at(deadline, read).await;
    buf.truncate(limit);
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// Why a compressed stream cannot be read, when the response is one: Cadence asks for
/// none, times the bytes as they arrive, and would read compressed bytes as no events.
fn compressed(headers: &http::HeaderMap) -> Option<String> {
    let enc = headers.get(http::header::CONTENT_ENCODING)?.to_str().ok()?;
    let enc = enc.trim().to_ascii_lowercase();
    (!enc.is_empty() && enc != "identity").then(|| {
        format!(
            "the server compressed the stream (content-encoding: {enc}) though none was asked for: chunk times would be those of compressed blocks; turn compression off for event streams on the server or the proxy in front of it"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_wakes_a_waiting_clone_and_a_dropped_sender_cancels() {
        let (tx, cancel) = Cancel::new();
        let mut waiting = cancel.clone();
        let task = tokio::spawn(async move {
            waiting.cancelled().await;
            waiting.is_cancelled()
        });
        tokio::task::yield_now().await;
        assert!(!cancel.is_cancelled());
        tx.send(false).unwrap();
        assert!(!cancel.is_cancelled());
        tx.send(true).unwrap();
        assert!(task.await.unwrap());
        assert!(cancel.clone().is_cancelled(), "a later clone sees it too");

        let (tx, mut cancel) = Cancel::new();
        // Dropped clones give their waker slot back.
        for _ in 0..3 {
            drop(cancel.clone());
        }
        assert_eq!(cancel.shared.wakers.lock().unwrap().slots.len(), 2);
        drop(tx);
        cancel.cancelled().await;
    }
}
