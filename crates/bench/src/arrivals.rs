//! The thread that keeps open-loop arrival schedules (the schedules themselves are
//! core's, shared with `plan`). Send times are absolute offsets from the level's start
//! (never relative sleeps, which drift), and a dedicated OS thread sleeps to each one:
//! tokio's timer wheel rounds to whole milliseconds, which at hundreds of requests per
//! second would be the client's own pacing error.

use crate::stoppable::Stoppable;
pub use cadence_core::arrivals::{ArrivalProcess, Schedule};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// One arrival handed to the dispatcher.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    /// The arrival's number in the schedule, from 0.
    pub index: u64,
    /// When the schedule wanted it sent.
    pub scheduled: tokio::time::Instant,
}

/// How long before a send time the pacing thread stops sleeping and spins.
const SPIN: Duration = Duration::from_micros(200);

/// The pacing thread: sleeps to each scheduled time and hands the ticket over.
pub struct Pacer {
    _thread: Stoppable<()>,
}

impl Pacer {
    /// Starts pacing `schedule` from `start`, for at most `limit` arrivals.
    pub fn start(
        start: Instant,
        mut schedule: impl Iterator<Item = Duration> + Send + 'static,
        limit: Option<u64>,
    ) -> (Pacer, mpsc::UnboundedReceiver<Ticket>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let thread = Stoppable::spawn("cadence-pacer", move |stopped| {
            let mut index = 0u64;
            while limit.is_none_or(|l| index < l) {
                let Some(offset) = schedule.next() else { break };
                let at = start + offset;
                // Sleep in short slices so a stop is seen promptly, waking a little
                // early: the OS wakes a sleeping thread tens to hundreds of µs late,
                // so the last stretch is spun.
                loop {
                    if stopped.load(Ordering::Relaxed) {
                        return;
                    }
                    let now = Instant::now();
                    if now >= at {
                        break;
                    }
                    let left = at - now;
                    if left > SPIN {
                        std::thread::sleep((left - SPIN).min(Duration::from_millis(50)));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                let ticket = Ticket {
                    index,
                    scheduled: tokio::time::Instant::from_std(at),
                };
                if tx.send(ticket).is_err() {
                    return;
                }
                index += 1;
            }
        });
        (Pacer { _thread: thread }, rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pacer_delivers_tickets_at_their_times() {
        let start = Instant::now();
        let schedule = Schedule::new(200.0, ArrivalProcess::Constant, Duration::ZERO);
        let (_pacer, mut rx) = Pacer::start(start, schedule, Some(20));
        let mut n = 0;
        while let Some(t) = rx.recv().await {
            let lateness = tokio::time::Instant::now().saturating_duration_since(t.scheduled);
            assert_eq!(t.index, n);
            // Tolerant bound: a busy CI machine may deschedule us; pacing precision is
            // measured by the benchmark, not here.
            assert!(
                lateness < Duration::from_millis(200),
                "ticket {n} late by {lateness:?}"
            );
            n += 1;
        }
        assert_eq!(n, 20, "the limit ends the schedule");
        assert!(
            start.elapsed() >= Duration::from_millis(95),
            "20 tickets at 200/s span 95 ms"
        );
    }
}
