//! One wrapper for a stream that a type holds and looks at on the way: its writes pass
//! through, its reads too unless the holder reads in a way of its own, and each read's
//! and write's result is shown to the holder first. The kernel-stamped reads
//! ([`crate::rxstamp::StampedTcp`]) and the watch page's idle deadline are two such
//! holders, so neither spells out the `AsyncRead`/`AsyncWrite` plumbing again.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a wrapper adds to the stream `S` it holds.
pub trait Watch<S> {
    /// Reads from `stream` into `buf`: by default, the stream's own read.
    fn poll_read(
        &mut self,
        stream: &mut S,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>>
    where
        S: AsyncRead + Unpin,
    {
        Pin::new(stream).poll_read(cx, buf)
    }

    /// What becomes of a read's or a write's result `r` (by default, itself): a wrapper
    /// that closes idle connections moves its deadline on progress and fails a wait
    /// past it. Flushes and shutdowns are not shown.
    fn seen<T>(&mut self, _cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        r
    }
}

/// A stream `S` with what `W` adds to it.
#[derive(Debug)]
pub struct Wrapped<S, W> {
    pub(crate) stream: S,
    pub(crate) watch: W,
}

impl<S, W> Wrapped<S, W> {
    /// `stream`, looked at by `watch`.
    pub fn wrap(stream: S, watch: W) -> Self {
        Wrapped { stream, watch }
    }

    /// The stream held.
    pub fn stream(&self) -> &S {
        &self.stream
    }
}

impl<S: AsyncRead + Unpin, W: Watch<S> + Unpin> AsyncRead for Wrapped<S, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = this.watch.poll_read(&mut this.stream, cx, buf);
        this.watch.seen(cx, r)
    }
}

impl<S: AsyncWrite + Unpin, W: Watch<S> + Unpin> AsyncWrite for Wrapped<S, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch.seen(cx, r)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch.seen(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts the results it is shown and turns the third into an error.
    #[derive(Default)]
    struct Count(usize);

    impl<S> Watch<S> for Count {
        fn seen<T>(&mut self, _: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
            self.0 += 1;
            if self.0 == 3 {
                return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
            }
            r
        }
    }

    #[tokio::test]
    async fn reads_and_writes_pass_through_and_each_result_is_seen() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut w = Wrapped::wrap(a, Count::default());
        w.write_all(b"ping").await.unwrap();
        let mut got = [0; 4];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        b.write_all(b"pong").await.unwrap();
        w.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        assert_eq!(w.watch.0, 2);
        w.flush().await.unwrap();
        assert_eq!(w.watch.0, 2, "a flush is not shown");
        let e = w.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
