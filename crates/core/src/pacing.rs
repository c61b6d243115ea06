//! How well an open-loop client kept its schedule (scheduled → sent lag, late sends,
//! dropped arrivals), so a report can say when the client, not the server, was slow.

use crate::metrics::ms;
use crate::stats::Distribution;
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
/// 0 when nothing scheduled was sent.
pub fn pacing(records: &[RequestRecord], dropped: u64, max_late_share: f64) -> Option<Pacing> {
    let mut any = false;
    let mut unsent = 0u64;
    let mut late = 0u64;
    let mut lags = Vec::new();
    for r in records.iter().filter(|r| !r.warmup) {
        let Some(sched) = r.scheduled_ns else {
            continue;
        };
        any = true;
        match r.sent_ns {
            Some(sent) => {
                let lag = sent.saturating_sub(sched);
                late += u64::from(lag > LATE_THRESHOLD_NS);
                lags.push(ms(lag));
            }
            None if !r.was_sent() => unsent += 1,
            // A connection-stage failure: an attempt without a send time, no lag sample.
            None => {}
        }
    }
    if !any {
        return None;
    }
    let sent = lags.len() as u64;
    let d = Distribution::from_samples(&mut lags);
    Some(Pacing {
        sent,
        late,
        dropped: dropped + unsent,
        lag_p50_ms: d.map_or(0.0, |d| d.p50),
        lag_p99_ms: d.map_or(0.0, |d| d.p99),
        lag_max_ms: d.map_or(0.0, |d| d.max),
        max_late_share,
        invalid: sent > 0 && late as f64 / sent as f64 > max_late_share,
    })
}
