//! The load runner: one dispatch loop hands tickets to request tasks, each of which
//! executes one request and sends its record to the sink. Closed loop waits for one of
//! `concurrency` slots; open loop takes tickets from the pacing thread and drops an
//! arrival when the `max_concurrency` cap is full. A level ends by request count,
//! duration, saturation or a stop signal (Ctrl-C), then drains in-flight requests
//! within a grace period and aborts the rest.

use crate::arrivals::{ArrivalProcess, Pacer, Schedule, Ticket};
use crate::floor::FloorProbe;

use crate::exec::{execute, Cancel, ExecContext, Timeouts};
use crate::progress::Progress;
use crate::session::{SessionKind, Steps};
use crate::workload::RequestFactory;
use cadence_core::rng::stream_seed;
use cadence_core::secret::Redactor;
use cadence_core::{InputTokenSource, Outcome, RequestRecord};
use cadence_records::{RecordSender, Sinks};
use cadence_transport::{Clock, HyperClient};
use cadence_wire::Api;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

/// The shape of the load.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// A fixed number of requests in flight; each slot sends again when its request ends.
    Closed {
        /// Requests in flight at once.
        concurrency: u32,
    },
    /// Requests sent at scheduled times whatever the server does (coordinated omission
    /// stays visible); arrivals beyond `max_concurrency` in flight are dropped.
    Open {
        /// Arrivals per second.
        rate: f64,
        /// How the gaps between arrivals are drawn (Poisson, constant, ...).
        process: ArrivalProcess,
        /// The most requests in flight; an arrival past it is dropped and recorded.
        max_concurrency: Option<u32>,
        /// The time over which the rate grows from 0 to `rate`.
        ramp_up: Duration,
    },
    /// Requests sent at recorded arrival offsets (trace replay), open loop.
    Trace {
        /// Each arrival's offset from the level's start, in send order.
        offsets: Arc<Vec<Duration>>,
        /// The most requests in flight; an arrival past it is dropped and recorded.
        max_concurrency: Option<u32>,
    },
}

impl Load {
    /// A label for reports: `concurrency=8`, `rate=5/s`.
    pub fn label(&self) -> String {
        match self {
            Load::Closed { concurrency } => {
                cadence_core::runlog::load_name(Some(*concurrency), None).unwrap_or_default()
            }
            Load::Open { rate, .. } => {
                cadence_core::runlog::load_name(None, Some(*rate)).unwrap_or_default()
            }
            Load::Trace { offsets, .. } => format!("trace({} arrivals)", offsets.len()),
        }
    }

    /// The send offsets of an open-loop shape; `None` for closed loop.
    pub fn schedule(&self) -> Option<Box<dyn Iterator<Item = Duration> + Send>> {
        self.schedule_for(None)
    }

    /// The send offsets of shard `(index, count)` of a fleet whose shards each run this
    /// load ([`Schedule::shard`]); `None`: the whole load.
    pub fn schedule_for(
        &self,
        shard: Option<(u32, u32)>,
    ) -> Option<Box<dyn Iterator<Item = Duration> + Send>> {
        match self {
            Load::Closed { .. } => None,
            Load::Open {
                rate,
                process,
                ramp_up,
                ..
            } => {
                let s = Schedule::new(*rate, *process, *ramp_up);
                Some(Box::new(match shard {
                    Some((i, n)) => s.shard(i, n),
                    None => s,
                }))
            }
            Load::Trace { offsets, .. } => {
                let offsets = offsets.clone();
                Some(Box::new((0..offsets.len()).map(move |i| offsets[i])))
            }
        }
    }
}

/// How much load, for how long.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// The shape of the load: closed, open or a trace's arrivals.
    pub load: Load,
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
    /// End the level early once it is clearly saturated (sweeps).
    pub stop_when_saturated: bool,
}

impl RunPlan {
    /// Slots for the pool: closed-loop concurrency or the open-loop cap.
    fn slot_cap(&self) -> Option<u32> {
        match self.load {
            Load::Closed { concurrency } => Some(concurrency.max(1)),
            Load::Open {
                max_concurrency, ..
            }
            | Load::Trace {
                max_concurrency, ..
            } => max_concurrency,
        }
    }
}

/// Where a level sits in a fleet of load generators (`bench --shard`): the instant
/// every shard starts it, and this shard's place among the fleet's arrivals and ids.
/// The default is a lone run: it starts now, with ids 0, 1, 2, …
#[derive(Debug, Clone, Copy, Default)]
pub struct Placement {
    /// Start sending at this instant (the run's `--duration` counts from it, so every
    /// shard stops on the same deadline). A shard that arrives late starts at once and
    /// paces its arrivals from then (no burst of overdue ones); its lateness is the
    /// summary's `start_skew`.
    pub start: Option<Instant>,
    /// `(index, count)`: the shard's arrivals interleave with the others'
    /// ([`Load::schedule_for`]) and its record ids are `k · count + index`.
    pub shard: Option<(u32, u32)>,
}

impl Placement {
    /// The record id of the shard's `local`-th request.
    fn id(&self, local: u64) -> u64 {
        match self.shard {
            Some((i, n)) => local * u64::from(n) + u64::from(i),
            None => local,
        }
    }
}

/// Everything the request tasks share.
pub struct RunContext {
    /// The HTTP client every request goes through.
    pub client: HyperClient,
    /// What each dispatch sends.
    pub factory: RequestFactory,
    /// The per-request time limits.
    pub timeouts: Timeouts,
    /// The dialect responses are read in.
    pub api: Api,
    /// A malformed event fails the request instead of being counted (`--strict`).
    pub strict: bool,
    /// What secrets are masked in a record's error text.
    pub redactor: Redactor,
    /// The live progress line and in-flight count.
    pub progress: Progress,
    /// Counts output tokens after each stream (off the read loop, on a blocking
    /// thread) and attributes them to chunks.
    pub tokenizer: Option<crate::tokenizer::Tokenizer>,
    /// W3C trace context on each request and in its record (`--otlp`).
    pub propagation: Option<crate::propagate::Propagation>,
}

/// When the server gave no prompt-token count, the workload's: the tokenizer's count of
/// the prompt text sent (message contents summed), else its whitespace words, named by
/// source. Nothing when the workload does not know the prompt (`parts` empty).
pub fn input_from_workload(
    rec: &mut RequestRecord,
    parts: &[String],
    tokenizer: Option<&crate::tokenizer::Tokenizer>,
) {
    if rec.input_tokens.is_some() || parts.is_empty() {
        return;
    }
    let (count, source) = match tokenizer {
        Some(tk) => (
            parts.iter().map(|p| tk.count(p) as u64).sum(),
            InputTokenSource::Tokenizer,
        ),
        None => (
            parts
                .iter()
                .map(|p| p.split_whitespace().count() as u64)
                .sum(),
            InputTokenSource::Words,
        ),
    };
    rec.input_tokens = Some(count);
    rec.input_tokens_source = Some(source);
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
    /// The level was clearly saturated (see `RunSummary::stopped_early`).
    Saturated,
    /// The dashboard asked for the next level (`s`); drained as at a deadline.
    Skipped,
}

/// A skipped level's `stopped_early`.
pub const SKIPPED: &str = "skipped from the dashboard";

/// What a run produced besides the records (which went to the sink).
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Requests the run meant to send (dispatched ones and later turns of sessions;
    /// warm-up included).
    pub intended: u64,
    /// Open-loop arrivals dropped because `max_concurrency` requests were in flight
    /// (each has a record with no send time).
    pub dropped: u64,
    /// Why the level ended before its plan, in plain words.
    pub stopped_early: Option<String>,
    /// Why the level stopped issuing requests.
    pub stop: StopReason,
    /// In-flight requests had to be cancelled after the grace period.
    pub aborted_in_flight: u64,
    /// The watchdog had to give up on tasks that did not answer cancellation.
    pub watchdog_fired: bool,
    /// From the first dispatch to the last record.
    pub wall: Duration,
    /// Event-loop lag seen by a 10 ms probe: (p99, max).
    pub loop_lag: (Duration, Duration),
    /// CPU time this process used during the level (absent off Linux).
    pub cpu: Option<Duration>,
    /// How late the level started after its [`Placement::start`] (zero when it had
    /// none, or started on time).
    pub start_skew: Duration,
    /// The machine's timer floor while an open-loop level sent (`crate::floor`).
    pub floor: Option<cadence_core::pacing::TimerFloor>,
}

impl RunSummary {
    /// What the run knew about the level of `plan` beyond its records, read off this
    /// summary and this machine ([`cadence_core::level_meta`] turns it into the
    /// level's metadata).
    pub fn facts(&self, plan: &RunPlan) -> cadence_core::LevelFacts {
        let (concurrency, rate) = match plan.load {
            Load::Closed { concurrency } => (Some(concurrency), None),
            Load::Open { rate, .. } => (None, Some(rate)),
            Load::Trace { .. } => (None, None),
        };
        cadence_core::LevelFacts {
            level: plan.level,
            name: plan.load.label(),
            concurrency,
            rate,
            intended: self.intended,
            stopped_early: self.stopped_early.clone(),
            watchdog_fired: self.watchdog_fired,
            loop_lag: self.loop_lag,
            cpu: self.cpu,
            wall: self.wall,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            aborted_in_flight: self.aborted_in_flight,
            interrupted: self.stop == StopReason::Interrupted,
            floor: self.floor,
        }
    }
}

/// What the runner remembers of a request while it is in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    scheduled_ns: Option<u64>,
    dispatched_ns: u64,
}

type InFlightMap = Arc<Mutex<BTreeMap<(u64, u32), InFlight>>>;

/// Who sends a request: the level, the slot it holds, and whether it is warm-up. Every
/// turn of a session shares its first request's.
#[derive(Debug, Clone, Copy)]
struct Identity {
    level: u32,
    slot: u32,
    warmup: bool,
    placement: Placement,
}

impl Identity {
    /// The record of request `index`, its identity set, entered as in flight (so the
    /// watchdog can account for it if its task never answers).
    fn start(
        self,
        index: u64,
        scheduled_ns: Option<u64>,
        in_flight: &InFlightMap,
        clock: &Clock,
    ) -> RequestRecord {
        let mut rec = RequestRecord::new(self.placement.id(index), Outcome::AbortedAtDeadline);
        rec.level = self.level;
        rec.worker = self.slot;
        rec.warmup = self.warmup;
        rec.scheduled_ns = scheduled_ns;
        in_flight.lock().expect("in-flight lock").insert(
            (index, self.slot),
            InFlight {
                scheduled_ns,
                dispatched_ns: clock.now_ns(),
            },
        );
        rec
    }
}

/// How long tasks have to answer cancellation before the watchdog gives up on them.
const WATCHDOG: Duration = Duration::from_secs(5);

/// Runs one level. `stop` resolving means: stop issuing, drain, report.
pub async fn run<S: Sinks>(
    cx: Arc<RunContext>,
    plan: &RunPlan,
    clock: Clock,
    sink: RecordSender<S>,
    stop: impl Future<Output = ()>,
) -> RunSummary {
    run_placed(cx, plan, clock, sink, stop, Placement::default()).await
}

/// [`run`] at a [`Placement`] in a fleet: waits for its start (a stop while waiting
/// ends the level before it sends anything), then runs.
pub async fn run_placed<S: Sinks>(
    cx: Arc<RunContext>,
    plan: &RunPlan,
    clock: Clock,
    sink: RecordSender<S>,
    stop: impl Future<Output = ()>,
    placement: Placement,
) -> RunSummary {
    tokio::pin!(stop);
    let start = wait_for_start(placement.start, &plan.load, stop.as_mut()).await;
    let started = match start {
        Some(s) => s.started,
        None => Instant::now(),
    };
    let cpu_at_start = crate::cpu::process_cpu_time();
    let lag_probe = LagProbe::start();
    let (cancel_tx, cancel) = Cancel::new();
    let level = Level {
        cx,
        plan: plan.clone(),
        clock,
        sink,
        cancel,
        in_flight: Arc::default(),
        slots: Slots::new(plan.slot_cap()),
        tally: Arc::new(Tally::default()),
        issued: Arc::new(AtomicU64::new(0)),
        placement,
    };
    let mut tasks = JoinSet::new();
    // Sends on a schedule are judged against the machine's own lateness while they go.
    let floor_probe = (start.is_some() && !matches!(plan.load, Load::Closed { .. }))
        .then(|| FloorProbe::start(crate::floor::PERIOD));
    let issuing = match start {
        Some(s) => {
            // The deadline is shared: it counts from the planned start, not a late one.
            let deadline = plan.duration.map(|d| s.planned + d);
            level
                .issue(&mut tasks, s.started, deadline, stop.as_mut())
                .await
        }
        None => Issuing {
            stop: StopReason::Interrupted,
            dropped: 0,
            stopped_early: None,
        },
    };
    let floor = floor_probe.map(FloorProbe::finish);
    let drained = level
        .drain(&mut tasks, issuing.stop, stop.as_mut(), cancel_tx)
        .await;
    if drained.watchdog_fired {
        level.account_stuck(&mut tasks);
    }
    let intended = level.issued.load(Ordering::Relaxed);
    drop(level);
    RunSummary {
        intended,
        dropped: issuing.dropped,
        stopped_early: issuing.stopped_early,
        stop: if drained.stop_seen {
            StopReason::Interrupted
        } else {
            issuing.stop
        },
        aborted_in_flight: drained.aborted_in_flight,
        watchdog_fired: drained.watchdog_fired,
        wall: started.elapsed(),
        loop_lag: lag_probe.finish().await,
        cpu: crate::cpu::process_cpu_time()
            .zip(cpu_at_start)
            .map(|(end, start)| end.saturating_sub(start)),
        start_skew: start.map_or(Duration::ZERO, |s| s.started - s.planned),
        floor,
    }
}

/// When a level starts: as planned, or (a late shard) when it could.
#[derive(Debug, Clone, Copy)]
struct Start {
    planned: Instant,
    /// The schedule's 0: `planned`, or now when that has passed.
    started: Instant,
}

/// How long before a planned open-loop start the runtime's timer wakes (it rounds to
/// whole milliseconds): the pacing thread spins the rest, so the first arrival is on time.
const WAKE_EARLY: Duration = Duration::from_millis(3);

/// Waits for `at` (now when `None`); `None` when `stop` fired first. An open loop
/// wakes a little early and leaves the exact instant to the pacing thread; a closed
/// loop starts when the timer fires.
async fn wait_for_start<F: Future<Output = ()>>(
    at: Option<Instant>,
    load: &Load,
    stop: std::pin::Pin<&mut F>,
) -> Option<Start> {
    let now = Instant::now();
    let planned = at.unwrap_or(now);
    let paced = !matches!(load, Load::Closed { .. });
    let wake = if paced {
        planned.checked_sub(WAKE_EARLY).unwrap_or(planned)
    } else {
        planned
    };
    if wake > now {
        tokio::select! {
            biased;
            _ = stop => return None,
            _ = sleep_until(wake) => {}
        }
    }
    let now = Instant::now();
    Some(Start {
        planned,
        started: if now > planned { now } else { planned },
    })
}

/// One level in progress: what the dispatch loop, the request tasks, the drain and
/// the watchdog share.
struct Level<S> {
    cx: Arc<RunContext>,
    plan: RunPlan,
    clock: Clock,
    sink: RecordSender<S>,
    cancel: Cancel,
    /// Requests in flight, keyed by (index, slot), with the time they were dispatched:
    /// what the watchdog needs to account for a request that never answers.
    in_flight: InFlightMap,
    slots: Slots,
    tally: Arc<Tally>,
    /// Record indices: one per request, dispatched or a later turn of a session.
    issued: Arc<AtomicU64>,
    placement: Placement,
}

/// How the dispatch loop ended.
struct Issuing {
    stop: StopReason,
    dropped: u64,
    stopped_early: Option<String>,
}

/// How the drain ended.
struct Drained {
    aborted_in_flight: u64,
    watchdog_fired: bool,
    /// The stop signal fired (before or during the drain).
    stop_seen: bool,
}

impl<S: Sinks> Level<S> {
    /// The dispatch loop: issues requests until the plan is done, the deadline
    /// passes, the level saturates or `stop` fires.
    async fn issue<F: Future<Output = ()>>(
        &self,
        tasks: &mut JoinSet<()>,
        started: Instant,
        deadline: Option<Instant>,
        mut stop: std::pin::Pin<&mut F>,
    ) -> Issuing {
        let plan = &self.plan;
        let total = plan.requests.map(|n| n + plan.warmup);
        // Open loop: the pacing thread owns the schedule; closed loop counts indices here.
        let (_pacer, mut tickets) = match plan.load.schedule_for(self.placement.shard) {
            None => (None, None),
            Some(schedule) => {
                let (pacer, rx) = Pacer::start(started.into_std(), schedule, total);
                (Some(pacer), Some(rx))
            }
        };
        let mut next: u64 = 0;
        let mut dropped = 0u64;
        let mut stopped_early = None;
        let mut skip = self.cx.progress.skip_watch();
        let far = started + Duration::from_secs(86_400 * 365);
        let stop = loop {
            if total.is_some_and(|t| next >= t) {
                break StopReason::Completed;
            }
            if plan.stop_when_saturated {
                let in_flight = self.in_flight.lock().expect("in-flight lock").len();
                if let Some(why) = self.tally.saturation(&plan.load, in_flight) {
                    stopped_early = Some(why);
                    break StopReason::Saturated;
                }
            }
            // The next arrival: a free slot (closed loop) or a ticket from the pacer.
            let (scheduled, permit) = match tickets.as_mut() {
                None => tokio::select! {
                    biased;
                    _ = &mut stop => break StopReason::Interrupted,
                    _ = skip.requested() => break StopReason::Skipped,
                    _ = sleep_until(deadline.unwrap_or(far)) => break StopReason::Deadline,
                    p = self.slots.acquire() => (None, p),
                },
                Some(rx) => {
                    let ticket: Ticket = tokio::select! {
                        biased;
                        _ = &mut stop => break StopReason::Interrupted,
                        _ = skip.requested() => break StopReason::Skipped,
                        _ = sleep_until(deadline.unwrap_or(far)) => break StopReason::Deadline,
                        t = rx.recv() => match t {
                            Some(t) => t,
                            None => break StopReason::Completed,
                        },
                    };
                    debug_assert_eq!(ticket.index, next);
                    // The window is [start, start + duration): rate × duration sends, not
                    // one more at the deadline itself (the pacer's ticket can beat the timer).
                    if deadline.is_some_and(|d| ticket.scheduled >= d) {
                        break StopReason::Deadline;
                    }
                    match self.slots.try_acquire() {
                        Some(p) => (Some(ticket.scheduled), p),
                        None => {
                            self.drop_arrival(ticket, next < plan.warmup);
                            dropped += 1;
                            next += 1;
                            continue;
                        }
                    }
                }
            };
            // Reap finished tasks so the set stays small on long runs.
            while tasks.try_join_next().is_some() {}
            self.dispatch(tasks, next, scheduled, permit);
            next += 1;
        };
        if stop == StopReason::Skipped {
            stopped_early = Some(SKIPPED.into());
        }
        Issuing {
            stop,
            dropped,
            stopped_early,
        }
    }

    /// The cap is full: the arrival is dropped, and recorded as such.
    fn drop_arrival(&self, ticket: Ticket, warmup: bool) {
        let index = self.issued.fetch_add(1, Ordering::Relaxed);
        let mut rec = RequestRecord::new(self.placement.id(index), Outcome::Dropped);
        rec.level = self.plan.level;
        rec.warmup = warmup;
        rec.scheduled_ns = Some(self.clock.ns_at(ticket.scheduled));
        rec.error = Some(format!(
            "dropped: {} requests were already in flight (--max-concurrency)",
            self.slots.cap.unwrap_or(0)
        ));
        self.sink.send(rec);
    }

    /// Starts the task of dispatch number `dispatch` (all turns of its session).
    fn dispatch(
        &self,
        tasks: &mut JoinSet<()>,
        dispatch: u64,
        scheduled: Option<Instant>,
        permit: SlotPermit,
    ) {
        let index = self.issued.fetch_add(1, Ordering::Relaxed);
        let who = Identity {
            level: self.plan.level,
            slot: permit.id,
            warmup: dispatch < self.plan.warmup,
            placement: self.placement,
        };
        let scheduled_ns = scheduled.map(|t| self.clock.ns_at(t));
        let rec = who.start(index, scheduled_ns, &self.in_flight, &self.clock);
        let task = RequestTask {
            cx: self.cx.clone(),
            clock: self.clock,
            sink: self.sink.clone(),
            cancel: self.cancel.clone(),
            in_flight: self.in_flight.clone(),
            tally: self.tally.clone(),
            issued: self.issued.clone(),
            who,
        };
        // Boxed: the runtime moves a task's future into its cell and its output back
        // out, whole; a request's state machine is KiBs, its box a pointer.
        tasks.spawn(Box::pin(async move {
            task.run(dispatch, index, rec).await;
            drop(permit);
        }));
    }

    /// A completed run waits for its requests (their own timeouts bound them); a
    /// stopped run gives them the grace period, then cancels, and the watchdog gives
    /// up on tasks that do not answer cancellation.
    async fn drain<F: Future<Output = ()>>(
        &self,
        tasks: &mut JoinSet<()>,
        stop_reason: StopReason,
        mut stop: std::pin::Pin<&mut F>,
        cancel_tx: crate::exec::CancelSender,
    ) -> Drained {
        let mut aborted_in_flight = 0;
        let mut watchdog_fired = false;
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let mut stop_seen = stop_reason == StopReason::Interrupted;
        let mut cancel_at = match stop_reason {
            StopReason::Completed => None,
            _ => Some(Instant::now() + self.plan.grace),
        };
        loop {
            tokio::select! {
                joined = tasks.join_next() => if joined.is_none() { break },
                _ = &mut stop, if !stop_seen => {
                    stop_seen = true;
                    let grace_end = Instant::now() + self.plan.grace;
                    cancel_at = Some(cancel_at.map_or(grace_end, |c| c.min(grace_end)));
                }
                _ = sleep_until(cancel_at.unwrap_or(far)), if cancel_at.is_some() => {
                    aborted_in_flight = self.in_flight.lock().expect("in-flight lock").len() as u64;
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
        Drained {
            aborted_in_flight,
            watchdog_fired,
            stop_seen,
        }
    }

    /// Tasks that ignored cancellation: aborted, and accounted for rather than lost.
    fn account_stuck(&self, tasks: &mut JoinSet<()>) {
        tasks.abort_all();
        let stuck: Vec<((u64, u32), InFlight)> = self
            .in_flight
            .lock()
            .expect("in-flight lock")
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        for ((index, slot), at) in stuck {
            let mut rec = RequestRecord::new(self.placement.id(index), Outcome::AbortedAtDeadline);
            rec.level = self.plan.level;
            rec.worker = slot;
            rec.warmup = index < self.plan.warmup;
            rec.scheduled_ns = at.scheduled_ns;
            // Its own send time died with the task; dispatch came just before it.
            rec.sent_ns = Some(at.dispatched_ns);
            rec.end_ns = Some(self.clock.now_ns());
            rec.error =
                Some("the watchdog ended a request that did not stop when cancelled".into());
            self.sink.send(rec);
        }
    }
}

/// What a later request quotes of a reply: nothing, its text (a session's next
/// turn), or its text and tool calls (an agent's next step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    No,
    Text,
    WithToolCalls,
}

/// What one request task holds: it sends its request (every turn of a session) and
/// hands each finished record to the sinks.
struct RequestTask<S> {
    cx: Arc<RunContext>,
    clock: Clock,
    sink: RecordSender<S>,
    cancel: Cancel,
    in_flight: InFlightMap,
    tally: Arc<Tally>,
    issued: Arc<AtomicU64>,
    who: Identity,
}

impl<S: Sinks> RequestTask<S> {
    async fn run(self, dispatch: u64, index: u64, rec: RequestRecord) {
        let cx = self.cx.clone();
        let arrived_ns = || rec.scheduled_ns.unwrap_or_else(|| self.clock.now_ns());
        match Steps::new(&cx.factory.session, &cx.factory, dispatch, arrived_ns) {
            Some(steps) => self.run_steps(steps, dispatch, index, rec).await,
            None if matches!(cx.factory.session, SessionKind::Replay(_)) => {}
            None => self.run_turns(dispatch, index, rec).await,
        }
    }

    /// An agent session or a recorded one replayed: steps until the session ends (an
    /// agent's reply without tool calls, the step cap, the recording's last call) or a
    /// step fails. Each step after the first waits for its due time, counted from the
    /// previous step's last byte (an agent's tool time; a replay's recorded tool wait,
    /// and not before the call's recorded offset from the session's arrival).
    async fn run_steps(
        mut self,
        mut steps: Steps<'_>,
        dispatch: u64,
        mut index: u64,
        mut rec: RequestRecord,
    ) {
        let cx = self.cx.clone();
        let mut rng = SmallRng::seed_from_u64(stream_seed(steps.spec().seed, dispatch));
        let mut prev_end_ns: u64 = 0;
        for step in 0..steps.len() {
            if step > 0 {
                let (due, tool_wait) = steps.due(step, prev_end_ns, &mut rng);
                if !self.wait_until(due).await {
                    break;
                }
                index = self.issued.fetch_add(1, Ordering::Relaxed);
                rec = self.who.start(index, None, &self.in_flight, &self.clock);
                rec.tool_wait_ns = Some(tool_wait);
            }
            let built = steps.build(&cx.factory, dispatch, step, &mut rng, &mut rec);
            let (text, mut calls, parts) =
                self.send_step(built, dispatch, step as u32, &mut rec).await;
            let ok = rec.outcome == Outcome::Succeeded;
            // Calls read in part are not sent back cut: the session ends here.
            let last = step + 1 == steps.len() || rec.tool_calls_cut;
            steps.mock(ok, last, (dispatch, step), &mut calls, &mut rec);
            let reply = text.content.clone();
            rec = self.count_tokens(rec, text, parts).await;
            // What the reply adds to the next prompt: re-tokenized by the tokenizer when
            // there is one (what the server will count when it is sent back), else the
            // server's count of what it generated.
            let server_tokens = match (&cx.tokenizer, rec.output_tokens) {
                (None, Some(t)) => Some(t.count),
                _ => None,
            };
            prev_end_ns = rec.end_ns.unwrap_or_else(|| self.clock.now_ns());
            self.finish_record(index, &mut rec);
            if !ok || last || !steps.goes_on(&calls) {
                break;
            }
            steps.push_reply(&reply, &calls, server_tokens, &mut rng);
        }
    }

    /// Waits until `due_ns` on the run clock; false when the run was cancelled
    /// meanwhile. The runtime's timer fires on the millisecond after its deadline, so
    /// a step goes out up to ~1 ms after its due time (the report's `rest`); spinning
    /// the last stretch away would cost a busy core at thousands of steps a second.
    async fn wait_until(&mut self, due_ns: u64) -> bool {
        let left = Duration::from_nanos(due_ns.saturating_sub(self.clock.now_ns()));
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => false,
            _ = sleep_until(Instant::now() + left) => true,
        }
    }

    /// Sends one step of agent session `dispatch` (its record says the session, the
    /// step and the calls its reply made) and gives back the reply, its tool calls and
    /// the prompt's text parts (for counting its tokens).
    async fn send_step(
        &mut self,
        built: crate::workload::BuiltTurn,
        dispatch: u64,
        step: u32,
        rec: &mut RequestRecord,
    ) -> (
        cadence_wire::StreamText,
        Vec<cadence_wire::ToolCall>,
        Vec<String>,
    ) {
        rec.expected_output_tokens = built.expected_output_tokens;
        rec.session = Some(dispatch);
        rec.turn = Some(step);
        let text = self
            .execute(built.request, built.max_tokens, Quote::WithToolCalls, rec)
            .await;
        let calls = cadence_wire::tool_calls::assemble(self.cx.api, &text.tool_events);
        rec.tool_calls = Some(calls.len() as u32);
        rec.tool_calls_cut = text.tool_events_cut;
        (text, calls, built.prompt_parts)
    }

    /// Hands a finished record to the sinks and the tally.
    fn finish_record(&mut self, index: u64, rec: &mut RequestRecord) {
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&(index, self.who.slot));
        self.tally.finished(rec);
        self.sink.send(std::mem::replace(
            rec,
            RequestRecord::new(index, Outcome::AbortedAtDeadline),
        ));
    }

    /// Turns of a multi-turn session (one turn without sessions).
    async fn run_turns(mut self, dispatch: u64, mut index: u64, mut rec: RequestRecord) {
        let turns = self.cx.factory.turns(dispatch);
        let session = (turns > 1).then_some(dispatch);
        let mut replies: Vec<String> = Vec::new();
        for turn in 0..turns {
            if turn > 0 {
                // Think time, then the next turn as a new request.
                let think = sleep_until(Instant::now() + self.cx.factory.think_time);
                tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => break,
                    _ = think => {}
                }
                index = self.issued.fetch_add(1, Ordering::Relaxed);
                rec = self.who.start(index, None, &self.in_flight, &self.clock);
            }
            let built = self.cx.factory.build_turn(dispatch, turn, &replies);
            rec.prompt_id = Some(built.prompt_id);
            rec.prefix_group = built.prefix_group;
            rec.expected_output_tokens = built.expected_output_tokens;
            if session.is_some() {
                rec.session = session;
                rec.turn = Some(turn as u32);
            }
            let quoted = session.is_some() && turn + 1 < turns;
            let quote = if quoted { Quote::Text } else { Quote::No };
            let text = self
                .execute(built.request, built.max_tokens, quote, &mut rec)
                .await;
            if quoted {
                replies.push(text.content.clone());
            }
            rec = self.count_tokens(rec, text, built.prompt_parts).await;
            let ok = rec.outcome == Outcome::Succeeded;
            self.finish_record(index, &mut rec);
            // A session ends at its first failed turn.
            if !ok {
                break;
            }
        }
    }

    async fn execute(
        &mut self,
        mut request: http::Request<http_body_util::Full<bytes::Bytes>>,
        max_tokens: Option<u64>,
        quote: Quote,
        rec: &mut RequestRecord,
    ) -> cadence_wire::StreamText {
        let cx = &self.cx;
        if let Some(p) = &cx.propagation {
            crate::propagate::stamp(p, &mut request, rec);
        }
        cx.progress.started();
        let ex = ExecContext {
            client: &cx.client,
            clock: &self.clock,
            timeouts: &cx.timeouts,
            api: cx.api,
            strict: cx.strict,
            redactor: &cx.redactor,
            max_tokens,
            keep_text: quote != Quote::No || cx.tokenizer.is_some(),
            keep_tool_calls: quote == Quote::WithToolCalls,
        };
        let text = execute(&ex, request, &mut self.cancel, rec).await;
        cx.progress.ended();
        text
    }

    /// Output tokens by the tokenizer (CPU work: kept off the threads that read
    /// sockets) and the prompt's count when the server gave none.
    async fn count_tokens(
        &self,
        mut rec: RequestRecord,
        text: cadence_wire::StreamText,
        prompt_parts: Vec<String>,
    ) -> RequestRecord {
        match self.cx.tokenizer.clone() {
            Some(tk) => tokio::task::spawn_blocking(move || {
                tk.annotate(&mut rec, &text);
                input_from_workload(&mut rec, &prompt_parts, Some(&tk));
                rec
            })
            .await
            .expect("tokenizing does not panic"),
            None => {
                input_from_workload(&mut rec, &prompt_parts, None);
                rec
            }
        }
    }
}

/// The pool of request slots: a semaphore bounds how many are in flight, and each
/// permit carries a reusable worker id for the records.
struct Slots {
    cap: Option<u32>,
    sem: Arc<Semaphore>,
    ids: Arc<Mutex<SlotIds>>,
}

#[derive(Default)]
struct SlotIds {
    free: Vec<u32>,
    next: u32,
}

/// A held slot; dropping it frees the slot and its id.
struct SlotPermit {
    id: u32,
    ids: Arc<Mutex<SlotIds>>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.ids.lock().expect("slot ids lock").free.push(self.id);
    }
}

impl Slots {
    fn new(cap: Option<u32>) -> Slots {
        let permits = cap.map_or(Semaphore::MAX_PERMITS, |c| c as usize);
        Slots {
            cap,
            sem: Arc::new(Semaphore::new(permits)),
            ids: Arc::default(),
        }
    }

    fn permit(&self, permit: OwnedSemaphorePermit) -> SlotPermit {
        let mut ids = self.ids.lock().expect("slot ids lock");
        let id = ids.free.pop().unwrap_or_else(|| {
            ids.next += 1;
            ids.next - 1
        });
        SlotPermit {
            id,
            ids: self.ids.clone(),
            _permit: permit,
        }
    }

    async fn acquire(&self) -> SlotPermit {
        let p = self
            .sem
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        self.permit(p)
    }

    fn try_acquire(&self) -> Option<SlotPermit> {
        self.sem
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|p| self.permit(p))
    }
}

/// Running counts the saturation rule reads.
#[derive(Default)]
struct Tally {
    finished: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    /// Requests needed before the error rule may stop a level.
    const MIN_FOR_ERRORS: u64 = 20;
    /// Open loop: this many seconds of arrivals in flight is unbounded queueing.
    const QUEUE_SECONDS: f64 = 30.0;

    fn finished(&self, rec: &RequestRecord) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        if rec.outcome.is_failure() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Why the level is clearly saturated, if it is.
    fn saturation(&self, load: &Load, in_flight: usize) -> Option<String> {
        let finished = self.finished.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        if finished >= Self::MIN_FOR_ERRORS && failed * 2 > finished {
            return Some(format!(
                "saturated: {failed} of {finished} finished requests failed"
            ));
        }
        if let Load::Open {
            rate,
            max_concurrency: None,
            ..
        } = load
        {
            if in_flight as f64 > rate * Self::QUEUE_SECONDS && in_flight > 100 {
                return Some(format!(
                    "saturated: {in_flight} requests in flight, more than {} s of arrivals: the server is not keeping up",
                    Self::QUEUE_SECONDS
                ));
            }
        }
        None
    }
}

/// Measures how late a 10 ms timer fires over the run (`crate::lag`): lag on the
/// event loop delays every timestamp the client takes, so it is reported beside the
/// figures.
struct LagProbe {
    handle: tokio::task::JoinHandle<Vec<Duration>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl LagProbe {
    fn start() -> LagProbe {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let handle = tokio::spawn(async move {
            let mut lags = Vec::new();
            tokio::select! {
                _ = stopped => {}
                _ = cadence_transport::lag::watch(cadence_transport::lag::PERIOD, |l| lags.push(l)) => {}
            }
            lags
        });
        LagProbe { handle, stop }
    }

    async fn finish(self) -> (Duration, Duration) {
        let _ = self.stop.send(());
        match self.handle.await {
            Ok(mut lags) => cadence_transport::lag::p99_and_max(&mut lags),
            Err(_) => (Duration::ZERO, Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_counts_the_prompt_only_when_the_server_did_not() {
        let parts = vec!["one two  three".to_string(), "four\nfive".to_string()];
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        input_from_workload(&mut rec, &parts, None);
        assert_eq!(rec.input_tokens, Some(5));
        assert_eq!(rec.input_tokens_source, Some(InputTokenSource::Words));

        let tk = crate::tokenizer::train_bpe("one two three four five six", 300).unwrap();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        input_from_workload(&mut rec, &parts, Some(&tk));
        let exact = (tk.count(&parts[0]) + tk.count(&parts[1])) as u64;
        assert_eq!(rec.input_tokens, Some(exact));
        assert_eq!(rec.input_tokens_source, Some(InputTokenSource::Tokenizer));

        // The server's usage wins; an unknown prompt (--extra-body) adds nothing.
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        rec.input_tokens = Some(42);
        rec.input_tokens_source = Some(InputTokenSource::Usage);
        input_from_workload(&mut rec, &parts, Some(&tk));
        assert_eq!(rec.input_tokens, Some(42));
        assert_eq!(rec.input_tokens_source, Some(InputTokenSource::Usage));
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        input_from_workload(&mut rec, &[], None);
        assert_eq!((rec.input_tokens, rec.input_tokens_source), (None, None));
    }
}
