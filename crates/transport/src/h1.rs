//! A lean HTTP/1.1 client for plain `http://` streams, read in the request's own task:
//! no connection task, no channel between it and the request, one socket read per
//! readiness and its time taken before any decoding. hyper's pooled client spawns a
//! task per connection and hands each body frame across to the request's task, which
//! costs more CPU per chunk than everything else the load generator does (BENCHMARKS,
//! "CPU per chunk"). HTTP/2 and TLS stay on hyper ([`crate::client`]).

mod replay;

pub use replay::{read_response, ReadResponse};

use crate::rxstamp::{RxStamp, RxStamps, StampedTcp, Timestamps};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::Full;
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The socket a connection reads: the one type to swap for an IO wrapper (say, one
/// that keeps kernel receive times), together with [`connect`].
pub type Stream = StampedTcp;

/// Opens a connection to `host:port` within `timeout`: the one place connections are
/// made. Every address the name resolves to is tried in turn.
pub async fn connect(
    host: &str,
    port: u16,
    timeout: Duration,
    timestamps: Timestamps,
) -> Result<Stream, H1Error> {
    let dial = async {
        let addrs = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| H1Error::new(Kind::Dns, e))?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    s.set_nodelay(true)
                        .map_err(|e| H1Error::new(Kind::Connect, e))?;
                    return Ok(StampedTcp::handing_over(s, timestamps));
                }
                Err(e) => last = e,
            }
        }
        Err(H1Error::new(Kind::Connect, last))
    };
    match tokio::time::timeout(timeout, dial).await {
        Ok(r) => r,
        Err(_) => Err(H1Error::new(
            Kind::Connect,
            io::Error::new(io::ErrorKind::TimedOut, "connection timed out"),
        )),
    }
}

/// What failed, for the outcome class and the stale-connection rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dns,
    Connect,
    /// The connection closed (EOF, reset, broken pipe) before any response byte.
    ClosedBeforeResponse,
    /// The connection closed mid-body.
    ClosedMidBody,
    Io,
    /// The server's bytes are not HTTP/1.1 as this client reads it.
    Parse,
}

/// An error of the lean client, with its cause as `source()` (for the error chain).
#[derive(Debug)]
pub struct H1Error {
    kind: Kind,
    cause: io::Error,
}

impl H1Error {
    fn new(kind: Kind, cause: io::Error) -> Self {
        H1Error { kind, cause }
    }

    fn parse(what: &str) -> Self {
        H1Error::new(
            Kind::Parse,
            io::Error::new(io::ErrorKind::InvalidData, what),
        )
    }

    /// A failure to open the connection (name, refusal, timeout), before any byte was sent.
    pub fn is_connect(&self) -> bool {
        matches!(self.kind, Kind::Dns | Kind::Connect)
    }

    /// The connection closed before any response byte arrived.
    pub fn is_closed_before_response(&self) -> bool {
        self.kind == Kind::ClosedBeforeResponse
    }
}

impl fmt::Display for H1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Dns => "dns error",
            Kind::Connect => "tcp connect error",
            Kind::ClosedBeforeResponse => "connection closed before message completed",
            Kind::ClosedMidBody => "connection closed before the body was complete",
            Kind::Io => "connection error",
            Kind::Parse => "invalid HTTP/1.1 response",
        })
    }
}

impl std::error::Error for H1Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// An io error as a closed connection when it is one (reset, broken pipe, abort).
fn closed_or(kind_if_closed: Kind, e: io::Error) -> H1Error {
    use io::ErrorKind::*;
    match e.kind() {
        ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof => {
            H1Error::new(kind_if_closed, e)
        }
        _ => H1Error::new(Kind::Io, e),
    }
}

/// How long an idle connection is kept (hyper's pool used the same).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// A connection's read buffer (hyper's first read buffer is the same size).
const READ_BUF: usize = 8 * 1024;
/// The most a response head may take.
const MAX_HEAD: usize = 64 * 1024;
/// The most headers a response head may carry.
const MAX_HEADERS: usize = 100;

/// One keep-alive connection and its read buffer.
struct Conn {
    io: Stream,
    /// `host:port`, to match idle connections to requests.
    key: String,
    /// The read buffer; `buf[..len]` holds bytes read and not yet used.
    buf: Vec<u8>,
    len: usize,
    idle_since: Instant,
}

impl Conn {
    /// Whether an idle connection still looks open (see [`StampedTcp::idle_looks_open`]).
    fn looks_open(&mut self) -> bool {
        self.io.idle_looks_open()
    }
}

/// Idle keep-alive connections, shared by every request of a run (closed and open
/// loop alike), at most `max_idle` kept: the run's concurrency.
#[derive(Debug)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    idle: Mutex<Vec<Conn>>,
    max_idle: usize,
    connect_timeout: Duration,
    timestamps: Timestamps,
}

impl fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolInner")
            .field("max_idle", &self.max_idle)
            .finish_non_exhaustive()
    }
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        Pool {
            inner: self.inner.clone(),
        }
    }
}

impl PoolInner {
    fn checkout(&self, key: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some(i) = idle.iter().rposition(|c| c.key == key) {
            let mut conn = idle.swap_remove(i);
            if now.duration_since(conn.idle_since) < IDLE_TIMEOUT && conn.looks_open() {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }
}

/// A response's status and headers.
#[derive(Debug)]
pub struct Head {
    /// The response's HTTP status.
    pub status: StatusCode,
    /// The response's headers, as received.
    pub headers: HeaderMap,
}

/// What a send gave: the response (or why not) and, after a stale pooled connection,
/// when the request was sent again.
pub type Sent = (Result<(Head, Body), H1Error>, Option<Instant>);

impl Pool {
    /// A pool keeping at most `max_idle` idle connections.
    pub fn new(max_idle: usize, connect_timeout: Duration) -> Self {
        Self::with_timestamps(max_idle, connect_timeout, Timestamps::default())
    }

    /// A pool whose connections stamp their reads as `timestamps` says.
    pub fn with_timestamps(
        max_idle: usize,
        connect_timeout: Duration,
        timestamps: Timestamps,
    ) -> Self {
        Pool {
            inner: Arc::new(PoolInner {
                idle: Mutex::new(Vec::new()),
                max_idle,
                connect_timeout,
                timestamps,
            }),
        }
    }

    /// Sends `req` and reads the response head, on an idle keep-alive connection when
    /// there is one. The same rule as [`crate::send_resending_if_stale`]: a reused
    /// connection the server closed before any response byte means the request never
    /// reached it, so it goes once more on a connection opened for it (never pooled
    /// afterwards); a fresh connection that closes the same way ends the request.
    pub async fn send(&self, req: &http::Request<Full<Bytes>>) -> Sent {
        let Some(host) = req.uri().host() else {
            return (Err(H1Error::parse("the URL has no host")), None);
        };
        // An IPv6 literal comes bracketed in the URL, not in a socket address.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = req.uri().port_u16().unwrap_or(80);
        let key = format!("{host}:{port}");
        let bytes = request_bytes(req);
        if let Some(conn) = self.inner.checkout(&key) {
            match self.exchange(conn, &bytes, true).await {
                Err(e) if e.is_closed_before_response() => {}
                r => return (r, None),
            }
            let resent = Instant::now();
            let r = match connect(
                host,
                port,
                self.inner.connect_timeout,
                self.inner.timestamps,
            )
            .await
            {
                Ok(io) => self.exchange(Conn::new(io, key), &bytes, false).await,
                Err(e) => Err(e),
            };
            return (r, Some(resent));
        }
        let r = match connect(
            host,
            port,
            self.inner.connect_timeout,
            self.inner.timestamps,
        )
        .await
        {
            Ok(io) => self.exchange(Conn::new(io, key), &bytes, true).await,
            Err(e) => Err(e),
        };
        (r, None)
    }

    /// Writes the request on `conn` and reads the response head.
    async fn exchange(
        &self,
        mut conn: Conn,
        request: &[u8],
        poolable: bool,
    ) -> Result<(Head, Body), H1Error> {
        conn.io
            .write_all(request)
            .await
            .map_err(|e| closed_or(Kind::ClosedBeforeResponse, e))?;
        let (head, framing, keep_alive, consumed, read_at) = read_head(&mut conn).await?;
        conn.consume(consumed);
        let decoder = Decoder::new(framing);
        let leftover = (conn.len > 0).then_some(read_at);
        Ok((
            head,
            Body {
                conn: Some(conn),
                decoder,
                pool: (poolable && keep_alive).then(|| self.inner.clone()),
                leftover,
                decoded: 0,
            },
        ))
    }
}

impl Conn {
    fn new(io: Stream, key: String) -> Self {
        Conn {
            io,
            key,
            buf: vec![0; READ_BUF],
            len: 0,
            idle_since: Instant::now(),
        }
    }

    /// One socket read appended to the buffered bytes: the byte count (0 at EOF).
    async fn read_more(&mut self) -> io::Result<usize> {
        poll_fn(|cx| self.poll_read_more(cx)).await
    }

    /// [`Conn::read_more`] as a poll.
    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.len() - self.len < READ_BUF / 2 {
            self.buf.resize(self.buf.len() + READ_BUF, 0);
        }
        let mut rb = ReadBuf::new(&mut self.buf[self.len..]);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        self.len += n;
        Poll::Ready(Ok(n))
    }

    /// The bytes read and not yet used.
    fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Drops the first `n` buffered bytes.
    fn consume(&mut self, n: usize) {
        if n < self.len {
            self.buf.copy_within(n..self.len, 0);
        }
        self.len -= n;
    }
}

/// The request as HTTP/1.1 bytes: request line, `host`, its headers, `content-length`
/// and the body.
fn request_bytes(req: &http::Request<Full<Bytes>>) -> Vec<u8> {
    let body = full_bytes(req.body());
    let mut out = Vec::with_capacity(256 + body.len());
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !req.headers().contains_key(http::header::HOST) {
        if let Some(authority) = req.uri().authority() {
            out.extend_from_slice(b"host: ");
            out.extend_from_slice(authority.as_str().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    for (name, value) in req.headers() {
        if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || !matches!(*req.method(), http::Method::GET | http::Method::HEAD) {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    out
}

/// The bytes of a `Full` body (it is ready at once).
fn full_bytes(body: &Full<Bytes>) -> Bytes {
    use hyper::body::Body as _;
    let mut body = body.clone();
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Chunked,
    Length(u64),
    /// At EOF (no length, not chunked): the connection cannot be reused.
    Close,
}

/// A parsed head: the head, its framing, whether the connection stays open after it,
/// the bytes it took in the buffer and when its last read arrived.
type ParsedHead = (Head, Framing, bool, usize, Instant);

/// Reads until a final (non-1xx) response head is in `conn.buf`, and parses it.
async fn read_head(conn: &mut Conn) -> Result<ParsedHead, H1Error> {
    let mut read_at = Instant::now();
    let mut got_any = false;
    loop {
        if conn.len > 0 {
            match head_step(conn.data())? {
                HeadStep::Interim(n) => {
                    conn.consume(n);
                    continue;
                }
                HeadStep::Final(head, framing, keep_alive, n) => {
                    return Ok((head, framing, keep_alive, n, read_at))
                }
                HeadStep::Partial => {}
            }
        }
        let kind = if got_any {
            Kind::ClosedMidBody
        } else {
            Kind::ClosedBeforeResponse
        };
        let n = conn.read_more().await.map_err(|e| closed_or(kind, e))?;
        if n == 0 {
            return Err(H1Error::new(
                kind,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ),
            ));
        }
        got_any = true;
        read_at = Instant::now();
    }
}

/// What the bytes read so far hold of a response head.
enum HeadStep {
    /// An interim (1xx) response of this many bytes: the final one follows.
    Interim(usize),
    /// The final head, its framing, whether the connection stays open, its bytes.
    Final(Head, Framing, bool, usize),
    /// Not all of the head yet (and under [`MAX_HEAD`]).
    Partial,
}

/// Parses the head at the start of `data` (the bytes read so far).
fn head_step(data: &[u8]) -> Result<HeadStep, H1Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(data) {
        Ok(httparse::Status::Complete(n)) => {
            let code = resp.code.unwrap_or(0);
            if (100..200).contains(&code) && code != 101 {
                return Ok(HeadStep::Interim(n));
            }
            let (head, framing, keep_alive) = head_of(&resp)?;
            Ok(HeadStep::Final(head, framing, keep_alive, n))
        }
        Ok(httparse::Status::Partial) if data.len() < MAX_HEAD => Ok(HeadStep::Partial),
        Ok(httparse::Status::Partial) => Err(H1Error::parse("response head over 64 KiB")),
        Err(e) => Err(H1Error::parse(&format!("response head: {e}"))),
    }
}

/// The head's status and headers, how its body is framed and whether the connection
/// may carry another request after it.
fn head_of(resp: &httparse::Response<'_, '_>) -> Result<(Head, Framing, bool), H1Error> {
    let status = StatusCode::from_u16(resp.code.unwrap_or(0))
        .map_err(|_| H1Error::parse("status code out of range"))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| H1Error::parse("invalid header name"))?;
        let value =
            HeaderValue::from_bytes(h.value).map_err(|_| H1Error::parse("invalid header value"))?;
        headers.append(name, value);
    }
    let has_token = |name: http::header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    let close = has_token(http::header::CONNECTION, "close");
    let http11 = resp.version == Some(1);
    let keep_alive = if http11 {
        !close
    } else {
        has_token(http::header::CONNECTION, "keep-alive")
    };
    let framing = if matches!(status.as_u16(), 204 | 304) {
        Framing::Length(0)
    } else if has_token(http::header::TRANSFER_ENCODING, "chunked") {
        Framing::Chunked
    } else if let Some(v) = headers.get(http::header::CONTENT_LENGTH) {
        let n = v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| H1Error::parse("invalid content-length"))?;
        Framing::Length(n)
    } else {
        Framing::Close
    };
    let keep_alive = keep_alive && framing != Framing::Close;
    Ok((Head { status, headers }, framing, keep_alive))
}

/// One read of a body: when the read returned, the kernel's stamp of it when known,
/// and its payload (framing taken off).
pub type StampedRead<'a> = (Instant, Option<RxStamp>, &'a [u8]);

/// A decoded read: when it returned and where its payload lies in the read buffer.
type DecodedRead = (Instant, Range<usize>);

/// A response body, read in the caller's task. Its connection goes back to the pool
/// when the body was read to its end and the connection may carry another request;
/// dropped before, it closes.
pub struct Body {
    conn: Option<Conn>,
    decoder: Decoder,
    pool: Option<Arc<PoolInner>>,
    /// Body bytes that came in the head's last read, and when.
    leftover: Option<Instant>,
    /// The buffered bytes the last read's decoding used: its payload was handed out
    /// in place, so they are dropped only when the next read is asked for.
    decoded: usize,
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Body")
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl Body {
    /// The kernel receive stamps of the connection's reads (none once it is gone).
    pub fn stamps(&self) -> Option<RxStamps> {
        self.conn.as_ref().map(|c| c.io.stamps())
    }

    /// The body bytes of the next socket read (framing taken off) and when the read
    /// returned, taken before any decoding; `None` at the end of the body. A read that
    /// carried only framing gives nothing and is not reported.
    pub async fn read(&mut self) -> Option<Result<(Instant, &[u8]), H1Error>> {
        let next = poll_fn(|cx| self.poll_next_range(cx)).await;
        Some(next?.map(|(t, out)| {
            let (t, _, data) = self.payload(t, out);
            (t, data)
        }))
    }

    /// As [`Body::read`], polled (a read loop that polls the body itself is one state
    /// machine per stream, not a future per read), with the kernel's stamp of the
    /// socket read the bytes came from (the latest read: each read is decoded before
    /// the next), when it had one.
    pub fn poll_read_stamped(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<StampedRead<'_>, H1Error>>> {
        match std::task::ready!(self.poll_next_range(cx)) {
            None => Poll::Ready(None),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            Some(Ok((t, out))) => Poll::Ready(Some(Ok(self.payload(t, out)))),
        }
    }

    /// A decoded read's time, stamp and payload (`out`, in the connection's buffer).
    fn payload(&self, t: Instant, out: Range<usize>) -> StampedRead<'_> {
        let conn = self
            .conn
            .as_ref()
            .expect("a payload is handed out from a live connection");
        (t, conn.io.latest_stamp(), &conn.buf[out])
    }

    /// The next read that carried payload: when it returned and where its payload lies
    /// in the connection's buffer. Nothing is held across `Pending` but the connection
    /// and the decoder, so polling again picks up where it left off.
    fn poll_next_range(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<DecodedRead, H1Error>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            conn.consume(std::mem::take(&mut self.decoded));
            let t = match self.leftover.take() {
                Some(t) => t,
                None => {
                    if self.decoder.is_done() {
                        self.finish();
                        return Poll::Ready(None);
                    }
                    match std::task::ready!(conn.poll_read_more(cx)) {
                        Ok(0) if self.decoder.framing == Framing::Close => {
                            self.conn = None;
                            return Poll::Ready(None);
                        }
                        Ok(0) => {
                            self.conn = None;
                            return Poll::Ready(Some(Err(H1Error::new(
                                Kind::ClosedMidBody,
                                io::Error::new(
                                    io::ErrorKind::UnexpectedEof,
                                    "end of file before the message length was reached",
                                ),
                            ))));
                        }
                        // The read's own time when the socket took it, else now.
                        Ok(_) => conn.io.read_at().unwrap_or_else(Instant::now),
                        Err(e) => {
                            self.conn = None;
                            return Poll::Ready(Some(Err(closed_or(Kind::ClosedMidBody, e))));
                        }
                    }
                }
            };
            // The payload is decoded in place, in the connection's buffer, where the
            // socket read just put it: no copy, no second buffer to bring into cache.
            let mut out = 0..0;
            let used = match self.decoder.decode(&mut conn.buf[..conn.len], &mut out) {
                Ok(used) => used,
                Err(e) => {
                    self.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            if !out.is_empty() {
                self.decoded = used;
                return Poll::Ready(Some(Ok((t, out))));
            }
            conn.consume(used);
        }
    }

    /// The body ended: the connection goes back to the pool when it may.
    fn finish(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // Bytes past the end of the body: nothing this client asked for.
        if let (Some(pool), 0) = (self.pool.take(), conn.len) {
            pool.put_back(conn);
        }
    }
}

/// Takes the framing off a body's bytes, across reads.
#[derive(Debug)]
struct Decoder {
    framing: Framing,
    state: Chunk,
}

/// Where in the chunked framing the decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line (the value so far, whether a digit was seen, in an extension).
    Size(u64, bool, bool),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// In the trailer section (whether the current line is empty so far).
    Trailer(bool),
    TrailerLf(bool),
    Done,
}

impl Decoder {
    fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Chunked => Chunk::Size(0, false, false),
            Framing::Length(0) => Chunk::Done,
            Framing::Length(n) => Chunk::Data(n),
            Framing::Close => Chunk::Data(u64::MAX),
        };
        Decoder { framing, state }
    }

    fn is_done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Decodes what it can of `input` in place: the payload ends up in `input[out]`
    /// (the first piece where it was read, later pieces moved down over the framing
    /// between them), `out` kept up to date even when an error follows. Gives the bytes
    /// it used: all of them unless the body ended inside `input`; `out` lies within them.
    fn decode(&mut self, input: &mut [u8], out: &mut Range<usize>) -> Result<usize, H1Error> {
        let chunked = self.framing == Framing::Chunked;
        let mut i = 0;
        while i < input.len() {
            // The common shapes in one step each: a whole plain size line, and the CRLF
            // after a chunk's data. Anything else (an extension, whitespace, a line
            // split across reads, a bad byte) goes byte by byte below, as before.
            match self.state {
                Chunk::Size(0, false, false) => {
                    if let Some((v, used)) = plain_size_line(&input[i..]) {
                        i += used;
                        self.state = if v == 0 {
                            Chunk::Trailer(true)
                        } else {
                            Chunk::Data(v)
                        };
                        continue;
                    }
                }
                Chunk::DataCr if input[i..].starts_with(b"\r\n") => {
                    i += 2;
                    self.state = Chunk::Size(0, false, false);
                    continue;
                }
                _ => {}
            }
            let b = input[i];
            self.state = match self.state {
                Chunk::Done => return Ok(i),
                Chunk::Data(n) => {
                    let take = (input.len() - i).min(usize::try_from(n).unwrap_or(usize::MAX));
                    if out.start == out.end {
                        *out = i..i + take;
                    } else {
                        if out.end != i {
                            input.copy_within(i..i + take, out.end);
                        }
                        out.end += take;
                    }
                    i += take;
                    let left = n - take as u64;
                    self.state = match (left, chunked) {
                        (0, true) => Chunk::DataCr,
                        (0, false) => Chunk::Done,
                        _ => Chunk::Data(left),
                    };
                    continue;
                }
                Chunk::Size(v, digits, ext) => match b {
                    b'\r' if digits => Chunk::SizeLf(v),
                    _ if ext => Chunk::Size(v, digits, ext),
                    b';' if digits => Chunk::Size(v, digits, true),
                    b' ' | b'\t' if digits => Chunk::Size(v, digits, ext),
                    _ => {
                        let d = (b as char)
                            .to_digit(16)
                            .ok_or_else(|| H1Error::parse("invalid chunk size"))?;
                        let v = v
                            .checked_mul(16)
                            .map(|v| v + u64::from(d))
                            .ok_or_else(|| H1Error::parse("chunk size overflows"))?;
                        Chunk::Size(v, true, false)
                    }
                },
                Chunk::SizeLf(v) => match (b, v) {
                    (b'\n', 0) => Chunk::Trailer(true),
                    (b'\n', v) => Chunk::Data(v),
                    _ => return Err(H1Error::parse("invalid chunk size line")),
                },
                Chunk::DataCr if b == b'\r' => Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => Chunk::Size(0, false, false),
                Chunk::DataCr | Chunk::DataLf => {
                    return Err(H1Error::parse("chunk data not followed by CRLF"))
                }
                Chunk::Trailer(empty) if b == b'\r' => Chunk::TrailerLf(empty),
                Chunk::Trailer(_) => Chunk::Trailer(false),
                Chunk::TrailerLf(true) if b == b'\n' => Chunk::Done,
                Chunk::TrailerLf(false) if b == b'\n' => Chunk::Trailer(true),
                Chunk::TrailerLf(_) => return Err(H1Error::parse("invalid trailer line")),
            };
            i += 1;
        }
        Ok(i)
    }
}

/// A whole chunk-size line of hex digits and nothing else (`1a\r\n`) at the start of
/// `input`: its value and length. `None` when the line is anything else or not all
/// here; at most 15 digits, so the value cannot overflow.
fn plain_size_line(input: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in input.iter().enumerate().take(16) {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            b'\r' if i > 0 => {
                return (input.get(i + 1) == Some(&b'\n')).then_some((v, i + 2));
            }
            _ => return None,
        };
        v = v << 4 | u64::from(d);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` (in place, in a copy) and appends what it gave to `out`, even
    /// when it fails.
    fn decode_into(d: &mut Decoder, input: &[u8], out: &mut Vec<u8>) -> Result<usize, H1Error> {
        let mut buf = input.to_vec();
        let mut range = 0..0;
        let used = d.decode(&mut buf, &mut range);
        if let Ok(used) = used {
            assert!(range.end <= used, "the payload lies within the bytes used");
        }
        out.extend_from_slice(&buf[range]);
        used
    }

    fn decode_all(framing: Framing, parts: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut d = Decoder::new(framing);
        let mut out = Vec::new();
        for p in parts {
            let used = decode_into(&mut d, p, &mut out).unwrap();
            assert_eq!(used, p.len(), "{p:?}");
        }
        (out, d.is_done())
    }

    #[test]
    fn chunked_bodies_decode_across_any_split() {
        let body = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-t: 1\r\n\r\n";
        for cut in 0..body.len() {
            let (a, b) = body.split_at(cut);
            let (out, done) = decode_all(Framing::Chunked, &[a, b]);
            assert_eq!(out, b"hello, world", "cut at {cut}");
            assert!(done, "cut at {cut}");
        }
        let (out, done) = decode_all(Framing::Chunked, &[b"A\r\n0123456789\r\n"]);
        assert_eq!(out, b"0123456789");
        assert!(!done, "no last chunk yet");
    }

    /// What decoding `body` delivered in reads of the given lengths (the rest in one
    /// last read) gives, as the body's read loop drives it: the decoded bytes, the
    /// error's message, whether the body ended and the bytes left past its end.
    fn decode_reads(body: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<String>, bool, Vec<u8>) {
        let mut d = Decoder::new(Framing::Chunked);
        let (mut out, mut buf, mut at) = (Vec::new(), Vec::new(), 0);
        for end in cuts.iter().copied().chain([body.len()]) {
            buf.extend_from_slice(&body[at..end]);
            at = end;
            match decode_into(&mut d, &buf, &mut out) {
                Ok(used) => drop(buf.drain(..used)),
                // The connection is dropped: what is left in it does not matter.
                Err(e) => return (out, Some(e.cause.to_string()), d.is_done(), Vec::new()),
            }
        }
        (out, None, d.is_done(), buf)
    }

    /// Every body decodes the same whole, byte by byte (the old path: no whole line is
    /// ever in one read), and split once or twice at every offset.
    #[test]
    fn whole_size_lines_decode_as_byte_by_byte_at_every_split() {
        let bodies: [&[u8]; 14] = [
            b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
            b"5;ext=1\r\nhello\r\n7 \r\n, world\r\n0\r\nx-t: 1\r\n\r\nrest",
            b"00a\r\n0123456789\r\nA\r\n0123456789\r\n000\r\n\r\n",
            b"1F\r\ndata: {\"x\":1}\r\n\r\ndata: [DONE]\r\n\r\n0\r\n\r\n",
            b"fffffffffffffff\r\nab",
            b"ffffffffffffffff\r\nab",
            b"10000000000000000\r\nab",
            b"zz\r\n",
            b"\r\n",
            b"5\rhello",
            b"2\r\nabX\r\n",
            b"2\r\nab\rX",
            b"2\r\nab\r\n;x\r\n",
            b"0\r\nx\rY\r\n",
        ];
        for body in bodies {
            let byte_by_byte: Vec<usize> = (1..body.len()).collect();
            let want = decode_reads(body, &byte_by_byte);
            assert_eq!(decode_reads(body, &[]), want, "{body:?} whole");
            for a in 0..=body.len() {
                assert_eq!(decode_reads(body, &[a]), want, "{body:?} cut at {a}");
                for b in a..=body.len() {
                    assert_eq!(
                        decode_reads(body, &[a, b]),
                        want,
                        "{body:?} cut at {a}, {b}"
                    );
                }
            }
        }
        // What the byte-by-byte path gives for some of them, by hand.
        let (out, err, done, rest) = decode_reads(bodies[1], &[]);
        assert_eq!(
            (out.as_slice(), err, done, rest.as_slice()),
            (&b"hello, world"[..], None, true, &b"rest"[..])
        );
        let (out, err, done, _) = decode_reads(bodies[4], &[]);
        assert_eq!((out.as_slice(), err, done), (&b"ab"[..], None, false));
        let (_, err, _, _) = decode_reads(bodies[6], &[]);
        assert_eq!(err.as_deref(), Some("chunk size overflows"));
        let (_, err, _, _) = decode_reads(bodies[9], &[]);
        assert_eq!(err.as_deref(), Some("invalid chunk size line"));
        let (out, err, _, _) = decode_reads(bodies[11], &[]);
        assert_eq!(
            (out.as_slice(), err.as_deref()),
            (&b"ab"[..], Some("chunk data not followed by CRLF"))
        );
        let (_, err, _, _) = decode_reads(bodies[12], &[]);
        assert_eq!(err.as_deref(), Some("invalid chunk size"));
    }

    #[test]
    fn bad_chunked_framing_is_an_error_and_lengths_end_where_they_say() {
        let mut out = Vec::new();
        assert!(decode_into(&mut Decoder::new(Framing::Chunked), b"zz\r\n", &mut out).is_err());
        assert!(decode_into(&mut Decoder::new(Framing::Chunked), b"2\r\nabX", &mut out).is_err());
        let mut d = Decoder::new(Framing::Length(3));
        out.clear();
        assert_eq!(decode_into(&mut d, b"abcdef", &mut out).unwrap(), 3);
        assert_eq!(out, b"abc");
        assert!(d.is_done());
    }
}
