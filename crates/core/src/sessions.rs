//! Figures of whole sessions (agent loops and multi-turn chats): a session's wall time
//! split into TTFT, decode, tool time and the rest, so the question "how much of my
//! agent's wall time is ITL" has a number, and re-priced at another TTFT or ITL
//! (`--what-if`) from the measured per-step sums. Pure arithmetic over step records.
//!
//! Per session: `wall` = last step's end − the first step's scheduled send (its send
//! in a closed loop); `ttft` = Σ steps' TTFT; `decode` = Σ (E2E − TTFT); `tool` = Σ
//! tool waits; `rest` = wall − ttft − decode − tool (client work, queueing before a
//! send). Only sessions whose every step succeeded are summarized.

use crate::dist::DistAcc;
use crate::stats::{self, Distribution};
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

mod tool_use;
pub use tool_use::{ToolUse, MIN_CALLING_SHARE};

/// The session figures in words, for the report's definitions.
pub const FORMULA: &str = "sessions (agent loops, multi-turn chats) whose every step \
succeeded: wall = last step's end - first step's scheduled send (its send in a closed loop); \
ttft = sum of the steps' TTFT; decode = sum of (E2E - TTFT), the time ITL adds up to; tool = \
sum of the tool times before each step; rest = wall - ttft - decode - tool (client work and \
queueing); shares are of the summed wall time; a what-if re-prices each session with \
ttft' (per step) and itl' (per gap between chunks) and keeps its tool time and rest";

/// Steps whose detail (for the slowest session's waterfall) a level keeps at most;
/// sessions past it are summed but not drawn.
const MAX_DETAILED_STEPS: usize = 200_000;

/// Context lengths (prompt tokens) at which the TTFT-by-context table is cut.
const CONTEXT_EDGES: [u64; 10] = [
    256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072,
];

/// One step as the waterfall draws it, times in ns since run start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Step {
    step: u32,
    sent: u64,
    first: u64,
    end: u64,
    tool: u64,
    input: u64,
    output: u64,
}

/// One session's running sums.
#[derive(Debug, Clone, Default, PartialEq)]
struct Partial {
    start: Option<u64>,
    end: u64,
    ttft: u64,
    decode: u64,
    tool: u64,
    /// Gaps between chunks, summed over the steps (what `itl'` multiplies).
    gaps: u64,
    steps: u32,
    failed: bool,
    output_tokens: u64,
    calls: u64,
    mocked: u64,
    tools: tool_use::SessionTools,
    cut: u64,
    detail: Option<Vec<Step>>,
}

/// How a what-if prices TTFT or ITL: a fixed time, or the measured one scaled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Price {
    /// A fixed time in ms: per step for TTFT, per gap between chunks for ITL.
    Ms(f64),
    /// The measured time times this factor (`x0.5`).
    Scale(f64),
}

/// A what-if: the sessions re-priced at another TTFT and/or ITL (`ttft=200ms,itl=x0.5`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// TTFT's price; `None` keeps the measured TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<Price>,
    /// ITL's price; `None` keeps the measured decode time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<Price>,
}

impl fmt::Display for WhatIf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = |name: &str, p: Option<Price>| {
            p.map(|p| match p {
                Price::Ms(ms) => format!("{name}={ms}ms"),
                Price::Scale(k) => format!("{name}=x{k}"),
            })
        };
        let parts: Vec<String> = [one("ttft", self.ttft), one("itl", self.itl)]
            .into_iter()
            .flatten()
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for WhatIf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: String| {
            format!("'{s}' is not a what-if ({why}); try itl=15ms, ttft=200ms,itl=x0.5")
        };
        let mut w = WhatIf {
            ttft: None,
            itl: None,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("'{part}' has no '='")))?;
            let price = match v.trim().strip_prefix('x') {
                Some(k) => match k.parse::<f64>() {
                    Ok(k) if k.is_finite() && k >= 0.0 => Price::Scale(k),
                    _ => return Err(bad(format!("'{v}' is not a factor like x0.5"))),
                },
                None => {
                    let d = crate::duration::parse_duration(v.trim())
                        .map_err(|e| bad(e.to_string()))?;
                    Price::Ms(d.as_secs_f64() * 1e3)
                }
            };
            match k.trim() {
                "ttft" => w.ttft = Some(price),
                "itl" => w.itl = Some(price),
                other => return Err(bad(format!("'{other}' is neither ttft nor itl"))),
            }
        }
        if w.ttft.is_none() && w.itl.is_none() {
            return Err(bad("it names nothing".into()));
        }
        Ok(w)
    }
}

/// Sums of whole sessions, fed each step record of a level.
#[derive(Debug, Clone, Default)]
pub struct SessionAcc {
    open: BTreeMap<u64, Partial>,
    detailed_steps: usize,
    /// TTFT by context length, first steps and later ones apart: `(edge index, later)`.
    by_context: BTreeMap<(usize, bool), DistAcc>,
    what_if: Vec<WhatIf>,
}

impl SessionAcc {
    /// Re-prices the sessions at each of these when summarized.
    pub fn set_what_if(&mut self, what_if: Vec<WhatIf>) {
        self.what_if = what_if;
    }

    /// Takes one record; records of no session are ignored, as are warm-up ones.
    pub fn push(&mut self, r: &RequestRecord) {
        let Some(id) = r.session else {
            return;
        };
        if r.warmup {
            return;
        }
        let keep_detail = self.detailed_steps < MAX_DETAILED_STEPS;
        let p = self.open.entry(id).or_insert_with(|| Partial {
            detail: keep_detail.then(Vec::new),
            ..Partial::default()
        });
        p.steps += 1;
        p.calls += u64::from(r.tool_calls.unwrap_or(0));
        p.mocked += u64::from(r.tool_call_mocked);
        p.tools.push(r);
        p.cut += u64::from(r.tool_calls_cut);
        p.tool += r.tool_wait_ns.unwrap_or(0);
        p.start = earliest(p.start, r.scheduled_ns.or(r.sent_ns));
        let timed = (r.sent_ns, r.first_chunk_ns(), r.end_ns);
        let (Outcome::Succeeded, (Some(sent), Some(first), Some(end))) = (r.outcome, timed) else {
            p.failed = true;
            return;
        };
        if first < sent || end < first {
            p.failed = true;
            return;
        }
        p.end = p.end.max(end);
        p.ttft += first - sent;
        p.decode += end - first;
        p.gaps += r.chunks.len().saturating_sub(1) as u64;
        let output = r.output_token_count().count;
        p.output_tokens = p.output_tokens.saturating_add(output);
        let input = r.input_tokens.unwrap_or(0);
        if let Some(d) = &mut p.detail {
            d.push(Step {
                step: r.turn.unwrap_or(0),
                sent,
                first,
                end,
                tool: r.tool_wait_ns.unwrap_or(0),
                input,
                output,
            });
            self.detailed_steps += 1;
        }
        if r.input_tokens.is_some() {
            let edge = CONTEXT_EDGES
                .iter()
                .position(|&e| input <= e)
                .unwrap_or(CONTEXT_EDGES.len());
            let later = r.turn.unwrap_or(0) > 0;
            self.by_context
                .entry((edge, later))
                .or_default()
                .push(ms(first - sent));
        }
    }

    /// Adds another part of the same level (fleet shards: their session ids differ).
    pub fn merge(&mut self, o: &SessionAcc) {
        for (id, p) in &o.open {
            match self.open.get_mut(id) {
                None => {
                    self.open.insert(*id, p.clone());
                }
                Some(mine) => {
                    mine.start = earliest(mine.start, p.start);
                    mine.end = mine.end.max(p.end);
                    mine.ttft += p.ttft;
                    mine.decode += p.decode;
                    mine.tool += p.tool;
                    mine.gaps += p.gaps;
                    mine.steps += p.steps;
                    mine.failed |= p.failed;
                    mine.output_tokens += p.output_tokens;
                    mine.calls += p.calls;
                    mine.mocked += p.mocked;
                    mine.tools.merge(&p.tools);
                    mine.cut += p.cut;
                    if let (Some(a), Some(b)) = (&mut mine.detail, &p.detail) {
                        a.extend_from_slice(b);
                    }
                }
            }
        }
        self.detailed_steps += o.detailed_steps;
        for (k, d) in &o.by_context {
            self.by_context.entry(*k).or_default().merge(d);
        }
    }

    /// The level's session figures; `None` when no record belonged to a session.
    pub fn finish(&self) -> Option<SessionSummary> {
        if self.open.is_empty() {
            return None;
        }
        let mut acc = Sums::default();
        let complete: Vec<(&u64, &Partial)> = self
            .open
            .iter()
            .filter(|(_, p)| !p.failed && p.start.is_some())
            .collect();
        for (_, p) in &complete {
            acc.push(p);
        }
        let slowest = complete
            .iter()
            .filter(|(_, p)| p.detail.is_some())
            .max_by_key(|(_, p)| wall_ns(p))
            .map(|(id, p)| waterfall(**id, p));
        let what_if = self
            .what_if
            .iter()
            .map(|w| {
                let mut walls = DistAcc::new();
                let mut share = Ratio::default();
                for (_, p) in &complete {
                    let (wall, decode) = reprice(p, w);
                    walls.push(wall);
                    share.add(decode, wall);
                }
                WhatIfResult {
                    what_if: *w,
                    label: w.to_string(),
                    wall: walls.summary(),
                    decode_share_pct: share.pct(),
                }
            })
            .collect();
        let by_context = self.context_rows();
        let total = |f: fn(&Partial) -> u64| self.open.values().map(f).sum::<u64>();
        let mut tool_use = ToolUse::default();
        self.open.values().for_each(|p| tool_use.add(&p.tools));
        Some(SessionSummary {
            sessions: self.open.len() as u64,
            complete: complete.len() as u64,
            tool_calls: total(|p| p.calls),
            mocked_tool_calls: total(|p| p.mocked),
            tool_use,
            cut_tool_calls: total(|p| p.cut),
            steps: acc.steps.summary(),
            output_tokens: acc.tokens.summary(),
            wall: acc.wall.summary(),
            ttft: acc.ttft.summary(),
            decode: acc.decode.summary(),
            tool: acc.tool.summary(),
            rest: acc.rest.summary(),
            split: acc.split(),
            decode_share_pct: acc.decode_share.summary(),
            by_context,
            slowest,
            what_if,
        })
    }

    fn context_rows(&self) -> Vec<ContextRow> {
        let mut rows: BTreeMap<usize, ContextRow> = BTreeMap::new();
        for ((edge, later), d) in &self.by_context {
            let row = rows.entry(*edge).or_insert_with(|| ContextRow {
                up_to_tokens: CONTEXT_EDGES.get(*edge).copied(),
                first_steps: None,
                later_steps: None,
            });
            let s = d.summary();
            if *later {
                row.later_steps = s;
            } else {
                row.first_steps = s;
            }
        }
        rows.into_values().collect()
    }
}

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn wall_ns(p: &Partial) -> u64 {
    p.end.saturating_sub(p.start.unwrap_or(p.end))
}

/// A session's wall time and decode time (ms) at the what-if's prices.
fn reprice(p: &Partial, w: &WhatIf) -> (f64, f64) {
    let wall = ms(wall_ns(p));
    let rest = wall - ms(p.ttft) - ms(p.decode) - ms(p.tool);
    let ttft = match w.ttft {
        None => ms(p.ttft),
        Some(Price::Ms(x)) => x * f64::from(p.steps),
        Some(Price::Scale(k)) => ms(p.ttft) * k,
    };
    let decode = match w.itl {
        None => ms(p.decode),
        Some(Price::Ms(x)) => x * p.gaps as f64,
        Some(Price::Scale(k)) => ms(p.decode) * k,
    };
    (ttft + decode + ms(p.tool) + rest, decode)
}

/// A share summed over sessions: Σ part / Σ whole.
#[derive(Default)]
struct Ratio(f64, f64);

impl Ratio {
    fn add(&mut self, part: f64, whole: f64) {
        self.0 += part;
        self.1 += whole;
    }
    fn pct(&self) -> Option<f64> {
        (self.1 > 0.0).then(|| self.0 / self.1 * 100.0)
    }
}

#[derive(Default)]
struct Sums {
    wall: DistAcc,
    ttft: DistAcc,
    decode: DistAcc,
    tool: DistAcc,
    rest: DistAcc,
    steps: DistAcc,
    tokens: DistAcc,
    decode_share: DistAcc,
    parts: [f64; 4],
    walls: f64,
}

impl Sums {
    fn push(&mut self, p: &Partial) {
        let wall = ms(wall_ns(p));
        let (t, d, k) = (ms(p.ttft), ms(p.decode), ms(p.tool));
        let rest = wall - t - d - k;
        self.wall.push(wall);
        self.ttft.push(t);
        self.decode.push(d);
        self.tool.push(k);
        self.rest.push(rest);
        self.steps.push(f64::from(p.steps));
        self.tokens.push(p.output_tokens as f64);
        if wall > 0.0 {
            self.decode_share.push(d / wall * 100.0);
        }
        for (acc, v) in self.parts.iter_mut().zip([t, d, k, rest]) {
            *acc += v;
        }
        self.walls += wall;
    }

    fn split(&self) -> Option<Split> {
        (self.walls > 0.0).then(|| {
            let pct = |v: f64| v / self.walls * 100.0;
            Split {
                ttft_pct: pct(self.parts[0]),
                decode_pct: pct(self.parts[1]),
                tool_pct: pct(self.parts[2]),
                rest_pct: pct(self.parts[3]),
            }
        })
    }
}

fn waterfall(id: u64, p: &Partial) -> Waterfall {
    let start = p.start.unwrap_or(0);
    let at = |t: u64| ms(t.saturating_sub(start));
    let mut steps: Vec<WaterfallStep> = p
        .detail
        .iter()
        .flatten()
        .map(|s| WaterfallStep {
            step: s.step,
            tool_ms: ms(s.tool),
            sent_ms: at(s.sent),
            ttft_ms: ms(s.first - s.sent),
            decode_ms: ms(s.end - s.first),
            input_tokens: s.input,
            output_tokens: s.output,
        })
        .collect();
    steps.sort_by_key(|s| s.step);
    Waterfall {
        session: id,
        wall_ms: ms(wall_ns(p)),
        steps,
    }
}

/// Session figures of one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSummary {
    /// Sessions that sent at least one step (outside the warm-up).
    pub sessions: u64,
    /// Of those, sessions whose every step succeeded: the ones summarized below.
    pub complete: u64,
    /// Tool calls the replies made, over every session (complete or not).
    pub tool_calls: u64,
    /// Steps where the client injected a call because the reply made none
    /// (`--agent-force mock`), over every session.
    pub mocked_tool_calls: u64,
    /// Whether the agent sessions called tools at all, and whether the server honoured
    /// `tool_choice` required; absent for multi-turn chats and replays.
    #[serde(default, skip_serializing_if = "ToolUse::is_empty")]
    pub tool_use: ToolUse,
    /// Steps whose reply's tool calls passed the client's ceiling on them (16 MiB of
    /// tool-call events): not sent back, the session ended there (record
    /// `tool_calls_cut`), over every session.
    #[serde(default)]
    pub cut_tool_calls: u64,
    /// Steps per complete session.
    pub steps: Option<Distribution>,
    /// Output tokens per complete session.
    pub output_tokens: Option<Distribution>,
    /// Wall time per complete session, ms: the last step's end minus the first step's
    /// scheduled send.
    #[serde(with = "stats::as_ms")]
    pub wall: Option<Distribution>,
    /// The steps' TTFT summed per complete session, ms.
    #[serde(with = "stats::as_ms")]
    pub ttft: Option<Distribution>,
    /// The steps' E2E − TTFT summed per complete session, ms: the time ITL adds up to.
    #[serde(with = "stats::as_ms")]
    pub decode: Option<Distribution>,
    /// The tool time summed per complete session, ms.
    #[serde(with = "stats::as_ms")]
    pub tool: Option<Distribution>,
    /// Wall − TTFT − decode − tool per complete session, ms (client work, queueing before
    /// sends).
    #[serde(with = "stats::as_ms")]
    pub rest: Option<Distribution>,
    /// The summed wall time split into its parts, in %.
    pub split: Option<Split>,
    /// Per session, decode (the ITL's sum) as a share of its wall time, in %.
    pub decode_share_pct: Option<Distribution>,
    /// TTFT by context length: first steps against later ones (whose context the
    /// prefix cache has mostly seen).
    pub by_context: Vec<ContextRow>,
    /// The complete session with the longest wall time, step by step.
    pub slowest: Option<Waterfall>,
    /// The sessions re-priced at each `--what-if`, in the order given; empty without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what_if: Vec<WhatIfResult>,
}

/// Shares of the summed wall time, in %; they add up to 100.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    /// TTFT's share, %.
    pub ttft_pct: f64,
    /// Decode's share (the ITL's sum), %.
    pub decode_pct: f64,
    /// Tool time's share, %.
    pub tool_pct: f64,
    /// The rest's share, %.
    pub rest_pct: f64,
}

/// TTFT (ms) of steps whose prompt held up to `up_to_tokens` tokens (`None`: more
/// than the largest edge).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRow {
    /// The row's upper edge in prompt tokens, inclusive; `None`: past the largest edge.
    pub up_to_tokens: Option<u64>,
    /// TTFT in ms of sessions' first steps in this row; `None` when there were none.
    pub first_steps: Option<Distribution>,
    /// TTFT in ms of later steps in this row; `None` when there were none.
    pub later_steps: Option<Distribution>,
}

/// One session step by step, times in ms from the session's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waterfall {
    /// The session's id (the records' `session`).
    pub session: u64,
    /// The session's wall time, ms.
    pub wall_ms: f64,
    /// Its steps in step order.
    pub steps: Vec<WaterfallStep>,
}

/// One step of a [`Waterfall`], times in ms from the session's start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaterfallStep {
    /// The step's index in the session (its turn; 0 = the first).
    pub step: u32,
    /// The tool time before this step.
    pub tool_ms: f64,
    /// When the step was sent.
    pub sent_ms: f64,
    /// The step's TTFT.
    pub ttft_ms: f64,
    /// First chunk to the step's end.
    pub decode_ms: f64,
    /// Prompt tokens the step sent (0 when unknown).
    pub input_tokens: u64,
    /// Output tokens of the step's reply.
    pub output_tokens: u64,
}

/// The sessions re-priced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatIfResult {
    /// The prices applied.
    pub what_if: WhatIf,
    /// The what-if as written back (`ttft=200ms,itl=x0.5`).
    pub label: String,
    /// Re-priced wall time per complete session, ms; `None` without a complete session.
    #[serde(with = "stats::as_ms")]
    pub wall: Option<Distribution>,
    /// Re-priced decode as a share of the summed wall time, %; `None` when that sum is 0.
    pub decode_share_pct: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Chunk;

    const MS: u64 = 1_000_000;

    /// A succeeded step: sent at `sent` ms, chunks at the given ms, ending at the last.
    fn step(
        session: u64,
        turn: u32,
        sent: u64,
        chunks: &[u64],
        tool_ms: Option<u64>,
    ) -> RequestRecord {
        let mut r = RequestRecord::new(turn as u64, Outcome::Succeeded);
        r.session = Some(session);
        r.turn = Some(turn);
        r.sent_ns = Some(sent * MS);
        r.scheduled_ns = Some(sent * MS);
        r.chunks = chunks.iter().map(|&c| Chunk(c * MS, None)).collect();
        r.end_ns = chunks.last().map(|&c| c * MS);
        r.tool_wait_ns = tool_ms.map(|t| t * MS);
        r.input_tokens = Some(100 * (u64::from(turn) + 1));
        r.tool_calls = Some(1);
        r
    }

    #[test]
    fn wall_is_ttft_plus_decode_plus_tool_plus_rest_exactly() {
        let mut acc = SessionAcc::default();
        // Step 0: sent 0, first chunk 50, end 80 (ttft 50, decode 30, 3 gaps).
        acc.push(&step(7, 0, 0, &[50, 60, 70, 80], None));
        // Tool 100 ms; sent at 190 (10 ms of client rest), ttft 20, decode 40.
        acc.push(&step(7, 1, 190, &[210, 230, 250], Some(100)));
        let s = acc.finish().unwrap();
        assert_eq!((s.sessions, s.complete, s.tool_calls), (1, 1, 2));
        let v = |d: Option<Distribution>| d.unwrap().p50;
        assert_eq!(v(s.wall), 250.0);
        assert_eq!(v(s.ttft), 70.0);
        assert_eq!(v(s.decode), 70.0);
        assert_eq!(v(s.tool), 100.0);
        assert_eq!(v(s.rest), 10.0);
        assert_eq!(v(s.ttft) + v(s.decode) + v(s.tool) + v(s.rest), v(s.wall));
        let split = s.split.unwrap();
        assert!((split.decode_pct - 28.0).abs() < 1e-9);
        assert!(
            (split.ttft_pct + split.decode_pct + split.tool_pct + split.rest_pct - 100.0).abs()
                < 1e-9
        );
        let w = s.slowest.unwrap();
        assert_eq!(w.steps.len(), 2);
        assert_eq!((w.steps[1].sent_ms, w.steps[1].tool_ms), (190.0, 100.0));
    }

    #[test]
    fn steps_whose_tool_calls_were_cut_are_counted() {
        let mut acc = SessionAcc::default();
        acc.push(&step(1, 0, 0, &[10, 20], None));
        let mut cut = step(2, 0, 0, &[10, 20], None);
        cut.tool_calls_cut = true;
        acc.push(&cut);
        let s = acc.finish().unwrap();
        assert_eq!((s.sessions, s.cut_tool_calls), (2, 1));
        assert_eq!(s.mocked_tool_calls, 0);
    }

    #[test]
    fn a_session_with_a_failed_step_is_counted_not_summarized() {
        let mut acc = SessionAcc::default();
        acc.push(&step(1, 0, 0, &[10, 20], None));
        let mut bad = step(1, 1, 30, &[], Some(5));
        bad.outcome = Outcome::Http5xx;
        acc.push(&bad);
        acc.push(&step(2, 0, 0, &[10, 20], None));
        let s = acc.finish().unwrap();
        assert_eq!((s.sessions, s.complete), (2, 1));
        assert_eq!(s.wall.unwrap().count, 1);
    }

    #[test]
    fn records_outside_sessions_and_warmup_leave_no_sessions() {
        let mut acc = SessionAcc::default();
        let mut r = step(1, 0, 0, &[10], None);
        r.session = None;
        acc.push(&r);
        let mut w = step(2, 0, 0, &[10], None);
        w.warmup = true;
        acc.push(&w);
        assert!(acc.finish().is_none());
    }

    #[test]
    fn what_if_reprices_ttft_per_step_and_itl_per_gap() {
        let mut acc = SessionAcc::default();
        acc.set_what_if(vec![
            "itl=1ms".parse().unwrap(),
            "ttft=x0.5,itl=x2".parse().unwrap(),
        ]);
        acc.push(&step(7, 0, 0, &[50, 60, 70, 80], None));
        acc.push(&step(7, 1, 190, &[210, 230, 250], Some(100)));
        let s = acc.finish().unwrap();
        // 5 gaps at 1 ms instead of 70 ms of decode: 250 - 70 + 5.
        assert_eq!(s.what_if[0].wall.unwrap().p50, 185.0);
        assert_eq!(s.what_if[0].label, "itl=1ms");
        // TTFT 70 → 35, decode 70 → 140: 250 - 35 + 70.
        assert_eq!(s.what_if[1].wall.unwrap().p50, 285.0);
        let share = s.what_if[1].decode_share_pct.unwrap();
        assert!((share - 140.0 / 285.0 * 100.0).abs() < 1e-9);
    }

    #[test]
    fn ttft_by_context_keeps_first_and_later_steps_apart() {
        let mut acc = SessionAcc::default();
        acc.push(&step(1, 0, 0, &[40, 50], None)); // 100 tokens, first, ttft 40
        let mut later = step(1, 1, 60, &[70, 80], Some(0)); // ttft 10
        later.input_tokens = Some(200);
        acc.push(&later);
        let s = acc.finish().unwrap();
        assert_eq!(s.by_context.len(), 1, "both under 256 tokens");
        let row = &s.by_context[0];
        assert_eq!(row.up_to_tokens, Some(256));
        assert_eq!(row.first_steps.unwrap().p50, 40.0);
        assert_eq!(row.later_steps.unwrap().p50, 10.0);
    }

    #[test]
    fn merged_parts_equal_one_accumulator() {
        let recs = [
            step(1, 0, 0, &[10, 20], None),
            step(1, 1, 40, &[50, 60], Some(15)),
            step(2, 0, 5, &[30, 45], None),
        ];
        let mut one = SessionAcc::default();
        recs.iter().for_each(|r| one.push(r));
        let (mut a, mut b) = (SessionAcc::default(), SessionAcc::default());
        a.push(&recs[0]);
        b.push(&recs[1]);
        b.push(&recs[2]);
        a.merge(&b);
        assert_eq!(a.finish(), one.finish());
    }

    #[test]
    fn what_if_specs_parse_and_refuse() {
        let w: WhatIf = "ttft=200ms, itl=x0.5".parse().unwrap();
        assert_eq!(w.ttft, Some(Price::Ms(200.0)));
        assert_eq!(w.itl, Some(Price::Scale(0.5)));
        assert_eq!(w.to_string(), "ttft=200ms,itl=x0.5");
        assert!("".parse::<WhatIf>().is_err());
        assert!("tpot=1ms".parse::<WhatIf>().is_err());
        assert!("itl=fast".parse::<WhatIf>().is_err());
        assert!("itl=x-1".parse::<WhatIf>().is_err());
    }
}
