//! `cadence twin fit`: records in, a [`Twin`] out. Each run is read on its own
//! timeline: the slots inferred from the most requests streaming at once, the chunks
//! grouped into the engine's steps ([`super::steps`]), each request's admission rebuilt
//! by replaying a FIFO queue for those slots; then every gap over a decode step filed
//! under the step's sequences and context, and every first token under its step's
//! sequences and prompt tokens, timed from the step boundary its prompt joined at.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use cadence_core::per_request::client_wait_before;
use cadence_core::{Outcome, RequestRecord};

use super::steps::{self, Steps, Stream};
use super::{
    prompt_bin, running_bin, size_bin, table_of, ItlCell, PrefillCell, Twin, BODY_POINTS, FORMAT,
    STALL_FACTOR, TAIL_POINTS,
};

/// Chunk sizes counted apart (the last: that many tokens or more).
const CHUNK_SIZES: usize = 16;
/// The slots count as seen full when, of the time at least that many requests were in
/// flight, this share had more in flight (waiting behind them).
const SATURATED_SHARE: f64 = 0.1;

/// Why records give no twin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    /// No succeeded request with a send time and a first chunk.
    #[error("no succeeded streamed request (with a send time and a first chunk) to learn from")]
    NoRequests,
    /// No gap between two chunks over a decode step.
    #[error("no request streamed two chunks over a step that finished no prompt: the twin learns decode steps from the gaps between them")]
    NoGaps,
}

/// A request as the fit reads it: times in ns on its run's timeline.
#[derive(Debug, Clone)]
struct Req<'a> {
    rec: &'a RequestRecord,
    sent: u64,
    first: u64,
    last: u64,
    end: u64,
    uncached: u64,
}

fn usable(r: &RequestRecord) -> Option<Req<'_>> {
    if r.outcome != Outcome::Succeeded {
        return None;
    }
    let sent = r.sent_ns?;
    let first = r.chunks.first()?.t_ns().max(sent);
    let last = r.chunks.last()?.t_ns().max(first);
    let end = r.end_ns.unwrap_or(last).max(last);
    let uncached = r
        .input_tokens
        .unwrap_or(0)
        .saturating_sub(r.cached_input_tokens.unwrap_or(0));
    Some(Req {
        rec: r,
        sent,
        first,
        last,
        end,
        uncached,
    })
}

/// The most intervals open at once (an interval ending when another starts does not
/// overlap it), and the time spent with at least `k` and more than `k` open.
fn overlap(intervals: impl Iterator<Item = (u64, u64)>, k: usize) -> (usize, u64, u64) {
    let mut ev: Vec<(u64, i32)> = intervals.flat_map(|(a, b)| [(a, 1), (b, -1)]).collect();
    ev.sort_unstable();
    let (mut open, mut most, mut at_least, mut above) = (0i64, 0usize, 0u64, 0u64);
    let mut prev = ev.first().map_or(0, |e| e.0);
    for (t, d) in ev {
        let span = t - prev;
        if open as usize >= k {
            at_least += span;
        }
        if open as usize > k {
            above += span;
        }
        open += i64::from(d);
        most = most.max(open.max(0) as usize);
        prev = t;
    }
    (most, at_least, above)
}

/// Per run: the most requests streaming at once, and whether requests were seen
/// waiting behind that many.
fn streaming(reqs: &[Req]) -> (usize, bool) {
    let (most, _, _) = overlap(reqs.iter().map(|r| (r.first, r.last)), 0);
    let (_, at_least, above) = overlap(reqs.iter().map(|r| (r.sent, r.end)), most);
    let full = at_least > 0 && above as f64 >= SATURATED_SHARE * at_least as f64;
    (most, full)
}

/// Each request's admission (ns) with `slots` slots, in the order of `reqs` (sorted by
/// send time): at its send, or when the earliest of the full slots frees (its last
/// chunk), never after its own first chunk.
fn admissions(reqs: &[Req], slots: usize) -> Vec<u64> {
    let mut busy: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    reqs.iter()
        .map(|r| {
            while busy.peek().is_some_and(|Reverse(t)| *t <= r.sent) {
                busy.pop();
            }
            let at = if busy.len() < slots {
                r.sent
            } else {
                busy.pop().map_or(r.sent, |Reverse(t)| t.max(r.sent))
            };
            let at = at.min(r.first);
            busy.push(Reverse(r.last.max(at)));
            at
        })
        .collect()
}

/// Samples filed by cell, before they become tables.
#[derive(Default)]
struct Samples {
    itl: BTreeMap<(u32, Option<u64>), Vec<f64>>,
    prefill: BTreeMap<(u32, u64), (Vec<f64>, f64)>,
    chunk_tokens: Vec<u64>,
    requests: u64,
    steps: u64,
    gaps: u64,
    max_running: u32,
    max_context: u64,
    max_prompt: u64,
    /// Requests the engine was idle for: time to first token (µs), its step's
    /// sequences, prompt tokens and context.
    idle: Vec<(f64, u32, u64, u64)>,
    /// Requests the engine was idle for whose server reported its prompt time: their
    /// own overhead (µs), time to first token less the server's queue and prompt.
    front: Vec<f64>,
}

/// The server's own account of a request's wait in its queue and its prompt step (ns),
/// when its dialect reports the prompt time (llama.cpp's `timings`, vLLM's metrics).
fn server_prompt(r: &RequestRecord) -> Option<(u64, u64)> {
    let t = r.counters.server_timing?;
    Some((t.queue_ns.unwrap_or(0), t.prompt_ns.filter(|&p| p > 0)?))
}

/// A request's chunks as the step grouping reads them: arrivals kept ascending, each
/// chunk's context the prompt and the tokens before it.
fn stream_of(r: &Req) -> Stream {
    let prompt = r.rec.input_tokens.unwrap_or(0);
    let (mut produced, mut at) = (0u64, r.first);
    let mut times = Vec::with_capacity(r.rec.chunks.len());
    let mut context = Vec::with_capacity(r.rec.chunks.len());
    for c in &r.rec.chunks {
        at = at.max(c.t_ns());
        times.push(at);
        context.push(prompt.saturating_add(produced));
        produced = produced.saturating_add(u64::from(c.tokens().filter(|&k| k > 0).unwrap_or(1)));
    }
    Stream {
        times,
        context,
        uncached: r.uncached,
    }
}

impl Samples {
    /// Files one run's requests, admitted by `adm` (aligned with `reqs`).
    fn add_run(&mut self, reqs: &[Req], adm: &[u64]) {
        let streams: Vec<Stream> = reqs.iter().map(stream_of).collect();
        let st = steps::group(&streams);
        self.steps += st.time.len() as u64;
        if let Some(&most) = st.members.iter().max() {
            self.max_running = self.max_running.max(most);
        }
        for (i, (r, &a)) in reqs.iter().zip(adm).enumerate() {
            self.requests += 1;
            self.add_prefill(&st, i, r, a);
            self.add_gaps(&st, &streams[i], i, r);
        }
    }

    /// A request's first token. When a step ended between its send and its first token
    /// (the engine was busy), the step that sent it is timed from the boundary before it:
    /// a prefill step. Otherwise the engine was idle: its time to first token is kept to
    /// tell the request's own overhead (send to engine) apart from the step, once the
    /// steps are known.
    fn add_prefill(&mut self, st: &Steps, i: usize, r: &Req, adm: u64) {
        let k = st.of[i][0];
        let (n, p) = (st.members[k], st.prompt[k]);
        self.max_prompt = self.max_prompt.max(p);
        let k0 = st.time.partition_point(|&t| t < adm);
        if k0 < k {
            self.prefill_step(n, p, r.first.saturating_sub(st.time[k - 1]));
        } else if adm == r.sent {
            let ttft = r.first - r.sent;
            match server_prompt(r.rec) {
                // The server's own time of the step is the prefill step; the rest of
                // the time to first token is the request's overhead.
                Some((queue, prompt)) => {
                    let front = ttft.saturating_sub(queue).saturating_sub(prompt);
                    self.front.push(front as f64 / 1e3);
                    self.prefill_step(n, p, prompt.min(ttft));
                }
                None => self.idle.push((ttft as f64 / 1e3, n, p, st.context[k])),
            }
        }
    }

    /// A prefill step of `n` sequences and `p` prompt tokens took `ns`.
    fn prefill_step(&mut self, n: u32, p: u64, ns: u64) {
        let cell = self
            .prefill
            .entry((running_bin(n), prompt_bin(p)))
            .or_default();
        cell.0.push(ns as f64 / 1e3);
        cell.1 += p as f64;
    }

    /// A request's gaps, each filed under its step's sequences: over a decode step, with
    /// its mean context; over a step that finished a prompt, as a prefill step of its
    /// prompt tokens (what a decoding stream saw of it). Its chunks' sizes counted.
    fn add_gaps(&mut self, st: &Steps, s: &Stream, i: usize, r: &Req) {
        for (c, chunk) in r.rec.chunks.iter().enumerate() {
            let n = chunk.tokens().filter(|&k| k > 0).unwrap_or(1);
            self.chunk_tokens[(n as usize).clamp(1, CHUNK_SIZES) - 1] += 1;
            if c == 0 || client_wait_before(r.rec, c) {
                continue;
            }
            let k = st.of[i][c];
            self.max_context = self.max_context.max(s.context[c]);
            let ns = s.times[c].saturating_sub(s.times[c - 1]);
            if st.joined[k] > 0 {
                continue;
            }
            let us = ns as f64 / 1e3;
            let rb = running_bin(st.members[k]);
            let cell = (rb, Some(size_bin(st.context[k])));
            self.itl.entry(cell).or_default().push(us);
            self.itl.entry((rb, None)).or_default().push(us);
            self.gaps += 1;
        }
    }
}

/// An ITL cell of `v`'s gaps (µs): the body up to [`STALL_FACTOR`] × the median, the
/// stall band above it.
fn itl_cell(running: u32, context: Option<u64>, mut v: Vec<f64>) -> ItlCell {
    v.sort_unstable_by(f64::total_cmp);
    let median = cadence_core::stats::quantile_sorted(&v, 0.5).unwrap_or(0.0);
    let cut = if median > 0.0 {
        v.partition_point(|&g| g <= STALL_FACTOR * median)
    } else {
        v.len()
    };
    let (body, stall) = v.split_at(cut);
    ItlCell {
        running,
        context,
        samples: v.len() as u64,
        stall_share: stall.len() as f64 / v.len() as f64,
        body_us: table_of(body, BODY_POINTS),
        stall_us: if stall.is_empty() {
            Vec::new()
        } else {
            table_of(stall, TAIL_POINTS)
        },
    }
}

/// Fits a twin to `runs`, each a run's records on its own timeline; `source` names
/// them in the file.
pub fn fit(runs: &[Vec<RequestRecord>], source: &str) -> Result<Twin, FitError> {
    let runs: Vec<Vec<Req>> = runs
        .iter()
        .map(|recs| {
            let mut v: Vec<Req> = recs.iter().filter_map(usable).collect();
            v.sort_by_key(|r| (r.sent, r.rec.index));
            v
        })
        .filter(|v| !v.is_empty())
        .collect();
    if runs.is_empty() {
        return Err(FitError::NoRequests);
    }
    let seen: Vec<(usize, bool)> = runs.iter().map(|r| streaming(r)).collect();
    let slots = seen.iter().map(|s| s.0).max().unwrap_or(1).max(1);
    let slots_seen = seen.iter().any(|&(m, full)| m == slots && full);
    let mut s = Samples {
        chunk_tokens: vec![0; CHUNK_SIZES],
        ..Samples::default()
    };
    for reqs in &runs {
        let adm = admissions(reqs, if slots_seen { slots } else { usize::MAX });
        s.add_run(reqs, &adm);
    }
    if s.gaps == 0 {
        return Err(FitError::NoGaps);
    }
    while s.chunk_tokens.last() == Some(&0) {
        s.chunk_tokens.pop();
    }
    if s.prefill.is_empty() {
        // Never a step ended while a prompt waited (one client, say): the idle requests'
        // time to first token is the prefill step, overhead and all.
        for (us, n, p, _) in std::mem::take(&mut s.idle) {
            s.prefill_step(n, p, (us * 1e3) as u64);
        }
    }
    let itl = std::mem::take(&mut s.itl)
        .into_iter()
        .map(|((r, c), v)| itl_cell(r, c, v))
        .collect();
    let prefill = std::mem::take(&mut s.prefill)
        .into_iter()
        .map(|((running, prompt), (mut v, tokens))| {
            v.sort_unstable_by(f64::total_cmp);
            PrefillCell {
                running,
                prompt,
                samples: v.len() as u64,
                mean_prompt: (tokens / v.len() as f64).round(),
                times_us: table_of(&v, TAIL_POINTS),
            }
        })
        .collect();
    let mut twin = Twin {
        format: FORMAT,
        source: source.to_string(),
        requests: s.requests,
        gaps: s.gaps,
        steps: s.steps,
        slots: u32::try_from(slots).unwrap_or(u32::MAX),
        slots_seen,
        max_running: s.max_running,
        max_context: s.max_context,
        max_prompt: s.max_prompt,
        chunk_tokens: s.chunk_tokens,
        overhead_us: Vec::new(),
        itl,
        prefill,
        in_sample: None,
    };
    twin.overhead_us = if s.front.is_empty() {
        overhead(&twin, &s.idle)
    } else {
        // Measured by the server's own timing: no step to tell apart.
        s.front.sort_unstable_by(f64::total_cmp);
        if s.front.last().is_some_and(|&o| o > 0.0) {
            table_of(&s.front, TAIL_POINTS)
        } else {
            Vec::new()
        }
    };
    Ok(twin)
}

/// The requests' own overhead (µs), from send to joining the engine: what the idle
/// requests' time to first token took beyond the step that sent it, quantile by
/// quantile (the k-th shortest time against the step's time at the same quantile);
/// empty when none took longer.
fn overhead(twin: &Twin, idle: &[(f64, u32, u64, u64)]) -> Vec<u64> {
    let mut idle = idle.to_vec();
    idle.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let len = idle.len() as f64;
    let mut v: Vec<f64> = idle
        .iter()
        .enumerate()
        .map(|(i, &(ttft, n, p, ctx))| {
            let u = (i as f64 + 0.5) / len;
            let decode = twin.itl_cell(n, ctx).map_or(0.0, |c| c.at(u));
            // A step that prefills is no shorter than a decode step of as many sequences.
            let step = super::server::prefill_us(twin, n, p, ctx, u, decode).max(decode);
            (ttft - step).max(0.0)
        })
        .collect();
    v.sort_unstable_by(f64::total_cmp);
    if v.last().is_none_or(|&o| o <= 0.0) {
        return Vec::new();
    }
    table_of(&v, TAIL_POINTS)
}
