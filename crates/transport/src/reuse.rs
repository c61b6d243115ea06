//! Whether a request went out on a connection that had answered before (a reused
//! pooled one) or on a fresh one. Only the first kind may be resent after the server
//! closed it unanswered: a fresh connection that closes may have delivered the request,
//! and sending it again would run it twice. hyper-util's pool does not say which it
//! was, so the connector tags each connection it opens and the client marks the tag
//! when an answer arrives on it.

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// One connection's tag: set once a response has arrived on it. hyper-util copies it
/// into every response's extensions and into the connection info of every error.
#[derive(Clone, Debug, Default)]
struct Answered(Arc<AtomicBool>);

/// Records that `response` arrived, so its connection counts as used from now on.
pub(crate) fn mark_answered<B>(response: &http::Response<B>) {
    if let Some(tag) = response.extensions().get::<Answered>() {
        tag.0.store(true, Ordering::Relaxed);
    }
}

/// Whether the connection `e` happened on had answered an earlier request; false when
/// the error carries no connection (it failed before one was made).
pub(crate) fn on_answered_connection(e: &hyper_util::client::legacy::Error) -> bool {
    let Some(info) = e.connect_info() else {
        return false;
    };
    let mut extensions = http::Extensions::new();
    info.get_extras(&mut extensions);
    extensions
        .get::<Answered>()
        .is_some_and(|tag| tag.0.load(Ordering::Relaxed))
}

/// A connector that tags every connection its inner connector opens.
#[derive(Clone, Debug)]
pub(crate) struct Tagging<C>(pub(crate) C);

impl<C> tower_service::Service<http::Uri> for Tagging<C>
where
    C: tower_service::Service<http::Uri>,
    C::Future: Send + 'static,
{
    type Response = Tagged<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let connecting = self.0.call(dst);
        Box::pin(async move {
            Ok(Tagged {
                io: connecting.await?,
                answered: Answered::default(),
            })
        })
    }
}

/// A connection with its tag; reads and writes go straight through.
#[derive(Debug)]
pub(crate) struct Tagged<T> {
    io: T,
    answered: Answered,
}

impl<T: Connection> Connection for Tagged<T> {
    fn connected(&self) -> Connected {
        self.io.connected().extra(self.answered.clone())
    }
}

impl<T: Read + Unpin> Read for Tagged<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Tagged<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}
