//! One event's data in every dialect (usage, server timing and tool-call objects
//! among them): never a panic, and for chat and completions the hand-written fast path
//! agrees with the serde reference wherever it decides, with and without the opening
//! an earlier chunk left cached (the first half of the input primes the cache).
#![no_main]

use cadence_wire::dialect::{fast_and_reference, parse_data, Prefix};
use cadence_wire::Api;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for api in Api::ALL {
        let _ = parse_data(api, text);
    }
    // A chunk and a later one: the earlier's opening primes the prefix cache.
    let (first, second) = match text.find('\n') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, text),
    };
    for api in [Api::Chat, Api::Completions] {
        let mut prefix = Prefix::default();
        for s in [first, second] {
            for cache in [None, Some(&mut prefix)] {
                let (fast, reference) = fast_and_reference(api, s, cache);
                if let Some(fast) = fast {
                    assert_eq!(fast, reference, "{api:?}: {s:?}");
                }
            }
        }
    }
});
