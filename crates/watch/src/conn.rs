//! The page's connections, bounded: at most so many at once (each holds a descriptor
//! the probes need too), and one that moves no byte for a while (an idle keep-alive, a
//! client that trickles or never sends) is closed, as is one whose request head is not
//! whole within a bound (hyper's own header timeout needs a timer axum::serve does not
//! give it), so silent or trickling sockets cannot take the page or the probes'
//! descriptors.

use cadence_transport::wrapped::{Watch, Wrapped};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The page's connections at most at once (lowered when the descriptor budget is short).
pub const PAGE_CONNECTIONS: usize = 128;

/// A page connection that moves no byte for this long is closed.
pub const PAGE_IDLE: Duration = Duration::from_secs(10);

/// A request head (its line and headers) not whole this long after its first byte
/// closes the connection, however steadily its bytes trickle in.
pub const PAGE_HEAD: Duration = Duration::from_secs(10);

/// How the page's connections are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Connections at most at once; more wait in the kernel's queue.
    pub connections: usize,
    /// A connection idle this long is closed.
    pub idle: Duration,
    /// A request head not whole this long after its first byte closes the connection.
    pub head: Duration,
}

impl Default for PageLimits {
    fn default() -> Self {
        PageLimits {
            connections: PAGE_CONNECTIONS,
            idle: PAGE_IDLE,
            head: PAGE_HEAD,
        }
    }
}

/// A listener that accepts while a connection slot is free.
pub(crate) struct Bounded {
    inner: tokio::net::TcpListener,
    slots: Arc<Semaphore>,
    limits: PageLimits,
}

impl Bounded {
    pub(crate) fn new(inner: tokio::net::TcpListener, limits: PageLimits) -> Bounded {
        Bounded {
            inner,
            slots: Arc::new(Semaphore::new(limits.connections.max(1))),
            limits,
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Idle;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Idle, SocketAddr) {
        loop {
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                // The semaphore is never closed; wait as for a slot.
                std::future::pending::<()>().await;
                continue;
            };
            match self.inner.accept().await {
                Ok((stream, peer)) => {
                    return (IdleDeadline::around(stream, slot, self.limits), peer)
                }
                Err(e) => {
                    if cadence_transport::classify::is_own_limit(&e) {
                        tracing::warn!(
                            "cadence watch: the page cannot accept a connection: too many open files (EMFILE); raise `ulimit -n`"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A page connection: the stream with its slot, idle and head deadlines.
pub(crate) type Idle = Wrapped<TcpStream, IdleDeadline>;

/// A page connection's slot, freed when it closes, the idle deadline that every byte
/// read or written moves on, and the head deadline a request head's first byte sets
/// (cleared when its blank line arrives or an answer is written).
pub(crate) struct IdleDeadline {
    _slot: OwnedSemaphorePermit,
    limits: PageLimits,
    deadline: Pin<Box<Sleep>>,
    head: Head,
    /// The result [`Watch::seen`] is shown next is a read's (else a write's).
    reading: bool,
}

/// Where the connection is in a request head: the bytes of one are read until its
/// blank line (two line feeds with only carriage returns between them).
struct Head {
    deadline: Pin<Box<Sleep>>,
    open: bool,
    line_feeds: u8,
}

impl Head {
    /// Takes bytes read: the first of a head sets its deadline `within` from now.
    fn read(&mut self, bytes: &[u8], within: Duration) {
        for &b in bytes {
            if !self.open {
                self.open = true;
                self.line_feeds = 0;
                self.deadline.as_mut().reset(Instant::now() + within);
            }
            match b {
                b'\n' => {
                    self.line_feeds += 1;
                    if self.line_feeds == 2 {
                        self.open = false;
                    }
                }
                b'\r' => {}
                _ => self.line_feeds = 0,
            }
        }
    }

    /// Whether an open head is past its deadline (registering for the wake when not).
    fn late(&mut self, cx: &mut Context<'_>) -> bool {
        self.open && self.deadline.as_mut().poll(cx).is_ready()
    }
}

impl IdleDeadline {
    fn around(stream: TcpStream, slot: OwnedSemaphorePermit, limits: PageLimits) -> Idle {
        Wrapped::wrap(
            stream,
            IdleDeadline {
                _slot: slot,
                limits,
                deadline: Box::pin(tokio::time::sleep(limits.idle)),
                head: Head {
                    deadline: Box::pin(tokio::time::sleep(limits.head)),
                    open: false,
                    line_feeds: 0,
                },
                reading: false,
            },
        )
    }
}

impl Watch<TcpStream> for IdleDeadline {
    /// The stream's own read, its bytes taken by the head's watch.
    fn poll_read(
        &mut self,
        stream: &mut TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.head.read(&buf.filled()[before..], self.limits.head);
        }
        self.reading = true;
        r
    }

    /// After progress: the idle deadline moves on (and a write, an answer, closes the
    /// head). While waiting: an error once the idle deadline or an open head's passed.
    fn seen<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        let read = std::mem::take(&mut self.reading);
        match r {
            Poll::Ready(r) => {
                if !read && r.is_ok() {
                    self.head.open = false;
                }
                let next = Instant::now() + self.limits.idle;
                self.deadline.as_mut().reset(next);
                Poll::Ready(r)
            }
            Poll::Pending => {
                let why = if self.head.late(cx) {
                    "the page's connection sent no whole request head in time"
                } else if self.deadline.as_mut().poll(cx).is_ready() {
                    "the page's connection was idle too long"
                } else {
                    return Poll::Pending;
                };
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
            }
        }
    }
}

/// The page's limits under the descriptor limit `fd_limit`, when `probes` descriptors
/// go to the targets' connections: 48 more are kept for the databases, the shared
/// store, the webhook and the runtime; the page takes what is left, up to
/// [`PAGE_CONNECTIONS`], at least 4. Gives the limits and, when the budget is short,
/// what to say.
pub fn budget(fd_limit: Option<u64>, probes: u64) -> (PageLimits, Option<String>) {
    const RESERVED: u64 = 48;
    let mut limits = PageLimits::default();
    let Some(limit) = fd_limit else {
        return (limits, None);
    };
    let want = probes + RESERVED + PAGE_CONNECTIONS as u64;
    if limit >= want {
        return (limits, None);
    }
    let left = limit.saturating_sub(probes + RESERVED).max(4);
    limits.connections = usize::try_from(left)
        .unwrap_or(PAGE_CONNECTIONS)
        .min(PAGE_CONNECTIONS);
    let probes_fit = limit >= probes + RESERVED + 4;
    let say = format!(
        "the descriptor limit (ulimit -n) is {limit}: the targets' connections need up to {probes}, the databases and the runtime ~{RESERVED}, the page {PAGE_CONNECTIONS}; the page takes at most {} connections at once{}; raise `ulimit -n` to {want}",
        limits.connections,
        if probes_fit {
            ""
        } else {
            ", and probes may fail with too many open files (EMFILE)"
        }
    );
    (limits, Some(say))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_takes_what_the_descriptor_budget_leaves() {
        assert_eq!(budget(None, 300), (PageLimits::default(), None));
        assert_eq!(budget(Some(1 << 20), 300).1, None);
        let (l, say) = budget(Some(256), 100);
        assert_eq!(l.connections, 108);
        let say = say.unwrap();
        assert!(
            say.contains("ulimit -n) is 256") && say.contains("to 276"),
            "{say}"
        );
        assert!(!say.contains("EMFILE"), "{say}");
        let (l, say) = budget(Some(256), 300);
        assert_eq!(l.connections, 4);
        assert!(say.unwrap().contains("EMFILE"));
    }

    /// A page answering `page` at `/` on 127.0.0.1 port 0 through [`Bounded`].
    async fn page(limits: PageLimits) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "page" }));
        tokio::spawn(async move {
            axum::serve(Bounded::new(listener, limits), app)
                .await
                .unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn f141_silent_page_connections_are_closed_and_the_page_still_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = page(PageLimits {
            connections: 2,
            idle: Duration::from_millis(300),
            head: PAGE_HEAD,
        })
        .await;
        // Two silent sockets take every slot (one trickles a byte of a request head).
        let mut silent = Vec::new();
        for _ in 0..2 {
            silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        silent[1].write_all(b"G").await.unwrap();
        let started = Instant::now();
        let mut page = tokio::net::TcpStream::connect(addr).await.unwrap();
        page.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), page.read_to_string(&mut answer))
            .await
            .expect("the page answers once an idle connection is closed")
            .unwrap();
        assert!(
            answer.starts_with("HTTP/1.0 200") && answer.ends_with("page"),
            "{answer}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        // The silent ones were closed by the page.
        for mut s in silent {
            let mut buf = [0u8; 64];
            let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
            assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
        }
    }

    #[tokio::test]
    async fn f147_a_trickled_request_head_is_closed_at_the_head_deadline() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = page(PageLimits {
            connections: 4,
            idle: Duration::from_millis(400),
            head: Duration::from_millis(800),
        })
        .await;
        // Half a request line, then a byte every 100 ms: never idle, never a whole head.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HT").await.unwrap();
        let started = Instant::now();
        let closed = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.write_all(b"X").await.is_err() {
                break started.elapsed();
            }
            let mut buf = [0u8; 64];
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "a trickled head still held its socket after 5 s"
            );
        };
        assert!(
            closed >= Duration::from_millis(700) && closed < Duration::from_secs(3),
            "{closed:?}"
        );
        // A whole head sent slowly within the bound is answered, and the
        // keep-alive connection's next head gets its own deadline.
        let mut page = tokio::net::TcpStream::connect(addr).await.unwrap();
        for part in [&b"GET / HTTP/1.1\r\n"[..], b"Host: x\r\n", b"\r\n"] {
            page.write_all(part).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(2), page.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
