//! The run's monotonic clock: every time in a record is nanoseconds since the run's
//! start on this clock, so wall-clock jumps never reach an interval (FAULTS 39).

use tokio::time::Instant;

/// A monotonic origin. Uses tokio's `Instant` so paused-clock tests are exact.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose origin is now: call once, when the run starts.
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    /// The instant the clock started, which every `*_ns` time counts from.
    pub fn origin(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// Nanoseconds from the origin to `t` (0 if `t` is before the origin).
    #[inline]
    pub fn ns_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_nanos() as u64
    }
}
