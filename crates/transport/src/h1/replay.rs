//! The lean client's reading of a response from bytes in memory, without a socket: the
//! door the fuzzers and tests use to hold the head parser and the body's framing to one
//! answer however the server's bytes are cut into reads.

use super::{head_step, Decoder, Framing, H1Error, HeadStep, Kind};
use std::io;

/// A response as the client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResponse {
    /// The final head's status code (interim 1xx heads are skipped).
    pub status: u16,
    /// The final head's headers in order, names lowercased.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body's payload, its framing (chunk sizes, trailers) taken off.
    pub body: Vec<u8>,
    /// The head lets the connection carry another request.
    pub keep_alive: bool,
}

/// Reads a response off `reads` (the socket's reads in order, EOF after the last) as
/// [`super::Pool`]'s requests do: the head parsed once it is all there, interim heads
/// skipped, the body's framing taken off read by read, bytes after the body's end left
/// unread. The errors are the client's: a bad or over-long head, a connection closed
/// before the head or the body's end, bad chunk framing.
pub fn read_response(reads: &[&[u8]]) -> Result<ReadResponse, H1Error> {
    // An empty read is EOF to a socket reader: the bytes after it never arrive.
    let mut reads = reads.iter().take_while(|r| !r.is_empty());
    let mut buf = Vec::new();
    let mut got_any = false;
    let (head, framing, keep_alive) = loop {
        if !buf.is_empty() {
            match head_step(&buf)? {
                HeadStep::Interim(n) => {
                    buf.drain(..n);
                    continue;
                }
                HeadStep::Final(head, framing, keep_alive, n) => {
                    buf.drain(..n);
                    break (head, framing, keep_alive);
                }
                HeadStep::Partial => {}
            }
        }
        let Some(read) = reads.next() else {
            let kind = if got_any {
                Kind::ClosedMidBody
            } else {
                Kind::ClosedBeforeResponse
            };
            return Err(eof(kind, "the server closed the connection"));
        };
        buf.extend_from_slice(read);
        got_any = true;
    };
    let mut decoder = Decoder::new(framing);
    let mut body = Vec::new();
    loop {
        if !buf.is_empty() && !decoder.is_done() {
            let mut out = 0..0;
            let used = decoder.decode(&mut buf, &mut out)?;
            body.extend_from_slice(&buf[out]);
            buf.drain(..used);
        }
        if decoder.is_done() {
            break;
        }
        match reads.next() {
            Some(read) => buf.extend_from_slice(read),
            None if framing == Framing::Close => break,
            None => {
                return Err(eof(
                    Kind::ClosedMidBody,
                    "end of file before the message length was reached",
                ))
            }
        }
    }
    let headers = head
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    Ok(ReadResponse {
        status: head.status.as_u16(),
        headers,
        body,
        keep_alive,
    })
}

fn eof(kind: Kind, what: &str) -> H1Error {
    H1Error::new(kind, io::Error::new(io::ErrorKind::UnexpectedEof, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNKED: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\ntrailer: t\r\n\r\n";

    #[test]
    fn a_chunked_body_reads_the_same_cut_anywhere() {
        let whole = read_response(&[CHUNKED]).unwrap();
        assert_eq!(whole.status, 200);
        assert_eq!(whole.body, b"hello world");
        assert!(whole.keep_alive);
        for cut in 1..CHUNKED.len() {
            let split = read_response(&[&CHUNKED[..cut], &CHUNKED[cut..]]).unwrap();
            assert_eq!(split, whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_body_cut_short_is_an_error_and_a_close_delimited_one_ends_at_eof() {
        let short = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
        let e = read_response(&[short]).unwrap_err();
        assert!(!e.is_closed_before_response());
        assert_eq!(
            e.to_string(),
            "connection closed before the body was complete"
        );
        let close = b"HTTP/1.0 200 OK\r\n\r\nabc";
        let r = read_response(&[close, b"def"]).unwrap();
        assert_eq!((r.body.as_slice(), r.keep_alive), (&b"abcdef"[..], false));
        assert!(read_response(&[]).unwrap_err().is_closed_before_response());
    }
}
