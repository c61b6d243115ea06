//! The SSE decoder: the same events however the bytes are cut into reads, and no
//! event, comment or event type longer than the decoder's cap (drawn small from the
//! input, so "too large" is reached by short inputs too).
#![no_main]

use cadence_fuzz::{cap, header, same_however_cut};
use cadence_wire::sse::{SseDecoder, SseItem};
use libfuzzer_sys::fuzz_target;

/// Each item as text (a borrowed item cannot outlive its feed), with the event's
/// last id and retry time at the end.
fn decode(cap: usize, feeds: &[&[u8]]) -> Vec<String> {
    let mut dec = SseDecoder::with_cap(cap);
    let mut items = Vec::new();
    let mut own = |i: SseItem<'_>| {
        let (len, text) = match i {
            // The cap counts bytes; each byte that is not UTF-8 becomes U+FFFD (3).
            SseItem::Event(e) => (e.data.len() / if e.lossy { 3 } else { 1 }, format!("{e:?}")),
            // A comment is read lossily too: a byte that is not UTF-8 is U+FFFD (3).
            SseItem::Comment(c) => (
                c.len() / if c.contains('\u{FFFD}') { 3 } else { 1 },
                format!("comment {c:?}"),
            ),
            // How much was pending at EOF is "roughly" said: not compared.
            SseItem::Incomplete { .. } => (0, "incomplete".to_owned()),
            other => (0, format!("{other:?}")),
        };
        assert!(len <= cap, "{text} over the cap {cap}");
        items.push(text);
    };
    for f in feeds {
        dec.feed(f, &mut own);
    }
    dec.finish(&mut own);
    items.push(format!("{:?} {:?}", dec.last_event_id(), dec.retry_ms()));
    items
}

fuzz_target!(|data: &[u8]| {
    if let Some((sel, seed, body)) = header(data) {
        same_however_cut(body, seed, |feeds| decode(cap(sel), feeds));
    }
});
