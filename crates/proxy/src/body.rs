//! Request bodies read in bounded memory and time: each frame hyper hands over is copied
//! into one contiguous buffer and dropped at once, so a body dripped one byte per TCP
//! segment does not pin one read buffer per byte (FAULTS 97), and the whole body must
//! arrive within the body read timeout (FAULTS 98).

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use std::time::Duration;

/// The most a body buffer reserves before its bytes arrive, whatever the request's
/// `Content-Length` declares.
pub(crate) const FIRST_CAPACITY: usize = 64 * 1024;

/// One request body as it arrives: one allocation that grows by doubling, never past
/// twice the bytes it holds (or [`FIRST_CAPACITY`]), nor past the body limit.
#[derive(Debug)]
pub(crate) struct BodyBuffer {
    buf: Vec<u8>,
    limit: usize,
}

/// The body would exceed the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

impl BodyBuffer {
    /// A buffer for a body of `declared` bytes (its `Content-Length`, if any), at most
    /// `limit`.
    pub fn new(declared: Option<u64>, limit: usize) -> BodyBuffer {
        let first = declared
            .map_or(0, |d| usize::try_from(d).unwrap_or(usize::MAX))
            .min(FIRST_CAPACITY)
            .min(limit);
        BodyBuffer {
            buf: Vec::with_capacity(first),
            limit,
        }
    }

    /// Copies `data` in.
    pub fn push(&mut self, data: &[u8]) -> Result<(), TooLarge> {
        let need = self.buf.len().checked_add(data.len()).ok_or(TooLarge)?;
        if need > self.limit {
            return Err(TooLarge);
        }
        if need > self.buf.capacity() {
            let grown = need
                .max(self.buf.capacity().saturating_mul(2))
                .min(self.limit);
            self.buf.reserve_exact(grown - self.buf.len());
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of memory the buffer holds.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub fn into_bytes(self) -> Bytes {
        Bytes::from(self.buf)
    }
}

/// Why a request body was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Declared or sent beyond the limit.
    TooLarge,
    /// Not complete within the body read timeout.
    TimedOut,
    /// The client's connection failed or the body was malformed.
    Failed,
}

/// Each this many body bytes received extend the body read timeout by a second: a body
/// arriving at 8 KiB/s or faster is never cut, however large (within the limit); one
/// dripped slower gets the timeout and little more.
pub(crate) const EARNS_A_SECOND: usize = 8 * 1024;

/// Reads a whole body of `declared` bytes (if known) within `limit` bytes and
/// `timeout`, extended by a second per [`EARNS_A_SECOND`] bytes received.
pub(crate) async fn read<B>(
    body: B,
    declared: Option<u64>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
{
    if declared.is_some_and(|d| d > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = body;
    let start = tokio::time::Instant::now();
    let mut buf = BodyBuffer::new(declared, limit);
    loop {
        let earned = Duration::from_secs_f64(buf.buf.len() as f64 / EARNS_A_SECOND as f64);
        let frame = match tokio::time::timeout_at(start + timeout + earned, body.frame()).await {
            Err(_) => return Err(BodyError::TimedOut),
            Ok(None) => return Ok(buf.into_bytes()),
            Ok(Some(frame)) => frame.map_err(|_| BodyError::Failed)?,
        };
        if let Some(data) = frame.data_ref() {
            buf.push(data).map_err(|TooLarge| BodyError::TooLarge)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FAULTS 97: a body fed one byte at a time, each byte a slice of a read buffer of
    /// its own (as hyper hands over a dripped body), holds one buffer of at most twice
    /// its bytes plus the first reservation, and no read buffer.
    #[test]
    fn f97_a_dripped_body_is_held_in_one_buffer_of_bounded_capacity() {
        let limit = 8 << 20;
        let mut b = BodyBuffer::new(Some(60 << 20), limit);
        assert!(b.capacity() <= FIRST_CAPACITY, "{}", b.capacity());
        let mut reads = Vec::new();
        for i in 0..300_000usize {
            let read = Bytes::from(vec![b'x'; 8192]);
            let frame = read.slice(i % 8192..i % 8192 + 1);
            drop(read);
            b.push(&frame).unwrap();
            if i % 10_000 == 0 {
                reads.push((b.len(), b.capacity()));
            }
        }
        for (len, cap) in reads.into_iter().chain([(b.len(), b.capacity())]) {
            assert!(
                cap <= 2 * len + FIRST_CAPACITY,
                "{cap} bytes held for {len} body bytes"
            );
        }
        assert_eq!(b.into_bytes().len(), 300_000);
    }

    #[test]
    fn the_buffer_never_grows_past_the_limit() {
        let mut b = BodyBuffer::new(None, 100_000);
        for _ in 0..100_000 {
            b.push(b"y").unwrap();
        }
        assert!(b.capacity() <= 100_000, "{}", b.capacity());
        assert_eq!(b.push(b"z"), Err(TooLarge));
        let mut b = BodyBuffer::new(Some(u64::MAX), 10);
        assert!(b.capacity() <= 10);
        assert_eq!(b.push(&[0; 11]), Err(TooLarge));
    }

    /// A body of `n` frames of `size` bytes, one every `every`.
    fn paced(
        n: usize,
        size: usize,
        every: Duration,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames = futures_util::stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            tokio::time::sleep(every).await;
            let f = hyper::body::Frame::data(Bytes::from(vec![b' '; size]));
            Some((Ok(f), i + 1))
        });
        http_body_util::StreamBody::new(Box::pin(frames))
    }

    /// FAULTS 98: a body dripped one byte a second is cut at the timeout though bytes
    /// keep coming; one that keeps a real rate earns the time it needs.
    #[tokio::test(start_paused = true)]
    async fn f98_a_dripped_body_is_cut_at_the_timeout_and_a_steady_one_is_not() {
        let t = Duration::from_secs(20);
        let start = tokio::time::Instant::now();
        let r = read(
            paced(1000, 1, Duration::from_secs(1)),
            Some(1000),
            1 << 20,
            t,
        )
        .await;
        assert_eq!(r, Err(BodyError::TimedOut));
        let took = start.elapsed();
        assert!(took >= t && took < t + Duration::from_secs(2), "{took:?}");
        // 4 MiB at 32 KiB/s: 128 s, past the timeout, at four times the minimum rate.
        let r = read(
            paced(64, 64 << 10, Duration::from_secs(2)),
            None,
            8 << 20,
            t,
        )
        .await;
        assert_eq!(r.unwrap().len(), 4 << 20);
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_before_reading() {
        let body = http_body_util::Full::new(Bytes::from_static(b"abc"));
        let r = read(body, Some(11), 10, Duration::from_secs(1)).await;
        assert_eq!(r, Err(BodyError::TooLarge));
        let body = http_body_util::Full::new(Bytes::from_static(b"abc"));
        let r = read(body, Some(3), 10, Duration::from_secs(1)).await;
        assert_eq!(r.unwrap(), Bytes::from_static(b"abc"));
    }
}
