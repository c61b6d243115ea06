//! The twin as a server in virtual time, serving its streams in shared steps as an
//! engine does: requests wait in order for one of the twin's slots and the next step
//! boundary; each step's time is one draw for all its sequences, from the decode cell
//! of its sequences and context, or, when prompts joined it, from the prefill cell of
//! its sequences and prompt tokens; at its end every decoding stream sends a chunk and
//! every joined prompt its first. So gaps are shared across streams, a prompt joining
//! delays them all, and TTFT's tail comes from queueing behind real steps. Seeded: the
//! same seed, the same draws. Every request that met a load, a context or a prompt
//! past what the fit saw is counted ([`Reach`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::{running_bin, table_at, PrefillCell, Twin, MIN_CELL};
use crate::drive::{Backend, SESSION_KEYS};
use crate::engine::{Event, Prefix, Request};
use crate::rng::{self, SplitMix64};

/// Prefix keys the twin remembers at most (the oldest forgotten first).
const MAX_PREFIXES: usize = 65_536;

pub use crate::reach::Reach;

#[derive(Debug, Clone)]
struct Seq {
    id: u64,
    prompt: u32,
    uncached: u32,
    max_tokens: u32,
    generated: u32,
    prefix: Option<Prefix>,
    beyond: bool,
}

impl Seq {
    fn context(&self) -> u64 {
        u64::from(self.prompt) + u64::from(self.generated)
    }
}

/// The twin serving requests in virtual time (see the module's docs).
#[derive(Debug)]
pub struct TwinServer {
    twin: Arc<Twin>,
    rng: SplitMix64,
    /// Requests on their way to the engine (their overhead): when each arrives there
    /// (one sent while others are on their way arrives with the last of them).
    arriving: Vec<(u64, Seq)>,
    waiting: VecDeque<Seq>,
    /// Streams decoding: each gets a chunk at every step's end.
    running: Vec<Seq>,
    /// Prompts admitted at the current step's start: their first chunk at its end.
    joining: Vec<Seq>,
    /// When the current step ends; `None`: idle.
    step_end: Option<u64>,
    prefixes: HashMap<u64, u32>,
    prefix_order: VecDeque<u64>,
    /// Past the fit's running counts (slots never seen full): step times scaled along
    /// the pooled cells' medians, a + b · running.
    line: (f64, f64),
    reach: Reach,
}

impl TwinServer {
    /// An idle twin at time 0, its draws seeded by `seed`.
    pub fn new(twin: Arc<Twin>, seed: u64) -> TwinServer {
        let line = median_line(&twin);
        TwinServer {
            twin,
            rng: rng::seeded(seed ^ 0x7713),
            arriving: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            joining: Vec::new(),
            step_end: None,
            prefixes: HashMap::new(),
            prefix_order: VecDeque::new(),
            line,
            reach: Reach::default(),
        }
    }

    /// How far the requests so far went past the fit.
    pub fn reach(&self) -> Reach {
        self.reach
    }

    fn slots(&self) -> usize {
        if self.twin.slots_seen {
            self.twin.slots as usize
        } else {
            usize::MAX
        }
    }

    /// A step starts at `t`: waiting prompts join while a slot is free, and the step's
    /// time is drawn, one draw for every sequence in it (a decode step, or a prefill
    /// step when prompts joined); nothing to serve leaves the twin idle.
    fn start_step(&mut self, t: u64, out: &mut Vec<Event>) {
        while self.running.len() + self.joining.len() < self.slots() {
            let Some(s) = self.waiting.pop_front() else {
                break;
            };
            out.push(Event::Scheduled { id: s.id, t });
            if let Some(p) = s.prefix.filter(|p| p.key & SESSION_KEYS == 0) {
                self.remember(p.key, p.tokens);
            }
            self.joining.push(s);
        }
        let n = (self.running.len() + self.joining.len()) as u32;
        if n == 0 {
            self.step_end = None;
            return;
        }
        let twin = self.twin.clone();
        let context = if self.running.is_empty() {
            mean(self.joining.iter().map(|s| u64::from(s.prompt)))
        } else {
            mean(self.running.iter().map(Seq::context))
        };
        let prompt: u64 = self.joining.iter().map(|s| u64::from(s.uncached)).sum();
        let u = self.rng.unit();
        let decode = self.decode_us(n, context, u);
        let us = if self.joining.is_empty() {
            decode
        } else {
            prefill_us(&twin, n, prompt, context, u, decode)
        };
        let beyond = n > twin.max_running || context > twin.max_context;
        let past_prompt = prompt > twin.max_prompt;
        for s in &mut self.running {
            s.beyond |= beyond;
        }
        for s in &mut self.joining {
            s.beyond |= beyond || past_prompt;
        }
        self.reach.max_running = self.reach.max_running.max(n);
        self.reach.max_context = self.reach.max_context.max(context);
        self.reach.max_prompt = self.reach.max_prompt.max(prompt);
        self.step_end = Some(t + ((us * 1e3).round() as u64).max(1));
    }

    /// A decode step's time (µs) for `n` sequences at a mean context of `context`, at
    /// quantile `u`; past the fit's running counts, scaled along the medians' line.
    fn decode_us(&self, n: u32, context: u64, u: f64) -> f64 {
        let twin = &self.twin;
        let us = twin.itl_cell(n, context).map_or(0.0, |c| c.at(u));
        us * scale(self.line, n, twin.max_running)
    }

    fn remember(&mut self, key: u64, tokens: u32) {
        let old = self.prefixes.insert(key, tokens);
        if old.is_none() {
            self.prefix_order.push_back(key);
            if self.prefix_order.len() > MAX_PREFIXES {
                if let Some(k) = self.prefix_order.pop_front() {
                    self.prefixes.remove(&k);
                }
            }
        }
        if let (Some(old), Some(v)) = (old, self.prefixes.get_mut(&key)) {
            *v = (*v).max(old);
        }
    }

    /// The step ends at `t`: every decoding stream sends a chunk and every joined
    /// prompt its first; the finished leave, and the next step starts.
    fn finish_step(&mut self, t: u64, out: &mut Vec<Event>) {
        let mut served = std::mem::take(&mut self.running);
        served.append(&mut self.joining);
        for mut s in served {
            let u = self.rng.unit();
            let n = self.twin.chunk_tokens_at(u).min(s.max_tokens - s.generated);
            s.generated += n;
            out.push(Event::Tokens { id: s.id, t, n });
            if s.generated < s.max_tokens {
                self.running.push(s);
                continue;
            }
            out.push(Event::Finished { id: s.id, t });
            self.reach.requests += 1;
            self.reach.beyond += u64::from(s.beyond);
            if let Some(p) = s.prefix.filter(|p| p.key & SESSION_KEYS != 0) {
                self.remember(p.key, s.prompt.saturating_add(s.generated));
            }
        }
        self.start_step(t, out);
    }
}

impl TwinServer {
    /// Finishes the steps that ended before `t` (the real-time sim may hand a request
    /// over before it advanced the twin past them), so nothing is scheduled before it
    /// arrived.
    fn run_before(&mut self, t: u64, out: &mut Vec<Event>) {
        while let Some(at) = self.next_time().filter(|&e| e < t) {
            self.run_at(at, out);
        }
    }

    /// Does what is due at `at`, the next thing's time: a request arrives at the engine
    /// (and starts a step when it is idle), or the step ends.
    fn run_at(&mut self, at: u64, out: &mut Vec<Event>) {
        let arrived = self.arriving.iter().position(|a| a.0 == at);
        match arrived {
            Some(i) if self.step_end.is_none_or(|e| at <= e) => {
                let (_, s) = self.arriving.swap_remove(i);
                self.waiting.push_back(s);
                if self.step_end.is_none() {
                    self.start_step(at, out);
                }
            }
            _ => self.finish_step(at, out),
        }
    }
}

/// The mean of `v`, 0 for none.
fn mean(v: impl Iterator<Item = u64>) -> u64 {
    let (sum, n) = v.fold((0u128, 0u128), |a, x| (a.0 + u128::from(x), a.1 + 1));
    u64::try_from(sum.checked_div(n).unwrap_or(0)).unwrap_or(u64::MAX)
}

/// How much longer a step of `n` sequences is than one of `max` (the fit's most), along
/// the pooled cells' medians `a + b · running`; 1 within the fit.
fn scale((a, b): (f64, f64), n: u32, max: u32) -> f64 {
    let at = |r: u32| a + b * f64::from(running_bin(r));
    if n > max && b > 0.0 && at(max) > 0.0 {
        at(n) / at(max)
    } else {
        1.0
    }
}

/// A prefill step's time (µs) at quantile `u`: a decode step's time `decode` for the
/// step's `n` sequences at a mean context of `context`, plus the extra time of
/// prefilling `prompt` uncached tokens. Each prompt bin's cell (of the running bin
/// nearest `n` among those of [`MIN_CELL`] / 2 first tokens, if any) gives the extra
/// over a decode step of its own running bin at its mean prompt; the extra at
/// `prompt` is interpolated between the cells' mean prompts (the smallest cell's below
/// them; past the largest, scaled by the prompt over its mean). A prompt that a cell of
/// `n`'s bin measured at exactly its mean comes out as measured.
pub(super) fn prefill_us(
    twin: &Twin,
    n: u32,
    prompt: u64,
    context: u64,
    u: f64,
    decode: f64,
) -> f64 {
    let r = running_bin(n);
    let mut points: Vec<(f64, f64)> = Vec::new();
    let full = |c: &&PrefillCell| c.samples >= MIN_CELL / 2;
    let any_full = twin.prefill.iter().any(|c| full(&c));
    let mut bins: Vec<u64> = twin.prefill.iter().map(|c| c.prompt).collect();
    bins.sort_unstable();
    bins.dedup();
    for b in bins {
        let cells = twin
            .prefill
            .iter()
            .filter(|c| c.prompt == b && (!any_full || full(c)));
        let Some(cell) = cells.min_by_key(|c| (c.running.abs_diff(r), c.running)) else {
            continue;
        };
        let base = if cell.running == r {
            decode
        } else {
            twin.itl_cell(cell.running, context)
                .map_or(0.0, |c| c.at(u))
        };
        points.push((cell.mean_prompt, table_at(&cell.times_us, u) - base));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let p = prompt as f64;
    let extra = match points.iter().position(|&(m, _)| m >= p) {
        None => points
            .last()
            .map_or(0.0, |&(m, e)| if m > 0.0 { e.max(0.0) * p / m } else { e }),
        Some(0) => points[0].1,
        Some(i) => {
            let ((m0, e0), (m1, e1)) = (points[i - 1], points[i]);
            let chord = e0 + (e1 - e0) * (p - m0) / (m1 - m0);
            // Convex: the next segment's slope carried back, never below the lower cell.
            match points.get(i + 1) {
                Some(&(m2, e2)) if e2 > e1 => {
                    chord.min(e0.max(e1 - (e2 - e1) / (m2 - m1) * (m1 - p)))
                }
                _ => chord,
            }
        }
    };
    (decode + extra).max(0.0)
}

/// Least squares of the pooled ITL cells' medians on their running bins: (a, b).
fn median_line(twin: &Twin) -> (f64, f64) {
    let pts: Vec<(f64, f64)> = twin
        .itl
        .iter()
        .filter(|c| c.context.is_none())
        .map(|c| (f64::from(c.running), super::table_at(&c.body_us, 0.5)))
        .collect();
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if pts.len() < 2 || sxx == 0.0 {
        return (my, 0.0);
    }
    let b = sxy / sxx;
    (my - b * mx, b)
}

impl Backend for TwinServer {
    fn reach(&self) -> Option<Reach> {
        Some(self.reach)
    }
    fn abort(&mut self, t: u64, id: u64, out: &mut Vec<Event>) {
        self.run_before(t, out);
        // Freed at the step's end, as an engine frees it.
        self.arriving.retain(|a| a.1.id != id);
        self.waiting.retain(|s| s.id != id);
        self.running.retain(|s| s.id != id);
        self.joining.retain(|s| s.id != id);
    }

    fn running(&self) -> usize {
        self.running.len() + self.joining.len()
    }

    fn waiting(&self) -> usize {
        self.waiting.len() + self.arriving.len()
    }

    fn kv_usage(&self) -> f64 {
        0.0
    }

    fn next_time(&self) -> Option<u64> {
        let arriving = self.arriving.iter().map(|a| a.0).min();
        match (self.step_end, arriving) {
            (Some(e), Some(a)) => Some(e.min(a)),
            (e, a) => e.or(a),
        }
    }

    fn advance(&mut self, t: u64, out: &mut Vec<Event>) {
        while let Some(at) = self.next_time().filter(|&e| e <= t) {
            self.run_at(at, out);
        }
    }

    fn submit(&mut self, t: u64, req: Request, prefix: Option<Prefix>, out: &mut Vec<Event>) {
        if req.max_tokens == 0 {
            out.push(Event::Rejected {
                id: req.id,
                t,
                reason: "max_tokens must be at least 1".into(),
            });
            return;
        }
        self.run_before(t, out);
        let cached = prefix
            .and_then(|p| self.prefixes.get(&p.key).map(|&c| c.min(p.tokens)))
            .unwrap_or(0);
        let seq = Seq {
            id: req.id,
            prompt: req.prompt_tokens,
            uncached: req.prompt_tokens.saturating_sub(cached),
            max_tokens: req.max_tokens,
            generated: 0,
            prefix,
            beyond: false,
        };
        let u = self.rng.unit();
        let o = (table_at(&self.twin.overhead_us, u) * 1e3).round() as u64;
        // Sent while others are on their way in, it is handed over with the last of
        // them: clients that send together are admitted at one step boundary, as an
        // engine prefills a closed loop's waiting prompts together (independent
        // draws would spread them over several steps and break that lock-step).
        let at = self.arriving.iter().map(|a| a.0).max().filter(|&a| a > t);
        let at = at.unwrap_or(t + o);
        if at > t {
            self.arriving.push((at, seq));
            return;
        }
        self.waiting.push_back(seq);
        if self.step_end.is_none() {
            self.start_step(t, out);
        }
    }
}
