//! `cadence plan`'s load generator in virtual time: closed-loop or open-loop
//! arrivals fed to the engine model, each request turned into the same
//! `RequestRecord` a real run against `cadence sim --preset` would produce.

use std::collections::HashMap;
use std::time::Duration;

use cadence_core::arrivals::{ArrivalProcess, Schedule};
use cadence_core::record::{Chunk, RequestRecord, TokenCount, TokenSource};
use cadence_core::Outcome;

use crate::engine::{Engine, Event, Prefix, Request, StepInfo};
use crate::rng::{self, SplitMix64};
use crate::spec::EngineSpec;

/// What each request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Measured requests.
    pub requests: u64,
    /// Requests sent first and marked warm-up.
    pub warmup: u64,
    /// Each request's own prompt tokens, before a shared prefix or a session's history
    /// (when `lengths` is empty; each session turn's own input).
    pub input_tokens: u32,
    /// Output tokens each request asks for (when `lengths` is empty).
    pub max_tokens: u32,
    /// Closed loop: mean time from a response's end to the client's next request
    /// reaching the engine (client and network), drawn uniformly in [½, 1½] × this,
    /// seeded. Real clients never come back in the same nanosecond; with 0 they do,
    /// and identical requests stay in lock-step.
    pub turnaround_ns: u64,
    /// Per request (prompt tokens, max tokens), used in turn; empty: every request
    /// asks for `input_tokens` and `max_tokens`.
    pub lengths: Vec<(u32, u32)>,
    /// A shared prefix of this many tokens before every prompt (as `cadence bench
    /// --prefix-tokens` sends one), in `prefix_groups` groups: request `i` uses group
    /// `i % prefix_groups`, so with the engine's prefix cache each group's prefix is
    /// computed once. 0: no shared prefix.
    pub prefix_tokens: u32,
    /// How many distinct shared prefixes there are (0 counts as 1).
    pub prefix_groups: u32,
    /// Multi-turn sessions (as `cadence bench --turns` sends them); `None`: every
    /// request stands alone.
    pub sessions: Option<Sessions>,
    /// Open loop: recorded send times (ns from the level's start, in order), request
    /// (or session) `i` sent at the `i`-th, as a trace or a measured run sent them; the
    /// level ends when they run out. Empty: the arrivals' own schedule.
    pub send_at_ns: Vec<u64>,
}

/// Multi-turn sessions. `requests` and `warmup` then count sessions; each turn is a
/// request whose prompt is the session's history (its earlier prompts and replies)
/// followed by the turn's own input, and names that history as the session's prefix,
/// so the engine's prefix cache computes it once. A session holds its closed-loop
/// client from its first turn to its last, and ends at its first failed turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sessions {
    /// Turns per session, at least 1.
    pub turns: u32,
    /// From a reply's end to the session's next turn being sent (the client
    /// turnaround comes on top).
    pub think_ns: u64,
    /// Agent sessions (`plan --agent`): each turn after the first is a step whose own
    /// input is this many tokens (the tool results), and `think_ns` is the tool time;
    /// the records say so (`tool_calls`, `tool_wait_ns`). `None`: chat turns.
    pub agent_step_input: Option<u32>,
}

/// Prefix keys of sessions' histories: apart from the shared prefixes' groups.
pub(crate) const SESSION_KEYS: u64 = 1 << 63;

/// A session's next turn, waiting for its client.
#[derive(Debug, Clone, Copy)]
struct NextTurn {
    session: u64,
    turn: u32,
    /// Prompt and reply tokens of the turns so far.
    history: u32,
}

impl Workload {
    /// Prompt and output tokens of request `i` of a level.
    pub fn lengths_of(&self, i: u64) -> (u32, u32) {
        if self.lengths.is_empty() {
            (self.input_tokens, self.max_tokens)
        } else {
            self.lengths[(i % self.lengths.len() as u64) as usize]
        }
    }

    /// The shared prefix request `i` starts with, if any: its group and length.
    pub fn prefix_of(&self, i: u64) -> Option<Prefix> {
        (self.prefix_tokens > 0).then(|| Prefix {
            key: i % self.prefix_groups.max(1) as u64,
            tokens: self.prefix_tokens,
        })
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// `concurrency` clients, each sending its next request when the last ends.
    Closed {
        /// Clients, each with one request in flight.
        concurrency: u32,
    },
    /// Open loop, evenly spaced at `rate` per second.
    Constant {
        /// Requests per second.
        rate: f64,
    },
    /// Open loop, exponential gaps with mean 1/`rate` s, seeded.
    Poisson {
        /// Mean requests per second.
        rate: f64,
        /// Seeds the gaps: the same seed, the same arrival times.
        seed: u64,
    },
}

impl Arrivals {
    /// The open-loop send offsets: core's one arrival schedule, the very one `cadence
    /// bench` paces real requests by, so a seed draws the same arrival times in both.
    /// `None` for closed loop.
    pub fn schedule(&self) -> Option<Schedule> {
        let (rate, process) = match *self {
            Arrivals::Closed { .. } => return None,
            Arrivals::Constant { rate } => (rate, ArrivalProcess::Constant),
            Arrivals::Poisson { rate, seed } => (rate, ArrivalProcess::Poisson { seed }),
        };
        Some(Schedule::new(rate, process, Duration::ZERO))
    }
}

/// One level's outcome: the records and the engine's steps.
#[derive(Debug, Clone)]
pub struct PlanLevel {
    /// One record per request sent, in send order, as a real run would write them.
    pub records: Vec<RequestRecord>,
    /// Every decode-loop step the engine ran during the level, in order.
    pub steps: Vec<StepInfo>,
    /// Sequences pre-empted for KV-cache room (and recomputed).
    pub preemptions: u64,
    /// Per request, ns from arrival to first admission (batch slot and KV room, or a
    /// prefill worker), in record order.
    pub queue_ns: Vec<u64>,
    /// Virtual time the level ended at (ns since `start_ns` of the first level).
    pub end_ns: u64,
}

/// Runs one level on a fresh engine. Times in the records are offset by `start_ns`
/// and indices by `first_index`, so several levels read like one sequential run.
pub fn plan_level(
    spec: &EngineSpec,
    arrivals: Arrivals,
    workload: &Workload,
    level: u32,
    start_ns: u64,
    first_index: u64,
) -> PlanLevel {
    let engine = Engine::new(spec.clone());
    let at = Start {
        seed: spec.serving.seed,
        level,
        start_ns,
        first_index,
    };
    plan_level_on(engine, arrivals, workload, at).0
}

/// What answers the requests of a level in virtual time: the engine model, or an
/// endpoint's twin ([`crate::twin::TwinServer`]).
pub trait Backend {
    /// The time of the next thing it will do, if anything is pending.
    fn next_time(&self) -> Option<u64>;
    /// Runs everything due up to `t`, reporting it in `out`.
    fn advance(&mut self, t: u64, out: &mut Vec<Event>);
    /// A request arrives at `t`, naming the prefix its prompt starts with, if any.
    fn submit(&mut self, t: u64, req: Request, prefix: Option<Prefix>, out: &mut Vec<Event>);
    /// The client of request `id` went away at `t`: it is dropped.
    fn abort(&mut self, t: u64, id: u64, out: &mut Vec<Event>);
    /// Requests holding a slot.
    fn running(&self) -> usize;
    /// Requests waiting for one.
    fn waiting(&self) -> usize;
    /// The share of the KV cache in use (0 where there is none to know).
    fn kv_usage(&self) -> f64;
    /// How far a twin's requests went past its fit; `None` for the engine model,
    /// which knows no fit.
    fn reach(&self) -> Option<crate::reach::Reach> {
        None
    }
}

impl Backend for Engine {
    fn next_time(&self) -> Option<u64> {
        Engine::next_time(self)
    }
    fn advance(&mut self, t: u64, out: &mut Vec<Event>) {
        Engine::advance(self, t, out);
    }
    fn submit(&mut self, t: u64, req: Request, prefix: Option<Prefix>, out: &mut Vec<Event>) {
        self.submit_with_prefix(t, req, prefix, out);
    }
    fn abort(&mut self, t: u64, id: u64, out: &mut Vec<Event>) {
        Engine::abort(self, t, id, out);
    }
    fn running(&self) -> usize {
        Engine::running(self)
    }
    fn waiting(&self) -> usize {
        Engine::waiting(self)
    }
    fn kv_usage(&self) -> f64 {
        self.kv_used() as f64 / self.kv_capacity().max(1) as f64
    }
}

/// Where a level starts: the clients' seed, the level's number, its virtual start
/// time and its first request's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// Seeds the clients' turnaround.
    pub seed: u64,
    /// The level's number in the records.
    pub level: u32,
    /// Virtual time the level starts at (ns since the first level's start).
    pub start_ns: u64,
    /// The index of the level's first request.
    pub first_index: u64,
}

/// [`plan_level`] on any backend; the backend is handed back for what it kept.
pub fn plan_level_on<B: Backend>(
    backend: B,
    arrivals: Arrivals,
    workload: &Workload,
    at: Start,
) -> (PlanLevel, B) {
    let mut run = LevelRun::new(backend, arrivals, workload, at);
    let mut now = 0u64;
    loop {
        run.account();
        run.release_clients(now);
        match (run.client_next(), run.engine.next_time()) {
            (Some((a, w)), e) if e.is_none_or(|e| a <= e) => {
                now = a;
                run.arrive(a, w);
            }
            (_, Some(e)) => {
                now = e;
                run.engine.advance(e, &mut run.out);
            }
            (_, None) => break,
        }
    }
    let level = PlanLevel {
        records: run.records,
        steps: run.steps,
        preemptions: run.preemptions,
        queue_ns: run.queue_ns,
        end_ns: at.start_ns + now,
    };
    (level, run.engine)
}

/// A level in progress: the engine, the records so far, and the clients: closed-loop
/// workers on their way back, or the open-loop schedule.
struct LevelRun<'a, B> {
    workload: &'a Workload,
    level: u32,
    start_ns: u64,
    first_index: u64,
    total: u64,
    engine: B,
    out: Vec<Event>,
    records: Vec<RequestRecord>,
    by_id: HashMap<u64, usize>,
    steps: Vec<StepInfo>,
    sent: u64,
    /// Sessions started (with no sessions configured, requests sent).
    started: u64,
    idle_workers: Vec<u32>,
    /// Per client, the next turn of its session.
    continuing: HashMap<u32, NextTurn>,
    /// Clients whose session goes on, to be released after the think time.
    next_turns: Vec<u32>,
    /// Open loop: the arrival schedule; `None` for closed loop.
    schedule: Option<Schedule>,
    /// (when, worker) of the next requests on their way: closed-loop clients, and
    /// sessions' later turns.
    pending: Vec<(u64, u32)>,
    turnaround_rng: SplitMix64,
    next_arrival: Option<u64>,
    preemptions: u64,
    queue_ns: Vec<u64>,
}

impl<'a, B: Backend> LevelRun<'a, B> {
    fn new(engine: B, arrivals: Arrivals, workload: &'a Workload, at: Start) -> Self {
        let Start {
            seed,
            level,
            start_ns,
            first_index,
        } = at;
        let total = workload.requests + workload.warmup;
        let mut run = LevelRun {
            workload,
            level,
            start_ns,
            first_index,
            total,
            engine,
            out: Vec::new(),
            records: Vec::with_capacity(
                (total * u64::from(workload.sessions.map_or(1, |s| s.turns))) as usize,
            ),
            by_id: HashMap::new(),
            steps: Vec::new(),
            sent: 0,
            started: 0,
            idle_workers: Vec::new(),
            continuing: HashMap::new(),
            next_turns: Vec::new(),
            schedule: arrivals.schedule(),
            pending: Vec::new(),
            turnaround_rng: rng::seeded(seed ^ 0x7A ^ ((level as u64) << 32)),
            next_arrival: None,
            preemptions: 0,
            queue_ns: Vec::with_capacity(total as usize),
        };
        match arrivals {
            Arrivals::Closed { concurrency } => {
                // Each client's first request also reaches the engine after a turnaround.
                for w in 0..(concurrency as u64).min(total) {
                    let back = turnaround(workload.turnaround_ns, &mut run.turnaround_rng);
                    run.pending.push((back, w as u32));
                }
            }
            Arrivals::Constant { .. } | Arrivals::Poisson { .. } => run.schedule_next(0),
        }
        run
    }

    fn closed(&self) -> bool {
        self.schedule.is_none()
    }

    /// Open loop: the next arrival, recorded or from the schedule, while requests
    /// remain.
    /// `after` is the last send's time: a recording out of order is sent in order.
    fn schedule_next(&mut self, after: u64) {
        let recorded = &self.workload.send_at_ns;
        self.next_arrival = match &mut self.schedule {
            _ if self.started >= self.total => None,
            Some(_) if !recorded.is_empty() => {
                recorded.get(self.started as usize).map(|&t| t.max(after))
            }
            Some(s) => s.next().map(|d| d.as_nanos() as u64),
            None => None,
        };
    }

    /// Accounts for what the engine reported.
    fn account(&mut self) {
        let start_ns = self.start_ns;
        for e in std::mem::take(&mut self.out) {
            match e {
                Event::Tokens { id, t, n } => {
                    let r = &mut self.records[self.by_id[&id]];
                    if r.chunks.is_empty() {
                        r.first_content_ns = Some(start_ns + t);
                    }
                    r.chunks.push(Chunk(start_ns + t, Some(n)));
                }
                Event::Finished { id, t } => {
                    let r = &mut self.records[self.by_id[&id]];
                    let produced: u64 = r.chunks.iter().filter_map(|c| c.1).map(u64::from).sum();
                    r.end_ns = Some(start_ns + t);
                    r.http_status = Some(200);
                    r.finish_reason = Some("length".into());
                    r.output_tokens = Some(TokenCount {
                        count: produced,
                        source: TokenSource::Usage,
                    });
                    let (worker, session, turn) = (r.worker, r.session, r.turn);
                    let history = r.input_tokens.unwrap_or(0) + produced;
                    match (self.workload.sessions, session, turn) {
                        (Some(s), Some(session), Some(turn)) if turn + 1 < s.turns => {
                            let next = NextTurn {
                                session,
                                turn: turn + 1,
                                history: u32::try_from(history).unwrap_or(u32::MAX),
                            };
                            self.continuing.insert(worker, next);
                            self.next_turns.push(worker);
                        }
                        _ => self.idle_workers.push(worker),
                    }
                }
                Event::Rejected { id, t, reason } => {
                    let r = &mut self.records[self.by_id[&id]];
                    r.end_ns = Some(start_ns + t);
                    r.http_status = Some(400);
                    r.outcome = Outcome::Http4xx;
                    r.error = Some(reason);
                    self.idle_workers.push(r.worker);
                }
                Event::Step(s) => self.steps.push(s),
                Event::Scheduled { id, t } => {
                    let r = &self.records[self.by_id[&id]];
                    let arrived = r.sent_ns.unwrap_or(start_ns + t) - start_ns;
                    self.queue_ns[self.by_id[&id]] = t - arrived;
                }
                Event::Preempted { .. } => self.preemptions += 1,
            }
        }
    }

    /// Sessions that go on send their next turn after the think time; in closed loop,
    /// the clients whose requests (or sessions) ended go again after a turnaround.
    fn release_clients(&mut self, now: u64) {
        let think = self.workload.sessions.map_or(0, |s| s.think_ns);
        for w in std::mem::take(&mut self.next_turns) {
            let back = turnaround(self.workload.turnaround_ns, &mut self.turnaround_rng);
            self.pending.push((now + think + back, w));
        }
        if !self.closed() {
            self.idle_workers.clear();
            return;
        }
        self.idle_workers.sort_unstable();
        for w in std::mem::take(&mut self.idle_workers) {
            let new_pending = self
                .pending
                .iter()
                .filter(|p| !self.continuing.contains_key(&p.1))
                .count() as u64;
            if self.started + new_pending < self.total {
                let back = turnaround(self.workload.turnaround_ns, &mut self.turnaround_rng);
                self.pending.push((now + back, w));
            }
        }
    }

    /// When the next request reaches the engine, and from which client (`None`: the
    /// open-loop schedule's next arrival).
    fn client_next(&self) -> Option<(u64, Option<u32>)> {
        let pending = self
            .pending
            .iter()
            .copied()
            .min()
            .map(|(t, w)| (t, Some(w)));
        match (self.next_arrival, pending) {
            (Some(a), Some(p)) if p.0 < a => Some(p),
            (Some(a), _) => Some((a, None)),
            (None, p) => p,
        }
    }

    /// A request reaches the engine at `t`: from client `worker`, or the schedule's.
    fn arrive(&mut self, t: u64, worker: Option<u32>) {
        match worker {
            Some(w) => {
                self.pending.retain(|p| *p != (t, w));
                self.send(t, w);
            }
            None => {
                // An open-loop session needs a client of its own for its later turns.
                let w = if self.workload.sessions.is_some() {
                    self.started as u32
                } else {
                    0
                };
                self.send(t, w);
                self.schedule_next(t);
            }
        }
    }

    /// Records the request (a new session's first turn, or the next turn of the
    /// session `worker` holds) and submits it to the engine.
    fn send(&mut self, t: u64, worker: u32) {
        let i = self.sent;
        self.sent += 1;
        let next = self.continuing.remove(&worker).unwrap_or_else(|| {
            self.started += 1;
            NextTurn {
                session: self.started - 1,
                turn: 0,
                history: 0,
            }
        });
        let at = self.start_ns + t;
        let mut r = RequestRecord::new(self.first_index + i, Outcome::Succeeded);
        r.level = self.level;
        r.worker = worker;
        r.warmup = next.session < self.workload.warmup;
        r.sent_ns = Some(at);
        r.headers_ns = Some(at);
        let (mut own, max_tokens) = self.workload.lengths_of(i);
        if let Some(s) = self.workload.sessions {
            if let (Some(step_input), true) = (s.agent_step_input, next.turn > 0) {
                own = step_input;
            }
            if s.agent_step_input.is_some() {
                // Every step but the last calls a tool; a step after one waited it out.
                r.tool_calls = Some(u32::from(next.turn + 1 < s.turns));
                r.tool_wait_ns = (next.turn > 0).then_some(s.think_ns);
            }
        }
        let (prefix, prompt_tokens) = if self.workload.sessions.is_some() {
            // The history is the session's prefix: the whole prompt for its first turn
            // (the later turns repeat it), the turns so far after that.
            let tokens = if next.turn == 0 { own } else { next.history };
            r.session = Some(next.session);
            r.turn = Some(next.turn);
            let key = SESSION_KEYS | next.session;
            (
                Some(Prefix { key, tokens }),
                next.history.saturating_add(own),
            )
        } else {
            let prefix = self.workload.prefix_of(i);
            r.prefix_group = prefix.map(|p| p.key as u32);
            (prefix, own.saturating_add(prefix.map_or(0, |p| p.tokens)))
        };
        r.input_tokens = Some(prompt_tokens as u64);
        if !self.closed() {
            r.scheduled_ns = Some(at);
        }
        self.by_id.insert(i, self.records.len());
        self.records.push(r);
        self.queue_ns.push(0);
        let request = Request {
            id: i,
            prompt_tokens,
            max_tokens,
        };
        self.engine.submit(t, request, prefix, &mut self.out);
    }
}

/// A client's turnaround: uniform in [½, 1½] × the mean.
fn turnaround(mean_ns: u64, rng: &mut SplitMix64) -> u64 {
    (mean_ns as f64 * (0.5 + rng.unit())).round() as u64
}
