//! The engine model's TOML spec (`--engine`, `plan`): a spec is accepted or refused
//! with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cadence_engine::EngineSpec::from_toml(text);
    }
});
