//! The fidelity check's verdict (`cadence fidelity`): the client's records of a level
//! against the server's own account of what it sent, both through the report's ITL, on
//! the measured clock and on the user clock, within the acceptance bounds. Pure: the
//! binary runs the simulator and the client and hands both sides here as records.

use crate::metrics::{summarize_level, LevelOptions};
use crate::{Outcome, RequestRecord};
use serde::Serialize;

/// The acceptance bounds: (streams up to, p50 relative error, p99 absolute error in ms).
pub const BOUNDS: [(u32, f64, f64); 2] = [(100, 0.02, 0.5), (u32::MAX, 0.05, 2.0)];

/// One level of the check: the true and measured ITL on both clocks, and the verdict.
#[derive(Debug, Serialize)]
pub struct LevelResult {
    /// Concurrent streams.
    pub concurrency: u32,
    /// Requests planned.
    pub requests: u64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// Gaps the client measured.
    pub gaps: u64,
    /// ITL p50 by the server's send log, ms.
    pub true_p50_ms: f64,
    /// ITL p50 the client measured, ms.
    pub measured_p50_ms: f64,
    /// The p50's error relative to the truth, %.
    pub p50_error_pct: f64,
    /// ITL p99 by the server's send log, ms.
    pub true_p99_ms: f64,
    /// ITL p99 the client measured, ms.
    pub measured_p99_ms: f64,
    /// The p99's absolute error, ms.
    pub p99_error_ms: f64,
    /// The p50's bound at this many streams, %.
    pub bound_p50_pct: f64,
    /// The p99's bound at this many streams, ms.
    pub bound_p99_ms: f64,
    /// The verdict, on the measured (kernel where available) clock.
    pub pass: bool,
    /// Requests whose chunks carry the kernel's receive time (the rest: the user clock).
    pub kernel_requests: u64,
    /// The same run on the user clock (each chunk at its read time).
    pub user_p50_ms: f64,
    /// The user clock's p50 error relative to the truth, %.
    pub user_p50_error_pct: f64,
    /// ITL p99 on the user clock, ms.
    pub user_p99_ms: f64,
    /// The user clock's p99 absolute error, ms.
    pub user_p99_error_ms: f64,
    /// The client's read delay (user read − kernel receive), p50/p99/max.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_delay_ms: Option<[f64; 3]>,
    /// Socket reads that carried more than one chunk.
    pub multi_event_reads: u64,
    /// Scrapes of the simulator's /metrics that answered (`--scrape-interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrapes: Option<u64>,
}

/// Why a level cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoGaps {
    /// The client's records hold no inter-token gap.
    #[error("no gaps measured at {concurrency} streams")]
    Measured {
        /// The level's streams.
        concurrency: u32,
    },
    /// The server's send log holds no inter-token gap.
    #[error("the send log has no gaps")]
    Sent,
}

/// One level's verdict: the client's `records` (of `requests` planned at `concurrency`
/// streams) against `truth`, the server's sent streams as records, on both clocks,
/// within the bounds for `concurrency` streams.
pub fn judge(
    concurrency: u32,
    requests: u64,
    records: &[RequestRecord],
    truth: &[RequestRecord],
    scrapes: Option<u64>,
) -> Result<LevelResult, NoGaps> {
    // Both sides go through core's own ITL (pooled gaps of succeeded requests), so the
    // check compares measurements, not two formulas.
    let itl = |recs: &[RequestRecord]| summarize_level(recs, &LevelOptions::default()).itl;
    let m = itl(records).ok_or(NoGaps::Measured { concurrency })?;
    let on_user: Vec<RequestRecord> = records.iter().map(RequestRecord::on_user_clock).collect();
    let u = itl(&on_user).ok_or(NoGaps::Measured { concurrency })?;
    let check = summarize_level(records, &LevelOptions::default()).clock;
    let t = itl(truth).ok_or(NoGaps::Sent)?;
    let gaps = m.count;
    let (_, b50, b99) = *BOUNDS
        .iter()
        .find(|(n, _, _)| concurrency <= *n)
        .unwrap_or(&BOUNDS[BOUNDS.len() - 1]);
    let p50_err = (m.p50 - t.p50).abs() / t.p50;
    let p99_err = (m.p99 - t.p99).abs();
    Ok(LevelResult {
        concurrency,
        requests,
        succeeded: records
            .iter()
            .filter(|r| r.outcome == Outcome::Succeeded)
            .count() as u64,
        gaps,
        true_p50_ms: t.p50,
        measured_p50_ms: m.p50,
        p50_error_pct: p50_err * 100.0,
        true_p99_ms: t.p99,
        measured_p99_ms: m.p99,
        p99_error_ms: p99_err,
        bound_p50_pct: b50 * 100.0,
        bound_p99_ms: b99,
        pass: p50_err <= b50 && p99_err <= b99 && records.len() as u64 == requests,
        scrapes,
        kernel_requests: check.as_ref().map_or(0, |c| c.kernel_requests),
        user_p50_ms: u.p50,
        user_p50_error_pct: (u.p50 - t.p50).abs() / t.p50 * 100.0,
        user_p99_ms: u.p99,
        user_p99_error_ms: (u.p99 - t.p99).abs(),
        read_delay_ms: check
            .as_ref()
            .and_then(|c| c.read_delay)
            .map(|d| [d.p50, d.p99, d.max]),
        multi_event_reads: check.map_or(0, |c| c.multi_event_reads),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Chunk;

    /// `n` succeeded streams of 11 chunks `gap_us` apart.
    fn streams(n: u64, gap_us: u64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(0);
                r.chunks = (1..=11)
                    .map(|k| Chunk(k * gap_us * 1_000, Some(1)))
                    .collect();
                r.end_ns = r.last_chunk_ns();
                r
            })
            .collect()
    }

    #[test]
    fn a_level_passes_within_its_streams_bounds_and_fails_outside_them() {
        let truth = streams(4, 10_000);
        // 1 % slow at p50 (and 0.1 ms at p99): within 2 % / 0.5 ms.
        let r = judge(4, 4, &streams(4, 10_100), &truth, None).unwrap();
        assert_eq!((r.true_p50_ms, r.measured_p50_ms), (10.0, 10.1));
        assert!((r.p50_error_pct - 1.0).abs() < 1e-9, "{}", r.p50_error_pct);
        assert!((r.p99_error_ms - 0.1).abs() < 1e-9, "{}", r.p99_error_ms);
        assert_eq!((r.gaps, r.succeeded), (40, 4));
        assert_eq!((r.bound_p50_pct, r.bound_p99_ms), (2.0, 0.5));
        assert!(r.pass);
        // 3 % slow: over 2 % at 4 streams, within 5 % above 100.
        assert!(!judge(4, 4, &streams(4, 10_300), &truth, None).unwrap().pass);
        let many = judge(200, 4, &streams(4, 10_300), &truth, None).unwrap();
        assert_eq!((many.bound_p50_pct, many.bound_p99_ms), (5.0, 2.0));
        assert!(many.pass);
        // A request missing fails the level however close the gaps.
        assert!(!judge(4, 5, &streams(4, 10_000), &truth, None).unwrap().pass);
    }

    #[test]
    fn a_side_without_gaps_cannot_be_judged() {
        let truth = streams(2, 10_000);
        assert_eq!(
            judge(3, 0, &[], &truth, None).unwrap_err(),
            NoGaps::Measured { concurrency: 3 }
        );
        assert_eq!(
            judge(3, 2, &truth, &[], None).unwrap_err().to_string(),
            "the send log has no gaps"
        );
    }
}
