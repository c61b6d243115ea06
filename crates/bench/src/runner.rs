//! The load runner: one dispatch loop hands tickets to request tasks, each of which
//! executes one request and sends its record to the sink. Closed loop is a pool of
//! `concurrency` slots; the run ends by request count, duration, or a stop signal
//! (Ctrl-C), then drains in-flight requests within a grace period and aborts the rest.

use crate::client::HyperClient;
use crate::clock::Clock;
use crate::exec::{execute, Cancel, ExecContext, Timeouts};
use crate::progress::Progress;
use crate::secret::Redactor;
use crate::sink::RecordSender;
use crate::workload::RequestFactory;
use cadence_core::{Outcome, RequestRecord};
use cadence_wire::Api;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

/// How much load, for how long.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// Requests in flight at once (closed loop).
    pub concurrency: u32,
    /// Measured requests to send (warm-up requests come on top).
    pub requests: Option<u64>,
    /// Stop issuing requests after this long.
    pub duration: Option<Duration>,
    /// Requests sent first and excluded from statistics.
    pub warmup: u64,
    /// How long in-flight requests may finish after the run stops issuing.
    pub grace: Duration,
    /// Load level tag written into every record.
    pub level: u32,
}

/// Everything the request tasks share.
pub struct RunContext {
    pub client: HyperClient,
    pub factory: RequestFactory,
    pub timeouts: Timeouts,
    pub api: Api,
    pub strict: bool,
    pub redactor: Redactor,
    pub progress: Progress,
}

/// Why the run stopped issuing requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Every planned request was issued.
    Completed,
    /// `--duration` elapsed.
    Deadline,
    /// The stop signal fired (Ctrl-C).
    Interrupted,
}

/// What a run produced besides the records (which went to the sink).
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Requests the run meant to send (dispatched ones; warm-up included).
    pub intended: u64,
    /// Requests that could not be sent (closed loop: 0).
    pub dropped: u64,
    pub stop: StopReason,
    /// In-flight requests had to be cancelled after the grace period.
    pub aborted_in_flight: u64,
    /// The watchdog had to give up on tasks that did not answer cancellation.
    pub watchdog_fired: bool,
    /// From the first dispatch to the last record.
    pub wall: Duration,
    /// Event-loop lag seen by a 10 ms probe: (p99, max).
    pub loop_lag: (Duration, Duration),
}

/// How long tasks have to answer cancellation before the watchdog gives up on them.
const WATCHDOG: Duration = Duration::from_secs(5);

/// Runs one level. `stop` resolving means: stop issuing, drain, report.
pub async fn run(
    cx: Arc<RunContext>,
    plan: &RunPlan,
    clock: Clock,
    sink: RecordSender,
    stop: impl Future<Output = ()>,
) -> RunSummary {
    let started = Instant::now();
    let lag_probe = LagProbe::start();
    let concurrency = plan.concurrency.max(1);
    let total = plan.requests.map(|n| n + plan.warmup);
    let deadline = plan.duration.map(|d| started + d);
    let (cancel_tx, cancel) = Cancel::new();
    let in_flight: Arc<Mutex<BTreeSet<(u64, u32)>>> = Arc::default();

    // The slot pool: a slot id is taken per request and given back when it ends.
    let (slot_tx, mut slot_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    for w in 0..concurrency {
        slot_tx.send(w).expect("receiver alive");
    }

    tokio::pin!(stop);
    let mut tasks = JoinSet::new();
    let mut next: u64 = 0;
    let stop_reason = loop {
        if total.is_some_and(|t| next >= t) {
            break StopReason::Completed;
        }
        let far = started + Duration::from_secs(86_400 * 365);
        let slot = tokio::select! {
            biased;
            _ = &mut stop => break StopReason::Interrupted,
            _ = sleep_until(deadline.unwrap_or(far)) => break StopReason::Deadline,
            s = slot_rx.recv() => s.expect("the runner holds a slot sender"),
        };
        // Reap finished tasks so the set stays small on long runs.
        while tasks.try_join_next().is_some() {}
        let index = next;
        next += 1;
        let mut rec = RequestRecord::new(index, Outcome::AbortedAtDeadline);
        rec.level = plan.level;
        rec.worker = slot;
        rec.warmup = index < plan.warmup;
        in_flight
            .lock()
            .expect("in-flight lock")
            .insert((index, slot));
        let cx = cx.clone();
        let sink = sink.clone();
        let slot_tx = slot_tx.clone();
        let mut cancel = cancel.clone();
        let in_flight = in_flight.clone();
        tasks.spawn(async move {
            let (req, pid) = cx.factory.build(index);
            rec.prompt_id = Some(pid.to_string());
            cx.progress.started();
            let ex = ExecContext {
                client: &cx.client,
                clock: &clock,
                timeouts: &cx.timeouts,
                api: cx.api,
                strict: cx.strict,
                redactor: &cx.redactor,
            };
            execute(&ex, req, &mut cancel, &mut rec).await;
            cx.progress.ended();
            in_flight
                .lock()
                .expect("in-flight lock")
                .remove(&(index, slot));
            sink.send(rec);
            let _ = slot_tx.send(slot);
        });
    };
    let intended = next;

    // Drain: a completed run waits for its requests (their own timeouts bound them);
    // a stopped run gives them the grace period, then cancels.
    let mut aborted_in_flight = 0;
    let mut watchdog_fired = false;
    let drain_deadline = match stop_reason {
        StopReason::Completed => None,
        _ => Some(Instant::now() + plan.grace),
    };
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    let mut stop_seen = stop_reason == StopReason::Interrupted;
    let mut cancel_at = drain_deadline;
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            _ = &mut stop, if !stop_seen => {
                stop_seen = true;
                let grace_end = Instant::now() + plan.grace;
                cancel_at = Some(cancel_at.map_or(grace_end, |c| c.min(grace_end)));
            }
            _ = sleep_until(cancel_at.unwrap_or(far)), if cancel_at.is_some() => {
                aborted_in_flight = in_flight.lock().expect("in-flight lock").len() as u64;
                let _ = cancel_tx.send(true);
                let watchdog_end = Instant::now() + WATCHDOG;
                loop {
                    tokio::select! {
                        joined = tasks.join_next() => if joined.is_none() { break },
                        _ = sleep_until(watchdog_end) => { watchdog_fired = true; break }
                    }
                }
                break;
            }
        }
    }
    if watchdog_fired {
        // Tasks that ignored cancellation: account for them rather than lose them.
        tasks.abort_all();
        let stuck: Vec<(u64, u32)> = in_flight
            .lock()
            .expect("in-flight lock")
            .iter()
            .copied()
            .collect();
        for (index, slot) in stuck {
            let mut rec = RequestRecord::new(index, Outcome::AbortedAtDeadline);
            rec.level = plan.level;
            rec.worker = slot;
            rec.warmup = index < plan.warmup;
            rec.sent_ns = Some(0);
            rec.end_ns = Some(clock.now_ns());
            rec.error =
                Some("the watchdog ended a request that did not stop when cancelled".into());
            sink.send(rec);
        }
    }
    drop(sink);
    RunSummary {
        intended,
        dropped: 0,
        stop: if stop_seen {
            StopReason::Interrupted
        } else {
            stop_reason
        },
        aborted_in_flight,
        watchdog_fired,
        wall: started.elapsed(),
        loop_lag: lag_probe.finish().await,
    }
}

/// Measures how late a 10 ms timer fires: lag on the event loop delays every
/// timestamp the client takes, so it is reported beside the figures.
struct LagProbe {
    handle: tokio::task::JoinHandle<Vec<Duration>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl LagProbe {
    const PERIOD: Duration = Duration::from_millis(10);

    fn start() -> LagProbe {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let handle = tokio::spawn(async move {
            let mut lags = Vec::new();
            let mut expected = Instant::now() + Self::PERIOD;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = sleep_until(expected) => {
                        let now = Instant::now();
                        lags.push(now.saturating_duration_since(expected));
                        expected = now + Self::PERIOD;
                    }
                }
            }
            lags
        });
        LagProbe { handle, stop }
    }

    async fn finish(self) -> (Duration, Duration) {
        let _ = self.stop.send(());
        match self.handle.await {
            Ok(mut lags) if !lags.is_empty() => {
                lags.sort();
                let p99 = lags[((lags.len() - 1) as f64 * 0.99) as usize];
                (p99, *lags.last().expect("non-empty"))
            }
            _ => (Duration::ZERO, Duration::ZERO),
        }
    }
}
