//! The rolling window behind `/stats` and the alert rules: the finished records of the
//! last few minutes, kept in end-time order, summarized on demand by core's
//! `summarize_level`, so the live percentiles are exact and mean what `cadence report`
//! means. Pure: the caller passes the time.

use cadence_core::{summarize_level, LevelOptions, LevelSummary, RequestRecord};
use serde::Serialize;
use std::collections::VecDeque;

/// Records that ended in the last `max_age_ns`, at most `max_records` of them.
#[derive(Debug, Clone)]
pub struct LiveWindow {
    records: VecDeque<RequestRecord>,
    max_age_ns: u64,
    max_records: usize,
    /// Records dropped early because the cap was reached (the window is then partial).
    pub dropped_for_cap: u64,
}

/// One window's figures, as `/stats` shows them.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStats {
    pub window_s: f64,
    /// Whether records that ended in this window were dropped to keep memory bounded
    /// (the percentiles then cover only the most recent ones).
    pub partial: bool,
    #[serde(flatten)]
    pub summary: LevelSummary,
}

impl LiveWindow {
    pub fn new(max_age_ns: u64, max_records: usize) -> Self {
        LiveWindow {
            records: VecDeque::new(),
            max_age_ns,
            max_records: max_records.max(1),
            dropped_for_cap: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Adds a finished record (one without `end_ns` is ignored), keeping end order.
    pub fn push(&mut self, rec: RequestRecord) {
        let Some(end) = rec.end_ns else { return };
        // Records arrive nearly in end order: search from the back.
        let at = self
            .records
            .iter()
            .rposition(|r| r.end_ns.unwrap_or(0) <= end)
            .map_or(0, |i| i + 1);
        self.records.insert(at, rec);
        while self.records.len() > self.max_records {
            self.records.pop_front();
            self.dropped_for_cap += 1;
        }
    }

    /// Forgets records that ended before `now_ns − max_age`.
    pub fn evict(&mut self, now_ns: u64) {
        let cutoff = now_ns.saturating_sub(self.max_age_ns);
        while self
            .records
            .front()
            .is_some_and(|r| r.end_ns.unwrap_or(0) < cutoff)
        {
            self.records.pop_front();
        }
    }

    /// Copies of the records that ended in `[now − window, now]`, and whether the cap
    /// dropped some that would be in it. Copying under the lock and summarizing
    /// outside it keeps finishing streams from waiting on a sort.
    pub fn window(&mut self, now_ns: u64, window_ns: u64) -> (Vec<RequestRecord>, bool) {
        let start = now_ns.saturating_sub(window_ns);
        let all = self.records.make_contiguous();
        let from = all.partition_point(|r| r.end_ns.unwrap_or(0) < start);
        let to = all.partition_point(|r| r.end_ns.unwrap_or(0) <= now_ns);
        let slice = &all[from..to.max(from)];
        // The cap dropped records only if the oldest kept one ended inside the window.
        let partial = self.dropped_for_cap > 0 && from == 0 && !slice.is_empty();
        (slice.to_vec(), partial)
    }

    /// Summary of the records that ended in `[now − window, now]`.
    pub fn summary(&mut self, now_ns: u64, window_ns: u64) -> WindowStats {
        let (records, partial) = self.window(now_ns, window_ns);
        summarize(&records, now_ns, window_ns, partial)
    }
}

/// Core's level summary of a window's records, measured over `[now − window, now]`.
pub fn summarize(
    records: &[RequestRecord],
    now_ns: u64,
    window_ns: u64,
    partial: bool,
) -> WindowStats {
    let opts = LevelOptions {
        window: Some((now_ns.saturating_sub(window_ns), now_ns)),
        ..LevelOptions::default()
    };
    WindowStats {
        window_s: window_ns as f64 / 1e9,
        partial,
        summary: summarize_level(records, &opts),
    }
}

/// The proxy's own event-loop lag over the last few minutes: how late its 10 ms timer
/// fired (`cadence_transport::lag`). Chunk timestamps taken in a stall are late by up to
/// the stall, so `/stats` shows it beside the stream figures. Memory is bounded by the
/// timer's rate: 100 samples a second.
#[derive(Debug, Clone)]
pub struct LagWindow {
    /// (when the tick fired, how late), in firing order.
    samples: VecDeque<(u64, u64)>,
    max_age_ns: u64,
}

/// One window of lag samples, as `/stats` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LagStats {
    pub window_s: f64,
    pub ticks: u64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Ticks more than 10 ms late: stalls long enough to bend an ITL measurement.
    pub over_10ms: u64,
}

impl LagWindow {
    pub fn new(max_age_ns: u64) -> Self {
        LagWindow {
            samples: VecDeque::new(),
            max_age_ns,
        }
    }

    pub fn push(&mut self, at_ns: u64, lag_ns: u64) {
        self.samples.push_back((at_ns, lag_ns));
        let cutoff = at_ns.saturating_sub(self.max_age_ns);
        while self.samples.front().is_some_and(|s| s.0 < cutoff) {
            self.samples.pop_front();
        }
    }

    /// The ticks that fired in `[now − window, now]`.
    pub fn summary(&self, now_ns: u64, window_ns: u64) -> LagStats {
        let start = now_ns.saturating_sub(window_ns);
        let mut ms: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.0 >= start && s.0 <= now_ns)
            .map(|s| s.1 as f64 / 1e6)
            .collect();
        ms.sort_by(f64::total_cmp);
        LagStats {
            window_s: window_ns as f64 / 1e9,
            ticks: ms.len() as u64,
            p99_ms: cadence_core::stats::quantile_sorted(&ms, 0.99).unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
            over_10ms: ms.iter().filter(|&&m| m > 10.0).count() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome};

    #[test]
    fn lag_windows_count_the_ticks_that_fired_in_them() {
        let mut w = LagWindow::new(300 * S);
        // 100 ticks at 0..99 ms of lag, one a second from t = 1 s to 100 s, then a
        // 250 ms stall at 290 s.
        for i in 0..100u64 {
            w.push((i + 1) * S, i * MS);
        }
        w.push(290 * S, 250 * MS);
        let all = w.summary(300 * S, 300 * S);
        assert_eq!(all.ticks, 101);
        assert_eq!(all.max_ms, 250.0);
        assert_eq!(all.over_10ms, 89 + 1, "11..99 ms and the stall");
        let last_minute = w.summary(300 * S, 60 * S);
        assert_eq!(
            last_minute,
            LagStats {
                window_s: 60.0,
                ticks: 1,
                p99_ms: 250.0,
                max_ms: 250.0,
                over_10ms: 1
            }
        );
        // Samples older than the window's age are forgotten as new ones arrive.
        w.push(401 * S, 0);
        assert_eq!(w.summary(401 * S, 300 * S).ticks, 2);
        assert_eq!(w.summary(401 * S, 60 * S).max_ms, 0.0);
    }

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn rec(end: u64, gaps_ms: &[u64]) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        let start = end - 1000 * MS;
        r.sent_ns = Some(start);
        let mut t = start + 100 * MS;
        r.chunks.push(Chunk(t, None));
        for g in gaps_ms {
            t += g * MS;
            r.chunks.push(Chunk(t, None));
        }
        r.end_ns = Some(end);
        r
    }

    #[test]
    fn windows_cover_exactly_the_records_that_ended_in_them() {
        let mut w = LiveWindow::new(300 * S, 1000);
        w.push(rec(10 * S, &[100, 100])); // ended 290 s ago at now = 300 s
        w.push(rec(250 * S, &[20, 40])); // 50 s ago
        w.push(rec(290 * S, &[10, 30])); // 10 s ago
        let one = w.summary(300 * S, 60 * S);
        let itl = one.summary.itl.unwrap();
        assert_eq!(itl.count, 4);
        // Pooled gaps 10, 20, 30, 40 ms: type-7 p50 = 25 ms.
        assert_eq!(itl.p50, 25.0);
        assert_eq!(one.summary.requests.succeeded, 2);
        let five = w.summary(300 * S, 300 * S);
        assert_eq!(five.summary.itl.unwrap().count, 6);
        assert!(!five.partial);
        w.evict(400 * S);
        assert_eq!(
            w.len(),
            2,
            "the record that ended at 10 s is older than 5 min at 400 s"
        );
        w.evict(551 * S);
        assert_eq!(
            w.len(),
            1,
            "only the one that ended at 290 s is within 5 min of 551 s"
        );
    }

    #[test]
    fn out_of_order_ends_are_sorted_and_the_cap_is_reported() {
        let mut w = LiveWindow::new(300 * S, 2);
        w.push(rec(20 * S, &[10]));
        w.push(rec(15 * S, &[20]));
        w.push(rec(18 * S, &[30]));
        assert_eq!(w.len(), 2);
        assert_eq!(w.dropped_for_cap, 1);
        let s = w.summary(30 * S, 60 * S);
        assert!(s.partial);
        let itl = s.summary.itl.unwrap();
        assert_eq!(
            (itl.min, itl.max),
            (10.0, 30.0),
            "the 15 s record was the oldest"
        );
    }

    #[test]
    fn an_empty_window_has_no_distributions() {
        let mut w = LiveWindow::new(300 * S, 10);
        let s = w.summary(5 * S, 60 * S);
        assert!(s.summary.itl.is_none());
        assert_eq!(s.summary.requests.sent, 0);
    }
}
