//! Request-smuggling guard (FAULTS 48). hyper resolves a request that carries both
//! `Content-Length` and `Transfer-Encoding` the RFC 9112 way (it drops the length),
//! so the service never sees the conflict. This scanner watches the raw bytes hyper
//! reads, request head by request head (skipping bodies by their framing), and tells
//! the service which requests had both headers so it can answer 400 and close.
//!
//! Pure state machine over bytes; the I/O wrapper is in [`GuardedIo`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Heads longer than this are hyper's to reject (431); the scanner stops watching.
const MAX_HEAD: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Collecting a request head until the blank line.
    Head,
    /// Skipping a body of known length.
    Fixed(u64),
    /// Chunked body: reading a chunk-size line.
    ChunkSize,
    /// Skipping chunk data plus its CRLF.
    ChunkData(u64),
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    /// Confused or over the limit: hyper decides; no more verdicts.
    Off,
}

/// One verdict per request head, in order: `true` when it had both headers.
#[derive(Debug, Clone, Default)]
pub struct Verdicts(Arc<Mutex<VecDeque<bool>>>);

impl Verdicts {
    /// The verdict for the next request hyper hands over (`false` when unknown).
    pub fn next(&self) -> bool {
        self.0
            .lock()
            .map(|mut q| q.pop_front().unwrap_or(false))
            .unwrap_or(false)
    }
}

/// Scans the bytes of one connection.
#[derive(Debug)]
pub struct Scanner {
    state: State,
    line: Vec<u8>,
    head: Vec<u8>,
    verdicts: Verdicts,
}

impl Scanner {
    /// A scanner at the start of a connection, handing its verdicts to `verdicts`.
    pub fn new(verdicts: Verdicts) -> Self {
        Scanner {
            state: State::Head,
            line: Vec::new(),
            head: Vec::new(),
            verdicts,
        }
    }

    /// Feeds bytes as they were read from the client.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Off => return,
                State::Fixed(n) => {
                    let k = (*n).min(bytes.len() as u64) as usize;
                    *n -= k as u64;
                    bytes = &bytes[k..];
                    if *n == 0 {
                        self.state = State::Head;
                    }
                }
                State::ChunkData(n) => {
                    let k = (*n).min(bytes.len() as u64) as usize;
                    *n -= k as u64;
                    bytes = &bytes[k..];
                    if *n == 0 {
                        self.state = State::ChunkSize;
                    }
                }
                State::Head => {
                    let (line_done, k) = take_line(&mut self.head, bytes);
                    bytes = &bytes[k..];
                    if self.head.len() > MAX_HEAD {
                        self.state = State::Off;
                    } else if line_done && self.head.ends_with(b"\n\n")
                        || self.head.ends_with(b"\r\n\r\n")
                    {
                        self.end_head();
                    } else if line_done && (self.head == b"\r\n" || self.head == b"\n") {
                        // Stray blank lines between requests are allowed.
                        self.head.clear();
                    }
                }
                State::ChunkSize | State::Trailers => {
                    let (line_done, k) = take_line(&mut self.line, bytes);
                    bytes = &bytes[k..];
                    if self.line.len() > 8192 {
                        self.state = State::Off;
                    } else if line_done {
                        let line = std::mem::take(&mut self.line);
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim();
                        self.state = if self.state == State::Trailers {
                            if text.is_empty() {
                                State::Head
                            } else {
                                State::Trailers
                            }
                        } else {
                            let hex = text.split(';').next().unwrap_or("").trim();
                            match u64::from_str_radix(hex, 16) {
                                Ok(0) => State::Trailers,
                                // The data, then its CRLF: the CRLF reads as an
                                // empty size line, skipped below.
                                Ok(n) => State::ChunkData(n),
                                Err(_) if text.is_empty() => State::ChunkSize,
                                Err(_) => State::Off,
                            }
                        };
                    }
                }
            }
        }
    }

    fn end_head(&mut self) {
        let head = std::mem::take(&mut self.head);
        let text = String::from_utf8_lossy(&head);
        let mut content_length: Option<u64> = None;
        let mut has_cl = false;
        let mut chunked = false;
        let mut has_te = false;
        for line in text.lines().skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let name = name.trim();
            if name.eq_ignore_ascii_case("content-length") {
                has_cl = true;
                content_length = value.trim().parse().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                has_te = true;
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
            }
        }
        if let Ok(mut q) = self.verdicts.0.lock() {
            q.push_back(has_cl && has_te);
        }
        self.state = if has_te && chunked {
            State::ChunkSize
        } else if has_te {
            // Not chunked: hyper rejects it; stop watching.
            State::Off
        } else {
            match (has_cl, content_length) {
                (false, _) | (true, Some(0)) => State::Head,
                (true, Some(n)) => State::Fixed(n),
                (true, None) => State::Off,
            }
        };
    }
}

/// Appends bytes up to and including the first LF to `buf`; returns whether a line
/// ended and how many bytes were taken.
fn take_line(buf: &mut Vec<u8>, bytes: &[u8]) -> (bool, usize) {
    match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => {
            buf.extend_from_slice(&bytes[..=i]);
            (true, i + 1)
        }
        None => {
            buf.extend_from_slice(bytes);
            (false, bytes.len())
        }
    }
}

/// The client connection, with every read shown to a [`Scanner`].
pub struct GuardedIo<T> {
    inner: T,
    scanner: Scanner,
}

impl<T> GuardedIo<T> {
    /// Wraps the client connection `inner`; its scanner's verdicts go to `verdicts`.
    pub fn new(inner: T, verdicts: Verdicts) -> Self {
        GuardedIo {
            inner,
            scanner: Scanner::new(verdicts),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.scanner.feed(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(input: &[&[u8]]) -> Vec<bool> {
        let v = Verdicts::default();
        let mut s = Scanner::new(v.clone());
        for part in input {
            s.feed(part);
        }
        let q = v.0.lock().unwrap();
        q.iter().copied().collect()
    }

    #[test]
    fn flags_both_headers_in_either_order() {
        let a: &[u8] =
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        let b: &[u8] =
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n";
        assert_eq!(verdicts(&[a]), vec![true]);
        assert_eq!(verdicts(&[b]), vec![true]);
    }

    #[test]
    fn skips_bodies_so_a_fake_head_inside_one_is_not_read() {
        let body =
            b"\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut req =
            format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        req.extend_from_slice(body);
        // A chunked request whose data looks like a head, then a clean GET.
        let chunked = format!(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            body.len(),
            String::from_utf8_lossy(body)
        );
        req.extend_from_slice(chunked.as_bytes());
        req.extend_from_slice(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
        // Byte by byte, as the worst split across reads.
        let parts: Vec<&[u8]> = req.chunks(1).collect();
        assert_eq!(verdicts(&parts), vec![false, false, false]);
        assert_eq!(verdicts(&[&req]), vec![false, false, false]);
    }
}
