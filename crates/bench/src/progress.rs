//! The live progress line on stderr: done / in flight / failed, elapsed, and running
//! ITL and TTFT p50/p99 over recent requests. Hidden when stderr is not a terminal or
//! with `--quiet`. It also carries what a dashboard shares with the run: the requests
//! in flight and the request to skip to the next level. The dashboard's own state is
//! one more record sink, composed by the binary (`crate::sink::BenchSinks::with_live`).

use cadence_core::{per_request, Outcome, RequestRecord};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Recent samples kept for the running percentiles.
const WINDOW_ITL: usize = 20_000;
const WINDOW_TTFT: usize = 2_000;

/// The progress line and the counts behind it, shared by the runner, the sink and a
/// dashboard (clones share one state).
#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    inner: Arc<Inner>,
}

struct Inner {
    in_flight: AtomicU64,
    failed: AtomicU64,
    recent: Mutex<Recent>,
    /// Bumped by each request to skip the level being run.
    skip: tokio::sync::watch::Sender<u64>,
}

/// Resolves when the level in progress should end early (the dashboard's `s`).
pub struct SkipWatch(tokio::sync::watch::Receiver<u64>);

impl SkipWatch {
    /// Waits for the next skip request (forever, once the progress is gone).
    pub async fn requested(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

struct Recent {
    itl_ms: VecDeque<f64>,
    ttft_ms: VecDeque<f64>,
    last_draw: Instant,
}

impl Progress {
    /// `total` is the number of requests when known.
    pub fn new(total: Option<u64>, visible: bool) -> Progress {
        let bar = if !visible {
            ProgressBar::hidden()
        } else {
            let bar = match total {
                Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            };
            let template = if total.is_some() {
                "{elapsed:>4} [{bar:24}] {pos}/{len} {msg}"
            } else {
                "{elapsed:>4} {spinner} {pos} done {msg}"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        };
        Progress {
            bar,
            inner: Arc::new(Inner {
                in_flight: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                recent: Mutex::new(Recent {
                    itl_ms: VecDeque::new(),
                    ttft_ms: VecDeque::new(),
                    last_draw: Instant::now(),
                }),
                skip: tokio::sync::watch::channel(0).0,
            }),
        }
    }

    /// Requests sent and not yet ended.
    pub fn in_flight(&self) -> u64 {
        self.inner.in_flight.load(Ordering::Relaxed)
    }

    /// Asks the level in progress to end now (drained as at its deadline).
    pub fn skip_level(&self) {
        self.inner.skip.send_modify(|n| *n += 1);
    }

    /// A watch that fires on the next [`Self::skip_level`], not on earlier ones.
    pub fn skip_watch(&self) -> SkipWatch {
        SkipWatch(self.inner.skip.subscribe())
    }

    /// Stops drawing the line for good (the dashboard took the terminal).
    pub fn hide_line(&self) {
        self.bar.finish_and_clear();
        self.bar.set_draw_target(ProgressDrawTarget::hidden());
    }

    /// A request went out (one more in flight).
    pub fn started(&self) {
        self.inner.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request ended (one fewer in flight).
    pub fn ended(&self) {
        self.inner.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Called by the sink for each finished request.
    pub fn record(&self, rec: &RequestRecord) {
        if self.bar.is_hidden() {
            return;
        }
        if rec.outcome.is_failure() {
            self.inner.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.bar.inc(1);
        let mut r = self.inner.recent.lock().expect("progress lock");
        r.add(rec);
        if r.last_draw.elapsed() >= Duration::from_millis(250) {
            r.last_draw = Instant::now();
            let msg = format!(
                "in flight {} failed {} | ITL p50 {} p99 {} | TTFT p50 {} p99 {}",
                self.inner.in_flight.load(Ordering::Relaxed),
                self.inner.failed.load(Ordering::Relaxed),
                pct(&r.itl_ms, 0.5),
                pct(&r.itl_ms, 0.99),
                pct(&r.ttft_ms, 0.5),
                pct(&r.ttft_ms, 0.99),
            );
            drop(r);
            self.bar.set_message(msg);
        }
    }

    /// Clears the line at the run's end.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Recent {
    /// Takes a succeeded request's TTFT and ITL gaps into the running windows.
    fn add(&mut self, rec: &RequestRecord) {
        if rec.outcome != Outcome::Succeeded || rec.warmup {
            return;
        }
        // Core's formulas: an interval that runs backwards gives no sample.
        let mut bad = 0;
        if let Some(t) = per_request::ttft_ms(rec, &mut bad) {
            push(&mut self.ttft_ms, WINDOW_TTFT, t);
        }
        for (gap, _) in per_request::itl_gaps(rec, &mut bad) {
            push(&mut self.itl_ms, WINDOW_ITL, per_request::ms(gap));
        }
    }
}

fn push(q: &mut VecDeque<f64>, cap: usize, v: f64) {
    if q.len() == cap {
        q.pop_front();
    }
    q.push_back(v);
}

/// A running percentile by the report's own rule, so the live line and the final
/// report never disagree on what "p99" means.
fn pct(q: &VecDeque<f64>, p: f64) -> String {
    let mut v: Vec<f64> = q.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    match cadence_core::stats::quantile_sorted(&v, p) {
        Some(x) => format!("{x:.1}ms"),
        None => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_percentiles_follow_the_report_rule() {
        let q: VecDeque<f64> = [4.0, 1.0, 3.0, 2.0].into_iter().collect();
        // Type 7 (linear interpolation): p50 of 1..4 is 2.5, p90 is 3.7.
        assert_eq!(pct(&q, 0.5), "2.5ms");
        assert_eq!(pct(&q, 0.9), "3.7ms");
        assert_eq!(pct(&VecDeque::new(), 0.5), "–");
    }

    fn recent() -> Recent {
        Recent {
            itl_ms: VecDeque::new(),
            ttft_ms: VecDeque::new(),
            last_draw: Instant::now(),
        }
    }

    #[test]
    fn samples_follow_core_formulas_and_skip_intervals_that_run_backwards() {
        use cadence_core::Chunk;
        let ms = 1_000_000;
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        // Sent at 50 ms, chunks at 40 (before the send: a record out of order), 60, 55
        // and 75 ms: TTFT runs backwards and the 60 -> 55 gap too; both are skipped,
        // as in the report, instead of wrapping or panicking.
        rec.sent_ns = Some(50 * ms);
        rec.chunks = [40, 60, 55, 75].map(|t| Chunk(t * ms, None)).to_vec();
        let mut r = recent();
        r.add(&rec);
        assert_eq!(r.ttft_ms, VecDeque::<f64>::new());
        assert_eq!(r.itl_ms, VecDeque::from([20.0, 20.0]));

        rec.sent_ns = Some(10 * ms);
        r.add(&rec);
        assert_eq!(r.ttft_ms, VecDeque::from([30.0]));
        rec.outcome = Outcome::Truncated;
        r.add(&rec);
        assert_eq!(r.itl_ms.len(), 4, "failed requests add no samples");
    }
}
