//! `cadence twin fit`: records in, a [`Twin`] out. Each run is read on its own
//! timeline: the slots inferred from the most requests streaming at once, each
//! request's admission rebuilt by replaying a FIFO queue for those slots, then every
//! gap and every prefill filed under the running count and context (or prompt) it saw,
//! a gap also by whether another request was admitted within it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use cadence_core::per_request::client_wait_before;
use cadence_core::{Outcome, RequestRecord};

use super::{
    running_bin, size_bin, table_of, ItlCell, PrefillCell, Twin, BODY_POINTS, FORMAT, STALL_FACTOR,
    TAIL_POINTS,
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
    /// No request streamed two chunks.
    #[error("no request streamed two chunks: the twin learns ITL from the gaps between them")]
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
    itl: BTreeMap<(u32, Option<u64>, bool), Vec<f64>>,
    prefill: BTreeMap<(u32, Option<u64>), (Vec<f64>, f64)>,
    chunk_tokens: Vec<u64>,
    requests: u64,
    gaps: u64,
    max_running: u32,
    max_context: u64,
    max_prompt: u64,
}

impl Samples {
    /// Files one run's requests, admitted by `adm` (aligned with `reqs`).
    fn add_run(&mut self, reqs: &[Req], adm: &[u64]) {
        let mut starts: Vec<u64> = adm.to_vec();
        let mut ends: Vec<u64> = reqs.iter().zip(adm).map(|(r, &a)| r.last.max(a)).collect();
        starts.sort_unstable();
        ends.sort_unstable();
        // Requests holding a slot at t: admitted at or before t, released after t.
        let running = |t: u64| {
            let n = starts.partition_point(|&s| s <= t) - ends.partition_point(|&e| e <= t);
            n.max(1) as u32
        };
        for (r, &a) in reqs.iter().zip(adm) {
            self.requests += 1;
            let at = running(a);
            self.max_running = self.max_running.max(at);
            self.max_prompt = self.max_prompt.max(r.uncached);
            let us = (r.first - a) as f64 / 1e3;
            let (rb, pb) = (running_bin(at), size_bin(r.uncached));
            for key in [(rb, Some(pb)), (rb, None)] {
                let cell = self.prefill.entry(key).or_default();
                cell.0.push(us);
                cell.1 += r.uncached as f64;
            }
            // Another request admitted within (a, b]: its prefill ran in the gap.
            let joined = |a: u64, b: u64| {
                starts.partition_point(|&s| s <= b) > starts.partition_point(|&s| s <= a)
            };
            self.add_gaps(r, &running, &joined);
        }
    }

    fn add_gaps(
        &mut self,
        r: &Req,
        running: &impl Fn(u64) -> u32,
        joined: &impl Fn(u64, u64) -> bool,
    ) {
        let prompt = r.rec.input_tokens.unwrap_or(0);
        let mut produced = 0u64;
        for (i, c) in r.rec.chunks.iter().enumerate() {
            let n = c.tokens().filter(|&k| k > 0).unwrap_or(1);
            self.chunk_tokens[(n as usize).clamp(1, CHUNK_SIZES) - 1] += 1;
            if i > 0 && !client_wait_before(r.rec, i) {
                let (a, b) = (r.rec.chunks[i - 1].t_ns(), c.t_ns());
                if b >= a {
                    let context = prompt + produced;
                    let at = running(a + (b - a) / 2);
                    self.max_running = self.max_running.max(at);
                    self.max_context = self.max_context.max(context);
                    let us = (b - a) as f64 / 1e3;
                    let (rb, j) = (running_bin(at), joined(a, b));
                    self.itl
                        .entry((rb, Some(size_bin(context)), j))
                        .or_default()
                        .push(us);
                    self.itl.entry((rb, None, j)).or_default().push(us);
                    self.gaps += 1;
                }
            }
            produced += u64::from(n);
        }
    }
}

/// An ITL cell of `v`'s gaps (µs): the body up to [`STALL_FACTOR`] × the median, the
/// stall band above it.
fn itl_cell(running: u32, context: Option<u64>, joined: bool, mut v: Vec<f64>) -> ItlCell {
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
        joined,
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
    let itl = std::mem::take(&mut s.itl)
        .into_iter()
        .map(|((r, c, j), v)| itl_cell(r, c, j, v))
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
    Ok(Twin {
        format: FORMAT,
        source: source.to_string(),
        requests: s.requests,
        gaps: s.gaps,
        slots: u32::try_from(slots).unwrap_or(u32::MAX),
        slots_seen,
        max_running: s.max_running,
        max_context: s.max_context,
        max_prompt: s.max_prompt,
        chunk_tokens: s.chunk_tokens,
        itl,
        prefill,
    })
}
