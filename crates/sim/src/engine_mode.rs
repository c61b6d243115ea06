//! Engine-timed serving: one tokio task runs the engine model's step loop against
//! `tokio::time` (so tests run it under a paused clock) and feeds every request's
//! stream as its tokens come out; the server-side view goes to `/metrics` in the
//! Prometheus/OpenMetrics text format with vLLM's metric names.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cadence_engine::engine::Request;
use cadence_engine::twin::{Twin, TwinServer};
use cadence_engine::{Backend, Engine, EngineSpec, Event, Injection, Prefix};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::warp::SimClock;

/// What a stream hears from the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emit {
    /// `n` tokens, one chunk.
    Tokens(u32),
    /// The last token has been emitted; the engine's timing of the request (its queue,
    /// scheduling to first token, first token to last), as vLLM reports it per request.
    Finished(crate::dialects::Timing),
    /// The engine cannot serve the request.
    Rejected(String),
}

struct Submit {
    prompt_tokens: u32,
    max_tokens: u32,
    prefix: Option<Prefix>,
    reply: mpsc::UnboundedSender<Emit>,
}

/// The handle streams submit through. Cheap to clone; the engine task ends when
/// the last handle is dropped.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Submit>,
    spec: Arc<EngineSpec>,
    seen: Arc<crate::history::SeenChains>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("engine", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl EngineHandle {
    /// Starts the engine task; virtual time 0 is now. The step loop runs on the sim's
    /// clock (`sim`): a freeze stops it for its duration, a slow-down slows it;
    /// `inject` adds requests no client sees at their times from now. With `twin`, the
    /// twin answers instead of the engine model (`spec` then only names it).
    pub(crate) fn spawn(
        spec: EngineSpec,
        metrics: Arc<EngineMetrics>,
        sim: SimClock,
        inject: Vec<Injection>,
        twin: Option<Arc<Twin>>,
    ) -> EngineHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let clock = Clock::new(Instant::now(), sim);
        let spec = Arc::new(spec);
        let phantoms = phantoms(&spec, &inject);
        let seen = crate::history::SeenChains::with_capacity(spec.kv_capacity());
        let backend: Box<dyn Backend + Send> = match twin {
            Some(t) => Box::new(TwinServer::new(t, spec.serving.seed)),
            None => Box::new(Engine::new((*spec).clone())),
        };
        tokio::spawn(run(backend, (clock, spec.clone()), rx, metrics, phantoms));
        EngineHandle {
            tx,
            spec,
            seen: Arc::new(seen),
        }
    }

    /// The engine spec the streams are timed by.
    pub fn spec(&self) -> &EngineSpec {
        &self.spec
    }

    /// Queues a request whose prompt starts with `prefix` (its history, for the
    /// prefix cache); its tokens arrive on the returned channel.
    pub fn submit(
        &self,
        prompt_tokens: u32,
        max_tokens: u32,
        prefix: Option<Prefix>,
    ) -> mpsc::UnboundedReceiver<Emit> {
        let (reply, rx) = mpsc::unbounded_channel();
        let _ = self.tx.send(Submit {
            prompt_tokens,
            max_tokens,
            prefix,
            reply,
        });
        rx
    }

    /// The message chains the engine has seen (see [`crate::history`]).
    pub fn seen(&self) -> &crate::history::SeenChains {
        &self.seen
    }
}

/// Maps real instants to the engine's virtual nanoseconds (the sim's clock since the
/// engine started) and back. A freeze stops virtual time, so events due during or
/// after it happen one freeze later; a slow-down runs it at `1 / factor`.
#[derive(Debug, Clone)]
struct Clock {
    sim: SimClock,
    /// The sim's clock when the engine started: virtual time 0.
    zero: Duration,
}

impl Clock {
    fn new(epoch: Instant, sim: SimClock) -> Clock {
        let zero = sim.warp.plan_at(epoch.saturating_duration_since(sim.epoch));
        Clock { sim, zero }
    }

    fn virtual_now(&self, now: Instant) -> u64 {
        let t = self
            .sim
            .warp
            .plan_at(now.saturating_duration_since(self.sim.epoch));
        t.saturating_sub(self.zero).as_nanos() as u64
    }

    fn deadline(&self, v: u64) -> Instant {
        self.sim.epoch + self.sim.warp.real_at(self.zero + Duration::from_nanos(v))
    }
}

/// The injected requests as (virtual time, prompt tokens, max tokens), latest first
/// (so the next is popped off the end).
fn phantoms(spec: &EngineSpec, inject: &[Injection]) -> Vec<(u64, u32, u32)> {
    let mut out: Vec<(u64, u32, u32)> = inject
        .iter()
        .flat_map(|i| {
            let at = i.at.as_nanos() as u64;
            i.requests(spec).into_iter().map(move |(p, m)| (at, p, m))
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.0));
    out
}

struct Live {
    reply: mpsc::UnboundedSender<Emit>,
    arrived: u64,
    scheduled: Option<u64>,
    first: Option<u64>,
    last: u64,
    /// Its KV transfer (ns, bytes), when the engine disaggregates: counted as its
    /// first token, which waited for it, leaves.
    transfer: Option<(u64, f64)>,
    /// The draft tokens each of its steps proposes, when the engine speculates: each
    /// chunk after the first is one step.
    draft: Option<u32>,
    /// Its speculation so far, as vLLM counts it per request (steps, accepted and
    /// drafted tokens); counted only when `draft` is set.
    spec: crate::dialects::SpecCounts,
}

async fn run(
    mut engine: Box<dyn Backend + Send>,
    (clock, spec): (Clock, Arc<EngineSpec>),
    mut rx: mpsc::UnboundedReceiver<Submit>,
    metrics: Arc<EngineMetrics>,
    mut phantoms: Vec<(u64, u32, u32)>,
) {
    let mut live: HashMap<u64, Live> = HashMap::new();
    let mut next_id = 0u64;
    let mut out = Vec::new();
    let mut open = true;
    while open || engine.next_time().is_some() {
        let due = engine.next_time();
        let inject_at = phantoms.last().map(|p| p.0).filter(|_| open);
        tokio::select! {
            biased;
            () = sleep_until_opt(inject_at.map(|v| clock.deadline(v))) => {
                let now = clock.virtual_now(Instant::now());
                // Injected requests have no stream: not in `live`, so nothing is sent.
                while let Some(&(at, prompt_tokens, max_tokens)) = phantoms.last() {
                    if at > now {
                        break;
                    }
                    phantoms.pop();
                    let request = Request { id: next_id, prompt_tokens, max_tokens };
                    next_id += 1;
                    engine.submit(now, request, None, &mut out);
                }
            }
            msg = rx.recv(), if open => match msg {
                Some(s) => {
                    let now = clock.virtual_now(Instant::now());
                    let id = next_id;
                    next_id += 1;
                    live.insert(id, Live {
                        reply: s.reply,
                        arrived: now,
                        scheduled: None,
                        first: None,
                        last: now,
                        transfer: spec.kv_transfer(s.prompt_tokens),
                        draft: spec.serving.speculation.map(|sp| sp.k),
                        spec: Default::default(),
                    });
                    let request = Request { id, prompt_tokens: s.prompt_tokens, max_tokens: s.max_tokens };
                    engine.submit(now, request, s.prefix, &mut out);
                }
                None => open = false,
            },
            () = sleep_until_opt(due.map(|v| clock.deadline(v))) => {
                let v = due.expect("slept only with a deadline");
                engine.advance(v, &mut out);
            }
        }
        let mut gone = Vec::new();
        for e in out.drain(..) {
            dispatch(e, &mut live, &metrics, &mut gone);
        }
        if !gone.is_empty() {
            let now = clock.virtual_now(Instant::now());
            for id in gone {
                metrics.aborted.inc();
                engine.abort(now, id, &mut out);
            }
            for e in out.drain(..) {
                dispatch(e, &mut live, &metrics, &mut Vec::new());
            }
        }
        metrics.running.set(engine.running() as i64);
        metrics.waiting.set(engine.waiting() as i64);
        metrics.kv_usage.set(engine.kv_usage());
        if let (Some(t), Some(r)) = (&metrics.twin, engine.reach()) {
            t.observe(r);
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Routes one engine event to its stream and the metrics; requests whose client
/// went away (the stream's receiver is gone) are added to `gone`.
fn dispatch(e: Event, live: &mut HashMap<u64, Live>, m: &EngineMetrics, gone: &mut Vec<u64>) {
    match e {
        Event::Scheduled { id, t } => {
            if let Some(l) = live.get_mut(&id) {
                l.scheduled = Some(t);
                m.queue_time.observe(secs(t - l.arrived));
            }
        }
        Event::Tokens { id, t, n } => {
            m.generation_tokens.inc_by(n as u64);
            if let Some(l) = live.get_mut(&id) {
                match l.first {
                    None => {
                        l.first = Some(t);
                        m.ttft.observe(secs(t - l.arrived));
                        // A disaggregated first token waited for its KV transfer after
                        // the prefill: the transfer is its own figure, not prefill.
                        let took = l.transfer.map_or(0, |(ns, _)| ns);
                        if let Some(s) = l.scheduled {
                            m.prefill_time.observe(secs((t - s).saturating_sub(took)));
                        }
                        if let (Some(pd), Some((_, bytes))) = (&m.pd, l.transfer) {
                            pd.moved(Duration::from_nanos(took), bytes);
                        }
                    }
                    Some(_) => {
                        m.itl.observe(secs(t - l.last));
                        if let Some(k) = l.draft {
                            // Each step's tokens but its bonus token were drafts accepted.
                            l.spec.steps += 1;
                            l.spec.accepted += n.saturating_sub(1);
                            l.spec.drafted += k;
                            if let Some(sm) = &m.spec {
                                sm.step(n, k);
                            }
                        }
                    }
                }
                l.last = t;
                // Like vLLM, a request whose client disconnected is aborted.
                if l.reply.send(Emit::Tokens(n)).is_err() {
                    live.remove(&id);
                    gone.push(id);
                }
            }
        }
        Event::Finished { id, t } => {
            if let Some(l) = live.remove(&id) {
                m.e2e.observe(secs(t - l.arrived));
                if let Some(f) = l.first {
                    m.decode_time.observe(secs(t - f));
                }
                m.success.inc();
                let _ = l.reply.send(Emit::Finished(timing_of(&l, t)));
            }
        }
        Event::Preempted { .. } => {
            m.preemptions.inc();
        }
        Event::Rejected { id, reason, .. } => {
            if let Some(l) = live.remove(&id) {
                let _ = l.reply.send(Emit::Rejected(reason));
            }
        }
        Event::Step(s) => {
            // Like vLLM, prompt tokens count as they are prefilled (recomputes too).
            m.prompt_tokens.inc_by(s.prefill_tokens as u64);
            m.batch_size.observe(s.decoding as f64);
            m.iteration_tokens.observe(s.tokens as f64);
            m.step_time.observe(secs(s.end - s.start));
        }
    }
}

/// A finished request's timing on the engine's virtual clock: queued from arrival to
/// its first scheduling, prefilled from then to its first token, decoded from its
/// first token to its last (`end` for a request that produced none), and its
/// speculation when the engine speculates.
fn timing_of(l: &Live, end: u64) -> crate::dialects::Timing {
    let d = |a: u64, b: u64| std::time::Duration::from_nanos(b.saturating_sub(a));
    let scheduled = l.scheduled.unwrap_or(l.arrived);
    let first = l.first.unwrap_or(end);
    crate::dialects::Timing {
        queue: d(l.arrived, scheduled),
        prompt: d(scheduled, first),
        decode: d(first, if l.first.is_some() { l.last } else { end }),
        spec: l.draft.map(|_| l.spec),
    }
}

/// The sim's server-side metrics, named as vLLM names its own (`vllm:` prefix,
/// `model_name` label) so dashboards and scrapers built for vLLM read the sim.
pub struct EngineMetrics {
    registry: Registry,
    /// Requests received, every mode and fault included
    /// (`cadence_sim_requests_received`).
    pub requests: Counter,
    aborted: Counter,
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge<f64, std::sync::atomic::AtomicU64>,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    preemptions: Counter,
    success: Counter,
    queue_time: Histogram,
    prefill_time: Histogram,
    decode_time: Histogram,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    batch_size: Histogram,
    iteration_tokens: Histogram,
    step_time: Histogram,
    spec: Option<crate::spec_metrics::SpecMetrics>,
    twin: Option<crate::twin_metrics::TwinMetrics>,
    pd: Option<crate::pd_metrics::PdMetrics>,
}

impl std::fmt::Debug for EngineMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineMetrics").finish_non_exhaustive()
    }
}

fn seconds_histogram() -> Histogram {
    // 1 ms … ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl EngineMetrics {
    /// Metrics for the model `model`; the engine families only when `engine`.
    pub fn new(model: &str, engine: bool) -> EngineMetrics {
        let mut registry = Registry::with_labels(std::iter::once((
            Cow::Borrowed("model_name"),
            Cow::Owned(model.to_owned()),
        )));
        let m = EngineMetrics {
            requests: Counter::default(),
            aborted: Counter::default(),
            running: Gauge::default(),
            waiting: Gauge::default(),
            kv_usage: Gauge::default(),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            preemptions: Counter::default(),
            success: Counter::default(),
            queue_time: seconds_histogram(),
            prefill_time: seconds_histogram(),
            decode_time: seconds_histogram(),
            ttft: seconds_histogram(),
            itl: seconds_histogram(),
            e2e: seconds_histogram(),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            iteration_tokens: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            step_time: seconds_histogram(),
            spec: None,
            twin: None,
            pd: None,
            registry: Registry::default(),
        };
        registry.register(
            "cadence_sim_requests_received",
            "Requests the simulator received (every mode, faults included)",
            m.requests.clone(),
        );
        if engine {
            m.register_engine_counts(&mut registry);
            m.register_engine_histograms(&mut registry);
        }
        EngineMetrics { registry, ..m }
    }

    /// Adds speculative decoding's families (`draft` tokens proposed a step), when
    /// the sim speculates (`--spec-accept-len`).
    pub fn with_speculation(mut self, draft: Option<u32>) -> EngineMetrics {
        self.spec =
            draft.map(|k| crate::spec_metrics::SpecMetrics::register(&mut self.registry, k));
        self
    }

    /// A served twin's families (`--twin`): its requests and those it extrapolated.
    pub fn with_twin(mut self, twin: Option<Arc<Twin>>) -> EngineMetrics {
        self.twin = twin.map(|t| crate::twin_metrics::TwinMetrics::register(&mut self.registry, t));
        self
    }

    /// A served twin's families, when the sim serves one.
    pub fn twin(&self) -> Option<&crate::twin_metrics::TwinMetrics> {
        self.twin.as_ref()
    }

    /// Adds disaggregation's KV-transfer families, when the sim transfers
    /// (`--pd-transfer`).
    pub fn with_pd_transfer(mut self, transfers: bool) -> EngineMetrics {
        self.pd = transfers.then(|| crate::pd_metrics::PdMetrics::register(&mut self.registry));
        self
    }

    /// Disaggregation's KV-transfer families, when the sim transfers.
    pub fn pd_transfer(&self) -> Option<&crate::pd_metrics::PdMetrics> {
        self.pd.as_ref()
    }

    /// Speculative decoding's families, when the sim speculates.
    pub fn speculation(&self) -> Option<&crate::spec_metrics::SpecMetrics> {
        self.spec.as_ref()
    }

    /// The engine's gauges and counters, under vLLM's names where vLLM has one.
    fn register_engine_counts(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "vllm:num_requests_running",
            "Requests holding a batch slot",
            m.running.clone(),
        );
        r.register(
            "vllm:num_requests_waiting",
            "Requests waiting for a slot, KV room or a prefill worker",
            m.waiting.clone(),
        );
        r.register(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage, 1 = full",
            m.kv_usage.clone(),
        );
        r.register(
            "vllm:prompt_tokens",
            "Prompt tokens prefilled (recomputed ones included)",
            m.prompt_tokens.clone(),
        );
        r.register(
            "vllm:generation_tokens",
            "Tokens generated",
            m.generation_tokens.clone(),
        );
        r.register(
            "vllm:num_preemptions",
            "Sequences pre-empted for KV-cache room",
            m.preemptions.clone(),
        );
        r.register(
            "vllm:request_success",
            "Requests that finished",
            m.success.clone(),
        );
        r.register(
            "cadence_sim_requests_aborted",
            "Requests aborted because the client went away",
            m.aborted.clone(),
        );
    }

    /// The engine's histograms: request phases, server-side TTFT/ITL/E2E, steps.
    fn register_engine_histograms(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "vllm:request_queue_time_seconds",
            "Arrival to first scheduling",
            m.queue_time.clone(),
        );
        r.register(
            "vllm:request_prefill_time_seconds",
            "First scheduling to first token",
            m.prefill_time.clone(),
        );
        r.register(
            "vllm:request_decode_time_seconds",
            "First token to last token",
            m.decode_time.clone(),
        );
        r.register(
            "vllm:time_to_first_token_seconds",
            "Arrival to first token, server side",
            m.ttft.clone(),
        );
        r.register(
            "vllm:inter_token_latency_seconds",
            "Gap between a request's consecutive chunks, server side",
            m.itl.clone(),
        );
        r.register(
            "vllm:e2e_request_latency_seconds",
            "Arrival to last token, server side",
            m.e2e.clone(),
        );
        r.register(
            "vllm:iteration_tokens_total",
            "Tokens processed per engine step (decode + prefill)",
            m.iteration_tokens.clone(),
        );
        r.register(
            "cadence_sim_step_batch_size",
            "Sequences decoding in each engine step",
            m.batch_size.clone(),
        );
        r.register(
            "cadence_sim_step_duration_seconds",
            "Duration of each engine step",
            m.step_time.clone(),
        );
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry)
            .expect("writing to a String cannot fail");
        s
    }
}

/// One engine-timed response: what the stream needs to write its chunks.
pub(crate) struct EngineStream {
    pub rx: mpsc::UnboundedReceiver<Emit>,
    pub dialect: crate::openai::Dialect,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub text_rng: crate::rng::SimRng,
    pub kill: crate::stream::Kill,
    pub recorder: crate::send_log::Recorder,
    /// The reply is these tool calls (see [`crate::tools`]).
    pub calls: Option<crate::tools::ToolStream>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Tokens,
    Done,
}

struct BodyState {
    s: EngineStream,
    produced: u32,
    phase: Phase,
    /// The text so far, for a dialect that resends it whole (SGLang).
    so_far: String,
}

fn sse(data: &str) -> bytes::Bytes {
    bytes::Bytes::from(format!("data: {data}\n\n"))
}

impl BodyState {
    fn writer(&self) -> crate::openai::Writer<'_> {
        crate::openai::Writer {
            dialect: self.s.dialect,
            id: &self.s.id,
            created: self.s.created,
            model: &self.s.model,
            pretty: false,
        }
    }

    fn usage(&self) -> Option<crate::openai::Usage> {
        self.s
            .continuous_usage
            .then(|| crate::openai::Usage::new(self.s.prompt_tokens, self.produced))
    }

    fn frame(&self, data: &str) -> bytes::Bytes {
        bytes::Bytes::from(crate::dialects::frame(self.s.dialect, data))
    }

    fn tail(&mut self, timing: crate::dialects::Timing) -> bytes::Bytes {
        let mut out = String::new();
        if !self.s.dialect.is_openai() {
            let u = crate::openai::Usage::new(self.s.prompt_tokens, self.produced);
            let closing = match &self.s.calls {
                Some(calls) => calls.closing(&self.writer(), u),
                None => crate::dialects::closing(&self.writer(), u, "length", timing),
            };
            for e in closing {
                out.push_str(&crate::dialects::frame(self.s.dialect, &e));
            }
        } else if self.s.include_usage {
            let u = crate::openai::Usage::new(self.s.prompt_tokens, self.produced);
            let metrics = crate::dialects::vllm_metrics(timing, self.produced);
            let usage = self.writer().usage_with_metrics(u, metrics);
            out.push_str(&format!("data: {usage}\n\n"));
        }
        if self.s.dialect.done_marker() {
            out.push_str("data: [DONE]\n\n");
        }
        self.phase = Phase::Done;
        self.s.recorder.finish(true);
        bytes::Bytes::from(out)
    }

    /// The stream's opening frames: chat's role chunk, or the dialect's opening events
    /// (none for dialects that open with their first token).
    fn opening(&self) -> Option<bytes::Bytes> {
        use crate::openai::{Dialect, Piece};
        if self.s.dialect == Dialect::Chat {
            let role = self.writer().chunk(
                Piece::Role {
                    null_content: self.s.calls.is_some(),
                },
                None,
                None,
                self.usage(),
            );
            return Some(sse(&role));
        }
        let opening = if self.s.calls.is_some() {
            crate::dialects::opening_calls(&self.writer(), self.s.prompt_tokens)
        } else {
            crate::dialects::opening(&self.writer(), self.s.prompt_tokens, false)
        };
        (!opening.is_empty()).then(|| {
            opening
                .iter()
                .map(|e| crate::dialects::frame(self.s.dialect, e))
                .collect::<String>()
                .into()
        })
    }

    /// The frame of one engine emission of `n` tokens: tool-call deltas when the stream
    /// calls tools, else content (SGLang's carries the whole text so far).
    fn tokens(&mut self, n: u32) -> bytes::Bytes {
        use crate::openai::{Dialect, Piece};
        use rand::Rng;
        let ids: Vec<u32> = (0..n)
            .map(|_| {
                self.s
                    .text_rng
                    .random_range(0..crate::text::VOCAB.len() as u32)
            })
            .collect();
        if let Some(mut calls) = self.s.calls.take() {
            self.produced += n;
            let last = self.produced >= self.s.max_tokens;
            let (prompt, continuous) = (self.s.prompt_tokens, self.s.continuous_usage);
            let usage = |k: u32| continuous.then(|| crate::openai::Usage::new(prompt, k));
            let out: String = calls
                .chunk(&self.writer(), &ids, last, usage)
                .iter()
                .map(|(e, _)| crate::dialects::frame(self.s.dialect, e))
                .collect();
            self.s.calls = Some(calls);
            self.s.recorder.sent(&[n]);
            return bytes::Bytes::from(out);
        }
        let mut text = std::mem::take(&mut self.so_far);
        if self.s.dialect != Dialect::Sglang {
            text.clear();
        }
        crate::text::Vocabulary::Plain.push_text(&ids, &mut text);
        self.produced += n;
        let last = self.produced >= self.s.max_tokens;
        let chunk = crate::dialects::chunk(
            &self.writer(),
            Piece::Content(Some(&text)),
            last.then_some("length"),
            None,
            self.usage(),
        );
        self.s.recorder.sent(&[n]);
        self.so_far = text;
        self.frame(&chunk)
    }

    async fn next(mut self) -> Option<(Result<bytes::Bytes, std::io::Error>, Self)> {
        match self.phase {
            Phase::Done => None,
            Phase::Start => {
                self.phase = Phase::Tokens;
                match self.opening() {
                    Some(frame) => Some((Ok(frame), self)),
                    None => Box::pin(self.next()).await,
                }
            }
            Phase::Tokens => {
                let msg = tokio::select! {
                    biased;
                    () = self.s.kill.wait() => None,
                    m = self.s.rx.recv() => Some(m),
                };
                match msg {
                    None => {
                        self.phase = Phase::Done;
                        self.s.recorder.finish(false);
                        let e = std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            "cadence-sim is shutting down",
                        );
                        Some((Err(e), self))
                    }
                    Some(Some(Emit::Tokens(n))) => {
                        let frame = self.tokens(n);
                        Some((Ok(frame), self))
                    }
                    Some(Some(Emit::Finished(timing))) => {
                        let tail = self.tail(timing);
                        Some((Ok(tail), self))
                    }
                    Some(None) => {
                        let tail = self.tail(crate::dialects::Timing::default());
                        Some((Ok(tail), self))
                    }
                    Some(Some(Emit::Rejected(reason))) => {
                        self.phase = Phase::Done;
                        self.s.recorder.finish(false);
                        let body = crate::dialects::error(self.s.dialect, &reason);
                        let frame = self.frame(&body);
                        Some((Ok(frame), self))
                    }
                }
            }
        }
    }
}

/// The SSE body of an engine-timed stream: role chunk at once (chat), one content
/// chunk per engine emission, then usage (if asked) and `[DONE]`.
pub(crate) fn body(s: EngineStream) -> axum::body::Body {
    let state = BodyState {
        s,
        produced: 0,
        phase: Phase::Start,
        so_far: String::new(),
    };
    axum::body::Body::from_stream(futures_util::stream::unfold(state, BodyState::next))
}
