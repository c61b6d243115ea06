//! Incremental Server-Sent Events framing after the WHATWG "event stream" rules, fed
//! socket reads of any size: the one place where bytes become events, so a split read,
//! a stray CR or a split UTF-8 character can never change what a stream means.
//!
//! Invalid UTF-8 is decoded lossily (U+FFFD) and the event is flagged `lossy`, so the
//! caller can count it as malformed without losing the rest of the event.

use crate::{utf8, BomStep, BomStripper, MAX_EVENT_BYTES};
use memchr::{memchr, memchr2};
use std::ops::ControlFlow;

/// Buffers that grew past this are released after the event that needed them.
const SHRINK_ABOVE: usize = 64 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` type, `"message"` when none was given.
    pub event: &'a str,
    /// The `data:` lines joined with `\n`.
    pub data: &'a str,
    /// The last event id of the stream (it persists across events), if non-empty.
    pub id: Option<&'a str>,
    /// Some bytes of a field were not UTF-8 and were replaced by U+FFFD.
    pub lossy: bool,
}

/// What the decoder reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// A complete event (ended by a blank line) with at least one `data` field.
    Event(SseEvent<'a>),
    /// A comment line (`: ping`), text after the colon with one leading space stripped.
    Comment(&'a str),
    /// A block ended by a blank line that set `event:` but had no `data` field. WHATWG
    /// dispatches nothing for it; it is reported so keep-alives such as a bare
    /// `event: ping` can be counted.
    Dataless {
        /// The block's `event:` field value (`ping`, say).
        event: &'a str,
    },
    /// One event's buffered bytes (or one line) exceeded the cap. The decoder discards
    /// input until the next blank line; memory stays bounded.
    TooLarge,
    /// At EOF, an event (or line) had started but was never ended by a blank line; per
    /// WHATWG it is discarded. `bytes` is roughly how much was pending.
    Incomplete {
        /// Roughly how many bytes were pending and dropped.
        bytes: usize,
    },
}

/// Incremental WHATWG event-stream decoder.
#[derive(Debug, Clone)]
pub struct SseDecoder {
    cap: usize,
    /// The current line when it spans feeds.
    line: Vec<u8>,
    /// The data buffer: each `data` value followed by LF.
    data: Vec<u8>,
    event_type: String,
    /// The `event:` value was not valid UTF-8.
    event_lossy: bool,
    last_id: String,
    retry: Option<u64>,
    scratch: String,
    bom: BomStripper,
    /// The last line ended with CR at the very end of a feed: an LF starting the next
    /// feed belongs to it.
    skip_lf: bool,
    /// Discarding an oversized event until the next blank line.
    discarding: bool,
    /// While discarding: the current line has bytes (so its end is not a blank line).
    discard_line_nonempty: bool,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the 1 MiB per-event cap.
    pub fn new() -> Self {
        Self::with_cap(MAX_EVENT_BYTES)
    }

    /// A decoder with another per-event cap (tests, or a tighter budget).
    pub fn with_cap(cap: usize) -> Self {
        SseDecoder {
            cap,
            line: Vec::new(),
            data: Vec::new(),
            event_type: String::new(),
            event_lossy: false,
            last_id: String::new(),
            retry: None,
            scratch: String::new(),
            bom: BomStripper::default(),
            skip_lf: false,
            discarding: false,
            discard_line_nonempty: false,
        }
    }

    /// The last event id seen (`id:` persists across events), empty if none.
    pub fn last_event_id(&self) -> &str {
        &self.last_id
    }

    /// The reconnection time from the last valid `retry:` field, in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry
    }

    /// True when the previous feed ended with a CR, so an LF opening the next feed is
    /// the rest of that line terminator and no new line.
    pub fn awaiting_lf(&self) -> bool {
        self.skip_lf
    }

    /// Back to a fresh stream, keeping allocations.
    pub fn reset(&mut self) {
        self.line.clear();
        self.data.clear();
        self.event_type.clear();
        self.event_lossy = false;
        self.last_id.clear();
        self.retry = None;
        self.bom.reset();
        self.skip_lf = false;
        self.discarding = false;
        self.discard_line_nonempty = false;
    }

    /// A read that may be one whole event of one `data` field, the shape most servers
    /// send a chunk in: `data:`, at most one space, VALUE, then a blank line (LF LF or
    /// CR LF CR LF), with this decoder holding nothing from earlier reads (no partial
    /// line, data or event type, no CR awaiting its LF, no event being discarded, the
    /// stream start and its BOM behind) and the read within the cap. Gives VALUE, or
    /// `None` for any other read.
    ///
    /// When VALUE holds no CR or LF, feeding the read would report exactly one
    /// [`SseItem::Event`]: type `message`, data VALUE (decoded as UTF-8, lossily when
    /// it is not), the last event id; and leave the decoder as it is. A caller that
    /// checks that much may take the event from here instead of feeding the read.
    /// Otherwise VALUE spans several lines and the read must be fed.
    #[inline]
    pub fn lone_data_event<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        if bytes.len() > self.cap
            || !self.line.is_empty()
            || !self.data.is_empty()
            || !self.event_type.is_empty() // (a lossy one is not empty either)
            || self.skip_lf
            || self.discarding
            || !self.bom.is_done()
        {
            return None;
        }
        let rest = bytes.strip_prefix(b"data:")?;
        let value = strip_one_space(rest);
        value
            .strip_suffix(b"\n\n")
            .or_else(|| value.strip_suffix(b"\r\n\r\n"))
    }

    /// Decode one read's bytes, reporting every item completed by them.
    pub fn feed(&mut self, bytes: &[u8], out: &mut impl FnMut(SseItem<'_>)) {
        self.feed_with(bytes, &mut |item| {
            out(item);
            ControlFlow::Continue(())
        });
    }

    /// Like [`feed`](Self::feed), but the callback may stop decoding right after an
    /// item. Returns how many bytes of `bytes` were consumed (all of them unless
    /// stopped); the rest has not been looked at and is not buffered.
    pub fn feed_with(
        &mut self,
        bytes: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> usize {
        match self.bom.step(bytes) {
            BomStep::Hold => bytes.len(),
            BomStep::Go { replay, rest } => {
                let skipped = bytes.len() - rest.len();
                if !replay.is_empty() {
                    // A BOM prefix that was not a BOM: it holds no line break, so it
                    // can only extend the current line.
                    let _ = self.partial(replay, out);
                }
                skipped + self.process(rest, out)
            }
        }
    }

    /// EOF: report an incomplete pending event (WHATWG discards it) and reset.
    pub fn finish(&mut self, out: &mut impl FnMut(SseItem<'_>)) {
        self.finish_with(&mut |item| {
            out(item);
            ControlFlow::Continue(())
        });
    }

    /// [`finish`](Self::finish) with the same callback type as [`feed_with`](Self::feed_with).
    pub fn finish_with(&mut self, out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>) {
        let pending = if self.discarding {
            0
        } else {
            self.bom.held().len() + self.line.len() + self.data.len() + self.event_type.len()
        };
        if pending > 0 {
            let _ = out(SseItem::Incomplete { bytes: pending });
        }
        self.reset();
    }

    fn process(
        &mut self,
        bytes: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> usize {
        let mut pos = 0;
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                pos = 1;
            }
        }
        // The common case, an event whose only data line and blank line both sit in this
        // read, is dispatched straight from `bytes`: the data value waits here instead of
        // being copied, and is copied only if anything else happens first.
        let mut pending: Option<&[u8]> = None;
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            let Some(i) = memchr2(b'\n', b'\r', rest) else {
                self.flush_pending(&mut pending);
                let _ = self.partial(rest, out);
                return bytes.len();
            };
            let mut next = pos + i + 1;
            if rest[i] == b'\r' {
                if next < bytes.len() {
                    if bytes[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.skip_lf = true;
                }
            }
            let line = &rest[..i];
            pos = next;
            let whole = self.line.is_empty() && !self.discarding;
            let flow = if whole && line.is_empty() && pending.is_some() {
                self.dispatch_data(pending.take().unwrap_or_default(), out)
            } else if let (true, None, true, Some(v)) =
                (whole, pending, self.data.is_empty(), data_value(line))
            {
                if line.len() > self.cap {
                    self.too_large(false, out)
                } else {
                    pending = Some(v);
                    ControlFlow::Continue(())
                }
            } else {
                self.flush_pending(&mut pending);
                self.end_line(line, out)
            };
            if flow.is_break() {
                break;
            }
        }
        self.flush_pending(&mut pending);
        pos
    }

    /// Copy a data value held back by [`process`](Self::process) into the buffer.
    fn flush_pending(&mut self, pending: &mut Option<&[u8]>) {
        if let Some(v) = pending.take() {
            self.data.extend_from_slice(v);
            self.data.push(b'\n');
        }
    }

    /// Bytes of a line whose end has not arrived yet.
    fn partial(
        &mut self,
        part: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.discarding {
            if !part.is_empty() {
                self.discard_line_nonempty = true;
            }
            return ControlFlow::Continue(());
        }
        if self.line.len() + part.len() + self.data.len() > self.cap {
            return self.too_large(true, out);
        }
        self.line.extend_from_slice(part);
        ControlFlow::Continue(())
    }

    /// A line terminator arrived; `part` is the line's bytes in this feed.
    fn end_line(
        &mut self,
        part: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.discarding {
            let blank = !self.discard_line_nonempty && part.is_empty();
            self.discard_line_nonempty = false;
            if blank {
                self.discarding = false;
                self.data.clear();
                self.event_type.clear();
                self.event_lossy = false;
            }
            return ControlFlow::Continue(());
        }
        if self.line.len() + part.len() + self.data.len() > self.cap {
            return self.too_large(false, out);
        }
        if self.line.is_empty() {
            self.process_line(part, out)
        } else {
            self.line.extend_from_slice(part);
            let line = std::mem::take(&mut self.line);
            let flow = self.process_line(&line, out);
            self.line = line;
            self.line.clear();
            if self.line.capacity() > SHRINK_ABOVE {
                self.line = Vec::new();
            }
            flow
        }
    }

    fn too_large(
        &mut self,
        mid_line: bool,
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.line = Vec::new();
        self.data = Vec::new();
        self.event_type.clear();
        self.event_lossy = false;
        self.discarding = true;
        self.discard_line_nonempty = mid_line;
        out(SseItem::TooLarge)
    }

    fn process_line(
        &mut self,
        line: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if line.is_empty() {
            return self.dispatch(out);
        }
        let (name, value) = match memchr(b':', line) {
            Some(0) => {
                let (text, _) = utf8(strip_one_space(&line[1..]), &mut self.scratch);
                return out(SseItem::Comment(text));
            }
            Some(i) => (&line[..i], strip_one_space(&line[i + 1..])),
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                let (text, lossy) = utf8(value, &mut self.scratch);
                self.event_type.clear();
                self.event_type.push_str(text);
                self.event_lossy = lossy;
            }
            b"id" if memchr(0, value).is_none() => {
                self.last_id.clear();
                self.last_id.push_str(&String::from_utf8_lossy(value));
            }
            // All ASCII digits, so valid UTF-8; an overflowing value is ignored.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// A blank line ending an event whose data is `data` (borrowed from the read when it
    /// was a single line, else the buffer); clears the event type.
    fn dispatch_data(
        &mut self,
        data: &[u8],
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let (data, data_lossy) = utf8(data, &mut self.scratch);
        let event = if self.event_type.is_empty() {
            "message"
        } else {
            self.event_type.as_str()
        };
        let id = (!self.last_id.is_empty()).then_some(self.last_id.as_str());
        let lossy = data_lossy || self.event_lossy;
        let flow = out(SseItem::Event(SseEvent {
            event,
            data,
            id,
            lossy,
        }));
        self.event_type.clear();
        self.event_lossy = false;
        flow
    }

    /// A blank line: dispatch the pending event, if any.
    fn dispatch(
        &mut self,
        out: &mut impl FnMut(SseItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.data.is_empty() {
            let flow = if self.event_type.is_empty() {
                ControlFlow::Continue(())
            } else {
                out(SseItem::Dataless {
                    event: &self.event_type,
                })
            };
            self.event_type.clear();
            self.event_lossy = false;
            return flow;
        }
        self.data.pop(); // the LF after the last data line
                         // Taken out for the call (no allocation) and put back to keep its capacity.
        let mut data = std::mem::take(&mut self.data);
        let flow = self.dispatch_data(&data, out);
        data.clear();
        if data.capacity() <= SHRINK_ABOVE {
            self.data = data;
        }
        flow
    }
}

/// The value of a `data` field line, or `None` for any other line.
#[inline]
fn data_value(line: &[u8]) -> Option<&[u8]> {
    match line.strip_prefix(b"data")? {
        [] => Some(&[]),
        [b':', v @ ..] => Some(strip_one_space(v)),
        _ => None,
    }
}

fn strip_one_space(v: &[u8]) -> &[u8] {
    match v.first() {
        Some(b' ') => &v[1..],
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Own {
        Event {
            event: String,
            data: String,
            id: Option<String>,
            lossy: bool,
        },
        Comment(String),
        Dataless(String),
        TooLarge,
        Incomplete,
    }

    fn own(item: SseItem<'_>) -> Own {
        match item {
            SseItem::Event(e) => Own::Event {
                event: e.event.to_owned(),
                data: e.data.to_owned(),
                id: e.id.map(str::to_owned),
                lossy: e.lossy,
            },
            SseItem::Comment(c) => Own::Comment(c.to_owned()),
            SseItem::Dataless { event } => Own::Dataless(event.to_owned()),
            SseItem::TooLarge => Own::TooLarge,
            SseItem::Incomplete { .. } => Own::Incomplete,
        }
    }

    fn decode_feeds(dec: &mut SseDecoder, feeds: &[&[u8]]) -> Vec<Own> {
        let mut items = Vec::new();
        for f in feeds {
            dec.feed(f, &mut |i| items.push(own(i)));
        }
        dec.finish(&mut |i| items.push(own(i)));
        items
    }

    fn decode(feeds: &[&[u8]]) -> Vec<Own> {
        decode_feeds(&mut SseDecoder::new(), feeds)
    }

    fn ev(data: &str) -> Own {
        Own::Event {
            event: "message".into(),
            data: data.into(),
            id: None,
            lossy: false,
        }
    }

    #[test]
    fn simple_event() {
        assert_eq!(decode(&[b"data: hello\n\n"]), vec![ev("hello")]);
    }

    #[test]
    fn comments_are_reported_not_dispatched() {
        assert_eq!(
            decode(&[b": ping\n:\n:  two\ndata: x\n\n"]),
            vec![
                Own::Comment("ping".into()),
                Own::Comment("".into()),
                Own::Comment(" two".into()),
                ev("x")
            ]
        );
    }

    #[test]
    fn exactly_one_leading_space_is_stripped() {
        assert_eq!(
            decode(&[b"data:a\n\ndata:  b\n\ndata: data: c\n\n"]),
            vec![ev("a"), ev(" b"), ev("data: c")]
        );
    }

    #[test]
    fn multi_line_data_is_joined_with_lf() {
        assert_eq!(
            decode(&[b"data: one\ndata:\ndata: three\n\n"]),
            vec![ev("one\n\nthree")]
        );
    }

    #[test]
    fn empty_data_field_dispatches_empty_event() {
        assert_eq!(decode(&[b"data\n\n"]), vec![ev("")]);
        assert_eq!(decode(&[b"data:\n\n"]), vec![ev("")]);
    }

    #[test]
    fn field_without_colon_has_empty_value() {
        // `event` with no colon resets the type to empty, so the default applies.
        assert_eq!(decode(&[b"event: a\nevent\ndata: x\n\n"]), vec![ev("x")]);
        // Unknown fields are ignored.
        assert_eq!(decode(&[b"foo\nbar: baz\ndata: x\n\n"]), vec![ev("x")]);
    }

    #[test]
    fn event_type_and_reset_after_dispatch() {
        assert_eq!(
            decode(&[b"event: delta\ndata: 1\n\ndata: 2\n\n"]),
            vec![
                Own::Event {
                    event: "delta".into(),
                    data: "1".into(),
                    id: None,
                    lossy: false
                },
                ev("2")
            ]
        );
    }

    #[test]
    fn blank_lines_without_fields_dispatch_nothing() {
        assert_eq!(decode(&[b"\n\n\r\n\rdata: x\n\n\n\n"]), vec![ev("x")]);
    }

    #[test]
    fn dataless_event_is_reported_separately() {
        assert_eq!(
            decode(&[b"event: ping\n\ndata: x\n\n"]),
            vec![Own::Dataless("ping".into()), ev("x")]
        );
    }

    #[test]
    fn id_persists_and_nul_ids_are_ignored() {
        let mut dec = SseDecoder::new();
        let items = decode_feeds(
            &mut dec,
            &[b"id: 7\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid\ndata: d\n\n"],
        );
        let ids: Vec<Option<String>> = items
            .iter()
            .map(|i| match i {
                Own::Event { id, .. } => id.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            ids,
            vec![Some("7".into()), Some("7".into()), Some("7".into()), None]
        );
    }

    #[test]
    fn retry_takes_digits_only() {
        let mut dec = SseDecoder::new();
        dec.feed(b"retry: 1500\n", &mut |_| {});
        assert_eq!(dec.retry_ms(), Some(1500));
        dec.feed(
            b"retry: 15x\nretry: -1\nretry:\nretry: 99999999999999999999999\n",
            &mut |_| {},
        );
        assert_eq!(dec.retry_ms(), Some(1500));
        dec.feed(b"retry:42\n\n", &mut |_| {});
        assert_eq!(dec.retry_ms(), Some(42));
        assert_eq!(dec.last_event_id(), "");
    }

    #[test]
    fn bom_at_start_is_stripped_once() {
        assert_eq!(decode(&[b"\xEF\xBB\xBFdata: x\n\n"]), vec![ev("x")]);
        // Split across feeds.
        assert_eq!(
            decode(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]),
            vec![ev("x")]
        );
        // A second BOM is not stripped: it becomes part of the field name.
        assert_eq!(decode(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"]), vec![]);
        // A BOM prefix that is not a BOM is kept (and is invalid UTF-8 here).
        let items = decode(&[b"\xEF", b"data: x\n\n"]);
        assert!(items.is_empty(), "{items:?}");
    }

    #[test]
    fn cr_lf_crlf_line_endings() {
        let want = vec![ev("a"), ev("b"), ev("c")];
        assert_eq!(decode(&[b"data: a\r\rdata: b\r\n\r\ndata: c\n\n"]), want);
        assert_eq!(decode(&[b"data: a\r\n\r\ndata: b\r\rdata: c\r\n\n"]), want);
    }

    #[test]
    fn cr_at_end_of_feed_and_lf_at_start_of_next_is_one_terminator() {
        // If the LF were a second line end, the event would be dispatched after the
        // first line and `data: b` would start a new one.
        assert_eq!(
            decode(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]),
            vec![ev("a\nb")]
        );
        // A CR at a feed end followed by a real blank line (LF LF) still works.
        assert_eq!(decode(&[b"data: a\r", b"\n\n"]), vec![ev("a")]);
        // A CR at a feed end followed by something else.
        assert_eq!(
            decode(&[b"data: a\r", b"\rdata: b\n\n"]),
            vec![ev("a"), ev("b")]
        );
    }

    #[test]
    fn utf8_split_across_feeds_decodes_intact() {
        let s = "data: h\u{e9}llo \u{1F600}\n\n".as_bytes();
        for cut in 0..s.len() {
            let got = decode(&[&s[..cut], &s[cut..]]);
            assert_eq!(got, vec![ev("h\u{e9}llo \u{1F600}")], "cut at {cut}");
        }
    }

    #[test]
    fn invalid_utf8_is_lossy_and_flagged() {
        let got = decode(&[b"data: a\xFFb\n\n"]);
        assert_eq!(
            got,
            vec![Own::Event {
                event: "message".into(),
                data: "a\u{FFFD}b".into(),
                id: None,
                lossy: true
            }]
        );
    }

    #[test]
    fn incomplete_event_at_eof_is_reported_not_dispatched() {
        assert_eq!(decode(&[b"data: a\n"]), vec![Own::Incomplete]);
        assert_eq!(decode(&[b"data: a"]), vec![Own::Incomplete]);
        assert_eq!(decode(&[b"data: a\n\n"]), vec![ev("a")]);
        assert_eq!(decode(&[b"data: a\n\n\n"]), vec![ev("a")]);
    }

    #[test]
    fn oversized_event_is_reported_once_and_skipped() {
        let mut dec = SseDecoder::with_cap(16);
        let items = decode_feeds(
            &mut dec,
            &[
                b"data: 0123456789\ndata: 0123456789\n",
                b"data: more\n\ndata: ok\n\n",
            ],
        );
        assert_eq!(items, vec![Own::TooLarge, ev("ok")]);
    }

    #[test]
    fn line_without_newline_is_capped() {
        let mut dec = SseDecoder::with_cap(64);
        let mut items = Vec::new();
        for _ in 0..1000 {
            dec.feed(b"data: xxxxxxxxxxxxxxxxxxxxxxx", &mut |i| {
                items.push(own(i))
            });
            assert!(dec.line.capacity() <= 64 + 32);
        }
        dec.feed(b"\n\ndata: ok\n\n", &mut |i| items.push(own(i)));
        assert_eq!(items, vec![Own::TooLarge, ev("ok")]);
    }

    /// A read `lone_data_event` gives the value of (with no line break in it) is, fed,
    /// exactly one `message` event with that data, and leaves the decoder as it was;
    /// in any state holding something from earlier reads it gives nothing.
    #[test]
    fn a_lone_data_event_is_what_feeding_it_gives() {
        let fed = |cap: usize, feeds: &[&[u8]]| {
            let mut d = SseDecoder::with_cap(cap);
            for f in feeds {
                d.feed(f, &mut |_| {});
            }
            d
        };
        let big = [b"data: ".as_slice(), &[b'x'; 40]].concat();
        // (name, decoder, idle: whether a whole event read may skip it)
        let states = [
            ("fresh", fed(64, &[]), false),
            ("a BOM", fed(64, &[b"\xEF\xBB\xBF"]), true),
            ("after an event", fed(64, &[b"data: a\n\n"]), true),
            ("after a comment", fed(64, &[b": ping\n"]), true),
            ("an id set", fed(64, &[b"id: 7\ndata: a\n\n"]), true),
            ("part of a BOM", fed(64, &[b"\xEF\xBB"]), false),
            ("data pending", fed(64, &[b"data: a\n"]), false),
            ("a line pending", fed(64, &[b"x\n\nda"]), false),
            ("an event type", fed(64, &[b"event: x\n"]), false),
            ("an empty event type", fed(64, &[b"x\n\nevent:\n"]), true),
            ("a CR awaiting its LF", fed(64, &[b"data: a\r\r"]), false),
            ("discarding", fed(16, &[b"x\n\n", &big]), false),
        ];
        let reads: [(&[u8], Option<&[u8]>); 12] = [
            (b"data: x\n\n", Some(b"x")),
            (b"data:x\n\n", Some(b"x")),
            (b"data:  x\n\n", Some(b" x")),
            (b"data: x\r\n\r\n", Some(b"x")),
            (b"data:\n\n", Some(b"")),
            (b"data: \xC3\xA9\xFF\n\n", Some(b"\xC3\xA9\xFF")),
            (b"data: a\nb\n\n", Some(b"a\nb")), // two lines: must be fed
            (b"data: x\n\n\n", Some(b"x\n")),   // so must this
            (b"data: x\r\r", None),
            (b"data: x\n", None),
            (b"event: e\ndata: x\n\n", None),
            (b"data: 0123456789abcdef\n\n", None), // over the 16-byte cap below
        ];
        for (name, state, idle) in &states {
            for (read, value) in &reads {
                let mut d = state.clone();
                if d.cap == 64 && read.len() > 16 {
                    d.cap = 16;
                }
                let got = d.lone_data_event(read);
                let want = if *idle { *value } else { None };
                assert_eq!(got, want, "{name}: {:?}", String::from_utf8_lossy(read));
                let Some(v) = got.filter(|v| memchr2(b'\n', b'\r', v).is_none()) else {
                    continue;
                };
                let before = format!("{d:?}");
                let mut items = Vec::new();
                d.feed(read, &mut |i| items.push(own(i)));
                let id = (!d.last_event_id().is_empty()).then(|| d.last_event_id().to_owned());
                let data = String::from_utf8_lossy(v).into_owned();
                let lossy = std::str::from_utf8(v).is_err();
                let event = Own::Event {
                    event: "message".into(),
                    data,
                    id,
                    lossy,
                };
                assert_eq!(items, vec![event], "{name}");
                if !lossy {
                    assert_eq!(format!("{d:?}"), before, "{name}: the decoder is as it was");
                }
            }
        }
    }

    #[test]
    fn feed_with_stops_and_reports_consumed() {
        let mut dec = SseDecoder::new();
        let bytes = b"data: a\r\n\r\ndata: [DONE]\r\n\r\ntrailing junk";
        let mut seen = Vec::new();
        let used = dec.feed_with(bytes, &mut |i| {
            if let SseItem::Event(e) = i {
                seen.push(e.data.to_owned());
                if e.data == "[DONE]" {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        assert_eq!(seen, vec!["a", "[DONE]"]);
        assert_eq!(&bytes[used..], b"trailing junk");
    }
}
