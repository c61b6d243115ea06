//! The machine's own timer floor, measured while an open-loop level sends: a thread that
//! does nothing but sleep to a deadline every millisecond and notes how late it woke.
//! Sends go through the same kind of wake-ups, so the pacing verdict can tell lateness
//! the machine makes (a busy neighbour, a hypervisor's steal) from a client that fell
//! behind its own work.

use crate::stoppable::Stoppable;
use cadence_core::pacing::{TimerFloor, TimerFloorAcc};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The floor thread's period: a deadline every millisecond is a thousand samples a
/// second for a few µs of CPU each.
pub const PERIOD: Duration = Duration::from_millis(1);

/// The running probe; [`FloorProbe::finish`] stops it and gives what it saw.
pub struct FloorProbe(Stoppable<TimerFloorAcc>);

impl FloorProbe {
    /// Starts sleeping to a deadline every `period`. Deadlines stay on their grid: a
    /// stall of several periods makes each deadline it covers late, as it makes late
    /// every send scheduled inside it.
    pub fn start(period: Duration) -> FloorProbe {
        FloorProbe(Stoppable::spawn("cadence-floor", move |stop| {
            let mut acc = TimerFloorAcc::default();
            let mut deadline = Instant::now() + period;
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if deadline > now {
                    std::thread::sleep(deadline - now);
                }
                let late = Instant::now().saturating_duration_since(deadline);
                acc.push(u64::try_from(late.as_nanos()).unwrap_or(u64::MAX));
                deadline += period;
            }
            acc
        }))
    }

    /// Stops the thread and returns the floor it measured.
    pub fn finish(self) -> TimerFloor {
        self.0.stop().unwrap_or_default().finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_sleeps_to_every_deadline_of_its_grid() {
        let period = Duration::from_millis(2);
        let t = Instant::now();
        let probe = FloorProbe::start(period);
        std::thread::sleep(Duration::from_millis(100));
        let before_stop = t.elapsed();
        let floor = probe.finish();
        let after_stop = t.elapsed();
        // One sample per deadline passed, however late the thread got to it: a loaded
        // machine delays the samples, never skips them.
        let lo = (before_stop.as_micros() / period.as_micros()) as u64 - 1;
        let hi = (after_stop.as_micros() / period.as_micros()) as u64 + 1;
        assert!(
            (lo..=hi).contains(&floor.deadlines),
            "{floor:?} in {lo}..={hi}"
        );
        assert!(floor.late <= floor.deadlines);
        assert!(floor.lag_max_ms >= floor.lag_p99_ms);
    }
}
