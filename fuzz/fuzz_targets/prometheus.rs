//! The Prometheus/OpenMetrics text parser (`--server-metrics` scrapes, the proxy's
//! and the watch's pages): never a panic, at most one series per line, and the figures
//! each engine's names map to are read from whatever it accepted.
#![no_main]

use cadence_core::server::prometheus::{engine_family, parse_text, to_sample};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(series) = parse_text(text) {
        assert!(
            series.len() <= text.lines().count(),
            "more series than lines"
        );
        let _ = engine_family(&series);
        let _ = to_sample(&series, 1);
    }
});
