//! The rolling windows behind `/stats` and the alert rules: one mergeable summary
//! (core's [`SummaryAcc`], the same formulas `cadence report` uses) per second of
//! request end time, kept for the longest window. A window's figures merge the seconds
//! it covers, so memory is bounded by the window's length, never by the traffic: each
//! second keeps its values exactly up to a budget and continues in core's log-bucketed
//! histograms past it. Pure: the caller passes the time.

use cadence_core::metrics::{SummaryAcc, DEFAULT_STALL_THRESHOLD_NS};
use cadence_core::{LevelOptions, LevelSummary, RequestRecord};
use serde::Serialize;
use std::collections::VecDeque;

const S: u64 = 1_000_000_000;

/// Values one slot keeps exactly (over all its distributions) before it continues in
/// histograms: 8,192 values, 64 KiB of samples.
pub const DEFAULT_EXACT_PER_SECOND: u64 = 8_192;

/// Values a merged window keeps exactly; a window whose slots hold more is merged
/// straight into histograms (percentiles then within core's stated relative error).
pub const DEFAULT_EXACT_PER_WINDOW: u64 = 262_144;

/// Bytes the slots may hold in all. A histogram's size grows with how spread its
/// values are (a noisy upstream, a loaded machine), not with its count; past this the
/// slots widen (neighbours merge, losslessly) so memory stays put whatever the spread.
pub const DEFAULT_MAX_BYTES: usize = 4 << 20;

/// How much the windows keep: the memory and CPU bound of `/stats` and the alert rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBudget {
    /// Values a slot keeps exactly.
    pub per_second: u64,
    /// Values a merged window keeps exactly.
    pub per_window: u64,
    /// Bytes all slots hold before they widen.
    pub max_bytes: usize,
}

impl Default for WindowBudget {
    fn default() -> Self {
        WindowBudget {
            per_second: DEFAULT_EXACT_PER_SECOND,
            per_window: DEFAULT_EXACT_PER_WINDOW,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Whole seconds `[start, end)` of request end times and the summary of the records
/// that ended in them: one second wide unless memory made the slots wider.
#[derive(Debug, Clone)]
struct Slot {
    start: u64,
    end: u64,
    acc: SummaryAcc,
    /// Values `acc` holds exactly (0 once bucketed).
    stored: u64,
    /// The slot's budget was spent: its distributions are histograms.
    bucketed: bool,
}

impl Slot {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Slot>() + self.acc.approx_bytes()
    }
}

/// Mergeable summaries of the records that ended in the last `max_age`, by end second.
#[derive(Debug, Clone)]
pub struct LiveWindow {
    /// In ascending, non-overlapping `[start, end)` order.
    slots: VecDeque<Slot>,
    max_age_s: u64,
    budget: WindowBudget,
    /// Width of new slots in seconds: 1, doubled while the slots hold too many bytes and
    /// halved again once they hold few.
    width_s: u64,
    /// The latest end second pushed.
    newest_s: u64,
    /// Records that arrived after their second had already aged out (not counted).
    pub too_late: u64,
}

/// One window's figures, as `/stats` shows them.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStats {
    /// The window's length in seconds (60 for the last minute).
    pub window_s: f64,
    /// Whether the window's distributions continue in log-bucketed histograms (more
    /// values than the budget); each bucketed distribution states its error bound.
    pub bucketed: bool,
    /// The widest slot the window merged, in seconds (1 unless memory widened them):
    /// the window's start is exact to this.
    pub resolution_s: u64,
    /// The window's records summarized as a bench level is (counts, latency
    /// distributions, throughput).
    #[serde(flatten)]
    pub summary: LevelSummary,
}

/// The merged slots of one window, taken under the proxy's lock and finished outside it.
#[derive(Debug, Clone)]
pub struct WindowPart {
    acc: SummaryAcc,
    /// `[first covered slot's start, now]`: what rates are measured over.
    span: (u64, u64),
    window_ns: u64,
    bucketed: bool,
    resolution_s: u64,
}

/// The rolling windows as a sink of the proxy's tap.
impl cadence_core::RecordSink for LiveWindow {
    fn accept(&mut self, record: &RequestRecord) {
        self.push(record);
    }
}

impl LiveWindow {
    /// Windows up to `max_age_ns` long (rounded up to whole seconds).
    pub fn new(max_age_ns: u64, budget: WindowBudget) -> Self {
        LiveWindow {
            slots: VecDeque::new(),
            max_age_s: max_age_ns.div_ceil(S).max(1),
            budget,
            width_s: 1,
            newest_s: 0,
            too_late: 0,
        }
    }

    /// Slots held (at most the longest window plus two).
    pub fn seconds(&self) -> usize {
        self.slots.len()
    }

    /// Width of new slots in seconds (1 unless memory widened them).
    pub fn width_s(&self) -> u64 {
        self.width_s
    }

    /// Heap bytes held by the slots' distributions.
    pub fn approx_bytes(&self) -> usize {
        self.slots.iter().map(Slot::bytes).sum()
    }

    /// Counts a finished record (one without `end_ns` is ignored) in its end second's slot.
    pub fn push(&mut self, rec: &RequestRecord) {
        let Some(end) = rec.end_ns else { return };
        let second = end / S;
        self.newest_s = self.newest_s.max(second);
        let newest = self.newest_s;
        self.forget_before(newest.saturating_sub(self.max_age_s + 1));
        let at = self.slots.partition_point(|s| s.end <= second);
        if self.slots.get(at).is_none_or(|s| s.start > second) {
            if self.slots.front().is_some_and(|f| second < f.start)
                && second + self.max_age_s + 1 < newest
            {
                self.too_late += 1;
                return;
            }
            self.insert_slot(second);
        }
        let at = self.slots.partition_point(|s| s.end <= second);
        let budget = self.budget.per_second;
        let slot = &mut self.slots[at];
        slot.stored += slot.acc.push(rec);
        if slot.stored > budget {
            slot.acc.bucketize();
            slot.stored = 0;
            slot.bucketed = true;
        }
    }

    /// A new slot for `second`, aligned to the current width and clipped
    /// to its neighbours. The moment to check memory (between new slots only the
    /// newest grows, by at most one slot's histograms).
    fn insert_slot(&mut self, second: u64) {
        let bytes = self.approx_bytes();
        if bytes > self.budget.max_bytes {
            self.widen();
        } else if bytes < self.budget.max_bytes / 4 && self.width_s > 1 {
            self.width_s /= 2;
        }
        let at = self.slots.partition_point(|s| s.end <= second);
        if self.slots.get(at).is_some_and(|s| s.start <= second) {
            return; // widening merged a slot over this second
        }
        let mut start = second / self.width_s * self.width_s;
        let mut end = start + self.width_s;
        if let Some(prev) = at.checked_sub(1).map(|i| &self.slots[i]) {
            start = start.max(prev.end);
        }
        if let Some(next) = self.slots.get(at) {
            end = end.min(next.start);
        }
        let slot = Slot {
            start,
            end,
            acc: SummaryAcc::new(DEFAULT_STALL_THRESHOLD_NS),
            stored: 0,
            bucketed: false,
        };
        self.slots.insert(at, slot);
    }

    /// Doubles the width of new slots and merges neighbours that fall in one slot of the
    /// new width, as often as needed to bring the bytes to half the bound.
    fn widen(&mut self) {
        while self.width_s < self.max_age_s && self.approx_bytes() > self.budget.max_bytes / 2 {
            self.width_s *= 2;
            let w = self.width_s;
            let old = std::mem::take(&mut self.slots);
            for s in old {
                match self.slots.back_mut() {
                    Some(b) if b.start / w == s.start / w => {
                        b.acc.merge(&s.acc);
                        b.end = s.end;
                        b.stored += s.stored;
                        b.bucketed |= s.bucketed;
                        if b.bucketed || b.stored > self.budget.per_second {
                            b.acc.bucketize();
                            b.stored = 0;
                            b.bucketed = true;
                        }
                    }
                    _ => self.slots.push_back(s),
                }
            }
        }
    }

    fn forget_before(&mut self, second: u64) {
        while self.slots.front().is_some_and(|s| s.end <= second) {
            self.slots.pop_front();
        }
    }

    /// Forgets the slots no window ending at `now_ns` or later can cover.
    pub fn evict(&mut self, now_ns: u64) {
        self.forget_before((now_ns / S).saturating_sub(self.max_age_s));
    }

    /// The slots overlapping `(now − window)`'s second to `now`'s, merged: cheap enough
    /// to hold the lock for (histograms merge bucket by bucket), finished outside it.
    pub fn window(&self, now_ns: u64, window_ns: u64) -> WindowPart {
        let first = now_ns.saturating_sub(window_ns) / S;
        let last = now_ns / S;
        let covered = || {
            self.slots
                .iter()
                .filter(move |s| s.end > first && s.start <= last)
        };
        let exact: u64 = covered().map(|s| s.stored).sum();
        let mut acc = SummaryAcc::new(DEFAULT_STALL_THRESHOLD_NS);
        let over = exact > self.budget.per_window;
        if over {
            acc.bucketize();
        }
        let (mut bucketed, mut resolution_s, mut start) = (over, 1, first);
        for s in covered() {
            acc.merge(&s.acc);
            bucketed |= s.bucketed;
            resolution_s = resolution_s.max(s.end - s.start);
            start = start.min(s.start);
        }
        if over {
            acc.bucketize();
        }
        WindowPart {
            acc,
            span: (start * S, now_ns),
            window_ns,
            bucketed,
            resolution_s,
        }
    }

    /// Summary of the records that ended from `(now − window)`'s second to `now`.
    pub fn summary(&self, now_ns: u64, window_ns: u64) -> WindowStats {
        self.window(now_ns, window_ns).finish()
    }
}

impl WindowPart {
    /// Core's level summary of the window, rates over its span.
    pub fn finish(&self) -> WindowStats {
        let opts = LevelOptions {
            window: Some(self.span),
            ..LevelOptions::default()
        };
        WindowStats {
            window_s: self.window_ns as f64 / 1e9,
            bucketed: self.bucketed,
            resolution_s: self.resolution_s,
            summary: self.acc.finish(&opts),
        }
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
    /// The window's length in seconds.
    pub window_s: f64,
    /// Timer ticks that fired in the window (about 100 a second).
    pub ticks: u64,
    /// The ticks' lateness p99 (ms); 0 without ticks.
    pub p99_ms: f64,
    /// The worst tick's lateness (ms); 0 without ticks.
    pub max_ms: f64,
    /// Ticks more than 10 ms late: stalls long enough to bend an ITL measurement.
    pub over_10ms: u64,
}

impl LagWindow {
    /// An empty window keeping samples for `max_age_ns` (ns) behind the newest.
    pub fn new(max_age_ns: u64) -> Self {
        LagWindow {
            samples: VecDeque::new(),
            max_age_ns,
        }
    }

    /// Adds a tick that fired at `at_ns` `lag_ns` late (both ns), dropping samples older
    /// than the window keeps.
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

    fn budget() -> WindowBudget {
        WindowBudget::default()
    }

    #[test]
    fn windows_cover_exactly_the_records_that_ended_in_them() {
        let mut w = LiveWindow::new(300 * S, budget());
        w.push(&rec(10 * S, &[100, 100])); // ended 290 s ago at now = 300 s
        w.push(&rec(250 * S, &[20, 40])); // 50 s ago
        w.push(&rec(290 * S, &[10, 30])); // 10 s ago
        let one = w.summary(300 * S, 60 * S);
        let itl = one.summary.itl.unwrap();
        assert_eq!(itl.count, 4);
        // Pooled gaps 10, 20, 30, 40 ms: type-7 p50 = 25 ms.
        assert_eq!(itl.p50, 25.0);
        assert_eq!(one.summary.requests.succeeded, 2);
        assert_eq!(one.summary.throughput.window_s, Some(60.0));
        let five = w.summary(300 * S, 300 * S);
        assert_eq!(five.summary.itl.unwrap().count, 6);
        assert!(!five.bucketed);
        w.evict(400 * S);
        assert_eq!(
            w.seconds(),
            2,
            "the record that ended at 10 s is older than 5 min at 400 s"
        );
        w.evict(551 * S);
        assert_eq!(
            w.seconds(),
            1,
            "only the one that ended at 290 s is within 5 min of 551 s"
        );
    }

    #[test]
    fn a_window_is_the_same_as_one_summary_of_its_records() {
        // 40 records over 20 s, arriving out of end order within each pair.
        let recs: Vec<RequestRecord> = (0..40u64)
            .map(|i| rec(100 * S + (i ^ 1) * S / 2, &[5 + i % 7, 9 + i % 3, 30]))
            .collect();
        let mut w = LiveWindow::new(300 * S, budget());
        recs.iter().for_each(|r| w.push(r));
        let now = 125 * S;
        let got = w.summary(now, 60 * S);
        let want = cadence_core::summarize_level(
            &recs,
            &LevelOptions {
                window: Some((65 * S, now)),
                ..LevelOptions::default()
            },
        );
        assert_eq!(got.summary, want, "exact under the budget");
    }

    #[test]
    fn late_records_join_their_second_and_too_old_ones_are_counted() {
        let mut w = LiveWindow::new(60 * S, budget());
        w.push(&rec(20 * S, &[10]));
        w.push(&rec(15 * S, &[20]));
        w.push(&rec(18 * S, &[30]));
        assert_eq!(w.seconds(), 3);
        let itl = w.summary(30 * S, 60 * S).summary.itl.unwrap();
        assert_eq!((itl.count, itl.min, itl.max), (3, 10.0, 30.0));
        w.push(&rec(200 * S, &[10]));
        w.push(&rec(100 * S, &[10])); // 100 s older than the newest: past every window
        assert_eq!(w.too_late, 1);
        assert_eq!(w.seconds(), 1, "seconds past the longest window are gone");
    }

    #[test]
    fn memory_is_bounded_by_the_window_not_the_traffic() {
        // Ten minutes of traffic at 1x, 10x and 100x the rate, 300 s windows: the bytes
        // held stop growing once the window is full, and more traffic per second costs
        // at most the per-second budget.
        let tiny = WindowBudget {
            per_second: 512,
            per_window: 100_000,
            max_bytes: usize::MAX,
        };
        let run = |per_second: u64| {
            let mut w = LiveWindow::new(300 * S, tiny);
            let mut at_300 = 0;
            for sec in 1..=600u64 {
                for i in 0..per_second {
                    w.push(&rec(sec * S + i, &[10, 12, 11, 40]));
                }
                if sec == 300 {
                    at_300 = w.approx_bytes();
                }
            }
            (at_300, w.approx_bytes(), w)
        };
        let (a300, a600, w1) = run(10);
        let (_, b600, w10) = run(100);
        let (_, c600, w100) = run(1_000);
        assert!(w1.seconds() <= 302 && w100.seconds() <= 302);
        assert!(a600 <= a300 + a300 / 10, "full window: {a300} -> {a600}");
        // 10/s (under 512 values a second, 100,000 a window) stays exact; 100/s and
        // 1,000/s are bucketed, and a histogram's size does not grow with its count.
        assert!(b600 < 3 * a600, "10x traffic: {a600} -> {b600}");
        assert!(c600 <= b600 + b600 / 10, "100x traffic: {b600} -> {c600}");
        let exact = w1.summary(600 * S, 300 * S);
        assert!(!exact.bucketed && exact.summary.itl.as_ref().unwrap().bucketed.is_none());
        for w in [&w10, &w100] {
            let s = w.summary(600 * S, 300 * S);
            assert!(s.bucketed);
            let itl = s.summary.itl.unwrap();
            assert!(itl.bucketed.is_some(), "the distribution states its bound");
            assert_eq!(itl.max, 40.0, "max stays exact");
        }
        let c = w100.summary(600 * S, 60 * S).summary;
        assert_eq!(c.requests.sent, 1_000 * 61, "counts stay exact");
    }

    #[test]
    fn spread_out_values_widen_the_slots_to_stay_within_the_bytes() {
        // Gaps spread over two decades make every second's histograms large; with a
        // 384 KiB bound the slots widen instead of growing, counts stay exact, and once
        // the spread calms down new slots are one second wide again.
        let cap = 384 << 10;
        let mut w = LiveWindow::new(
            300 * S,
            WindowBudget {
                per_second: 64,
                per_window: 1_000,
                max_bytes: cap,
            },
        );
        let mut n = 0u64;
        for sec in 1..=400u64 {
            for i in 0..20u64 {
                let g: Vec<u64> = (0..8)
                    .map(|k| 1 + (sec * 31 + i * 7 + k * 13) % 97)
                    .collect();
                w.push(&rec(sec * S + i, &g));
                n += 1;
            }
            assert!(
                w.approx_bytes() <= cap + cap / 2,
                "{} at {sec} s",
                w.approx_bytes()
            );
        }
        assert!(w.width_s() > 1, "memory widened the slots");
        let s = w.summary(400 * S, 300 * S);
        assert!(s.resolution_s > 1 && s.bucketed);
        let sent = s.summary.requests.sent;
        assert!(
            (300 * 20..=(300 + s.resolution_s) * 20).contains(&sent),
            "{sent}"
        );
        assert!(n > sent);
        for sec in 401..=1000u64 {
            w.push(&rec(sec * S, &[10]));
        }
        assert_eq!(w.width_s(), 1, "narrow again once the slots are small");
        assert_eq!(w.summary(1000 * S, 60 * S).resolution_s, 1);
    }

    #[test]
    fn an_empty_window_has_no_distributions() {
        let w = LiveWindow::new(300 * S, budget());
        let s = w.summary(5 * S, 60 * S);
        assert!(s.summary.itl.is_none());
        assert_eq!(s.summary.requests.sent, 0);
    }
}
