//! The proxy's WebSocket frame reader (RFC 6455 frames of either side, fragments,
//! control frames, masks): the same messages and the same error however the relayed
//! bytes are cut, and no message over the reader's cap (drawn small from the input).
#![no_main]

use cadence_fuzz::{cap, header, same_however_cut};
use cadence_proxy::ws_frames::{close_detail, FrameReader, Message, Side};
use libfuzzer_sys::fuzz_target;

fn read(side: Side, cap: usize, feeds: &[&[u8]]) -> (Vec<(u8, Vec<u8>)>, Option<String>) {
    let mut reader = FrameReader::new(side, cap);
    let mut messages = Vec::new();
    let mut on = |m: Message<'_>| {
        let (kind, bytes) = match m {
            Message::Text(b) => (0, b),
            Message::Binary(b) => (1, b),
            Message::Close(b) => {
                let _ = close_detail(b);
                (2, b)
            }
        };
        assert!(
            kind == 2 || bytes.len() <= cap,
            "a message over the cap {cap}"
        );
        messages.push((kind, bytes.to_vec()));
    };
    for f in feeds {
        if let Err(e) = reader.feed(f, &mut on) {
            return (messages, Some(e.to_string()));
        }
    }
    (messages, None)
}

fuzz_target!(|data: &[u8]| {
    if let Some((sel, seed, body)) = header(data) {
        let side = if sel & 1 == 0 {
            Side::Server
        } else {
            Side::Client
        };
        same_however_cut(body, seed, |feeds| read(side, cap(sel & !1), feeds));
    }
});
