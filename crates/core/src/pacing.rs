//! How well an open-loop client kept its schedule (scheduled → sent lag, late sends,
//! dropped arrivals), so a report can say when the client, not the server, was slow.

use crate::dist::DistAcc;
use crate::metrics::ms;
use crate::RequestRecord;
use serde::{Deserialize, Serialize};

/// A send more than this far behind its schedule is late.
pub const LATE_THRESHOLD_NS: u64 = 1_000_000;

/// The formula in words, for the report's definitions.
pub const FORMULA: &str = "open loop only, non-warm-up requests: lag = sent - scheduled \
(0 when sent early); late = sends more than 1 ms behind schedule; dropped = arrivals never \
sent (the runner's count plus scheduled records without a send); floor = a thread that only \
sleeps to a deadline every millisecond during the level, its share of wake-ups more than \
1 ms late (f, taken at its upper bound (k + 2 sqrt k + 3) / n for k late of n); the level is \
invalid when late > sent x max_late_share (--max-late) + m + 3 sqrt m, where \
m = 2 x f x sent is what the machine alone makes late (a send waits for two wake-ups: the \
pacing thread's and a runtime worker's); without a floor (older records) the allowance is \
sent x max_late_share";

/// Wake-ups of a sleeping thread on a send's path: the pacing thread's at the send time,
/// and the runtime worker's that takes the ticket.
pub const WAKEUPS_PER_SEND: f64 = 2.0;

/// The machine's own timer floor during a level: how late a thread that does nothing
/// but sleep to a deadline every millisecond woke. Noise the machine makes (a busy
/// neighbour, a hypervisor's steal, a laptop's power state) shows here as it shows in
/// the sends; a client that falls behind its own work shows in the sends only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerFloor {
    /// Deadlines the thread slept to.
    pub deadlines: u64,
    /// Of them, the ones it woke more than 1 ms ([`LATE_THRESHOLD_NS`]) after.
    pub late: u64,
    /// The 99th percentile of how late it woke, ms (0 when it slept to none).
    pub lag_p99_ms: f64,
    /// The latest it woke, ms (0 when it slept to none).
    pub lag_max_ms: f64,
}

impl TimerFloor {
    /// `late / deadlines`; `None` when it slept to none.
    pub fn late_share(&self) -> Option<f64> {
        (self.deadlines > 0).then(|| self.late as f64 / self.deadlines as f64)
    }

    /// Two floors as one (shards of a fleet on their machines): deadlines and late
    /// wake-ups add up; p99 and max are the larger of the two.
    pub fn merged(a: Option<TimerFloor>, b: Option<TimerFloor>) -> Option<TimerFloor> {
        match (a, b) {
            (Some(a), Some(b)) => Some(TimerFloor {
                deadlines: a.deadlines + b.deadlines,
                late: a.late + b.late,
                lag_p99_ms: a.lag_p99_ms.max(b.lag_p99_ms),
                lag_max_ms: a.lag_max_ms.max(b.lag_max_ms),
            }),
            (a, b) => a.or(b),
        }
    }

    /// An upper bound of the machine's late rate: `(k + 2 sqrt k + 3) / n` for `k` late of
    /// `n` (about a 97.5 % Poisson bound; three for none, the rule of three).
    pub fn late_rate_bound(&self) -> f64 {
        if self.deadlines == 0 {
            return 0.0;
        }
        let k = self.late as f64;
        ((k + 2.0 * k.sqrt() + 3.0) / self.deadlines as f64).min(1.0)
    }
}

/// [`TimerFloor`] one wake-up at a time.
#[derive(Debug, Clone, Default)]
pub struct TimerFloorAcc {
    late: u64,
    lags: DistAcc,
}

impl TimerFloorAcc {
    /// Values kept exactly before the lags continue in a histogram (a day at 1 ms).
    const EXACT: u64 = 100_000;

    /// One deadline the thread woke `lag_ns` after.
    pub fn push(&mut self, lag_ns: u64) {
        self.late += u64::from(lag_ns > LATE_THRESHOLD_NS);
        if self.lags.stored() >= Self::EXACT {
            self.lags.to_bucketed();
        }
        self.lags.push(ms(lag_ns));
    }

    /// The floor over the wake-ups pushed so far.
    pub fn finish(&self) -> TimerFloor {
        let d = self.lags.summary();
        TimerFloor {
            deadlines: self.lags.count(),
            late: self.late,
            lag_p99_ms: d.map_or(0.0, |d| d.p99),
            lag_max_ms: d.map_or(0.0, |d| d.max),
        }
    }
}

/// Late sends a level may have and stay valid: `--max-late`'s share of `sent`, plus what
/// the machine's own floor makes late (`m = 2 f sent` with `f` the floor's bounded late
/// rate) and three standard deviations of that count (`3 sqrt m`). Without a floor, the
/// `--max-late` share alone.
pub fn allowed_late(sent: u64, max_late_share: f64, floor: Option<&TimerFloor>) -> f64 {
    let base = sent as f64 * max_late_share;
    let Some(f) = floor.filter(|f| f.deadlines > 0) else {
        return base;
    };
    let m = WAKEUPS_PER_SEND * f.late_rate_bound() * sent as f64;
    base + m + 3.0 * m.sqrt()
}

/// Pacing of an open-loop level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pacing {
    /// Scheduled requests that were sent (with a send time): the lag samples, and the
    /// denominator of the late share.
    pub sent: u64,
    /// Sends more than 1 ms ([`LATE_THRESHOLD_NS`]) behind schedule.
    pub late: u64,
    /// Arrivals never sent: the runner's count plus scheduled records with no send.
    pub dropped: u64,
    /// The median of sent − scheduled, ms (0 when nothing scheduled was sent).
    pub lag_p50_ms: f64,
    /// The 99th percentile of sent − scheduled, ms (0 likewise).
    pub lag_p99_ms: f64,
    /// The largest sent − scheduled, ms (0 likewise).
    pub lag_max_ms: f64,
    /// The `--max-late` threshold, as a fraction of sends (0.001 = 0.1 %).
    pub max_late_share: f64,
    /// The machine's timer floor during the level (absent in records from before it was
    /// measured, and in levels judged without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<TimerFloor>,
    /// Late sends the level could have and stay valid ([`allowed_late`]).
    #[serde(default)]
    pub allowed_late: f64,
    /// Send lag p99 as a share of the level's TTFT p50: open-loop TTFT counts from the
    /// schedule, so this is how much of a typical TTFT the client's lateness can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_p99_of_ttft_p50: Option<f64>,
    /// `late > allowed_late`: the client fell behind, figures are unreliable.
    pub invalid: bool,
}

impl Pacing {
    /// `late / sent`; `None` when nothing was sent.
    pub fn late_share(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.late as f64 / self.sent as f64)
    }

    /// Judges the level against the machine's timer `floor` measured in the same level
    /// and its TTFT p50 (ms): sets the allowance, the verdict and the lag's share of TTFT.
    pub fn judge(&mut self, floor: Option<TimerFloor>, ttft_p50_ms: Option<f64>) {
        self.floor = floor;
        self.allowed_late = allowed_late(self.sent, self.max_late_share, floor.as_ref());
        self.invalid = self.sent > 0 && self.late as f64 > self.allowed_late;
        self.lag_p99_of_ttft_p50 = ttft_p50_ms
            .filter(|t| *t > 0.0 && self.sent > 0)
            .map(|t| self.lag_p99_ms / t);
    }

    /// Whether the machine's own lateness explains the late sends, that is the level
    /// would be invalid under `--max-late` alone but its floor makes up the difference.
    pub fn late_explained_by_floor(&self) -> bool {
        !self.invalid
            && self.floor.is_some()
            && self.late as f64 > allowed_late(self.sent, self.max_late_share, None)
    }
}

/// Pacing of the non-warm-up `records` that carry a schedule (`scheduled_ns`); `None`
/// when none does (a closed-loop level). `dropped` counts arrivals the runner dropped
/// without leaving a record; `max_late_share` is the `--max-late` fraction. Lags are
/// 0 when nothing scheduled was sent. A fold of [`PacingAcc`].
pub fn pacing(records: &[RequestRecord], dropped: u64, max_late_share: f64) -> Option<Pacing> {
    let mut acc = PacingAcc::default();
    for r in records {
        acc.push(r);
    }
    acc.finish(dropped, max_late_share)
}

/// [`pacing`] one record at a time; mergeable, lags in a [`DistAcc`].
#[derive(Debug, Clone, Default)]
pub struct PacingAcc {
    any: bool,
    unsent: u64,
    late: u64,
    lags: DistAcc,
}

impl PacingAcc {
    /// Takes one record; returns the values it kept exactly (for the level's budget).
    pub fn push(&mut self, r: &RequestRecord) -> u64 {
        let Some(sched) = r.scheduled_ns.filter(|_| !r.warmup) else {
            return 0;
        };
        self.any = true;
        match r.sent_ns {
            Some(sent) => {
                let lag = sent.saturating_sub(sched);
                self.late += u64::from(lag > LATE_THRESHOLD_NS);
                return self.lags.push(ms(lag));
            }
            None if !r.was_sent() => self.unsent += 1,
            // A connection-stage failure: an attempt without a send time, no lag sample.
            None => {}
        }
        0
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &PacingAcc) {
        self.any |= o.any;
        self.unsent += o.unsent;
        self.late += o.late;
        self.lags.merge(&o.lags);
    }

    /// The lag distribution, for the level's budget and size accounting.
    pub fn dist_mut(&mut self) -> &mut DistAcc {
        &mut self.lags
    }

    /// Heap bytes held by the lag distribution.
    pub fn approx_bytes(&self) -> usize {
        self.lags.approx_bytes()
    }

    /// The level's pacing, judged without a timer floor ([`Pacing::judge`] adds one);
    /// `None` when no record carried a schedule. `dropped` and `max_late_share` as for
    /// [`pacing()`].
    pub fn finish(&self, dropped: u64, max_late_share: f64) -> Option<Pacing> {
        if !self.any {
            return None;
        }
        let d = self.lags.summary();
        let mut p = Pacing {
            sent: self.lags.count(),
            late: self.late,
            dropped: dropped + self.unsent,
            lag_p50_ms: d.map_or(0.0, |d| d.p50),
            lag_p99_ms: d.map_or(0.0, |d| d.p99),
            lag_max_ms: d.map_or(0.0, |d| d.max),
            max_late_share,
            floor: None,
            allowed_late: 0.0,
            lag_p99_of_ttft_p50: None,
            invalid: false,
        };
        p.judge(None, None);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    /// `sent` scheduled records, one every ms, the first `late` of them 3 ms behind.
    fn sends(sent: u64, late: u64) -> Vec<RequestRecord> {
        (0..sent)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.scheduled_ns = Some(i * 1_000_000);
                r.sent_ns = Some(i * 1_000_000 + if i < late { 3_000_000 } else { 20_000 });
                r
            })
            .collect()
    }

    fn floor(deadlines: u64, late: u64) -> TimerFloor {
        TimerFloor {
            deadlines,
            late,
            lag_p99_ms: 0.5,
            lag_max_ms: 4.0,
        }
    }

    fn judged(sent: u64, late: u64, f: Option<TimerFloor>) -> Pacing {
        let mut p = pacing(&sends(sent, late), 0, 0.001).expect("open loop");
        p.judge(f, Some(20.0));
        p
    }

    #[test]
    fn without_a_floor_the_allowance_is_the_max_late_share() {
        let p = judged(300, 1, None);
        assert_eq!((p.sent, p.late), (300, 1));
        assert!((p.allowed_late - 0.3).abs() < 1e-12);
        assert!(p.invalid, "one late send in 300 is over 0.1 %");
        assert!(
            !judged(3000, 3, None).invalid,
            "3 of 3,000 is 0.1 %, not over"
        );
        assert!(judged(3000, 4, None).invalid);
    }

    #[test]
    fn a_healthy_client_on_a_noisy_machine_stays_valid() {
        // The machine misses 1 ms on 0.4 % of a bare loop's deadlines; the sends, with
        // two wake-ups each, on 0.6 %: six times --max-late, all of it the machine's.
        let noisy = floor(10_000, 40);
        let p = judged(10_000, 60, Some(noisy));
        assert!(!p.invalid, "{p:?}");
        assert!(p.late_explained_by_floor());
        assert!(
            judged(10_000, 60, None).invalid,
            "the share rule alone fails it"
        );
        // One hiccup in a 300-send level on a quiet machine (no late deadline in
        // 10,000) is inside the bound; two are not.
        let quiet = floor(10_000, 0);
        assert!(!judged(300, 1, Some(quiet)).invalid);
        assert!(judged(300, 2, Some(quiet)).invalid);
    }

    #[test]
    fn a_client_that_fell_behind_is_invalid_whatever_the_floor() {
        // Its own timer thread kept time (0.02 % late) while 30 % of sends were late.
        let p = judged(10_000, 3_000, Some(floor(10_000, 2)));
        assert!(p.invalid);
        assert!(!p.late_explained_by_floor());
        // Even on a very noisy machine (5 % of deadlines late), 30 % is too many.
        assert!(judged(10_000, 3_000, Some(floor(10_000, 500))).invalid);
    }

    #[test]
    fn the_allowance_follows_the_stated_formula() {
        let f = floor(5_000, 16);
        // f = (16 + 8 + 3) / 5,000; m = 2 f 2,000 = 21.6; 2 + 21.6 + 3 sqrt 21.6.
        let m = 2.0 * 27.0 / 5_000.0 * 2_000.0;
        let want = 2.0 + m + 3.0 * f64::sqrt(m);
        assert!((allowed_late(2_000, 0.001, Some(&f)) - want).abs() < 1e-9);
        // A floor that slept to nothing says nothing.
        assert_eq!(allowed_late(2_000, 0.001, Some(&floor(0, 0))), 2.0);
        assert_eq!(floor(0, 0).late_share(), None);
        assert_eq!(floor(200, 1).late_share(), Some(0.005));
    }

    #[test]
    fn the_lag_is_set_against_the_ttft_it_sits_in() {
        let mut p = judged(100, 0, None);
        assert!((p.lag_p99_ms - 0.02).abs() < 1e-9);
        assert!((p.lag_p99_of_ttft_p50.unwrap() - 0.001).abs() < 1e-12);
        p.judge(None, None);
        assert_eq!(p.lag_p99_of_ttft_p50, None);
    }

    #[test]
    fn the_floor_counts_late_wake_ups_and_keeps_p99_and_max() {
        let mut acc = TimerFloorAcc::default();
        for i in 0..1_000u64 {
            // 10 µs late, except every 100th deadline, 2 ms, and one at 1 ms exactly.
            let lag = match i {
                500 => 1_000_000,
                i if i % 100 == 99 => 2_000_000,
                _ => 10_000,
            };
            acc.push(lag);
        }
        let f = acc.finish();
        assert_eq!(
            (f.deadlines, f.late),
            (1_000, 10),
            "1 ms exactly is not late"
        );
        assert_eq!(f.lag_max_ms, 2.0);
        assert!(f.lag_p99_ms > 0.01 && f.lag_p99_ms <= 2.0, "{f:?}");
        assert_eq!(TimerFloorAcc::default().finish().deadlines, 0);
    }
}
