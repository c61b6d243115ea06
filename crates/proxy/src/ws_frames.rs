//! A WebSocket frame reader (RFC 6455 §5) over bytes the proxy relays unchanged: it
//! never owns the socket or re-frames anything, it only follows the frames in a copy
//! of each read, however the reads split them, and hands on each complete message.
//! The header is a few bytes of pure code; tungstenite's own parser wants a whole
//! buffered frame and a stream, which the relay does not have.

/// Which side's frames these are: a client's must be masked, a server's must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's frames (masked).
    Client,
    /// The server's frames (unmasked).
    Server,
}

/// A complete message (fragments joined, unmasked) or a control frame of note.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message's payload.
    Text(&'a [u8]),
    /// A binary message's payload.
    Binary(&'a [u8]),
    /// A close frame's payload: the status code (2 bytes, big-endian) and the reason.
    Close(&'a [u8]),
}

/// A close frame's status code and reason as the record's error tells them
/// (`code 1011: engine overloaded`); empty for a close without a code.
pub fn close_detail(payload: &[u8]) -> String {
    match payload {
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            let reason = String::from_utf8_lossy(reason);
            let reason = cadence_wire::truncate_str(reason.trim(), 256);
            if reason.is_empty() {
                format!("code {code}")
            } else {
                format!("code {code}: {reason}")
            }
        }
        _ => String::new(),
    }
}

/// Why the bytes cannot be followed as WebSocket frames (the relay goes on unchanged;
/// the measurement stops).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A message past the cap (the wire's one-event limit).
    TooLarge(usize),
    /// Anything else against RFC 6455, in words.
    Protocol(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(cap) => write!(f, "a WebSocket message larger than {cap} bytes"),
            FrameError::Protocol(what) => write!(f, "not a WebSocket stream: {what}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    fin: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    /// Payload bytes still to come.
    left: u64,
    /// Payload bytes already seen (the mask's position).
    seen: u64,
}

/// Follows one direction of a WebSocket connection.
#[derive(Debug)]
pub struct FrameReader {
    side: Side,
    cap: usize,
    head: [u8; 14],
    have: usize,
    frame: Option<Frame>,
    /// The data message being assembled (first opcode, payload so far).
    message: Option<u8>,
    data: Vec<u8>,
    control: Vec<u8>,
    failed: Option<FrameError>,
    closed: bool,
}

impl FrameReader {
    /// A reader of `side`'s frames that refuses a message over `cap` bytes.
    pub fn new(side: Side, cap: usize) -> Self {
        FrameReader {
            side,
            cap,
            head: [0; 14],
            have: 0,
            frame: None,
            message: None,
            data: Vec::new(),
            control: Vec::new(),
            failed: None,
            closed: false,
        }
    }

    /// Reads one relayed chunk, calling `on` for each message it completes. After an
    /// error (returned once, then again on every call) nothing more is read; after a
    /// close frame the rest is ignored.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        on: &mut dyn FnMut(Message<'_>),
    ) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        while !bytes.is_empty() && !self.closed {
            let step = match self.frame {
                None => self.header(bytes, on),
                Some(f) => Ok(self.payload(f, bytes, on)),
            };
            match step {
                Ok(n) => bytes = &bytes[n..],
                Err(e) => {
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes header bytes; returns how many were used.
    fn header(
        &mut self,
        bytes: &[u8],
        on: &mut dyn FnMut(Message<'_>),
    ) -> Result<usize, FrameError> {
        let need = header_len(&self.head[..self.have]);
        let take = (need - self.have).min(bytes.len());
        self.head[self.have..self.have + take].copy_from_slice(&bytes[..take]);
        self.have += take;
        if self.have < header_len(&self.head[..self.have]) {
            return Ok(take);
        }
        let frame = self.parse_head()?;
        self.have = 0;
        self.start(frame, on)?;
        Ok(take)
    }

    /// The complete header in `head`, checked against the RFC.
    fn parse_head(&self) -> Result<Frame, FrameError> {
        let h = &self.head;
        let (fin, rsv, opcode) = (h[0] & 0x80 != 0, h[0] & 0x70, h[0] & 0x0f);
        if rsv != 0 {
            return Err(FrameError::Protocol(
                "reserved bits set (a compression extension such as permessage-deflate?)",
            ));
        }
        let masked = h[1] & 0x80 != 0;
        let (len, at) = match h[1] & 0x7f {
            126 => (u16::from_be_bytes([h[2], h[3]]) as u64, 4),
            127 => {
                let len = u64::from_be_bytes(h[2..10].try_into().expect("8 bytes"));
                if len >> 63 != 0 {
                    return Err(FrameError::Protocol("a 64-bit length with its top bit set"));
                }
                (len, 10)
            }
            n => (n as u64, 2),
        };
        match (self.side, masked) {
            (Side::Client, false) => return Err(FrameError::Protocol("a client frame not masked")),
            (Side::Server, true) => return Err(FrameError::Protocol("a server frame masked")),
            _ => {}
        }
        let mask = masked.then(|| [h[at], h[at + 1], h[at + 2], h[at + 3]]);
        Ok(Frame {
            fin,
            opcode,
            mask,
            left: len,
            seen: 0,
        })
    }

    /// Checks a new frame against the message in progress and begins it.
    fn start(&mut self, frame: Frame, on: &mut dyn FnMut(Message<'_>)) -> Result<(), FrameError> {
        match frame.opcode {
            0 if self.message.is_none() => {
                return Err(FrameError::Protocol("a continuation frame with no message"))
            }
            1 | 2 if self.message.is_some() => {
                return Err(FrameError::Protocol(
                    "a new message inside a fragmented one",
                ))
            }
            1 | 2 => self.message = Some(frame.opcode),
            0 => {}
            8..=10 if !frame.fin || frame.left > 125 => {
                return Err(FrameError::Protocol(
                    "a control frame fragmented or over 125 bytes",
                ))
            }
            8..=10 => self.control.clear(),
            _ => return Err(FrameError::Protocol("a reserved opcode")),
        }
        if frame.opcode < 8 && self.data.len() as u64 + frame.left > self.cap as u64 {
            return Err(FrameError::TooLarge(self.cap));
        }
        self.frame = Some(frame);
        if frame.left == 0 {
            self.complete(frame, on);
        }
        Ok(())
    }

    /// Takes payload bytes of `f`; returns how many were used.
    fn payload(&mut self, mut f: Frame, bytes: &[u8], on: &mut dyn FnMut(Message<'_>)) -> usize {
        let take = (f.left.min(bytes.len() as u64)) as usize;
        let buf = if f.opcode >= 8 {
            &mut self.control
        } else {
            &mut self.data
        };
        let start = buf.len();
        buf.extend_from_slice(&bytes[..take]);
        if let Some(mask) = f.mask {
            for (i, b) in buf[start..].iter_mut().enumerate() {
                *b ^= mask[((f.seen as usize) + i) % 4];
            }
        }
        f.left -= take as u64;
        f.seen += take as u64;
        self.frame = Some(f);
        if f.left == 0 {
            self.complete(f, on);
        }
        take
    }

    /// The frame's payload is all in: a final data frame completes its message.
    fn complete(&mut self, f: Frame, on: &mut dyn FnMut(Message<'_>)) {
        self.frame = None;
        match f.opcode {
            8 => {
                self.closed = true;
                on(Message::Close(&self.control));
            }
            9 | 10 => {}
            _ if f.fin => {
                match self.message.take() {
                    Some(1) => on(Message::Text(&self.data)),
                    _ => on(Message::Binary(&self.data)),
                }
                self.data.clear();
            }
            _ => {}
        }
    }
}

/// The header's full length, as far as the bytes so far tell (at least 2).
fn header_len(h: &[u8]) -> usize {
    if h.len() < 2 {
        return 2;
    }
    let mask = if h[1] & 0x80 != 0 { 4 } else { 0 };
    mask + match h[1] & 0x7f {
        126 => 4,
        127 => 10,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One frame as a peer would write it.
    fn frame(fin: bool, opcode: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(fin as u8) << 7 | opcode];
        let m = if mask.is_some() { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => out.push(m | n as u8),
            n if n < 65536 => {
                out.push(m | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(m | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mut body = payload.to_vec();
        if let Some(k) = mask {
            out.extend_from_slice(&k);
            for (i, b) in body.iter_mut().enumerate() {
                *b ^= k[i % 4];
            }
        }
        out.extend_from_slice(&body);
        out
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        Text(String),
        Binary(usize),
        Close,
    }

    fn read_in(side: Side, parts: &[&[u8]]) -> (Vec<Got>, Result<(), FrameError>) {
        let mut r = FrameReader::new(side, 1 << 20);
        let mut got = Vec::new();
        let mut res = Ok(());
        for p in parts {
            res = r.feed(p, &mut |m| {
                got.push(match m {
                    Message::Text(t) => Got::Text(String::from_utf8(t.to_vec()).unwrap()),
                    Message::Binary(b) => Got::Binary(b.len()),
                    Message::Close(_) => Got::Close,
                })
            });
            if res.is_err() {
                break;
            }
        }
        (got, res)
    }

    /// A server stream with fragmentation, an interleaved ping, 16- and 64-bit lengths,
    /// an empty message and a close.
    fn server_stream() -> (Vec<u8>, Vec<Got>) {
        let long = "x".repeat(300);
        let huge = "y".repeat(70_000);
        let mut b = Vec::new();
        b.extend(frame(
            true,
            1,
            None,
            br#"{"type":"response.text.delta","delta":"hi"}"#,
        ));
        b.extend(frame(false, 1, None, b"{\"type\":"));
        b.extend(frame(true, 9, None, b"ping"));
        b.extend(frame(false, 0, None, b"\"response"));
        b.extend(frame(true, 0, None, b".done\"}"));
        b.extend(frame(true, 1, None, long.as_bytes()));
        b.extend(frame(true, 2, None, huge.as_bytes()));
        b.extend(frame(true, 1, None, b""));
        b.extend(frame(true, 8, None, &[3, 232]));
        b.extend(frame(true, 1, None, b"after close"));
        let want = vec![
            Got::Text(r#"{"type":"response.text.delta","delta":"hi"}"#.into()),
            Got::Text(r#"{"type":"response.done"}"#.into()),
            Got::Text(long),
            Got::Binary(70_000),
            Got::Text(String::new()),
            Got::Close,
        ];
        (b, want)
    }

    #[test]
    fn messages_are_the_same_at_every_split() {
        let (bytes, want) = server_stream();
        // Every split in two over the opening frames (the header bytes, the fragments,
        // the ping), then a coarser walk over the long ones.
        let splits = (0..200).chain((200..bytes.len()).step_by(997));
        for at in splits {
            let (got, res) = read_in(Side::Server, &[&bytes[..at], &bytes[at..]]);
            assert_eq!(res, Ok(()), "split at {at}");
            assert_eq!(got, want, "split at {at}");
        }
        // One byte per read.
        let ones: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read_in(Side::Server, &ones).0, want);
    }

    #[test]
    fn client_frames_are_unmasked_across_splits() {
        let key = [0x12, 0x34, 0x56, 0x78];
        let msg = br#"{"type":"response.create","response":{"max_output_tokens":6}}"#;
        let mut bytes = frame(false, 1, Some(key), &msg[..7]);
        bytes.extend(frame(true, 0, Some([9, 8, 7, 6]), &msg[7..]));
        for at in 0..=bytes.len() {
            let (got, res) = read_in(Side::Client, &[&bytes[..at], &bytes[at..]]);
            assert_eq!(res, Ok(()));
            assert_eq!(
                got,
                vec![Got::Text(String::from_utf8(msg.to_vec()).unwrap())]
            );
        }
    }

    #[test]
    fn rule_breaking_frames_are_errors() {
        let bad: [(Side, Vec<u8>, &str); 8] = [
            (
                Side::Server,
                frame(true, 1, Some([1, 2, 3, 4]), b"a"),
                "masked",
            ),
            (Side::Client, frame(true, 1, None, b"a"), "not masked"),
            (Side::Server, frame(true, 0, None, b"a"), "continuation"),
            (Side::Server, frame(true, 3, None, b"a"), "reserved opcode"),
            (Side::Server, frame(false, 9, None, b"a"), "control frame"),
            (
                Side::Server,
                frame(true, 8, None, &[0; 126]),
                "control frame",
            ),
            (Side::Server, vec![0xc1, 0x01, b'a'], "reserved bits"),
            (
                Side::Server,
                [frame(false, 1, None, b"a"), frame(true, 1, None, b"b")].concat(),
                "inside a fragmented",
            ),
        ];
        for (side, bytes, needle) in bad {
            let (got, res) = read_in(side, &[&bytes]);
            let e = res.unwrap_err().to_string();
            assert!(e.contains(needle), "{e} / {needle}");
            assert!(got.is_empty());
        }
        let mut too_long = vec![0x81, 127];
        too_long.extend_from_slice(&(1u64 << 63).to_be_bytes());
        assert!(read_in(Side::Server, &[&too_long]).1.is_err());
    }

    #[test]
    fn a_message_past_the_cap_is_too_large_and_reading_stops() {
        let mut r = FrameReader::new(Side::Server, 10);
        let mut n = 0;
        let mut bytes = frame(false, 1, None, b"123456");
        bytes.extend(frame(true, 0, None, b"789012"));
        assert_eq!(
            r.feed(&bytes, &mut |_| n += 1),
            Err(FrameError::TooLarge(10))
        );
        assert_eq!(
            r.feed(&frame(true, 1, None, b"a"), &mut |_| n += 1),
            Err(FrameError::TooLarge(10))
        );
        assert_eq!(n, 0);
    }
}
