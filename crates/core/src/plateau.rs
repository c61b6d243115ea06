//! Steady state: a closed-loop level ramps up, holds its concurrency, then drains, and
//! its whole figures mix the three. The plateau is the span in which requests in flight
//! stay at or above a share of the concurrency asked; its figures are those of the
//! requests wholly inside it, beside the level's own.

use crate::per_request::{e2e_ms, itl_gaps, ms, tpot_and_speed, ttft_ms, NS_PER_S};
use crate::{Distribution, Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

/// The share of the concurrency asked that requests in flight must reach (`--plateau`).
pub const DEFAULT_SHARE: f64 = 0.9;

/// The method in words, for the report's definitions and the docs.
pub const FORMULA: &str = "closed-loop levels only: requests in flight over time from \
every sent record's send and end times (warm-up included; a request ends at its end \
time, else its last chunk, else its send; at one instant ends count before sends); the \
plateau runs from the first instant in flight reaches ceil(share x concurrency) to the \
last instant it drops below; its TTFT, ITL (their gaps), TPOT and E2E are those of the \
succeeded non-warm-up requests sent and ended inside it, its throughput the succeeded \
requests that ended inside it (and their output tokens) over its length";

/// A request's times and figures, as the plateau needs them.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    sent: u64,
    end: u64,
    /// Counted in the figures: not warm-up.
    measured: bool,
    ok: bool,
    tokens: u64,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    tpot_ms: Option<f64>,
    /// Its ITL gaps (ns): `gaps[from..to]` of the accumulator.
    gaps: (usize, usize),
}

/// An entry's size in 8-byte values, for the cap.
const ENTRY_VALUES: usize = std::mem::size_of::<Entry>().div_ceil(8);

/// A level's requests' times, kept until the level ends (the window is known only
/// then): one entry a sent request and its gaps, at most `cap` 8-byte values in all (the
/// level's `--exact-samples`: about as many bytes as its exact samples), past which the plateau is not computed and says so.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlateauAcc {
    cap: u64,
    entries: Vec<Entry>,
    gaps: Vec<u64>,
    /// More than `cap` values arrived: nothing is kept.
    over: bool,
}

impl PlateauAcc {
    /// An empty accumulator holding at most `cap` 8-byte values (entries and gaps).
    pub fn new(cap: u64) -> PlateauAcc {
        PlateauAcc {
            cap,
            ..PlateauAcc::default()
        }
    }

    /// Values held, an entry counting as the 8-byte values its size makes it.
    fn held(&self) -> u64 {
        (self.entries.len() * ENTRY_VALUES + self.gaps.len()) as u64
    }

    /// Heap bytes held.
    pub fn approx_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>() + self.gaps.capacity() * 8
    }

    fn give_up(&mut self) {
        self.over = true;
        self.entries = Vec::new();
        self.gaps = Vec::new();
    }

    /// Takes one record (unsent ones have no place in time and are left out).
    pub fn push(&mut self, r: &RequestRecord) {
        let Some(sent) = r.sent_ns else { return };
        if self.over {
            return;
        }
        let end = r.end_ns.or(r.last_chunk_ns()).unwrap_or(sent).max(sent);
        let ok = r.outcome == Outcome::Succeeded;
        let mut bad = 0;
        let from = self.gaps.len();
        if ok && !r.warmup {
            self.gaps.extend(itl_gaps(r, &mut bad).map(|(g, _)| g));
        }
        self.entries.push(Entry {
            sent,
            end,
            measured: !r.warmup,
            ok,
            tokens: r.output_token_count().count,
            ttft_ms: ok.then(|| ttft_ms(r, &mut bad)).flatten(),
            e2e_ms: ok.then(|| e2e_ms(r, &mut bad)).flatten(),
            tpot_ms: ok
                .then(|| tpot_and_speed(r, &mut bad))
                .flatten()
                .map(|t| t.0),
            gaps: (from, self.gaps.len()),
        });
        if self.held() > self.cap {
            self.give_up();
        }
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &PlateauAcc) {
        if self.over || o.over {
            self.give_up();
            return;
        }
        let shift = self.gaps.len();
        self.gaps.extend_from_slice(&o.gaps);
        self.entries.extend(o.entries.iter().map(|e| Entry {
            gaps: (e.gaps.0 + shift, e.gaps.1 + shift),
            ..e.clone()
        }));
        if self.held() > self.cap {
            self.give_up();
        }
    }

    /// The plateau of a closed-loop level at `concurrency` where in flight must reach
    /// `share` of it; `None` when `share` is 0 (off) or not above 0.
    pub fn finish(&self, concurrency: u32, share: f64) -> Option<Plateau> {
        if share.is_nan() || share <= 0.0 {
            return None;
        }
        // The guard keeps 0.9 × 10 at 9, where floating point makes it 9.000000000000002.
        let min = ((share.min(1.0) * f64::from(concurrency)) - 1e-9)
            .ceil()
            .max(1.0) as u64;
        let mut p = Plateau {
            share,
            min_in_flight: min,
            window: None,
            absent: None,
        };
        if self.over {
            p.absent = Some(format!(
                "not computed: the level held more than {} request times and gaps, in 8-byte values (--exact-samples)",
                self.cap
            ));
            return Some(p);
        }
        match self.window(min) {
            Err(max) => {
                p.absent = Some(format!(
                    "none: in flight never reached {min} of {concurrency} (at most {max})"
                ));
            }
            Ok((start, end)) => match self.figures(start, end) {
                Some(w) => p.window = Some(w),
                None => {
                    p.absent = Some(format!(
                        "none: too short ({} ms at {min} or more in flight, no request sent and ended inside it)",
                        ms(end - start)
                    ));
                }
            },
        }
        Some(p)
    }

    /// From the first instant in flight reaches `min` to the last it drops below; the
    /// most in flight when it never reaches `min`.
    fn window(&self, min: u64) -> Result<(u64, u64), u64> {
        let mut events: Vec<(u64, i8)> = self
            .entries
            .iter()
            .flat_map(|e| [(e.sent, 1), (e.end, -1)])
            .collect();
        // Ends before sends at one instant: a closed loop's next send follows an end.
        events.sort_unstable();
        let (mut n, mut most) = (0u64, 0u64);
        let (mut start, mut end) = (None, None);
        let mut i = 0;
        while i < events.len() {
            let t = events[i].0;
            let before = n;
            while i < events.len() && events[i].0 == t {
                n = if events[i].1 > 0 {
                    n + 1
                } else {
                    n.saturating_sub(1)
                };
                i += 1;
            }
            most = most.max(n);
            if n >= min && start.is_none() {
                start = Some(t);
            }
            if before >= min && n < min && start.is_some() {
                end = Some(t);
            }
        }
        match (start, end) {
            (Some(s), Some(e)) => Ok((s, e)),
            _ => Err(most),
        }
    }

    /// The window's figures; `None` when no measured request was sent and ended in it.
    fn figures(&self, start: u64, end: u64) -> Option<PlateauWindow> {
        let inside = |e: &&Entry| e.measured && e.sent >= start && e.end <= end;
        let members: Vec<&Entry> = self.entries.iter().filter(inside).collect();
        if members.is_empty() || end == start {
            return None;
        }
        let ok: Vec<&Entry> = members.iter().copied().filter(|e| e.ok).collect();
        let dist = |f: fn(&Entry) -> Option<f64>| {
            Distribution::from_samples(&mut ok.iter().filter_map(|e| f(e)).collect::<Vec<_>>())
        };
        let mut gaps: Vec<f64> = ok
            .iter()
            .flat_map(|e| self.gaps[e.gaps.0..e.gaps.1].iter().map(|&g| ms(g)))
            .collect();
        let ended = self
            .entries
            .iter()
            .filter(|e| e.measured && e.ok && e.end >= start && e.end <= end);
        let (done, tokens) = ended.fold((0u64, 0u64), |(n, t), e| {
            (n + 1, t.saturating_add(e.tokens))
        });
        let secs = (end - start) as f64 / NS_PER_S;
        Some(PlateauWindow {
            start_s: start as f64 / NS_PER_S,
            end_s: end as f64 / NS_PER_S,
            requests: members.len() as u64,
            succeeded: ok.len() as u64,
            ttft: dist(|e| e.ttft_ms),
            itl: Distribution::from_samples(&mut gaps),
            tpot: dist(|e| e.tpot_ms),
            e2e: dist(|e| e.e2e_ms),
            requests_per_s: done as f64 / secs,
            output_tokens_per_s: tokens as f64 / secs,
        })
    }
}

/// A closed-loop level's steady state ([`FORMULA`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plateau {
    /// The share of the concurrency asked (`--plateau`).
    pub share: f64,
    /// In flight at least this many: ⌈share × concurrency⌉.
    pub min_in_flight: u64,
    /// The window and its figures; `None` when the level has no plateau.
    pub window: Option<PlateauWindow>,
    /// Why there is no window, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
}

/// The plateau's span and the figures of the requests inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlateauWindow {
    /// Its start on the run clock, seconds.
    pub start_s: f64,
    /// Its end on the run clock, seconds.
    pub end_s: f64,
    /// Non-warm-up requests sent and ended inside it.
    pub requests: u64,
    /// Those that succeeded (the figures are theirs).
    pub succeeded: u64,
    /// Their TTFT, ms.
    #[serde(with = "crate::stats::as_ms")]
    pub ttft: Option<Distribution>,
    /// Their ITL gaps, ms.
    #[serde(with = "crate::stats::as_ms")]
    pub itl: Option<Distribution>,
    /// Their TPOT, ms.
    #[serde(with = "crate::stats::as_ms")]
    pub tpot: Option<Distribution>,
    /// Their E2E, ms.
    #[serde(with = "crate::stats::as_ms")]
    pub e2e: Option<Distribution>,
    /// Succeeded requests that ended inside it, per second of it.
    pub requests_per_s: f64,
    /// Their output tokens per second of it.
    pub output_tokens_per_s: f64,
}

impl PlateauWindow {
    /// Its length, seconds.
    pub fn duration_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, TokenCount, TokenSource};

    const MS: u64 = 1_000_000;

    /// A succeeded request sent at `sent` ms with chunks at `chunks` ms, ending at the
    /// last one, one token a chunk.
    fn rec(sent: u64, chunks: &[u64]) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(sent * MS);
        r.chunks = chunks.iter().map(|&t| Chunk(t * MS, Some(1))).collect();
        r.end_ns = chunks.last().map(|&t| t * MS);
        r.output_tokens = Some(TokenCount {
            count: chunks.len() as u64,
            source: TokenSource::Usage,
        });
        r
    }

    /// Two clients, closed loop: client A from 0 to 1000 ms, client B from 200 ms to
    /// 800 ms, then A alone until 1300 ms. In flight 2 from 200 to 800 ms.
    fn level() -> Vec<RequestRecord> {
        vec![
            // A: ramp (alone), then three inside the plateau, then the drain.
            rec(0, &[100, 150]),
            rec(150, &[300, 350]),
            rec(350, &[400, 420, 500]),
            rec(500, &[600, 700]),
            rec(700, &[900, 1000]),
            rec(1000, &[1200, 1300]),
            // B: two requests, 200-500 and 500-800.
            rec(200, &[260, 300, 500]),
            rec(500, &[650, 800]),
        ]
    }

    fn acc(records: &[RequestRecord]) -> PlateauAcc {
        let mut a = PlateauAcc::new(1_000);
        records.iter().for_each(|r| a.push(r));
        a
    }

    #[test]
    fn the_window_is_where_in_flight_holds_the_share_and_its_figures_are_its_requests() {
        let p = acc(&level()).finish(2, 0.9).unwrap();
        assert_eq!(p.min_in_flight, 2);
        assert_eq!(p.absent, None);
        let w = p.window.unwrap();
        // B's first send at 200 ms makes 2; B's last end at 800 ms makes 1 (A's end and
        // next send at 500 and 700 ms leave it at 2: ends before sends).
        assert_eq!((w.start_s, w.end_s), (0.2, 0.8));
        // Inside: A's 350-500 and 500-700, B's 200-500 and 500-800.
        assert_eq!((w.requests, w.succeeded), (4, 4));
        let ttft = w.ttft.unwrap();
        // TTFTs 50, 100, 60, 150 ms.
        assert_eq!(
            (ttft.count, ttft.min, ttft.max, ttft.mean),
            (4, 50.0, 150.0, 90.0)
        );
        // Gaps 20, 80; 100; 40, 200; 150 ms.
        let itl = w.itl.unwrap();
        assert_eq!(
            (itl.count, itl.min, itl.max, itl.p50),
            (6, 20.0, 200.0, 90.0)
        );
        // TPOT (last − first) ÷ (tokens − 1): 50, 100, 120, 150.
        let tpot = w.tpot.unwrap();
        assert_eq!((tpot.count, tpot.mean), (4, 105.0));
        let e2e = w.e2e.unwrap();
        assert_eq!((e2e.min, e2e.max), (150.0, 300.0));
        // Ended inside [200, 800] ms: A's at 350, 500, 700 and B's at 500, 800: 5 in
        // 0.6 s, their 2 + 3 + 2 + 3 + 2 tokens.
        assert!((w.requests_per_s - 5.0 / 0.6).abs() < 1e-9);
        assert!((w.output_tokens_per_s - 12.0 / 0.6).abs() < 1e-9);
        // Merged halves give the same plateau.
        let all = level();
        let (a, b) = all.split_at(3);
        let mut m = acc(a);
        m.merge(&acc(b));
        assert_eq!(m.finish(2, 0.9), acc(&level()).finish(2, 0.9));
    }

    #[test]
    fn a_level_without_a_plateau_says_why() {
        // Asked for 4: in flight never passed 2.
        let p = acc(&level()).finish(4, 0.9).unwrap();
        assert_eq!(p.min_in_flight, 4);
        assert_eq!(p.window, None);
        assert_eq!(
            p.absent.as_deref(),
            Some("none: in flight never reached 4 of 4 (at most 2)")
        );
        // Two that overlap but neither lies inside the overlap.
        let short = acc(&[rec(0, &[100]), rec(50, &[150])])
            .finish(2, 1.0)
            .unwrap();
        assert_eq!(
            short.absent.as_deref(),
            Some("none: too short (50 ms at 2 or more in flight, no request sent and ended inside it)")
        );
        // Off, and a threshold never above the concurrency.
        assert_eq!(acc(&level()).finish(2, 0.0), None);
        assert_eq!(acc(&level()).finish(10, 0.9).unwrap().min_in_flight, 9);
        assert_eq!(acc(&level()).finish(2, 0.2).unwrap().min_in_flight, 1);
    }

    #[test]
    fn past_its_cap_the_plateau_is_not_computed_and_says_so() {
        let mut a = PlateauAcc::new(8 * ENTRY_VALUES as u64);
        level().iter().for_each(|r| a.push(r));
        let p = a.finish(2, 0.9).unwrap();
        assert_eq!(p.window, None);
        let why = p.absent.unwrap();
        assert!(
            why.contains(&format!("more than {} request", 8 * ENTRY_VALUES)),
            "{why}"
        );
        assert!(a.entries.is_empty() && a.gaps.is_empty());
        // What the docs say an entry counts as, on a 64-bit target.
        assert_eq!(ENTRY_VALUES, 12);
    }

    #[test]
    fn warm_up_counts_in_flight_but_not_in_the_figures() {
        let mut recs = level();
        recs[2].warmup = true;
        let w = acc(&recs).finish(2, 0.9).unwrap().window.unwrap();
        assert_eq!((w.start_s, w.end_s), (0.2, 0.8));
        assert_eq!(w.requests, 3);
    }
}
