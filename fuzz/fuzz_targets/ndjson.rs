//! The NDJSON decoder: the same lines however the bytes are cut into reads, and no
//! line longer than the decoder's cap (drawn small from the input, so "too large" is
//! reached by short inputs too).
#![no_main]

use cadence_fuzz::{cap, header, same_however_cut};
use cadence_wire::ndjson::{NdjsonDecoder, NdjsonItem};
use libfuzzer_sys::fuzz_target;

fn decode(cap: usize, feeds: &[&[u8]]) -> Vec<Option<(String, bool)>> {
    let mut dec = NdjsonDecoder::with_cap(cap);
    let mut items = Vec::new();
    let mut own = |i: NdjsonItem<'_>| {
        items.push(match i {
            NdjsonItem::Line { text, lossy } => {
                // The cap counts the line's bytes; each byte that is not UTF-8
                // becomes U+FFFD (3 bytes) in the text.
                let most = if lossy { 3 * cap } else { cap };
                assert!(text.len() <= most, "a line over the cap {cap}");
                Some((text.to_owned(), lossy))
            }
            NdjsonItem::TooLarge => None,
        })
    };
    for f in feeds {
        dec.feed(f, &mut own);
    }
    dec.finish(&mut own);
    items
}

fuzz_target!(|data: &[u8]| {
    if let Some((sel, seed, body)) = header(data) {
        same_however_cut(body, seed, |feeds| decode(cap(sel), feeds));
    }
});
