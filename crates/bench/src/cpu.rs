//! The client's own CPU use over a level, for the self-check: a client that used
//! nearly all the cores it had may have taken its timestamps late. Linux reads
//! `/proc/self/stat`; elsewhere the figure is absent.

use std::time::Duration;

/// Clock ticks per second of `/proc` times (USER_HZ, 100 on every mainstream Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU time of this process so far.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat)
}

/// utime and stime are fields 14 and 15; the command name (field 2) may hold spaces,
/// so counting starts after its closing parenthesis.
fn parse_stat(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is at index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / TICKS_PER_SECOND,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utime_and_stime_after_a_name_with_spaces() {
        let stat =
            "4242 (cadence x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 1000 0 0";
        assert_eq!(parse_stat(stat), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_time().is_some());
        }
    }
}
