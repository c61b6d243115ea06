//! The agent traces `bench --agent-trace` replays (Cadence sessions, Mooncake calls,
//! OTLP span exports; the format detected or named): a trace is read into sessions
//! and retimed, or refused with an error, never a panic.
#![no_main]

use cadence_bench::agent_trace::{parse, retime, Format};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let [sel, body @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let format = match sel % 4 {
        0 => None,
        1 => Some(Format::Cadence),
        2 => Some(Format::Mooncake),
        _ => Some(Format::Otel),
    };
    // Mooncake's block size: 1 to 64 tokens a hash id.
    let block_size = u32::from(sel / 4) + 1;
    if let Ok(mut sessions) = parse(text, format, block_size) {
        assert!(!sessions.is_empty(), "a trace read without a session");
        assert_eq!(
            sessions[0].at,
            Duration::ZERO,
            "the first session arrives at zero"
        );
        retime(&mut sessions, 2.0, Duration::from_secs(1));
    }
});
