//! The bench dashboard's live state: what finished records say about the level being
//! run and the levels before it. The record thread feeds it (never a socket reader);
//! the dashboard reads a [`View`] of it at its own frame rate. Memory is bounded:
//! distributions are bucketed (within 1/256 of the value), the last seconds are kept
//! per second, older seconds as one point each of the charts.

use crate::view::{
    Bin, Counts, Latency, LevelProgress, Pacing, Pcts, SelfCheck, Side, Stalls, TableRow, View,
};
use cadence_core::pacing::LATE_THRESHOLD_NS;
use cadence_core::{per_request, DistAcc, Outcome, RequestRecord};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The recent span of the latency table and the self-check, in seconds.
pub const WINDOW_S: u64 = 10;
/// Points kept per chart (one a second).
const SERIES: usize = 600;
/// Loop-lag samples kept: 10 s of the 10 ms probe.
const LAGS: usize = 1000;
/// The histogram's bins: powers of two of ms from 1/8 ms to 16 s.
const BIN_LO_EXP: i32 = -3;
const BIN_HI_EXP: i32 = 14;

/// Everything the dashboard knows about a run.
#[derive(Debug)]
pub struct Live {
    stall_threshold_ms: f64,
    max_late_share: f64,
    /// The level being run; `None` before the first.
    current: Option<Current>,
    levels: BTreeMap<u32, LevelLive>,
    /// The current level's last seconds by end time, oldest first.
    seconds: VecDeque<Second>,
    /// Older seconds as (ITL p99 ms, output tokens).
    series: VecDeque<(f64, f64)>,
    /// The second the next chart point stands for.
    series_next: Option<u64>,
    lags: VecDeque<Duration>,
}

#[derive(Debug, Clone)]
struct Current {
    index: u32,
    of: Option<u32>,
    label: String,
    planned: Option<u64>,
    duration: Option<Duration>,
    started_ns: u64,
}

/// One level's running totals.
#[derive(Debug, Default)]
struct LevelLive {
    label: String,
    /// Records of the level, warm-up included (the progress bar's count).
    done: u64,
    counts: Counts,
    failed: BTreeMap<&'static str, u64>,
    ttft: DistAcc,
    itl: DistAcc,
    tokens: u64,
    stalls: Stalls,
    first_sent_ns: Option<u64>,
    last_end_ns: Option<u64>,
    /// Set when the level ended, with why it ended early, if it did.
    ended: Option<String>,
}

/// One second of the current level.
#[derive(Debug, Default)]
struct Second {
    sec: u64,
    ttft: DistAcc,
    itl: DistAcc,
    tokens: u64,
    paced: u64,
    late: u64,
    lag: DistAcc,
}

fn push(d: &mut DistAcc, x: f64) {
    d.push_in(x, true);
}

fn pcts(d: &DistAcc) -> Option<Pcts> {
    d.quantiles(&[0.5, 0.9, 0.99]).map(|q| [q[0], q[1], q[2]])
}

impl Second {
    fn itl_p99(&self) -> f64 {
        self.itl.quantiles(&[0.99]).map_or(0.0, |q| q[0])
    }
}

impl Live {
    /// `max_late_share` is the `--max-late` bound of the self-check.
    pub fn new(stall_threshold: Duration, max_late_share: f64) -> Live {
        Live {
            stall_threshold_ms: stall_threshold.as_secs_f64() * 1e3,
            max_late_share,
            current: None,
            levels: BTreeMap::new(),
            seconds: VecDeque::new(),
            series: VecDeque::new(),
            series_next: None,
            lags: VecDeque::new(),
        }
    }

    /// Level `index` starts now (`now_ns` on the records' clock): `planned` records
    /// (warm-up included) when known, for `duration` when given.
    pub fn begin_level(
        &mut self,
        index: u32,
        of: Option<u32>,
        label: String,
        planned: Option<u64>,
        duration: Option<Duration>,
        now_ns: u64,
    ) {
        self.retire_seconds(u64::MAX);
        self.levels.entry(index).or_default().label = label.clone();
        self.current = Some(Current {
            index,
            of,
            label,
            planned,
            duration,
            started_ns: now_ns,
        });
    }

    /// Level `index` ended; `note` says why early, if it did.
    pub fn end_level(&mut self, index: u32, note: Option<String>) {
        self.levels.entry(index).or_default().ended = Some(note.unwrap_or_default());
    }

    /// One loop-lag sample of the client's runtime.
    pub fn loop_lag(&mut self, lag: Duration) {
        if self.lags.len() == LAGS {
            self.lags.pop_front();
        }
        self.lags.push_back(lag);
    }

    /// One finished request.
    pub fn add(&mut self, rec: &RequestRecord) {
        let threshold = self.stall_threshold_ms;
        let lv = self.levels.entry(rec.level).or_default();
        lv.done += 1;
        if rec.warmup {
            return;
        }
        let mut bad = 0;
        let ttft =
            per_request::ttft_ms(rec, &mut bad).filter(|_| rec.outcome == Outcome::Succeeded);
        let gaps: Vec<f64> = if rec.outcome == Outcome::Succeeded {
            per_request::itl_gaps(rec, &mut bad)
                .map(|(g, _)| per_request::ms(g))
                .collect()
        } else {
            Vec::new()
        };
        let tokens = if rec.outcome == Outcome::Succeeded {
            rec.output_token_count().count
        } else {
            0
        };
        lv.count(rec);
        if let Some(t) = ttft {
            push(&mut lv.ttft, t);
        }
        // A stall is a wait over the threshold, for the first token or between chunks,
        // as the report counts it.
        let stalls = gaps.iter().filter(|&&g| g > threshold).count() as u64;
        let first_wait = (rec.outcome == Outcome::Succeeded)
            .then(|| rec.sent_ns.zip(rec.first_chunk_ns()))
            .flatten()
            .is_some_and(|(s, f)| per_request::ms(f.saturating_sub(s)) > threshold);
        lv.stalls.gaps += stalls;
        lv.stalls.first_token += u64::from(first_wait);
        lv.stalls.requests += u64::from(stalls > 0 || first_wait);
        for &g in &gaps {
            push(&mut lv.itl, g);
        }
        lv.tokens += tokens;
        if self.current.as_ref().is_some_and(|c| c.index == rec.level) {
            if let Some(end) = rec.end_ns.or(rec.sent_ns) {
                let s = self.second(end / 1_000_000_000);
                if let Some(t) = ttft {
                    push(&mut s.ttft, t);
                }
                for &g in &gaps {
                    push(&mut s.itl, g);
                }
                s.tokens += tokens;
                if let (Some(sched), Some(sent)) = (rec.scheduled_ns, rec.sent_ns) {
                    let lag = sent.saturating_sub(sched);
                    s.paced += 1;
                    s.late += u64::from(lag > LATE_THRESHOLD_NS);
                    push(&mut s.lag, per_request::ms(lag));
                }
            }
        }
    }

    /// The bucket of second `sec`, made if missing (records end nearly in order).
    fn second(&mut self, sec: u64) -> &mut Second {
        let at = self.seconds.iter().rposition(|s| s.sec <= sec);
        match at {
            Some(i) if self.seconds[i].sec == sec => &mut self.seconds[i],
            _ => {
                let i = at.map_or(0, |i| i + 1);
                self.seconds.insert(
                    i,
                    Second {
                        sec,
                        ..Second::default()
                    },
                );
                &mut self.seconds[i]
            }
        }
    }

    /// Moves the seconds before `before` to the charts (empty seconds as zeros).
    fn retire_seconds(&mut self, before: u64) {
        while self.seconds.front().is_some_and(|s| s.sec < before) {
            let s = self.seconds.pop_front().expect("checked");
            for _ in self.series_next.unwrap_or(s.sec)..s.sec {
                self.push_point((0.0, 0.0));
            }
            self.push_point((s.itl_p99(), s.tokens as f64));
            self.series_next = Some(s.sec + 1);
        }
    }

    fn push_point(&mut self, p: (f64, f64)) {
        if self.series.len() == SERIES {
            self.series.pop_front();
        }
        self.series.push_back(p);
    }
}

impl LevelLive {
    /// Counts a non-warm-up record by the report's accounting.
    fn count(&mut self, rec: &RequestRecord) {
        let c = &mut self.counts;
        if !rec.was_sent() {
            c.dropped += 1;
            return;
        }
        c.sent += 1;
        match rec.outcome {
            Outcome::Succeeded => c.succeeded += 1,
            o if o.is_abort() => c.aborted += 1,
            o => *self.failed.entry(o.name()).or_default() += 1,
        }
        if let Some(s) = rec.sent_ns {
            self.first_sent_ns = Some(self.first_sent_ns.map_or(s, |f| f.min(s)));
        }
        if let Some(e) = rec.end_ns {
            self.last_end_ns = Some(self.last_end_ns.map_or(e, |l| l.max(e)));
        }
    }

    fn counts(&self) -> Counts {
        let mut c = self.counts.clone();
        c.failed = self
            .failed
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        c.failed
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        c
    }

    /// Output tokens of succeeded requests per second from the first send to the last end.
    fn tok_s(&self) -> Option<f64> {
        let (from, to) = (self.first_sent_ns?, self.last_end_ns?);
        (to > from).then(|| self.tokens as f64 / ((to - from) as f64 / 1e9))
    }

    fn row(&self) -> TableRow {
        let ttft = pcts(&self.ttft);
        let itl = pcts(&self.itl);
        TableRow {
            label: self.label.clone(),
            sent: self.counts.sent,
            succeeded: self.counts.succeeded,
            failed: self.failed.values().sum(),
            ttft_p50_ms: ttft.map(|p| p[0]),
            ttft_p99_ms: ttft.map(|p| p[2]),
            itl_p50_ms: itl.map(|p| p[0]),
            itl_p99_ms: itl.map(|p| p[2]),
            tok_s: self.tok_s(),
            note: self.ended.clone().unwrap_or_default(),
        }
    }
}

/// Log bins of `d`'s values: powers of two of ms.
fn histogram(d: &DistAcc) -> Vec<Bin> {
    let mut bins: Vec<Bin> = (BIN_LO_EXP..=BIN_HI_EXP)
        .map(|e| Bin {
            lo_ms: 2f64.powi(e),
            hi_ms: 2f64.powi(e + 1),
            count: 0,
        })
        .collect();
    for (v, n) in d.sorted_values() {
        let e = if v > 0.0 {
            v.log2().floor() as i32
        } else {
            BIN_LO_EXP
        };
        let i = (e.clamp(BIN_LO_EXP, BIN_HI_EXP) - BIN_LO_EXP) as usize;
        bins[i].count += n;
    }
    bins
}

/// This process's figures the dashboard adds to the records' (read at frame time).
#[derive(Debug, Clone, Copy, Default)]
pub struct Client {
    /// Requests in flight now.
    pub in_flight: u64,
    /// This process's CPU use over the last second, as a share of all cores; `None` until
    /// two readings a second apart exist (or where CPU time cannot be read).
    pub cpu_share: Option<f64>,
    /// The machine's cores.
    pub cores: usize,
}

impl Live {
    /// The view at `now_ns` on the records' clock; the caller sets the title and clock.
    pub fn view(&mut self, now_ns: u64, client: Client) -> View {
        let now_sec = now_ns / 1_000_000_000;
        self.retire_seconds((now_sec + 1).saturating_sub(WINDOW_S));
        let mut recent = Second::default();
        for s in &self.seconds {
            recent.ttft.merge(&s.ttft);
            recent.itl.merge(&s.itl);
            recent.paced += s.paced;
            recent.late += s.late;
            recent.lag.merge(&s.lag);
        }
        let (mut itl_series, mut tok_series): (Vec<f64>, Vec<f64>) =
            self.series.iter().copied().unzip();
        // The seconds still open, up to the last whole one (none: zeros, a stall).
        let from = self
            .series_next
            .or(self.seconds.front().map(|s| s.sec))
            .unwrap_or(now_sec);
        for sec in from..now_sec {
            let s = self.seconds.iter().find(|s| s.sec == sec);
            itl_series.push(s.map_or(0.0, Second::itl_p99));
            tok_series.push(s.map_or(0.0, |s| s.tokens as f64));
        }
        let cur = self.current.clone();
        let lv = cur.as_ref().and_then(|c| self.levels.get(&c.index));
        let empty = LevelLive::default();
        let lv = lv.unwrap_or(&empty);
        View {
            level: cur.as_ref().map(|c| LevelProgress {
                index: c.index,
                of: c.of,
                label: c.label.clone(),
                done: lv.done,
                planned: c.planned,
                elapsed_s: now_ns.saturating_sub(c.started_ns) as f64 / 1e9,
                duration_s: c.duration.map(|d| d.as_secs_f64()),
            }),
            scope: "this level".into(),
            in_flight: Some(client.in_flight),
            counts: lv.counts(),
            latency: Latency {
                spans: [format!("last {WINDOW_S} s"), "this level".into()],
                ttft: [pcts(&recent.ttft), pcts(&lv.ttft)],
                itl: [pcts(&recent.itl), pcts(&lv.itl)],
            },
            stalls: Some(Stalls {
                threshold_ms: self.stall_threshold_ms,
                ..lv.stalls
            }),
            side: Side::Histogram(histogram(&lv.itl)),
            chart_titles: ["ITL p99 per second".into(), "output tok/s".into()],
            itl_p99_series: itl_series,
            tok_s_series: tok_series,
            check: self.check(&recent, client),
            table_title: "Completed levels".into(),
            rows: self
                .levels
                .values()
                .filter(|l| l.ended.is_some())
                .map(LevelLive::row)
                .collect(),
            ..View::default()
        }
    }

    fn check(&self, recent: &Second, client: Client) -> SelfCheck {
        let loop_lag_ms = (!self.lags.is_empty()).then(|| {
            let mut ms: Vec<f64> = self.lags.iter().map(|l| l.as_secs_f64() * 1e3).collect();
            ms.sort_by(f64::total_cmp);
            let p99 = cadence_core::stats::quantile_sorted(&ms, 0.99).unwrap_or(0.0);
            (p99, ms.last().copied().unwrap_or(0.0))
        });
        let pacing = (recent.paced > 0).then(|| Pacing {
            late_share: recent.late as f64 / recent.paced as f64,
            max_late_share: self.max_late_share,
            lag_p99_ms: recent.lag.quantiles(&[0.99]).map_or(0.0, |q| q[0]),
        });
        SelfCheck {
            loop_lag_ms,
            pacing,
            cpu_share: client.cpu_share,
            cores: client.cores,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, TokenCount, TokenSource};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// A request of level 0 sent at `at`, first chunk 40 ms later, then chunks `gap_ms` apart.
    fn ok(at: u64, gap_ms: u64, chunks: u64) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(at);
        r.chunks = (0..chunks)
            .map(|i| Chunk(at + 40 * MS + i * gap_ms * MS, None))
            .collect();
        r.end_ns = r.chunks.last().map(|c| c.0);
        r.output_tokens = Some(TokenCount {
            count: chunks,
            source: TokenSource::Usage,
        });
        r
    }

    fn live() -> Live {
        let mut l = Live::new(Duration::from_millis(500), 0.001);
        l.begin_level(0, Some(2), "concurrency=2".into(), Some(5), None, 0);
        l
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b * cadence_core::dist::RELATIVE_ERROR + 1e-3
    }

    #[test]
    fn counts_follow_the_report_accounting_and_skip_warm_up() {
        let mut l = live();
        l.add(&ok(0, 10, 3));
        let mut warm = ok(0, 10, 3);
        warm.warmup = true;
        l.add(&warm);
        let mut failed = ok(S, 10, 2);
        failed.outcome = Outcome::Http5xx;
        l.add(&failed);
        let mut aborted = ok(S, 10, 2);
        aborted.outcome = Outcome::AbortedAtDeadline;
        l.add(&aborted);
        l.add(&RequestRecord::new(9, Outcome::Dropped));
        let v = l.view(2 * S, Client::default());
        assert_eq!(v.counts.sent, 3);
        assert_eq!(v.counts.succeeded, 1);
        assert_eq!(v.counts.failed, vec![("http_5xx".to_string(), 1)]);
        assert_eq!((v.counts.aborted, v.counts.dropped), (1, 1));
        // The bar counts every record of the level, warm-up included.
        assert_eq!(v.level.unwrap().done, 5);
    }

    #[test]
    fn latency_is_windowed_and_cumulative() {
        let mut l = live();
        // Second 0: gaps of 10 ms; second 20: gaps of 30 ms, TTFT 40 ms throughout.
        l.add(&ok(0, 10, 5));
        l.add(&ok(20 * S, 30, 5));
        let v = l.view(21 * S, Client::default());
        let [recent, whole] = v.latency.itl;
        assert!(close(recent.unwrap()[0], 30.0), "{recent:?}");
        // Eight gaps, four of each: the pooled p50 interpolates between them.
        assert!(close(whole.unwrap()[0], 20.0), "{whole:?}");
        assert!(close(whole.unwrap()[2], 30.0), "{whole:?}");
        assert!(close(v.latency.ttft[0].unwrap()[1], 40.0));
        // The charts, one point per whole second: 0 and 20 had 5 tokens each (ITL p99
        // 10 and 30 ms), 1..19 none.
        assert_eq!(v.tok_s_series.len(), 21);
        assert_eq!((v.tok_s_series[0], v.tok_s_series[20]), (5.0, 5.0));
        assert!(close(v.itl_p99_series[0], 10.0));
        assert!(close(v.itl_p99_series[20], 30.0));
        assert!(v.tok_s_series[1..20].iter().all(|&t| t == 0.0));
    }

    #[test]
    fn a_long_wait_for_the_first_token_is_a_stall_as_in_the_report() {
        let mut l = live();
        l.add(&ok(0, 600, 3)); // two gaps over 500 ms
        let mut slow = ok(S, 3, 4); // a first token 1,040 ms after the send
        slow.sent_ns = Some(0);
        l.add(&slow);
        l.add(&ok(0, 3, 4));
        let s = l.view(2 * S, Client::default()).stalls.unwrap();
        assert_eq!((s.gaps, s.first_token, s.requests), (2, 1, 2));
    }

    #[test]
    fn stalls_histogram_and_completed_levels() {
        let mut l = live();
        l.add(&ok(0, 600, 3)); // two gaps over 500 ms
        l.add(&ok(0, 3, 4)); // three gaps of 3 ms
        let v = l.view(S, Client::default());
        let stalls = v.stalls.unwrap();
        assert_eq!((stalls.gaps, stalls.requests), (2, 1));
        let Side::Histogram(bins) = v.side else {
            panic!("bench shows the histogram")
        };
        let count = |lo: f64| bins.iter().find(|b| b.lo_ms == lo).unwrap().count;
        assert_eq!(count(2.0), 3);
        assert_eq!(count(512.0), 2);
        assert!(v.rows.is_empty(), "no level has ended");
        l.end_level(0, Some("skipped from the dashboard".into()));
        l.begin_level(1, Some(2), "concurrency=4".into(), None, None, S);
        let v = l.view(S, Client::default());
        assert_eq!(v.rows.len(), 1);
        assert_eq!(v.rows[0].label, "concurrency=2");
        assert_eq!(v.rows[0].sent, 2);
        assert_eq!(v.rows[0].note, "skipped from the dashboard");
        assert_eq!(v.counts.sent, 0, "the status line shows the new level");
    }

    #[test]
    fn the_self_check_reads_late_sends_and_loop_lag() {
        let mut l = live();
        let mut on_time = ok(S, 10, 2);
        on_time.scheduled_ns = Some(S);
        let mut late = ok(S, 10, 2);
        late.scheduled_ns = Some(S - 5 * MS);
        l.add(&on_time);
        l.add(&late);
        for ms in 0..100 {
            l.loop_lag(Duration::from_millis(ms));
        }
        let v = l.view(
            2 * S,
            Client {
                in_flight: 3,
                cpu_share: Some(0.5),
                cores: 2,
            },
        );
        let p = v.check.pacing.unwrap();
        assert_eq!(p.late_share, 0.5);
        assert!(v.check.pacing_bad());
        let (p99, max) = v.check.loop_lag_ms.unwrap();
        assert!((p99 - 98.01).abs() < 1e-9 && max == 99.0, "{p99} {max}");
        assert_eq!(v.in_flight, Some(3));
        // Memory stays bounded however long the run.
        for i in 0..(LAGS as u64 * 3) {
            l.loop_lag(Duration::from_micros(i));
        }
        assert_eq!(l.lags.len(), LAGS);
    }
}
