//! The engine's step loop as a discrete-event model in virtual nanoseconds: the
//! caller submits requests at times of its choosing and advances the clock; the
//! engine reports what happened (admissions, tokens, pre-emptions, steps) as events.

use std::collections::{HashSet, VecDeque};

use crate::prefix_cache::PrefixCache;
use crate::rng::{self, SplitMix64};
use crate::spec::{EngineSpec, KvPolicy, Prefill, Speculation, StepWork, RECOMPUTE_CHUNK};

/// What the engine did, in time order. A request's first `Tokens` is its first token.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The request got a batch slot (or a prefill worker) for the first time.
    Scheduled {
        /// The request's id, as submitted.
        id: u64,
        /// When it was admitted (virtual ns).
        t: u64,
    },
    /// The request's stream gained `n` tokens at `t` (one chunk).
    Tokens {
        /// The request's id, as submitted.
        id: u64,
        /// When the chunk left the engine (virtual ns).
        t: u64,
        /// Tokens in the chunk (more than 1 with speculation).
        n: u32,
    },
    /// The request produced its last token.
    Finished {
        /// The request's id, as submitted.
        id: u64,
        /// When its last token left (virtual ns).
        t: u64,
    },
    /// The KV cache ran out: the request lost its cache and waits to be recomputed.
    Preempted {
        /// The request's id, as submitted.
        id: u64,
        /// When it was pre-empted (virtual ns).
        t: u64,
    },
    /// The request can never be served (it would not fit in the KV cache alone).
    Rejected {
        /// The request's id, as submitted.
        id: u64,
        /// When it was turned away (virtual ns).
        t: u64,
        /// Why, in words.
        reason: String,
    },
    /// One decode-loop step finished.
    Step(StepInfo),
}

/// The shape of one step, for server-side metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInfo {
    /// When the step began (virtual ns).
    pub start: u64,
    /// When it ended (virtual ns): its tokens leave at this time.
    pub end: u64,
    /// Sequences that decoded in this step.
    pub decoding: u32,
    /// Prompt tokens processed in this step (chunked prefill or recompute).
    pub prefill_tokens: u32,
    /// Tokens emitted by this step (first tokens of finished prefills included).
    pub emitted: u32,
    /// Positions fed through the model: (k + 1) per decoding sequence + prefill tokens.
    pub tokens: u32,
    /// Sequences holding a batch slot after the step.
    pub running: u32,
    /// Requests waiting for a slot (or a prefill worker) after the step.
    pub waiting: u32,
    /// KV-cache tokens in use after the step.
    pub kv_used: u64,
    /// The KV cache's capacity in tokens.
    pub kv_capacity: u64,
}

/// A request as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The caller's id for the request, echoed in every [`Event`] about it.
    pub id: u64,
    /// Prompt tokens, a named prefix included (its cached part is not prefilled again).
    pub prompt_tokens: u32,
    /// Output tokens the request produces before it finishes (0 is rejected).
    pub max_tokens: u32,
}

/// The part of a prompt another request may already have computed: the first
/// `tokens` of the prompt are the prefix called `key` (a shared system prompt's
/// group, or a session whose history this turn repeats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Which prefix: a shared prompt's group, or a session's history.
    pub key: u64,
    /// Its length: the prompt's first `tokens` tokens.
    pub tokens: u32,
}

#[derive(Debug, Clone)]
struct Seq {
    id: u64,
    prompt: u32,
    max_tokens: u32,
    generated: u32,
    /// Context positions already in the KV cache.
    prefilled: u32,
    /// Positions to prefill before decoding (prompt, or prompt + generated on recompute).
    target: u32,
    scheduled: bool,
    /// KV tokens held.
    alloc: u64,
    /// The prefix this prompt starts with, if it names one.
    prefix: Option<Prefix>,
}

impl Seq {
    fn context(&self) -> u64 {
        (self.prompt + self.generated) as u64
    }
    fn decoding(&self) -> bool {
        self.prefilled >= self.target
    }
    fn remaining(&self) -> u32 {
        self.max_tokens - self.generated
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Decode,
    Prefill(u32),
}

#[derive(Debug)]
struct Step {
    start: u64,
    end: u64,
    /// Aligned with `running`.
    work: Vec<Work>,
    prefill_tokens: u32,
    tokens: u32,
}

/// The engine: decode loop, queues, KV accounting and (disaggregated) prefill workers.
#[derive(Debug)]
pub struct Engine {
    spec: EngineSpec,
    capacity: u64,
    budget: u32,
    spec_decode: Option<Speculation>,
    rng: SplitMix64,
    now: u64,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    kv_used: u64,
    step: Option<Step>,
    wake: Option<u64>,
    /// Disaggregated prefill: queue, workers (busy until, sequence), transfers.
    prefill_queue: VecDeque<Seq>,
    workers: Vec<Option<(u64, Seq)>>,
    transfers: Vec<(u64, Seq)>,
    /// Requests on their way in (`serving.request_overhead_ms`): (enters the queue at,
    /// sequence), in arrival order.
    arriving: VecDeque<(u64, Seq)>,
    /// Requests the client gave up on while they sat in a step or a prefill worker:
    /// dropped, with their KV freed, when that work ends.
    aborted: HashSet<u64>,
    /// Prefix cache: per prefix key, the positions computed so far, at most the KV
    /// capacity in all (least recently used evicted first).
    prefixes: PrefixCache,
    /// Prompt positions whose prefill the prefix cache saved.
    prefix_hits: u64,
}

impl Engine {
    /// An idle engine at time 0. `spec` must be valid ([`EngineSpec::validate`]).
    pub fn new(spec: EngineSpec) -> Engine {
        let (budget, workers) = match spec.serving.prefill {
            Prefill::Chunked { chunk_tokens } => (chunk_tokens, 0),
            Prefill::Disaggregated { workers, .. } => (RECOMPUTE_CHUNK, workers as usize),
        };
        let capacity = spec.kv_capacity();
        Engine {
            capacity,
            budget,
            spec_decode: spec.serving.speculation,
            rng: rng::seeded(spec.serving.seed),
            now: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            step: None,
            wake: None,
            prefill_queue: VecDeque::new(),
            workers: vec![None; workers],
            transfers: Vec::new(),
            arriving: VecDeque::new(),
            aborted: HashSet::new(),
            prefixes: PrefixCache::new(capacity),
            prefix_hits: 0,
            spec,
        }
    }

    /// Prompt positions the prefix cache saved so far.
    pub fn prefix_hits(&self) -> u64 {
        self.prefix_hits
    }

    /// Prefix keys the prefix cache holds (bounded: see [`Engine::prefix_cached_tokens`]).
    pub fn prefix_keys(&self) -> usize {
        self.prefixes.len()
    }

    /// Positions the prefix cache holds over all keys: at most the KV capacity.
    pub fn prefix_cached_tokens(&self) -> u64 {
        self.prefixes.held()
    }

    /// The spec the engine runs.
    pub fn spec(&self) -> &EngineSpec {
        &self.spec
    }

    /// Sequences holding a batch slot.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting for a slot (and, disaggregated, for a prefill worker).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
            + self.arriving.len()
            + self.prefill_queue.len()
            + self.transfers.len()
            + self.workers.iter().flatten().count()
    }

    /// KV-cache tokens in use now.
    pub fn kv_used(&self) -> u64 {
        self.kv_used
    }

    /// KV-cache capacity in tokens.
    pub fn kv_capacity(&self) -> u64 {
        self.capacity
    }

    /// The time of the next thing the engine will do, if anything is pending.
    pub fn next_time(&self) -> Option<u64> {
        let step = self.step.as_ref().map(|s| s.end);
        let workers = self.workers.iter().flatten().map(|(t, _)| *t).min();
        let transfers = self.transfers.iter().map(|(t, _)| *t).min();
        let arriving = self.arriving.front().map(|(t, _)| *t);
        [step, self.wake, workers, transfers, arriving]
            .into_iter()
            .flatten()
            .min()
    }

    /// A request arrives at `t` (not before the last time advanced to).
    /// Requests arriving at the same time join the same step.
    pub fn submit(&mut self, t: u64, req: Request, out: &mut Vec<Event>) {
        self.submit_with_prefix(t, req, None, out);
    }

    /// [`Engine::submit`] for a request whose prompt starts with `prefix`: with the
    /// prefix cache on, the positions of that prefix already computed (by an earlier
    /// request with the same key that got that far) are not prefilled again.
    pub fn submit_with_prefix(
        &mut self,
        t: u64,
        req: Request,
        prefix: Option<Prefix>,
        out: &mut Vec<Event>,
    ) {
        self.run_until(t, false, out);
        let kv_need = req.prompt_tokens as u64 + req.max_tokens as u64;
        if req.max_tokens == 0 || kv_need > self.capacity {
            out.push(Event::Rejected {
                id: req.id,
                t,
                reason: format!(
                    "prompt ({}) + max_tokens ({}) tokens exceed the KV cache ({} tokens)",
                    req.prompt_tokens, req.max_tokens, self.capacity
                ),
            });
            return;
        }
        let seq = Seq {
            id: req.id,
            prompt: req.prompt_tokens,
            max_tokens: req.max_tokens,
            generated: 0,
            prefilled: 0,
            target: req.prompt_tokens,
            scheduled: false,
            alloc: 0,
            prefix: prefix.filter(|_| self.spec.serving.prefix_cache),
        };
        let overhead_ns = (self.spec.serving.request_overhead_ms * 1e6).round() as u64;
        if overhead_ns == 0 {
            self.enqueue(t, seq, out);
        } else {
            // Arrival times only grow, so a constant overhead keeps the queue sorted.
            self.arriving.push_back((t + overhead_ns, seq));
        }
    }

    /// The request reaches the scheduler at `t`.
    fn enqueue(&mut self, t: u64, seq: Seq, out: &mut Vec<Event>) {
        if self.workers.is_empty() {
            self.waiting.push_back(seq);
            self.wake_at(t);
        } else {
            self.prefill_queue.push_back(seq);
            self.start_prefills(t, out);
        }
    }

    /// The client went away at `t`: the request stops taking slots, KV and steps
    /// (at once if it was waiting, at the end of its current step otherwise) and
    /// emits nothing more.
    pub fn abort(&mut self, t: u64, id: u64, out: &mut Vec<Event>) {
        self.run_until(t, false, out);
        let queued = |e: &Engine| {
            e.waiting.len() + e.prefill_queue.len() + e.transfers.len() + e.arriving.len()
        };
        let before = queued(self);
        self.waiting.retain(|s| s.id != id);
        self.prefill_queue.retain(|s| s.id != id);
        self.transfers.retain(|(_, s)| s.id != id);
        self.arriving.retain(|(_, s)| s.id != id);
        let after = queued(self);
        let busy = self.running.iter().any(|s| s.id == id)
            || self.workers.iter().flatten().any(|(_, s)| s.id == id);
        if after == before && busy {
            self.aborted.insert(id);
        }
    }

    /// Processes everything due at or before `t`, in time order.
    pub fn advance(&mut self, t: u64, out: &mut Vec<Event>) {
        self.run_until(t, true, out);
    }

    fn run_until(&mut self, t: u64, inclusive: bool, out: &mut Vec<Event>) {
        while let Some(next) = self.next_time().filter(|&n| n < t || (inclusive && n == t)) {
            self.now = next;
            if self.step.as_ref().is_some_and(|s| s.end == next) {
                self.finish_step(out);
                self.start_step(next, out);
            } else if let Some(i) = self
                .workers
                .iter()
                .position(|w| w.as_ref().is_some_and(|(e, _)| *e == next))
            {
                self.finish_prefill(i, next, out);
            } else if self.arriving.front().is_some_and(|(e, _)| *e == next) {
                let (_, seq) = self.arriving.pop_front().expect("front exists");
                self.enqueue(next, seq, out);
            } else if let Some(i) = self.transfers.iter().position(|(e, _)| *e == next) {
                let (_, seq) = self.transfers.swap_remove(i);
                self.transferred(next, seq, out);
            } else {
                self.wake = None;
                if self.step.is_none() {
                    self.start_step(next, out);
                }
            }
        }
        self.now = self.now.max(t);
    }

    /// A KV transfer landed at `t`: the prefill's token, which travelled with the cache,
    /// leaves from the decode worker (the client's first token comes after the
    /// transfer, as vLLM's, SGLang's and Dynamo's disaggregated serving send it), and
    /// the sequence waits for a decode slot.
    fn transferred(&mut self, t: u64, mut seq: Seq, out: &mut Vec<Event>) {
        out.push(Event::Tokens {
            id: seq.id,
            t,
            n: 1,
        });
        if seq.remaining() == 0 {
            out.push(Event::Finished { id: seq.id, t });
            return;
        }
        seq.prefilled = seq.prompt;
        seq.target = seq.prompt;
        self.waiting.push_back(seq);
        self.wake_at(t);
    }

    fn wake_at(&mut self, t: u64) {
        if self.step.is_none() {
            self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
        }
    }

    fn jitter(&mut self) -> f64 {
        let j = self.spec.serving.jitter;
        if j == 0.0 {
            1.0
        } else {
            1.0 + j * (2.0 * self.rng.unit() - 1.0)
        }
    }

    fn jittered_ns(&mut self, seconds: f64) -> u64 {
        ((seconds * self.jitter() * 1e9).round() as u64).max(1)
    }

    /// Worst-case KV growth of the running sequences in the next step.
    fn growth(&self) -> u64 {
        if self.spec.serving.kv_policy == KvPolicy::Reserve {
            return 0;
        }
        let verified = self.spec.verified_per_step();
        self.running
            .iter()
            .map(|s| {
                if s.decoding() {
                    s.remaining().min(verified) as u64
                } else {
                    1
                }
            })
            .sum()
    }

    /// Pre-empts, latest admitted first, until the step's growth fits the KV cache.
    fn preempt_to_fit(&mut self, t: u64, out: &mut Vec<Event>) {
        while self.kv_used + self.growth() > self.capacity && self.running.len() > 1 {
            let mut seq = self.running.pop().expect("more than one running");
            self.kv_used -= seq.alloc;
            seq.alloc = 0;
            seq.prefilled = 0;
            seq.target = seq.prompt + seq.generated;
            out.push(Event::Preempted { id: seq.id, t });
            self.waiting.push_front(seq);
        }
    }

    /// Admits waiting requests in arrival order while a slot and KV room allow.
    fn admit(&mut self, t: u64, out: &mut Vec<Event>, reserve: bool) {
        while self.running.len() < self.spec.serving.max_batch as usize {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let need = if reserve {
                front.prompt as u64 + front.max_tokens as u64
            } else {
                front.context() + 1
            };
            if self.kv_used + self.growth() + need > self.capacity {
                break;
            }
            let mut seq = self.waiting.pop_front().expect("front exists");
            if !seq.scheduled {
                self.reuse_prefix(&mut seq);
            }
            // Reserve holds the whole budget; pre-empt holds the context and grows.
            seq.alloc = if reserve { need } else { seq.context() };
            self.kv_used += seq.alloc;
            if !seq.scheduled {
                seq.scheduled = true;
                out.push(Event::Scheduled { id: seq.id, t });
            }
            self.running.push(seq);
        }
    }

    /// A newly admitted sequence skips the computed part of its prefix (at least its
    /// last prompt position is always computed, to produce the first token).
    fn reuse_prefix(&mut self, seq: &mut Seq) {
        let Some(p) = seq.prefix else {
            return;
        };
        let computed = self.prefixes.get(p.key);
        let hit = computed.min(p.tokens).min(seq.prompt.saturating_sub(1));
        seq.prefilled = hit;
        self.prefix_hits += hit as u64;
    }

    /// Records how far a sequence with a prefix key has computed its context.
    fn note_computed(&mut self, seq: &Seq) {
        if let Some(p) = seq.prefix {
            let done = if seq.decoding() {
                (seq.context() as u32).max(seq.prefilled)
            } else {
                seq.prefilled
            };
            self.prefixes.note(p.key, done);
        }
    }

    fn start_step(&mut self, t: u64, out: &mut Vec<Event>) {
        self.wake = None;
        let reserve = self.spec.serving.kv_policy == KvPolicy::Reserve;
        if !reserve {
            self.preempt_to_fit(t, out);
        }
        self.admit(t, out, reserve);
        if self.running.is_empty() {
            self.step = None;
            return;
        }
        let verified = self.spec.verified_per_step();
        let decode_tokens: u32 = self
            .running
            .iter()
            .filter(|s| s.decoding())
            .map(|_| verified)
            .sum();
        let mut left = self.budget.saturating_sub(decode_tokens);
        let mut work = Vec::with_capacity(self.running.len());
        let mut bytes_ctx = 0u64;
        let mut attended = 0u64;
        let mut prefill_tokens = 0u32;
        for s in &self.running {
            if s.decoding() {
                work.push(Work::Decode);
                bytes_ctx += s.context();
                attended += verified as u64 * s.context();
            } else {
                let c = (s.target - s.prefilled).min(left);
                left -= c;
                prefill_tokens += c;
                work.push(Work::Prefill(c));
                let p = s.prefilled as u64;
                bytes_ctx += p + c as u64;
                attended += c as u64 * p + (c as u64 * (c as u64 + 1)) / 2;
            }
        }
        let decoding = work.iter().filter(|w| **w == Work::Decode).count() as u64;
        let seconds = self.spec.step_s(&StepWork {
            tokens: (decode_tokens + prefill_tokens) as u64,
            kv_positions: bytes_ctx,
            attended,
            seqs: self.running.len() as u64,
            decoding,
        });
        let end = t + self.jittered_ns(seconds);
        self.step = Some(Step {
            start: t,
            end,
            work,
            prefill_tokens,
            tokens: decode_tokens + prefill_tokens,
        });
    }

    /// Tokens a decoding sequence emits this step: 1, or with speculation the
    /// accepted drafts (each with chance α, up to the first rejection) + 1.
    fn emitted(&mut self) -> u32 {
        match self.spec_decode {
            None => 1,
            Some(s) => {
                let mut n = 1;
                while n <= s.k && self.rng.unit() < s.alpha {
                    n += 1;
                }
                n
            }
        }
    }

    fn finish_step(&mut self, out: &mut Vec<Event>) {
        let step = self.step.take().expect("a step is running");
        let t = step.end;
        let reserve = self.spec.serving.kv_policy == KvPolicy::Reserve;
        let mut emitted_total = 0u32;
        let mut decoding = 0u32;
        let mut keep = Vec::with_capacity(self.running.len());
        let running = std::mem::take(&mut self.running);
        for (mut s, w) in running.into_iter().zip(step.work) {
            if self.aborted.remove(&s.id) {
                self.kv_used -= s.alloc;
                continue;
            }
            let n = match w {
                Work::Decode => {
                    decoding += 1;
                    self.emitted().min(s.remaining())
                }
                Work::Prefill(c) => {
                    s.prefilled += c;
                    u32::from(s.decoding())
                }
            };
            self.note_computed(&s);
            if n > 0 {
                s.generated += n;
                emitted_total += n;
                if !reserve {
                    s.alloc += n as u64;
                    self.kv_used += n as u64;
                }
                out.push(Event::Tokens { id: s.id, t, n });
            }
            if s.remaining() == 0 {
                self.note_computed(&s);
                self.kv_used -= s.alloc;
                out.push(Event::Finished { id: s.id, t });
            } else {
                keep.push(s);
            }
        }
        self.running = keep;
        out.push(Event::Step(StepInfo {
            start: step.start,
            end: t,
            decoding,
            prefill_tokens: step.prefill_tokens,
            emitted: emitted_total,
            tokens: step.tokens,
            running: self.running.len() as u32,
            waiting: self.waiting() as u32,
            kv_used: self.kv_used,
            kv_capacity: self.capacity,
        }));
    }

    fn start_prefills(&mut self, t: u64, out: &mut Vec<Event>) {
        for i in 0..self.workers.len() {
            if self.workers[i].is_some() {
                continue;
            }
            let Some(mut seq) = self.prefill_queue.pop_front() else {
                return;
            };
            self.reuse_prefix(&mut seq);
            seq.scheduled = true;
            out.push(Event::Scheduled { id: seq.id, t });
            let (cached, p) = (seq.prefilled as u64, (seq.prompt - seq.prefilled) as u64);
            let seconds = self.spec.step_s(&StepWork {
                tokens: p,
                kv_positions: cached + p,
                attended: p * cached + p * (p + 1) / 2,
                seqs: 1,
                decoding: 0,
            });
            let end = t + self.jittered_ns(seconds);
            self.workers[i] = Some((end, seq));
        }
    }

    fn finish_prefill(&mut self, worker: usize, t: u64, out: &mut Vec<Event>) {
        let (_, mut seq) = self.workers[worker].take().expect("worker busy");
        if self.aborted.remove(&seq.id) {
            self.start_prefills(t, out);
            return;
        }
        seq.prefilled = seq.prompt;
        self.note_computed(&seq);
        seq.generated = 1;
        if let Some((took, _)) = self.spec.kv_transfer(seq.prompt) {
            self.transfers.push((t + took, seq));
        }
        self.start_prefills(t, out);
    }
}
