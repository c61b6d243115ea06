//! The twin as a server in virtual time: requests wait in order for one of the twin's
//! slots, then each draws its prefill from the cell of its running count and uncached
//! prompt, and each chunk's gap from the cell of the running count and context it
//! meets. Seeded: the same seed, the same draws. Every request that met a load, a
//! context or a prompt past what the fit saw is counted ([`Reach`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::{running_bin, Twin};
use crate::drive::{Backend, SESSION_KEYS};
use crate::engine::{Event, Prefix, Request};
use crate::rng::{self, SplitMix64};

/// Prefix keys the twin remembers at most (the oldest forgotten first).
const MAX_PREFIXES: usize = 65_536;

/// How far a level went past what the fit saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    /// Requests served.
    pub requests: u64,
    /// Requests that met more running requests, a deeper context or a longer uncached
    /// prompt than the fit saw: their figures are extrapolated.
    pub beyond: u64,
    /// The most requests running at once.
    pub max_running: u32,
    /// The deepest context met.
    pub max_context: u64,
    /// The longest uncached prompt met.
    pub max_prompt: u64,
}

#[derive(Debug, Clone)]
struct Seq {
    id: u64,
    prompt: u32,
    uncached: u32,
    max_tokens: u32,
    generated: u32,
    /// When its next chunk leaves.
    next: u64,
    /// When its last chunk left (0 before its first).
    last: u64,
    /// Another request was admitted within its current gap.
    joined: bool,
    prefix: Option<Prefix>,
    beyond: bool,
}

/// The twin serving requests in virtual time (see the module's docs).
#[derive(Debug)]
pub struct TwinServer {
    twin: Arc<Twin>,
    rng: SplitMix64,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    prefixes: HashMap<u64, u32>,
    prefix_order: VecDeque<u64>,
    /// Past the fit's running counts (slots never seen full): ITL scaled along the
    /// pooled cells' medians, a + b · running.
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
            waiting: VecDeque::new(),
            running: Vec::new(),
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

    /// Admits waiting requests while a slot is free, drawing each one's prefill.
    fn admit(&mut self, t: u64, out: &mut Vec<Event>) {
        while self.running.len() < self.slots() {
            let Some(mut s) = self.waiting.pop_front() else {
                return;
            };
            let n = self.running.len() as u32 + 1;
            let twin = &self.twin;
            let u = self.rng.unit();
            let us = twin
                .prefill_cell(n, u64::from(s.uncached))
                .map_or(0.0, |cell| {
                    let us = super::table_at(&cell.times_us, u);
                    if u64::from(s.uncached) > twin.max_prompt && cell.mean_prompt > 0.0 {
                        us * f64::from(s.uncached) / cell.mean_prompt
                    } else {
                        us
                    }
                });
            s.beyond |= n > twin.max_running || u64::from(s.uncached) > twin.max_prompt;
            self.reach.max_running = self.reach.max_running.max(n);
            self.reach.max_prompt = self.reach.max_prompt.max(u64::from(s.uncached));
            s.next = t + (us * 1e3).round() as u64;
            out.push(Event::Scheduled { id: s.id, t });
            self.join(t);
            if let Some(p) = s.prefix.filter(|p| p.key & SESSION_KEYS == 0) {
                self.remember(p.key, p.tokens);
            }
            self.running.push(s);
        }
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

    /// A request is admitted at `t`: its prefill runs within the current gap of every
    /// streaming sequence, each redrawn from the cells of gaps another joined.
    fn join(&mut self, t: u64) {
        for i in 0..self.running.len() {
            let s = &self.running[i];
            if s.generated > 0 && !s.joined && s.next > t {
                let g = self.gap(i, true);
                let s = &mut self.running[i];
                s.joined = true;
                s.next = (s.last + g).max(t);
            }
        }
    }

    /// The gap (ns) before a chunk of the sequence at `i`, another request admitted
    /// within it or not.
    fn gap(&mut self, i: usize, joined: bool) -> u64 {
        let n = self.running.len() as u32;
        let s = &self.running[i];
        let context = u64::from(s.prompt) + u64::from(s.generated);
        let twin = &self.twin;
        let (pick, u) = (self.rng.unit(), self.rng.unit());
        let mut us = twin
            .itl_cell(n, context, joined)
            .map_or(0.0, |c| c.sample(pick, u));
        if n > twin.max_running {
            let (a, b) = self.line;
            let at = |r: u32| a + b * f64::from(running_bin(r));
            if b > 0.0 && at(twin.max_running) > 0.0 {
                us *= at(n) / at(twin.max_running);
            }
        }
        let beyond = n > twin.max_running || context > twin.max_context;
        self.reach.max_context = self.reach.max_context.max(context);
        self.running[i].beyond |= beyond;
        (us * 1e3).round() as u64
    }

    /// The sequence at `i` sends its chunk at `t`: its first (after prefill) or a
    /// later one; it finishes, or its next chunk is drawn.
    fn chunk(&mut self, i: usize, t: u64, out: &mut Vec<Event>) {
        let u = self.rng.unit();
        let s = &mut self.running[i];
        let n = self.twin.chunk_tokens_at(u).min(s.max_tokens - s.generated);
        s.generated += n;
        out.push(Event::Tokens { id: s.id, t, n });
        s.last = t;
        s.joined = false;
        if s.generated < s.max_tokens {
            let g = self.gap(i, false);
            self.running[i].next = t + g;
            return;
        }
        let s = self.running.swap_remove(i);
        out.push(Event::Finished { id: s.id, t });
        self.reach.requests += 1;
        self.reach.beyond += u64::from(s.beyond);
        if let Some(p) = s.prefix.filter(|p| p.key & SESSION_KEYS != 0) {
            self.remember(p.key, s.prompt.saturating_add(s.generated));
        }
        self.admit(t, out);
    }
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
    fn abort(&mut self, t: u64, id: u64, out: &mut Vec<Event>) {
        self.waiting.retain(|s| s.id != id);
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            self.running.swap_remove(i);
            self.admit(t, out);
        }
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn kv_usage(&self) -> f64 {
        0.0
    }

    fn next_time(&self) -> Option<u64> {
        self.running.iter().map(|s| s.next).min()
    }

    fn advance(&mut self, t: u64, out: &mut Vec<Event>) {
        loop {
            let due = self
                .running
                .iter()
                .enumerate()
                .filter(|(_, s)| s.next <= t)
                .min_by_key(|(_, s)| (s.next, s.id))
                .map(|(i, s)| (i, s.next));
            match due {
                Some((i, at)) => self.chunk(i, at, out),
                None => return,
            }
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
        let cached = prefix
            .and_then(|p| self.prefixes.get(&p.key).map(|&c| c.min(p.tokens)))
            .unwrap_or(0);
        self.waiting.push_back(Seq {
            id: req.id,
            prompt: req.prompt_tokens,
            uncached: req.prompt_tokens.saturating_sub(cached),
            max_tokens: req.max_tokens,
            generated: 0,
            next: t,
            last: 0,
            joined: false,
            prefix,
            beyond: false,
        });
        self.admit(t, out);
    }
}
