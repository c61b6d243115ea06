//! Incremental newline-delimited JSON framing (one JSON text per line), fed socket
//! reads of any size, for servers that stream JSON lines instead of SSE.
//!
//! Lines end with LF (a CR before it is dropped); blank lines are skipped; a last line
//! without a newline is flushed at EOF. Invalid UTF-8 is decoded lossily and flagged.

use crate::{utf8, BomStep, BomStripper, MAX_EVENT_BYTES};
use memchr::memchr;
use std::ops::ControlFlow;

const SHRINK_ABOVE: usize = 64 * 1024;

/// What the decoder reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdjsonItem<'a> {
    /// One non-blank line, surrounding ASCII whitespace trimmed.
    Line {
        /// The line, without its line ending and surrounding ASCII whitespace.
        text: &'a str,
        /// Some bytes were not UTF-8 and were replaced by U+FFFD.
        lossy: bool,
    },
    /// A line exceeded the cap; it is discarded up to the next LF.
    TooLarge,
}

/// Incremental NDJSON decoder.
#[derive(Debug, Clone)]
pub struct NdjsonDecoder {
    cap: usize,
    line: Vec<u8>,
    scratch: String,
    bom: BomStripper,
    discarding: bool,
}

impl Default for NdjsonDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl NdjsonDecoder {
    /// A decoder with the 1 MiB per-line cap.
    pub fn new() -> Self {
        Self::with_cap(MAX_EVENT_BYTES)
    }

    /// A decoder with another per-line cap.
    pub fn with_cap(cap: usize) -> Self {
        NdjsonDecoder {
            cap,
            line: Vec::new(),
            scratch: String::new(),
            bom: BomStripper::default(),
            discarding: false,
        }
    }

    /// Back to a fresh stream, keeping allocations.
    pub fn reset(&mut self) {
        self.line.clear();
        self.bom.reset();
        self.discarding = false;
    }

    /// Decode one read's bytes, reporting every line completed by them.
    pub fn feed(&mut self, bytes: &[u8], out: &mut impl FnMut(NdjsonItem<'_>)) {
        self.feed_with(bytes, &mut |item| {
            out(item);
            ControlFlow::Continue(())
        });
    }

    /// Like [`feed`](Self::feed), but the callback may stop decoding right after an
    /// item; returns how many bytes were consumed.
    pub fn feed_with(
        &mut self,
        bytes: &[u8],
        out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>,
    ) -> usize {
        match self.bom.step(bytes) {
            BomStep::Hold => bytes.len(),
            BomStep::Go { replay, rest } => {
                let skipped = bytes.len() - rest.len();
                if !replay.is_empty() {
                    let _ = self.partial(replay, out);
                }
                skipped + self.process(rest, out)
            }
        }
    }

    /// EOF: flush a last line that had no newline, then reset.
    pub fn finish(&mut self, out: &mut impl FnMut(NdjsonItem<'_>)) {
        self.finish_with(&mut |item| {
            out(item);
            ControlFlow::Continue(())
        });
    }

    /// [`finish`](Self::finish) with the same callback type as [`feed_with`](Self::feed_with).
    pub fn finish_with(&mut self, out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>) {
        let held = self.bom.held();
        if !held.is_empty() {
            let _ = self.partial(held, out);
        }
        if !self.discarding && !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let _ = self.emit(&line, out);
            self.line = line;
        }
        self.reset();
    }

    fn process(
        &mut self,
        bytes: &[u8],
        out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>,
    ) -> usize {
        let mut pos = 0;
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            let Some(i) = memchr(b'\n', rest) else {
                let _ = self.partial(rest, out);
                return bytes.len();
            };
            pos += i + 1;
            let flow = self.end_line(&rest[..i], out);
            if flow.is_break() {
                break;
            }
        }
        pos
    }

    fn partial(
        &mut self,
        part: &[u8],
        out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.discarding {
            return ControlFlow::Continue(());
        }
        if self.line.len() + part.len() > self.cap {
            self.line = Vec::new();
            self.discarding = true;
            return out(NdjsonItem::TooLarge);
        }
        self.line.extend_from_slice(part);
        ControlFlow::Continue(())
    }

    fn end_line(
        &mut self,
        part: &[u8],
        out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.discarding {
            self.discarding = false;
            return ControlFlow::Continue(());
        }
        if self.line.len() + part.len() > self.cap {
            self.line = Vec::new();
            return out(NdjsonItem::TooLarge);
        }
        if self.line.is_empty() {
            self.emit(part, out)
        } else {
            self.line.extend_from_slice(part);
            let line = std::mem::take(&mut self.line);
            let flow = self.emit(&line, out);
            self.line = line;
            self.line.clear();
            if self.line.capacity() > SHRINK_ABOVE {
                self.line = Vec::new();
            }
            flow
        }
    }

    fn emit(
        &mut self,
        line: &[u8],
        out: &mut impl FnMut(NdjsonItem<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let line = line.trim_ascii();
        if line.is_empty() {
            return ControlFlow::Continue(());
        }
        let (text, lossy) = utf8(line, &mut self.scratch);
        out(NdjsonItem::Line { text, lossy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(dec: &mut NdjsonDecoder, feeds: &[&[u8]]) -> Vec<Option<String>> {
        let mut items = Vec::new();
        let mut push = |i: NdjsonItem<'_>| match i {
            NdjsonItem::Line { text, .. } => items.push(Some(text.to_owned())),
            NdjsonItem::TooLarge => items.push(None),
        };
        for f in feeds {
            dec.feed(f, &mut push);
        }
        dec.finish(&mut push);
        items
    }

    fn lines(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some((*s).to_owned())).collect()
    }

    #[test]
    fn lines_crlf_blank_and_tail() {
        let got = decode(
            &mut NdjsonDecoder::new(),
            &[b"{\"a\":1}\r\n\n  \r\n{\"b\"", b":2}\n{\"c\":3}"],
        );
        assert_eq!(got, lines(&["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]));
    }

    #[test]
    fn crlf_split_across_feeds() {
        let got = decode(&mut NdjsonDecoder::new(), &[b"{}\r", b"\n[]\r", b"\n"]);
        assert_eq!(got, lines(&["{}", "[]"]));
    }

    #[test]
    fn bom_is_stripped() {
        let got = decode(&mut NdjsonDecoder::new(), &[b"\xEF\xBB", b"\xBF{}\n"]);
        assert_eq!(got, lines(&["{}"]));
    }

    #[test]
    fn oversized_line_is_capped() {
        let mut dec = NdjsonDecoder::with_cap(8);
        let got = decode(
            &mut dec,
            &[b"{\"x\":\"0123", b"456789\"}\n{}\n{\"long\":1234}\n[]"],
        );
        assert_eq!(got, vec![None, Some("{}".into()), None, Some("[]".into())]);
    }
}
