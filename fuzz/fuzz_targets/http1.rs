//! The lean HTTP/1.1 client's reading of a response (head, interim heads, chunked,
//! length and close-delimited bodies): the same response or the same error however
//! the server's bytes are cut into reads.
#![no_main]

use cadence_fuzz::{header, same_however_cut};
use cadence_transport::h1::{read_response, H1Error, ReadResponse};
use libfuzzer_sys::fuzz_target;
use std::error::Error as _;

fn read(reads: &[&[u8]]) -> Result<ReadResponse, String> {
    read_response(reads).map_err(|e: H1Error| {
        let cause = e.source().map(|s| s.to_string()).unwrap_or_default();
        format!("{e}: {cause}")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((_, seed, body)) = header(data) else {
        return;
    };
    if let Ok(r) = read(&[body]) {
        assert!(r.body.len() <= body.len(), "more payload than bytes read");
    }
    // The cuts never make an empty read (which a socket reader takes for EOF).
    same_however_cut(body, seed, read);
});
