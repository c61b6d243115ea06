//! The sim's own clock under its server-wide faults: a freeze stops it, a slow-down runs
//! it at `1 / factor`. Streams plan their tokens on this clock and leave at the real
//! instant it reaches each planned offset, so the flat and the engine modes share one map.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Freeze, Slow};

/// From this real offset (from the sim's start) on, the sim's clock reads `plan` plus
/// `rate` times the real time since.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Segment {
    real: f64,
    plan: f64,
    rate: f64,
}

/// A monotone, piecewise-linear map between real offsets from the sim's start and the
/// sim's clock. Without a fault it is the identity.
#[derive(Debug, Clone, Default)]
pub(crate) struct Warp {
    /// Sorted by `real`; the first starts at 0, the last runs at rate 1 for ever.
    /// Empty: the identity.
    segments: Arc<[Segment]>,
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

fn from_ns(v: f64) -> Duration {
    Duration::from_nanos(v.max(0.0).round() as u64)
}

impl Warp {
    pub(crate) fn new(freeze: Option<Freeze>, slow: Option<Slow>) -> Warp {
        let freeze = freeze.map(|f| (ns(f.at), ns(f.at + f.duration)));
        let slow = slow.map(|s| (ns(s.at), ns(s.at + s.duration), s.factor));
        if freeze.is_none() && slow.is_none() {
            return Warp::default();
        }
        let mut cuts = vec![0.0];
        cuts.extend(freeze.iter().flat_map(|f| [f.0, f.1]));
        cuts.extend(slow.iter().flat_map(|s| [s.0, s.1]));
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        let mut segments = Vec::with_capacity(cuts.len());
        let mut plan = 0.0;
        for (i, &real) in cuts.iter().enumerate() {
            let inside = |(a, b): (f64, f64)| real >= a && real < b;
            let rate = if freeze.is_some_and(inside) {
                0.0
            } else {
                match slow {
                    Some((a, b, factor)) if inside((a, b)) => 1.0 / factor,
                    _ => 1.0,
                }
            };
            segments.push(Segment { real, plan, rate });
            if let Some(&next) = cuts.get(i + 1) {
                plan += (next - real) * rate;
            }
        }
        Warp {
            segments: segments.into(),
        }
    }

    /// The sim's clock at `real` from its start.
    pub(crate) fn plan_at(&self, real: Duration) -> Duration {
        let r = ns(real);
        let i = self.segments.partition_point(|s| s.real <= r);
        match i.checked_sub(1).map(|i| self.segments[i]) {
            Some(s) => from_ns(s.plan + (r - s.real) * s.rate),
            None => real,
        }
    }

    /// The first real offset from the sim's start at which its clock reads `plan` (after
    /// a freeze that stopped it there: the freeze's end).
    pub(crate) fn real_at(&self, plan: Duration) -> Duration {
        let p = ns(plan);
        let i = self.segments.partition_point(|s| s.plan <= p);
        match i.checked_sub(1).map(|i| self.segments[i]) {
            // Only the last segment of a run with one `plan` is found, and a run never
            // ends frozen (the last segment runs at rate 1).
            Some(s) if s.rate > 0.0 => from_ns(s.real + (p - s.plan) / s.rate),
            _ => plan,
        }
    }
}

/// The sim's start and its warp: when a stream's planned offsets fall due.
#[derive(Debug, Clone)]
pub(crate) struct SimClock {
    pub(crate) epoch: Instant,
    pub(crate) warp: Warp,
}

impl SimClock {
    /// When an offset `at` planned from `start` falls due: `at` of the sim's clock after
    /// its reading at `start`.
    pub(crate) fn due(&self, start: Instant, at: Duration) -> Instant {
        let from = self
            .warp
            .plan_at(start.saturating_duration_since(self.epoch));
        self.epoch + self.warp.real_at(from + at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn slow(at: u64, duration: u64, factor: f64) -> Option<Slow> {
        Some(Slow {
            at: ms(at),
            duration: ms(duration),
            factor,
        })
    }

    #[test]
    fn without_a_fault_the_clock_is_real_time() {
        let w = Warp::new(None, None);
        assert_eq!(w.plan_at(ms(1234)), ms(1234));
        assert_eq!(w.real_at(ms(1234)), ms(1234));
    }

    #[test]
    fn a_slow_down_stretches_only_the_time_inside_its_window() {
        // From 1 s to 3 s the sim runs at half speed: 2 s real are 1 s of its clock.
        let w = Warp::new(None, slow(1000, 2000, 2.0));
        assert_eq!(w.plan_at(ms(500)), ms(500));
        assert_eq!(w.plan_at(ms(2000)), ms(1500));
        assert_eq!(w.plan_at(ms(3000)), ms(2000));
        assert_eq!(w.plan_at(ms(4000)), ms(3000));
        for real in [0, 700, 1000, 1800, 3000, 5000] {
            assert_eq!(w.real_at(w.plan_at(ms(real))), ms(real), "{real} ms");
        }
        let c = SimClock {
            epoch: Instant::now(),
            warp: w,
        };
        let gap = |start: u64, at: u64| c.due(c.epoch + ms(start), ms(at)) - c.epoch;
        // A 10 ms gap before, inside and after the window.
        assert_eq!(gap(100, 10), ms(110));
        assert_eq!(gap(1500, 10), ms(1520));
        assert_eq!(gap(3100, 10), ms(3110));
        // One straddling the window's start: 5 ms at full speed, 5 ms at half.
        assert_eq!(gap(995, 10), ms(1010));
        // And its end: 5 ms of the clock at half speed (10 ms real), then 5 ms.
        assert_eq!(gap(2990, 10), ms(3005));
    }

    #[test]
    fn a_freeze_stops_the_clock_and_streams_resume_one_freeze_later() {
        let w = Warp::new(
            Some(Freeze {
                at: ms(1000),
                duration: ms(500),
            }),
            None,
        );
        assert_eq!(w.plan_at(ms(1200)), ms(1000));
        assert_eq!(w.plan_at(ms(2000)), ms(1500));
        let c = SimClock {
            epoch: Instant::now(),
            warp: w,
        };
        let due = |start: u64, at: u64| c.due(c.epoch + ms(start), ms(at)) - c.epoch;
        assert_eq!(due(900, 50), ms(950), "due before the freeze");
        assert_eq!(due(900, 100), ms(1500), "due at its start: its end");
        assert_eq!(due(900, 300), ms(1700), "one freeze later");
        assert_eq!(
            due(1200, 0),
            ms(1500),
            "arriving frozen: starts at the thaw"
        );
        assert_eq!(due(1200, 40), ms(1540));
        assert_eq!(due(1600, 40), ms(1640), "after it: untouched");
    }

    #[test]
    fn a_freeze_inside_a_slow_down_stops_it_and_the_rest_runs_slow() {
        let w = Warp::new(
            Some(Freeze {
                at: ms(2000),
                duration: ms(1000),
            }),
            slow(1000, 4000, 4.0),
        );
        // 1 s slow (0.25 s), 1 s frozen, 2 s slow (0.5 s), then real time.
        assert_eq!(w.plan_at(ms(2000)), ms(1250));
        assert_eq!(w.plan_at(ms(2500)), ms(1250));
        assert_eq!(w.plan_at(ms(5000)), ms(1750));
        assert_eq!(w.plan_at(ms(6000)), ms(2750));
        assert_eq!(w.real_at(ms(1250)), ms(3000));
        assert_eq!(w.real_at(ms(1500)), ms(4000));
    }
}
