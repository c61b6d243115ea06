//! The machine's bare timer floor: a thread that does nothing but sleep to a deadline
//! every millisecond (the same probe `cadence bench` runs beside an open-loop level), for
//! SECONDS, then one JSON line: deadlines, how many woke over 1 ms late, lag p99 and max.
//! What a pacing figure is set against when it is measured just before or after.
//!
//!     cargo run --release -p cadence-benchsuite --bin floor -- 5

use cadence_bench::floor::{FloorProbe, PERIOD};
use std::time::Duration;

fn main() {
    let secs: f64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 5.0,
        Some(Ok(s)) if s > 0.0 => s,
        Some(_) => {
            eprintln!("usage: floor [SECONDS > 0]");
            std::process::exit(2);
        }
    };
    let probe = FloorProbe::start(PERIOD);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let f = probe.finish();
    println!(
        "{}",
        serde_json::json!({
            "deadlines": f.deadlines,
            "late": f.late,
            "late_share": f.late_share(),
            "lag_p99_ms": f.lag_p99_ms,
            "lag_max_ms": f.lag_max_ms,
        })
    );
}
