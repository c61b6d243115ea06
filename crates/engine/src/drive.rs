//! `cadence plan`'s load generator in virtual time: closed-loop or open-loop
//! arrivals fed to the engine model, each request turned into the same
//! `RequestRecord` a real run against `cadence sim --preset` would produce.

use std::collections::HashMap;

use cadence_core::record::{Chunk, RequestRecord, TokenCount, TokenSource};
use cadence_core::Outcome;

use crate::engine::{Engine, Event, Request, StepInfo};
use crate::rng::SplitMix;
use crate::spec::EngineSpec;

/// What each request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Measured requests.
    pub requests: u64,
    /// Requests sent first and marked warm-up.
    pub warmup: u64,
    pub input_tokens: u32,
    pub max_tokens: u32,
    /// Closed loop: mean time from a response's end to the client's next request
    /// reaching the engine (client and network), drawn uniformly in [½, 1½] × this,
    /// seeded. Real clients never come back in the same nanosecond; with 0 they do,
    /// and identical requests stay in lock-step.
    pub turnaround_ns: u64,
    /// Per request (prompt tokens, max tokens), used in turn; empty: every request
    /// asks for `input_tokens` and `max_tokens`.
    pub lengths: Vec<(u32, u32)>,
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
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// `concurrency` clients, each sending its next request when the last ends.
    Closed { concurrency: u32 },
    /// Open loop, evenly spaced at `rate` per second.
    Constant { rate: f64 },
    /// Open loop, exponential gaps with mean 1/`rate` s, seeded.
    Poisson { rate: f64, seed: u64 },
}

/// One level's outcome: the records and the engine's steps.
#[derive(Debug, Clone)]
pub struct PlanLevel {
    pub records: Vec<RequestRecord>,
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
    let total = workload.requests + workload.warmup;
    let mut engine = Engine::new(spec.clone());
    let mut records: Vec<RequestRecord> = Vec::with_capacity(total as usize);
    let mut by_id: HashMap<u64, usize> = HashMap::new();
    let mut steps = Vec::new();
    let mut out = Vec::new();
    let mut sent = 0u64;
    let mut idle_workers: Vec<u32> = Vec::new();
    let closed = matches!(arrivals, Arrivals::Closed { .. });
    // Closed loop: (when, worker) of the next requests on their way.
    let mut pending: Vec<(u64, u32)> = Vec::new();
    let mut turnaround_rng = SplitMix::new(spec.serving.seed ^ 0x7A ^ ((level as u64) << 32));
    let mut rng = match arrivals {
        Arrivals::Poisson { seed, .. } => SplitMix::new(seed ^ level as u64),
        _ => SplitMix::new(0),
    };
    let mut next_arrival: Option<u64> = None;
    let mut preemptions = 0u64;
    let mut queue_ns = vec![0u64; total as usize];

    let send = |t: u64,
                worker: u32,
                engine: &mut Engine,
                out: &mut Vec<Event>,
                records: &mut Vec<RequestRecord>,
                by_id: &mut HashMap<u64, usize>,
                sent: &mut u64| {
        let i = *sent;
        *sent += 1;
        let mut r = RequestRecord::new(first_index + i, Outcome::Succeeded);
        r.level = level;
        r.worker = worker;
        r.warmup = i < workload.warmup;
        r.sent_ns = Some(start_ns + t);
        r.headers_ns = Some(start_ns + t);
        let (prompt_tokens, max_tokens) = workload.lengths_of(i);
        r.input_tokens = Some(prompt_tokens as u64);
        if !matches!(arrivals, Arrivals::Closed { .. }) {
            r.scheduled_ns = Some(start_ns + t);
        }
        by_id.insert(i, records.len());
        records.push(r);
        engine.submit(
            t,
            Request {
                id: i,
                prompt_tokens,
                max_tokens,
            },
            out,
        );
    };

    match arrivals {
        Arrivals::Closed { concurrency } => {
            // Each client's first request also reaches the engine after a turnaround.
            for w in 0..(concurrency as u64).min(total) {
                let back = turnaround(workload.turnaround_ns, &mut turnaround_rng);
                pending.push((back, w as u32));
            }
        }
        Arrivals::Constant { .. } | Arrivals::Poisson { .. } => {
            next_arrival = (total > 0).then_some(0);
        }
    }

    let mut now = 0u64;
    loop {
        // Account for what the engine reported, and let closed-loop clients go again.
        for e in out.drain(..) {
            match e {
                Event::Tokens { id, t, n } => {
                    let r = &mut records[by_id[&id]];
                    if r.chunks.is_empty() {
                        r.first_content_ns = Some(start_ns + t);
                    }
                    r.chunks.push(Chunk(start_ns + t, Some(n)));
                }
                Event::Finished { id, t } => {
                    let r = &mut records[by_id[&id]];
                    let produced: u64 = r.chunks.iter().filter_map(|c| c.1).map(u64::from).sum();
                    r.end_ns = Some(start_ns + t);
                    r.http_status = Some(200);
                    r.finish_reason = Some("length".into());
                    r.output_tokens = Some(TokenCount {
                        count: produced,
                        source: TokenSource::Usage,
                    });
                    idle_workers.push(r.worker);
                }
                Event::Rejected { id, t, reason } => {
                    let r = &mut records[by_id[&id]];
                    r.end_ns = Some(start_ns + t);
                    r.http_status = Some(400);
                    r.outcome = Outcome::Http4xx;
                    r.error = Some(reason);
                    idle_workers.push(r.worker);
                }
                Event::Step(s) => steps.push(s),
                Event::Scheduled { id, t } => {
                    let r = &records[by_id[&id]];
                    let arrived = r.sent_ns.unwrap_or(start_ns + t) - start_ns;
                    queue_ns[by_id[&id]] = t - arrived;
                }
                Event::Preempted { .. } => preemptions += 1,
            }
        }
        if closed {
            idle_workers.sort_unstable();
            for w in std::mem::take(&mut idle_workers) {
                if sent + (pending.len() as u64) < total {
                    let back = turnaround(workload.turnaround_ns, &mut turnaround_rng);
                    pending.push((now + back, w));
                }
            }
        } else {
            idle_workers.clear();
        }
        let client_next = if closed {
            pending.iter().copied().min()
        } else {
            next_arrival.map(|a| (a, 0))
        };
        match (client_next, engine.next_time()) {
            (Some((a, w)), e) if e.is_none_or(|e| a <= e) => {
                now = a;
                pending.retain(|p| *p != (a, w));
                send(
                    a,
                    w,
                    &mut engine,
                    &mut out,
                    &mut records,
                    &mut by_id,
                    &mut sent,
                );
                if !closed {
                    next_arrival = (sent < total).then(|| a + gap_ns(arrivals, &mut rng));
                }
            }
            (_, Some(e)) => {
                now = e;
                engine.advance(e, &mut out);
            }
            (_, None) => break,
        }
    }
    let end_ns = start_ns + now;
    PlanLevel {
        records,
        steps,
        preemptions,
        queue_ns,
        end_ns,
    }
}

/// A client's turnaround: uniform in [½, 1½] × the mean.
fn turnaround(mean_ns: u64, rng: &mut SplitMix) -> u64 {
    (mean_ns as f64 * (0.5 + rng.unit())).round() as u64
}

fn gap_ns(arrivals: Arrivals, rng: &mut SplitMix) -> u64 {
    match arrivals {
        Arrivals::Closed { .. } => 0,
        Arrivals::Constant { rate } => (1e9 / rate).round() as u64,
        Arrivals::Poisson { rate, .. } => {
            let u = 1.0 - rng.unit();
            (-u.ln() / rate * 1e9).round() as u64
        }
    }
}
