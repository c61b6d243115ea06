//! `bench --tools FILE` (OpenAI, Anthropic and Responses tool shapes): tools or an
//! error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cadence_bench::agent::parse_tools(text);
    }
});
