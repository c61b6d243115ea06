//! The page's connections, bounded: at most so many at once (each holds a descriptor
//! the probes need too), and one that moves no byte for a while (an idle keep-alive, a
//! client that trickles or never sends) is closed, so silent sockets cannot take the
//! page or the probes' descriptors.

use cadence_transport::wrapped::{Watch, Wrapped};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The page's connections at most at once (lowered when the descriptor budget is short).
pub const PAGE_CONNECTIONS: usize = 128;

/// A page connection that moves no byte for this long is closed.
pub const PAGE_IDLE: Duration = Duration::from_secs(10);

/// How the page's connections are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Connections at most at once; more wait in the kernel's queue.
    pub connections: usize,
    /// A connection idle this long is closed.
    pub idle: Duration,
}

impl Default for PageLimits {
    fn default() -> Self {
        PageLimits {
            connections: PAGE_CONNECTIONS,
            idle: PAGE_IDLE,
        }
    }
}

/// A listener that accepts while a connection slot is free.
pub(crate) struct Bounded {
    inner: tokio::net::TcpListener,
    slots: Arc<Semaphore>,
    idle: Duration,
}

impl Bounded {
    pub(crate) fn new(inner: tokio::net::TcpListener, limits: PageLimits) -> Bounded {
        Bounded {
            inner,
            slots: Arc::new(Semaphore::new(limits.connections.max(1))),
            idle: limits.idle,
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
                Ok((stream, peer)) => return (IdleDeadline::around(stream, slot, self.idle), peer),
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

/// A page connection: the stream with its slot and idle deadline.
pub(crate) type Idle = Wrapped<TcpStream, IdleDeadline>;

/// A page connection's slot, freed when it closes, and the idle deadline that every
/// byte read or written moves on.
pub(crate) struct IdleDeadline {
    _slot: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleDeadline {
    fn around(stream: TcpStream, slot: OwnedSemaphorePermit, idle: Duration) -> Idle {
        Wrapped::wrap(
            stream,
            IdleDeadline {
                _slot: slot,
                idle,
                deadline: Box::pin(tokio::time::sleep(idle)),
            },
        )
    }
}

impl Watch<TcpStream> for IdleDeadline {
    /// After progress: the deadline moves on. While waiting: an error once it passed.
    fn seen<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                let next = Instant::now() + self.idle;
                self.deadline.as_mut().reset(next);
                Poll::Ready(r)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the page's connection was idle too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
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

    #[tokio::test]
    async fn f141_silent_page_connections_are_closed_and_the_page_still_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = PageLimits {
            connections: 2,
            idle: Duration::from_millis(300),
        };
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "page" }));
        tokio::spawn(async move {
            axum::serve(Bounded::new(listener, limits), app)
                .await
                .unwrap();
        });
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
}
