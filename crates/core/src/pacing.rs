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
sent (the runner's count plus scheduled records without a send); the level is invalid when \
late / sent exceeds max_late_share (--max-late)";

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
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
    /// The `--max-late` threshold, as a fraction of sends (0.001 = 0.1 %).
    pub max_late_share: f64,
    /// `late / sent > max_late_share`: the client fell behind, figures are unreliable.
    pub invalid: bool,
}

impl Pacing {
    /// `late / sent`; `None` when nothing was sent.
    pub fn late_share(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.late as f64 / self.sent as f64)
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

    pub fn approx_bytes(&self) -> usize {
        self.lags.approx_bytes()
    }

    pub fn finish(&self, dropped: u64, max_late_share: f64) -> Option<Pacing> {
        if !self.any {
            return None;
        }
        let sent = self.lags.count();
        let late = self.late;
        let d = self.lags.summary();
        Some(Pacing {
            sent,
            late,
            dropped: dropped + self.unsent,
            lag_p50_ms: d.map_or(0.0, |d| d.p50),
            lag_p99_ms: d.map_or(0.0, |d| d.p99),
            lag_max_ms: d.map_or(0.0, |d| d.max),
            max_late_share,
            invalid: sent > 0 && late as f64 / sent as f64 > max_late_share,
        })
    }
}
