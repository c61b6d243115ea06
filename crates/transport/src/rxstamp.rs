//! Kernel receive timestamps: a TCP stream that reads with `recvmsg` and keeps the time
//! the kernel stamped on the bytes of each read (`SO_TIMESTAMPNS`), so a chunk's time is
//! when it arrived, not when a busy client got round to reading it.
//!
//! The stream is an IO type of its own ([`StampedTcp`], under hyper as
//! `TokioIo<StampedTcp>`); what it learns is shared through a cheap handle
//! ([`RxStamps`]) that hyper-util copies into every response's extensions. The reads of
//! the connection task and the frames the request's task takes are matched by address:
//! each read records where in the reader's buffer its bytes went, and a body frame of
//! plain HTTP is a slice of that buffer (hyper splits frames off its read buffer without
//! copying), so the frame's own read is found even when the connection task has read
//! again since. Bytes that were copied on the way (TLS decrypts into another buffer)
//! match no read and get the latest read's stamp (see `docs/src/DESIGN.md`).

use crate::wrapped::{Watch, Wrapped};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Which clock stamps chunks: the kernel's receive time, or the time the client read
/// the bytes (`--timestamps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timestamps {
    /// The kernel's receive time where the platform and socket give one, else the user
    /// clock.
    #[default]
    Kernel,
    /// The client's clock when its read returned (how Cadence always stamped before).
    User,
}

/// Reads remembered per connection. hyper's connection task is at most one body frame
/// ahead of the request's task, so two would do; eight leave room for small frames
/// that share a read.
const READS_KEPT: usize = 8;

/// A stamp older than this at the moment of the read is taken as no stamp (the wall
/// clock was stepped, or the stamp is garbage).
pub const MAX_STAMP_AGE: Duration = Duration::from_secs(60);

/// The bytes one `recvmsg` may take; larger bodies take more reads.
const SCRATCH: usize = 16 * 1024;

/// One read: its number on the connection, where its bytes went, and the kernel's
/// receive time of its last byte, on the monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
struct ReadEntry {
    seq: u64,
    start: usize,
    len: usize,
    arrived: Option<Instant>,
}

#[derive(Debug, Default)]
struct Ring {
    reads: [ReadEntry; READS_KEPT],
    /// Reads so far (the next read's `seq` is this + 1).
    seq: u64,
    /// Whether the socket took `SO_TIMESTAMPNS`.
    enabled: bool,
}

/// The kernel receive time found for some bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxStamp {
    /// The read that carried them (1 for the connection's first read): frames with the
    /// same number came in one read.
    pub read: u64,
    /// When the kernel received the read's last segment, on the monotonic clock.
    pub arrived: Instant,
    /// Whether the bytes were found in that read (`false`: they were copied on the way,
    /// as TLS does, and this is the latest read).
    pub exact: bool,
}

/// The cheap, cloneable handle to one connection's receive stamps.
#[derive(Debug, Clone, Default)]
pub struct RxStamps(Arc<Mutex<Ring>>);

impl RxStamps {
    fn with<T>(&self, f: impl FnOnce(&mut Ring) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether the socket stamps its reads (it took the option).
    pub fn enabled(&self) -> bool {
        self.with(|r| r.enabled)
    }

    /// Records a read of `len` bytes placed at `start`, received at `arrived`.
    fn record(&self, start: usize, len: usize, arrived: Option<Instant>) {
        self.with(|r| {
            r.seq += 1;
            let seq = r.seq;
            r.reads[(seq % READS_KEPT as u64) as usize] = ReadEntry {
                seq,
                start,
                len,
                arrived,
            };
        })
    }

    /// The kernel receive time of the read that carried `bytes`: the newest remembered
    /// read whose buffer range holds their first byte, else the latest read (not
    /// `exact`). `None` when that read had no stamp or nothing was read yet.
    pub fn stamp_for(&self, bytes: &[u8]) -> Option<RxStamp> {
        let at = bytes.as_ptr() as usize;
        self.with(|r| {
            let newest_first = (0..READS_KEPT as u64)
                .filter_map(|back| r.seq.checked_sub(back))
                .filter(|&s| s > 0)
                .map(|s| r.reads[(s % READS_KEPT as u64) as usize]);
            let mut latest = None;
            for e in newest_first {
                latest.get_or_insert(e);
                if e.len > 0 && at >= e.start && at < e.start + e.len {
                    return e.arrived.map(|arrived| RxStamp {
                        read: e.seq,
                        arrived,
                        exact: true,
                    });
                }
            }
            let e = latest?;
            e.arrived.map(|arrived| RxStamp {
                read: e.seq,
                arrived,
                exact: false,
            })
        })
    }
}

/// When a stamp of the realtime clock happened on the monotonic clock, given both
/// clocks read together just after it: `mono_now − (real_now − stamp)`. `None` for a
/// stamp from the future (the wall clock stepped back since) or older than
/// [`MAX_STAMP_AGE`].
pub fn realtime_to_monotonic(
    stamp: Duration,
    real_now: Duration,
    mono_now: Instant,
) -> Option<Instant> {
    let age = real_now.checked_sub(stamp)?;
    if age > MAX_STAMP_AGE {
        return None;
    }
    mono_now.checked_sub(age)
}

/// How long a thread reuses one reading of the wall clock's offset from the monotonic
/// clock. The two clocks run at the same NTP-slewed rate, so their offset changes only
/// when the wall clock is stepped: a step moves the stamps of at most this long (and
/// [`crate::chunk_time`] discards a stamp that falls outside its request).
const WALL_REFRESH: Duration = Duration::from_millis(100);

thread_local! {
    /// The monotonic and realtime clocks read together, on this thread.
    static WALL: std::cell::Cell<Option<(Instant, Duration)>> = const { std::cell::Cell::new(None) };
}

/// [`realtime_to_monotonic`] for a read at `now` (monotonic), without reading the wall
/// clock at every read: the offset read on this thread within [`WALL_REFRESH`] stands
/// in. A stamp newer than that offset allows (the wall clock stepped forward, or the
/// runtime's clock is paused in a test) reads both clocks afresh.
fn stamp_to_monotonic(stamp: Duration, now: Instant) -> Option<Instant> {
    WALL.with(|wall| {
        if let Some((mono, real)) = wall.get() {
            let since = now.saturating_duration_since(mono);
            let real_now = real + since;
            if since < WALL_REFRESH && stamp <= real_now {
                return realtime_to_monotonic(stamp, real_now, now);
            }
        }
        let real = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        let mono = Instant::now();
        wall.set(Some((mono, real)));
        realtime_to_monotonic(stamp, real, mono)
    })
}

/// Bytes of control-message space per read: one `SCM_TIMESTAMPNS` needs 32 on 64-bit
/// Linux (a 16-byte header and a `timespec`); the rest is slack.
const CMSG_SPACE: usize = 64;

/// Control-message space aligned as the kernel's `cmsghdr` is read back.
#[derive(Debug)]
#[repr(C, align(8))]
struct CmsgSpace([u8; CMSG_SPACE]);

/// A TCP stream whose reads keep their kernel receive time (see the module docs).
pub type StampedTcp = Wrapped<TcpStream, StampedReads>;

/// What a [`StampedTcp`] keeps of its reads, and how it reads (`recvmsg`, when the
/// socket stamps); its writes pass through.
#[derive(Debug)]
pub struct StampedReads {
    stamps: RxStamps,
    /// Whether the socket took `SO_TIMESTAMPNS` (else it reads as a plain stream).
    enabled: bool,
    /// For callers whose buffer is not initialized (hyper's): made on first need.
    scratch: Vec<u8>,
    /// The control-message space of a read, inline: touched at every read, so kept on
    /// the stream's own cache lines rather than in an allocation of its own.
    cmsg: CmsgSpace,
    /// The latest read with bytes: its number and stamp, for a reader that hands each
    /// read's bytes over at once (no lookup in the shared handle needed).
    latest: Option<RxStamp>,
    /// When the latest read with bytes returned (the monotonic clock, read once per read).
    read_at: Option<Instant>,
    reads: u64,
    /// Whether reads go into the shared handle's ring, for readers that find a frame's
    /// read by its address (hyper's); a reader that takes [`StampedTcp::latest_stamp`]
    /// after each read needs no ring and no lock per read.
    ring: bool,
}

impl StampedTcp {
    /// Wraps `tcp`, asking the kernel to stamp its reads when `mode` is
    /// [`Timestamps::Kernel`]. A socket that refuses (another platform, a kernel
    /// without the option) reads as usual and every stamp is `None`: the caller's
    /// clock stands in.
    pub fn new(tcp: TcpStream, mode: Timestamps) -> StampedTcp {
        Self::with_ring(tcp, mode, true)
    }

    /// As [`StampedTcp::new`], for a reader that takes [`StampedTcp::latest_stamp`] and
    /// [`StampedTcp::read_at`] after each read: [`RxStamps::stamp_for`] then finds no
    /// read (the handle still says whether the socket stamps).
    pub fn handing_over(tcp: TcpStream, mode: Timestamps) -> StampedTcp {
        Self::with_ring(tcp, mode, false)
    }

    fn with_ring(tcp: TcpStream, mode: Timestamps, ring: bool) -> StampedTcp {
        let enabled = mode == Timestamps::Kernel && sys::enable(&tcp);
        let stamps = RxStamps::default();
        stamps.with(|r| r.enabled = enabled);
        Wrapped::wrap(
            tcp,
            StampedReads {
                stamps,
                enabled,
                scratch: Vec::new(),
                cmsg: CmsgSpace([0; CMSG_SPACE]),
                latest: None,
                read_at: None,
                reads: 0,
                ring,
            },
        )
    }

    /// When the latest read that carried bytes returned, on the monotonic clock: the
    /// read's user time, taken once (`None` before one, or when the socket does not
    /// stamp: a plain read is not timed here).
    pub fn read_at(&self) -> Option<Instant> {
        self.watch.read_at
    }

    /// The stamp of the latest read that carried bytes (`exact: false`: it says nothing
    /// of which bytes), or `None` before one or when it had no stamp. What a reader
    /// that decodes each read before the next one gives its bytes, without the lookup
    /// of [`RxStamps::stamp_for`].
    pub fn latest_stamp(&self) -> Option<RxStamp> {
        self.watch.latest
    }

    /// Whether an idle connection still looks open: a peek that would block. A closed
    /// one reads EOF; one with bytes nobody asked for is not reusable either. Asks the
    /// socket itself, not the runtime's readiness (cleared after a draining read, so it
    /// may not have seen the server's FIN yet), and takes no byte.
    pub fn idle_looks_open(&self) -> bool {
        sys::peek_would_block(&self.stream)
    }

    /// The handle the request side reads stamps through.
    pub fn stamps(&self) -> RxStamps {
        self.watch.stamps.clone()
    }
}

impl StampedReads {
    /// Reads with `recvmsg` into `buf` (through the scratch buffer when `buf`'s free
    /// part is not initialized); records where the bytes went and their stamp.
    fn poll_read_stamped(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let filled = buf.filled().len();
        let want = buf.remaining().min(SCRATCH);
        if want == 0 {
            return Poll::Ready(Ok(()));
        }
        // Straight into the caller's buffer when that part of it is initialized (the
        // lean client's is): no copy.
        let direct = buf.initialized().len() >= filled + want;
        if !direct && self.scratch.len() < want {
            self.scratch = vec![0; SCRATCH];
        }
        loop {
            std::task::ready!(tcp.poll_read_ready(cx))?;
            let cmsg = &mut self.cmsg.0;
            let dst = if direct {
                &mut buf.initialized_mut()[filled..filled + want]
            } else {
                &mut self.scratch[..want]
            };
            // A read that filled less than it asked for emptied the receive queue (the
            // socket is edge-triggered): its readiness is cleared as tokio's own
            // `TcpStream` does, by answering `WouldBlock` to `try_io` with the bytes
            // kept aside, so the next read waits for the next event instead of making
            // a `recvmsg` that can only say EAGAIN.
            let mut drained = None;
            let read = tcp.try_io(tokio::io::Interest::READABLE, || {
                let (n, stamp) = sys::recv_stamped(tcp, dst, cmsg)?;
                if n > 0 && n < want {
                    drained = Some((n, stamp));
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok((n, stamp))
            });
            match drained.map_or(read, Ok) {
                Ok((n, stamp)) => {
                    let now = Instant::now();
                    let arrived = stamp.and_then(|s| stamp_to_monotonic(s, now));
                    if direct {
                        buf.advance(n);
                    } else {
                        buf.put_slice(&self.scratch[..n]);
                    }
                    if n > 0 {
                        if self.ring {
                            let start = buf.filled()[filled..].as_ptr() as usize;
                            self.stamps.record(start, n, arrived);
                        }
                        self.read_at = Some(now);
                        self.reads += 1;
                        self.latest = arrived.map(|arrived| RxStamp {
                            read: self.reads,
                            arrived,
                            exact: false,
                        });
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Watch<TcpStream> for StampedReads {
    fn poll_read(
        &mut self,
        tcp: &mut TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.enabled {
            return Pin::new(tcp).poll_read(cx, buf);
        }
        self.poll_read_stamped(tcp, cx, buf)
    }
}

impl Connection for StampedTcp {
    fn connected(&self) -> Connected {
        self.stream.connected().extra(self.watch.stamps.clone())
    }
}

/// A connector whose connections are [`StampedTcp`]s: the inner connector (hyper-util's
/// `HttpConnector`) connects, this wraps the stream. TLS, when the URL asks for it,
/// goes on top (hyper-rustls wraps this connector), so HTTPS reads are stamped too.
#[derive(Debug, Clone)]
pub struct Stamping<C> {
    inner: C,
    mode: Timestamps,
}

impl<C> Stamping<C> {
    /// Wraps `inner`, stamping its connections' reads as `mode` says.
    pub fn new(inner: C, mode: Timestamps) -> Self {
        Stamping { inner, mode }
    }
}

impl<C> tower_service::Service<http::Uri> for Stamping<C>
where
    C: tower_service::Service<http::Uri, Response = TokioIo<TcpStream>>,
    C::Future: Send + 'static,
{
    type Response = TokioIo<StampedTcp>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let mode = self.mode;
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(StampedTcp::new(tcp, mode)))
        })
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::time::Duration;
    use tokio::net::TcpStream;

    /// Asks the kernel to stamp every received segment; false when it refuses.
    pub(super) fn enable(tcp: &TcpStream) -> bool {
        setsockopt(tcp, sockopt::ReceiveTimestampns, &true).is_ok()
    }

    /// The control-message space a stamped read needs (one `SCM_TIMESTAMPNS`).
    #[cfg(test)]
    pub(super) fn cmsg_needed() -> usize {
        nix::cmsg_space!(nix::sys::time::TimeSpec).len()
    }

    /// A one-byte `MSG_PEEK` that would block: nothing to read and no EOF.
    pub(super) fn peek_would_block(tcp: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            nix::sys::socket::recv(
                tcp.as_raw_fd(),
                &mut byte,
                MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
            ),
            Err(nix::errno::Errno::EAGAIN)
        )
    }

    /// One `recvmsg`: the bytes read and the realtime stamp of the last segment they
    /// came from, when the kernel attached one.
    pub(super) fn recv_stamped(
        tcp: &TcpStream,
        buf: &mut [u8],
        cmsg: &mut [u8],
    ) -> io::Result<(usize, Option<Duration>)> {
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            tcp.as_raw_fd(),
            &mut iov,
            Some(cmsg),
            MsgFlags::MSG_DONTWAIT,
        )
        .map_err(io::Error::from)?;
        let mut stamp = None;
        // A truncated control message (ENOBUFS) is read as no stamp.
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmTimestampns(ts) = c {
                    stamp = u64::try_from(ts.tv_sec())
                        .ok()
                        .zip(u32::try_from(ts.tv_nsec()).ok())
                        .map(|(s, ns)| Duration::new(s, ns));
                }
            }
        }
        Ok((msg.bytes, stamp))
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::time::Duration;
    use tokio::net::TcpStream;

    pub(super) fn enable(_: &TcpStream) -> bool {
        false
    }

    #[cfg(test)]
    pub(super) fn cmsg_needed() -> usize {
        0
    }

    pub(super) fn peek_would_block(tcp: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(tcp.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    pub(super) fn recv_stamped(
        _: &TcpStream,
        _: &mut [u8],
        _: &mut [u8],
    ) -> io::Result<(usize, Option<Duration>)> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FAULTS 90.
    #[test]
    fn realtime_stamps_become_monotonic_instants_by_their_age() {
        let mono = Instant::now();
        let real = Duration::from_secs(1_700_000_000);
        // Received 3.5 ms before the clocks were read: 3.5 ms before `mono`.
        let stamp = real - Duration::from_micros(3_500);
        assert_eq!(
            realtime_to_monotonic(stamp, real, mono),
            Some(mono - Duration::from_micros(3_500))
        );
        // Received just now.
        assert_eq!(realtime_to_monotonic(real, real, mono), Some(mono));
        // From the future (the wall clock stepped back): no stamp.
        assert_eq!(
            realtime_to_monotonic(real + Duration::from_nanos(1), real, mono),
            None
        );
        // Older than the bound: no stamp; at the bound: kept.
        let old = real - MAX_STAMP_AGE - Duration::from_nanos(1);
        assert_eq!(realtime_to_monotonic(old, real, mono), None);
        let at_bound = real - MAX_STAMP_AGE;
        if let Some(t) = realtime_to_monotonic(at_bound, real, mono) {
            assert_eq!(mono - t, MAX_STAMP_AGE);
        }
    }

    /// FAULTS 93.
    #[test]
    fn a_frame_finds_its_own_read_even_after_later_reads() {
        let stamps = RxStamps::default();
        let buf = vec![0u8; 300];
        let t0 = Instant::now();
        let (a, b, c) = (
            t0,
            t0 + Duration::from_millis(10),
            t0 + Duration::from_millis(20),
        );
        let base = buf.as_ptr() as usize;
        stamps.record(base, 100, Some(a));
        stamps.record(base + 100, 100, Some(b));
        stamps.record(base + 200, 100, None);
        // The first read's bytes, taken after two more reads: its own stamp.
        let s = stamps.stamp_for(&buf[10..20]).unwrap();
        assert_eq!((s.read, s.arrived, s.exact), (1, a, true));
        assert_eq!(stamps.stamp_for(&buf[100..150]).unwrap().arrived, b);
        // The third read had no stamp.
        assert_eq!(stamps.stamp_for(&buf[250..]), None);
        // Bytes that were copied elsewhere (TLS): the latest read, not exact; it has
        // no stamp here, so none.
        let copied = vec![0u8; 8];
        assert_eq!(stamps.stamp_for(&copied), None);
        stamps.record(base, 1, Some(c));
        let s = stamps.stamp_for(&copied).unwrap();
        assert_eq!((s.read, s.arrived, s.exact), (4, c, false));
        // The newest read over the same address wins (the buffer was reused).
        assert_eq!(stamps.stamp_for(&buf[0..1]).unwrap().read, 4);
    }

    /// A connected pair on 127.0.0.1: the server's end and the client's stamped end.
    async fn pair() -> (TcpStream, StampedTcp) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (
            server.unwrap().0,
            StampedTcp::new(client.unwrap(), Timestamps::Kernel),
        )
    }

    /// A read that emptied the socket clears its readiness (no `recvmsg` that can only
    /// say EAGAIN); the next event still wakes the reader and is read with its stamp.
    #[tokio::test]
    async fn a_draining_read_waits_for_the_next_event_and_misses_none() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, mut client) = pair().await;
        let mut buf = [0u8; 64];
        for event in [&b"data: a\n\n"[..], b"data: bb\n\n", b"data: ccc\n\n"] {
            server.write_all(event).await.unwrap();
            let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
                .await
                .expect("the event wakes the reader")
                .unwrap();
            assert_eq!(&buf[..n], event, "one short read took the whole event");
            // Drained: the next poll waits instead of reading.
            let mut rb = ReadBuf::new(&mut buf);
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(Pin::new(&mut client)
                .poll_read(&mut cx, &mut rb)
                .is_pending());
        }
        // A kernel may leave the first segments after the option is turned on
        // unstamped (it enables stamping asynchronously): checked only when stamped.
        let latest = client.stamps().stamp_for(b"x");
        if let Some(s) = latest {
            assert_eq!(s.read, 3, "three reads, one per event");
        }
        assert_eq!(
            client.latest_stamp(),
            latest,
            "the latest read, without the lookup"
        );
        drop(server);
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0, "EOF after the server closed");
    }

    /// A caller whose buffer is not initialized (hyper's) is served through the
    /// scratch buffer, and its bytes are still found in their read by address.
    #[tokio::test]
    async fn an_uninitialized_buffer_reads_through_the_scratch_buffer() {
        use std::mem::MaybeUninit;
        use tokio::io::AsyncWriteExt;
        let (mut server, mut client) = pair().await;
        server.write_all(b"hello").await.unwrap();
        let mut storage = [MaybeUninit::<u8>::uninit(); 32];
        let mut rb = ReadBuf::uninit(&mut storage);
        tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| Pin::new(&mut client).poll_read(cx, &mut rb)),
        )
        .await
        .expect("the bytes wake the reader")
        .unwrap();
        assert_eq!(rb.filled(), b"hello");
        if let Some(s) = client.stamps().stamp_for(&rb.filled()[1..]) {
            assert!(s.exact, "found by address in the caller's buffer");
            assert_eq!(s.read, 1);
        }
    }

    /// An idle connection looks open until the server closes it or sends bytes nobody
    /// asked for, whatever the runtime's readiness says, and the peek takes no byte.
    #[tokio::test]
    async fn an_idle_connection_is_judged_by_the_socket_itself() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, mut client) = pair().await;
        assert!(client.idle_looks_open());
        server.write_all(b"x").await.unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while client.idle_looks_open() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!client.idle_looks_open(), "unasked bytes: not reusable");
        let mut b = [0u8; 1];
        assert_eq!(
            client.read(&mut b).await.unwrap(),
            1,
            "the peek left the byte"
        );
        assert!(client.idle_looks_open());
        drop(server);
        while client.idle_looks_open() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!client.idle_looks_open(), "closed by the server");
    }

    fn wall_now() -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    }

    /// The wall clock's offset is read once per [`WALL_REFRESH`] on a thread, and a
    /// stamp converted with the kept offset lands where a fresh reading puts it.
    #[test]
    fn a_kept_clock_offset_converts_like_a_fresh_one() {
        let now = Instant::now();
        let fresh = stamp_to_monotonic(wall_now(), now).expect("a stamp of just now");
        assert!(now - fresh < Duration::from_millis(50), "{:?}", now - fresh);
        let (mono, _) = WALL.with(|w| w.get()).expect("the offset is kept");
        // A stamp 2 ms old, converted with the kept offset: 2 ms before the read.
        std::thread::sleep(Duration::from_millis(3));
        let now = Instant::now();
        let stamp = wall_now() - Duration::from_millis(2);
        let t = stamp_to_monotonic(stamp, now).expect("a recent stamp");
        let age = now - t;
        assert!(
            age >= Duration::from_millis(1) && age < Duration::from_millis(50),
            "{age:?}"
        );
        assert_eq!(
            WALL.with(|w| w.get()).map(|(m, _)| m),
            Some(mono),
            "no second reading within the refresh interval"
        );
    }

    /// A stamp newer than the kept offset allows (a paused test clock, or a wall clock
    /// stepped forward) reads both clocks again instead of calling it from the future.
    #[test]
    fn a_stamp_newer_than_the_kept_offset_reads_the_clocks_again() {
        let now = Instant::now();
        stamp_to_monotonic(wall_now(), now);
        // The same monotonic time (a frozen clock), but the wall clock moved on.
        std::thread::sleep(Duration::from_millis(20));
        let stamp = wall_now();
        let t = stamp_to_monotonic(stamp, now).expect("re-read, not from the future");
        assert!(t <= Instant::now());
        let (mono, real) = WALL.with(|w| w.get()).unwrap();
        assert!(mono > now && real >= stamp, "the offset was read again");
    }

    /// A reader that takes each read's stamp as it goes leaves the shared ring empty
    /// (no lock per read) but still sees the read's stamp and time.
    #[tokio::test]
    async fn a_handing_over_stream_keeps_only_the_latest_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let mut server = server.unwrap().0;
        let mut client = StampedTcp::handing_over(client.unwrap(), Timestamps::Kernel);
        assert_eq!(client.read_at(), None, "no read yet");
        server.write_all(b"data: a\n\n").await.unwrap();
        let before = Instant::now();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"data: a\n\n");
        assert_eq!(client.stamps().stamp_for(&buf[..n]), None, "no ring");
        if !client.watch.enabled {
            // Without kernel stamps the plain read is not timed: the reader's clock stands in.
            assert_eq!(client.read_at(), None);
            return;
        }
        let read_at = client.read_at().expect("the read was timed");
        assert!(read_at >= before && read_at <= Instant::now());
        if let Some(s) = client.latest_stamp() {
            assert_eq!(s.read, 1);
            assert!(s.arrived <= read_at);
        }
    }

    #[test]
    fn the_inline_control_space_holds_a_timestamp() {
        assert!(sys::cmsg_needed() <= CMSG_SPACE, "{}", sys::cmsg_needed());
        assert_eq!(std::mem::align_of::<CmsgSpace>(), 8);
    }

    #[test]
    fn no_read_yet_means_no_stamp() {
        assert_eq!(RxStamps::default().stamp_for(b"x"), None);
    }
}
