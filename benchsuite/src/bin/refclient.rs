//! The floor for a streaming client's CPU per chunk: plain tokio, one task per stream,
//! a raw `TcpStream` (`connect`, `write`, `epoll_wait` and one `read` per readiness, as
//! hyper reads; `--kernel-stamps on` reads with `recvmsg` as Cadence's default does), the same chat request Cadence sends (built
//! by Cadence's own request factory, written as HTTP/1.1 keep-alive), a timestamp at
//! every read and a count of SSE events, nothing more: no records, no parsing, no
//! timeouts. `benchsuite/cpu-per-chunk.sh` runs it beside `cadence bench`.
//!
//! ```text
//! cargo build --release -p cadence-benchsuite --bin refclient
//! target/release/refclient --url http://127.0.0.1:PORT/v1 --streams 1000 --seconds 30
//! ```
//!
//! Each stream sends a request, reads its response to the end of the chunked body
//! (`0\r\n\r\n`), and sends the next on the same connection until the time is up; the
//! stream in flight then finishes, as `cadence bench -d` drains. It prints one line:
//! `streams=… events=… chunks=… reads=… stamped=… wall_s=…`, where `chunks` are the content
//! events (every chat stream of the simulator adds three others: the role chunk, the
//! usage chunk and `[DONE]`).
//!
//! `--runtime multi|current|mio` (default `multi`, tokio's default runtime): `current`
//! is tokio's one-thread runtime; `mio` drops tokio for a bare event loop on one thread
//! (mio's poller: `epoll_wait`, then a `read` per ready socket until a short read, with
//! no tasks, wakers or timers), the floor under any runtime (BENCHMARKS.md, "What the
//! runtime costs").
//!
//! `--touch-lines K` (default 0) makes each read also touch K cache lines of a
//! per-stream buffer (one byte read and one written per line): what K more lines of
//! cold state per read cost a client that otherwise does nothing (BENCHMARKS.md,
//! "Where the rest is not"). `--touch-stride BYTES` (default 64) puts those places that
//! far apart: 4096 puts each on a page of its own.
//!
//! `--kernel-stamps on` (default off; tokio runtimes only) reads as Cadence's default
//! `--timestamps kernel` does: `SO_TIMESTAMPNS` on each socket and a `recvmsg` per read
//! whose control message carries the kernel's receive time, instead of a plain `read`.
//! The reference on the syscalls Cadence makes by default (BENCHMARKS.md).
//!
//! `--park-sleep-us N` (default 0; tokio runtimes only) sleeps N µs in the runtime's
//! `on_thread_park` hook before each park, so reads gather between wake-ups: what fewer
//! sleeps and wake-ups are worth to any client (BENCHMARKS.md, "Wake-ups coalesced").

use cadence_bench::body::BodySpec;
use cadence_bench::workload::{RequestFactory, DEFAULT_PROMPT};
use cadence_wire::Api;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Events that are not content chunks in each simulated chat stream.
const NON_CONTENT_EVENTS: u64 = 3;
/// hyper's first read buffer size.
const READ_BUF: usize = 8 * 1024;
/// The end of a chunked body after an SSE event's blank line.
const LAST_CHUNK: &[u8; 7] = b"\r\n0\r\n\r\n";

struct Args {
    url: http::Uri,
    streams: u64,
    seconds: f64,
    max_tokens: u32,
    model: String,
    touch: Touch,
    kernel_stamps: bool,
    runtime: Runtime,
    park_sleep: Duration,
}

#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    Multi,
    Current,
    Mio,
}

fn args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:8000/v1".parse().expect("a URI"),
        streams: 1000,
        seconds: 30.0,
        max_tokens: 64,
        model: "m".into(),
        touch: Touch {
            lines: 0,
            stride: 64,
        },
        kernel_stamps: false,
        runtime: Runtime::Multi,
        park_sleep: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = v.parse().expect("--url: a URI"),
            "--streams" => a.streams = v.parse().expect("--streams: a number"),
            "--seconds" => a.seconds = v.parse().expect("--seconds: a number"),
            "--max-tokens" => a.max_tokens = v.parse().expect("--max-tokens: a number"),
            "--model" => a.model = v,
            "--touch-lines" => a.touch.lines = v.parse().expect("--touch-lines: a number"),
            "--touch-stride" => {
                a.touch.stride = v.parse().expect("--touch-stride: bytes");
                assert!(a.touch.stride >= 2, "--touch-stride: at least 2 bytes");
            }
            "--kernel-stamps" => {
                a.kernel_stamps = match v.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => panic!("--kernel-stamps: on or off"),
                }
            }
            "--park-sleep-us" => {
                a.park_sleep = Duration::from_micros(v.parse().expect("--park-sleep-us: µs"))
            }
            "--runtime" => {
                a.runtime = match v.as_str() {
                    "multi" => Runtime::Multi,
                    "current" => Runtime::Current,
                    "mio" => Runtime::Mio,
                    _ => panic!("--runtime: multi, current or mio"),
                }
            }
            _ => panic!("unknown flag {flag}"),
        }
    }
    assert!(
        !(a.kernel_stamps && a.runtime == Runtime::Mio),
        "--kernel-stamps on: tokio runtimes only"
    );
    a
}

/// The request Cadence sends (`cadence bench URL --api chat --model M --max-tokens N`),
/// as the bytes hyper writes for it: request line, `host`, Cadence's headers,
/// `content-length`, body.
fn request_bytes(a: &Args) -> Vec<u8> {
    let base = a.url.to_string();
    let endpoint: http::Uri = format!("{}/chat/completions", base.trim_end_matches('/'))
        .parse()
        .expect("an endpoint");
    let headers = cadence_transport::client::base_headers(None, &[]).expect("base headers");
    let body = BodySpec {
        api: Api::Chat,
        model: a.model.clone(),
        max_tokens: Some(a.max_tokens),
        extra: None,
        path: endpoint.path().to_string(),
    };
    let factory = RequestFactory::new(endpoint, headers, body, vec![DEFAULT_PROMPT.into()]);
    let req = factory.build_turn(0, 0, &[]).request;
    // The body `build_turn` just put in the request.
    let body = factory.body.body(DEFAULT_PROMPT);
    let mut out = Vec::new();
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    write!(out, "{} {path} HTTP/1.1\r\n", req.method()).expect("in memory");
    let host = req.uri().authority().expect("a host").as_str();
    write!(out, "host: {host}\r\n").expect("in memory");
    for (n, v) in req.headers() {
        out.extend_from_slice(n.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    write!(out, "content-length: {}\r\n\r\n", body.len()).expect("in memory");
    out.extend_from_slice(&body);
    out
}

#[derive(Default)]
struct Tally {
    streams: AtomicU64,
    events: AtomicU64,
    reads: AtomicU64,
    /// Reads whose control message carried a kernel stamp (`--kernel-stamps on`).
    stamped: AtomicU64,
}

/// One response's progress through its bytes: the head, the SSE events, the end of the
/// chunked body. The same scan for every runtime.
struct Scan {
    in_head: bool,
    prev: u8,
    tail: [u8; 7],
}

impl Scan {
    fn new() -> Scan {
        Scan {
            in_head: true,
            prev: 0,
            tail: [0; 7],
        }
    }

    /// Takes one read's bytes; counts the events in them into `events`; says whether
    /// the response ended.
    fn feed(&mut self, mut bytes: &[u8], events: &mut u64) -> bool {
        if self.in_head {
            // Head: assumed to end within the first read's bytes (it does on loopback);
            // checked, never guessed.
            assert!(bytes.starts_with(b"HTTP/1.1 200"), "not a 200 response");
            let end = bytes
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("the response head in the first read");
            bytes = &bytes[end + 4..];
            self.in_head = false;
        }
        // An event ends with a blank line: an LF right after an LF (the simulator
        // writes each event in one HTTP chunk, so no chunk framing falls between).
        for i in memchr::memchr_iter(b'\n', bytes) {
            let before = if i == 0 { self.prev } else { bytes[i - 1] };
            if before == b'\n' {
                *events += 1;
            }
        }
        if let Some(&last) = bytes.last() {
            self.prev = last;
        }
        if bytes.len() >= 7 {
            self.tail.copy_from_slice(&bytes[bytes.len() - 7..]);
        } else {
            self.tail.rotate_left(bytes.len());
            self.tail[7 - bytes.len()..].copy_from_slice(bytes);
        }
        &self.tail == LAST_CHUNK
    }
}

/// The per-stream state each read touches besides its own: `lines` places `stride`
/// bytes apart (64: adjacent cache lines; 4096: one line on each of `lines` pages).
#[derive(Clone, Copy)]
struct Touch {
    lines: usize,
    stride: usize,
}

impl Touch {
    /// A stream's buffer of these places.
    fn buffer(self) -> Vec<u8> {
        vec![0u8; self.lines * self.stride]
    }
}

/// Touches a stream's `cold` places, one byte read and one written at each.
fn touch(cold: &mut [u8], stride: usize, acc: &mut u8) {
    for line in cold.chunks_mut(stride) {
        *acc = acc.wrapping_add(line[0]);
        line[1] = *acc;
    }
}

/// One stream slot: requests back to back on one keep-alive connection until `until`.
async fn slot(
    addr: String,
    request: Arc<Vec<u8>>,
    until: Instant,
    tally: Arc<Tally>,
    touched: Touch,
    kernel_stamps: bool,
) {
    let mut sock = TcpStream::connect(&addr).await.expect("connect");
    sock.set_nodelay(true).expect("nodelay");
    if kernel_stamps {
        use nix::sys::socket::{setsockopt, sockopt};
        setsockopt(&sock, sockopt::ReceiveTimestampns, &true).expect("SO_TIMESTAMPNS");
    }
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut buf = vec![0u8; READ_BUF];
    let (mut streams, mut events, mut reads, mut stamped) = (0u64, 0u64, 0u64, 0u64);
    let mut last_read = Instant::now();
    // State of the stream's own that each read touches, a line apart (none by default).
    let mut cold = touched.buffer();
    let mut acc = 0u8;
    while Instant::now() < until {
        sock.write_all(&request).await.expect("write");
        let mut scan = Scan::new();
        loop {
            let n = if kernel_stamps {
                let (n, stamp) = read_stamped(&sock, &mut buf, &mut cmsg).await;
                stamped += u64::from(std::hint::black_box(stamp).is_some());
                n
            } else {
                sock.read(&mut buf).await.expect("read")
            };
            // The timestamp a measuring client takes for each read, before anything else.
            last_read = std::hint::black_box(Instant::now());
            assert!(n > 0, "the server closed the connection mid-response");
            reads += 1;
            touch(&mut cold, touched.stride, &mut acc);
            if scan.feed(&buf[..n], &mut events) {
                break;
            }
        }
        streams += 1;
    }
    std::hint::black_box((last_read, acc));
    tally.streams.fetch_add(streams, Ordering::Relaxed);
    tally.events.fetch_add(events, Ordering::Relaxed);
    tally.reads.fetch_add(reads, Ordering::Relaxed);
    tally.stamped.fetch_add(stamped, Ordering::Relaxed);
}

/// One `recvmsg` with the kernel's receive stamp, as Cadence's default reads: the
/// bytes read and the stamp taken out of its control message (seconds and
/// nanoseconds). A read that filled less than the buffer clears the socket's readiness
/// (answered `WouldBlock` with its bytes kept), as tokio's own `read` does.
async fn read_stamped(
    sock: &TcpStream,
    buf: &mut [u8],
    cmsg: &mut [u8],
) -> (usize, Option<(i64, i64)>) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    loop {
        sock.readable().await.expect("readable");
        let mut short = None;
        let read = sock.try_io(tokio::io::Interest::READABLE, || {
            let want = buf.len();
            let mut iov = [std::io::IoSliceMut::new(buf)];
            let msg = recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(cmsg),
                MsgFlags::MSG_DONTWAIT,
            )
            .map_err(std::io::Error::from)?;
            let mut stamp = None;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmTimestampns(ts) = c {
                        stamp = Some((ts.tv_sec(), ts.tv_nsec()));
                    }
                }
            }
            if msg.bytes > 0 && msg.bytes < want {
                short = Some((msg.bytes, stamp));
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Ok((msg.bytes, stamp))
        });
        match short.map_or(read, Ok) {
            Ok(read) => return read,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("recvmsg: {e}"),
        }
    }
}

/// One stream on the bare event loop.
struct MioStream {
    sock: mio::net::TcpStream,
    buf: Vec<u8>,
    scan: Scan,
    cold: Vec<u8>,
    done: bool,
}

/// Every stream on one thread's bare event loop: connect them all, send each its
/// request, then wait for readiness and read each ready socket until a short read (the
/// socket is then drained: edge-triggered readiness comes again with new bytes).
fn mio_streams(a: &Args, request: &[u8], until: std::time::Instant, tally: &Tally) {
    use mio::{Events, Interest, Poll, Token};
    use std::io::Read as _;
    let addr: std::net::SocketAddr = a
        .url
        .authority()
        .expect("a host")
        .as_str()
        .parse()
        .expect("an IP:port URL");
    let mut poll = Poll::new().expect("a poller");
    let mut streams: Vec<MioStream> = Vec::new();
    for i in 0..a.streams as usize {
        let std_sock = std::net::TcpStream::connect(addr).expect("connect");
        std_sock.set_nodelay(true).expect("nodelay");
        std_sock.set_nonblocking(true).expect("nonblocking");
        let mut sock = mio::net::TcpStream::from_std(std_sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE)
            .expect("register");
        streams.push(MioStream {
            sock,
            buf: vec![0u8; READ_BUF],
            scan: Scan::new(),
            cold: a.touch.buffer(),
            done: false,
        });
    }
    for s in &mut streams {
        // A request is far below the socket's send buffer: one write takes it whole.
        s.sock.write_all(request).expect("write");
    }
    let (mut finished, mut events, mut reads) = (0u64, 0u64, 0u64);
    let mut last_read = std::time::Instant::now();
    let mut acc = 0u8;
    let mut live = streams.len();
    let mut ready = Events::with_capacity(1024);
    while live > 0 {
        poll.poll(&mut ready, None).expect("poll");
        for ev in ready.iter() {
            let s = &mut streams[ev.token().0];
            while !s.done {
                let n = match s.sock.read(&mut s.buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                };
                last_read = std::hint::black_box(std::time::Instant::now());
                assert!(n > 0, "the server closed the connection mid-response");
                reads += 1;
                touch(&mut s.cold, a.touch.stride, &mut acc);
                if s.scan.feed(&s.buf[..n], &mut events) {
                    finished += 1;
                    s.scan = Scan::new();
                    if std::time::Instant::now() < until {
                        s.sock.write_all(request).expect("write");
                    } else {
                        s.done = true;
                        live -= 1;
                    }
                }
                if n < READ_BUF {
                    break;
                }
            }
        }
    }
    std::hint::black_box((last_read, acc));
    tally.streams.fetch_add(finished, Ordering::Relaxed);
    tally.events.fetch_add(events, Ordering::Relaxed);
    tally.reads.fetch_add(reads, Ordering::Relaxed);
}

fn main() {
    let a = args();
    let request = Arc::new(request_bytes(&a));
    let addr = a.url.authority().expect("a host").as_str().to_owned();
    let tally = Arc::new(Tally::default());
    let started = std::time::Instant::now();
    if a.runtime == Runtime::Mio {
        let until = started + Duration::from_secs_f64(a.seconds);
        mio_streams(&a, &request, until, &tally);
        return print_tally(&tally, started);
    }
    let mut rt = if a.runtime == Runtime::Current {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let park_sleep = a.park_sleep;
    if !park_sleep.is_zero() {
        rt.on_thread_park(move || std::thread::sleep(park_sleep));
    }
    let rt = rt.enable_all().build().expect("a runtime");
    rt.block_on(async {
        let until = Instant::now() + Duration::from_secs_f64(a.seconds);
        let tasks: Vec<_> = (0..a.streams)
            .map(|_| {
                tokio::spawn(slot(
                    addr.clone(),
                    request.clone(),
                    until,
                    tally.clone(),
                    a.touch,
                    a.kernel_stamps,
                ))
            })
            .collect();
        for t in tasks {
            t.await.expect("a stream slot panicked");
        }
    });
    print_tally(&tally, started);
}

/// The one line of output.
fn print_tally(tally: &Tally, started: std::time::Instant) {
    let (streams, events, reads, stamped) = (
        tally.streams.load(Ordering::Relaxed),
        tally.events.load(Ordering::Relaxed),
        tally.reads.load(Ordering::Relaxed),
        tally.stamped.load(Ordering::Relaxed),
    );
    println!(
        "streams={streams} events={events} chunks={} reads={reads} stamped={stamped} wall_s={:.3}",
        events - NON_CONTENT_EVENTS * streams,
        started.elapsed().as_secs_f64()
    );
}
