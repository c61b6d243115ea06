//! The SLO and duration grammars (`--slo itl.p99<=50ms`, `--duration 1h30m`): never a
//! panic, and the spelling each gives back parses to the same value and spells itself.
#![no_main]

use cadence_base::duration::{parse_duration, parse_duration_spelled};
use cadence_core::Slo;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((d, spelled)) = parse_duration_spelled(text) {
        assert_eq!(parse_duration(text), Ok(d), "{text:?}");
        assert_eq!(
            parse_duration_spelled(&spelled),
            Ok((d, spelled.clone())),
            "{text:?}"
        );
    } else {
        assert!(parse_duration(text).is_err(), "{text:?}");
    }
    if let Ok(slo) = text.parse::<Slo>() {
        let again: Slo = slo
            .text
            .parse()
            .unwrap_or_else(|e| panic!("{text:?} -> {:?}: {e}", slo.text));
        assert_eq!(again, slo, "{text:?}");
    }
});
