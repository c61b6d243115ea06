//! The knee of a sweep: the load past which ITL p99 or TTFT p90 leaves its low-load
//! value behind (queueing starts, a batch fills). A reader of a sweep wants that load
//! named, not read off a chart; `compare` says where it moved.

use serde::{Deserialize, Serialize};

/// The factor over the lowest load's value past which a level is past the knee.
pub const FACTOR: f64 = 2.0;

/// How [`Knee::absent`] opens for a curve that never passes [`FACTOR`].
const FLAT: &str = "none: flat";

/// The method in words, for the docs and the report's definitions.
pub const FORMULA: &str = "levels in order of load (concurrency, else rate); the knee \
is the last level before the first whose figure is more than 2x the figure at the \
lowest load; none when no level passes 2x (flat) or fewer than 3 levels have the figure";

/// What the knee reads of a level: its load and its two figures, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// Closed-loop concurrency.
    pub concurrency: Option<u32>,
    /// Open-loop rate, requests/s.
    pub rate: Option<f64>,
    /// ITL p99, ms.
    pub itl_p99: Option<f64>,
    /// TTFT p90, ms.
    pub ttft_p90: Option<f64>,
}

/// How to read a figure from a level, ms.
type Read = fn(&Level) -> Option<f64>;

/// The figures whose knee a sweep reports: name, and how to read it from a level.
const FIGURES: [(&str, Read); 2] = [("ITL p99", |l| l.itl_p99), ("TTFT p90", |l| l.ttft_p90)];

/// Where one figure bends against load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knee {
    /// The figure: `ITL p99` or `TTFT p90`.
    pub figure: String,
    /// The load axis: `concurrency` or `rate`.
    pub axis: String,
    /// Its value at the lowest load, ms.
    pub base_ms: Option<f64>,
    /// The knee: the last level within [`FACTOR`] × the base (its load and figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Point>,
    /// The first level past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub past: Option<Point>,
    /// Why there is no knee, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
}

/// A level on the curve: its load and the figure there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Concurrency, or rate in requests/s.
    pub load: f64,
    /// The figure, ms.
    pub ms: f64,
}

/// The load as the console writes it: `c=16`, `rate=5/s`.
pub fn load_name(axis: &str, load: f64) -> String {
    if axis == "rate" {
        format!("rate={load}/s")
    } else {
        format!("c={load}")
    }
}

/// Each figure's knee over the sweep's levels; empty for a single level, or levels
/// that are neither all closed-loop nor all open-loop.
pub fn knees(levels: &[Level]) -> Vec<Knee> {
    let Some((axis, loads)) = axis_loads(levels) else {
        return Vec::new();
    };
    if levels.len() < 2 {
        return Vec::new();
    }
    FIGURES
        .iter()
        .map(|(name, read)| {
            let mut curve: Vec<(f64, f64)> = levels
                .iter()
                .zip(&loads)
                .filter_map(|(l, x)| Some((*x, read(l)?)))
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect();
            curve.sort_by(|a, b| a.0.total_cmp(&b.0));
            knee(name, axis, &curve)
        })
        .collect()
}

/// The knee of one figure over `curve`, (load, ms) in order of load.
pub fn knee(figure: &str, axis: &str, curve: &[(f64, f64)]) -> Knee {
    let mut k = Knee {
        figure: figure.to_string(),
        axis: axis.to_string(),
        base_ms: curve.first().map(|p| p.1),
        at: None,
        past: None,
        absent: None,
    };
    if curve.len() < 3 {
        k.absent = Some(format!(
            "none: {} levels have {figure}, a knee needs 3",
            curve.len()
        ));
        return k;
    }
    let base = curve[0].1;
    match curve.iter().position(|p| p.1 > FACTOR * base) {
        Some(i) if i > 0 => {
            let point = |(load, ms): (f64, f64)| Point { load, ms };
            k.at = Some(point(curve[i - 1]));
            k.past = Some(point(curve[i]));
        }
        _ => {
            let most = curve.iter().map(|p| p.1).fold(f64::MIN, f64::max);
            let ratio = if base > 0.0 { most / base } else { f64::NAN };
            k.absent = Some(if base > 0.0 {
                format!("{FLAT}, never more than {FACTOR}x its value at the lowest load (at most {ratio:.2}x)")
            } else {
                format!("none: its value at the lowest load is {base} ms")
            });
        }
    }
    k
}

impl Knee {
    /// One line: `ITL p99 bends at c=16: 12.1 ms → 31.0 ms at c=32`, or why not.
    pub fn line(&self, fmt_ms: impl Fn(f64) -> String) -> String {
        match (&self.at, &self.past) {
            (Some(a), Some(p)) => format!(
                "{} bends at {}: {} → {} at {}",
                self.figure,
                load_name(&self.axis, a.load),
                fmt_ms(a.ms),
                fmt_ms(p.ms),
                load_name(&self.axis, p.load)
            ),
            _ => format!(
                "{}: {}",
                self.figure,
                self.absent.as_deref().unwrap_or("none")
            ),
        }
    }
}

/// How a figure's knee moved from run A to run B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shift {
    /// B bends at a lower load than A: worse.
    Earlier,
    /// B bends at a higher load than A: better.
    Later,
    /// Both bend at the same load.
    Same,
    /// A bends and B stays flat past A's bend: better.
    Gone,
    /// B bends and A stays flat past B's bend: worse.
    New,
    /// Neither sweep bends.
    Neither,
    /// The sweeps cannot say (another load axis, too few levels, one stops short).
    NotComparable,
}

impl Shift {
    /// The verdict's words: `earlier, WORSE`.
    pub fn words(self) -> &'static str {
        match self {
            Shift::Earlier => "earlier, WORSE",
            Shift::Later => "later, better",
            Shift::Same => "unchanged",
            Shift::Gone => "gone, better",
            Shift::New => "new, WORSE",
            Shift::Neither => "no knee in either",
            Shift::NotComparable => "not comparable",
        }
    }
}

/// One figure's knee in A and in B, and how it moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KneeMove {
    /// The figure: `ITL p99` or `TTFT p90`; empty when the sweeps are not comparable
    /// at all (another load axis).
    pub figure: String,
    /// A's knee, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<Point>,
    /// B's knee, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<Point>,
    /// How it moved.
    pub shift: Shift,
    /// The whole line: `ITL p99 knee moved from c=16 to c=8: earlier, WORSE`.
    pub line: String,
}

/// A sweep's load axis (`concurrency` when every level has one, else `rate` when every
/// level has one) and each level's load on it; `None` for levels of mixed kinds.
fn axis_loads(levels: &[Level]) -> Option<(&'static str, Vec<f64>)> {
    if let Some(c) = levels
        .iter()
        .map(|l| l.concurrency.map(f64::from))
        .collect()
    {
        Some(("concurrency", c))
    } else {
        let rates: Option<Vec<f64>> = levels.iter().map(|l| l.rate).collect();
        rates.map(|r| ("rate", r))
    }
}

/// A sweep's load axis and its highest load.
fn axis_and_top(levels: &[Level]) -> Option<(&'static str, f64)> {
    axis_loads(levels).map(|(axis, loads)| (axis, loads.into_iter().fold(f64::MIN, f64::max)))
}

/// The knees of two sweeps side by side, one move per figure; empty when neither run
/// is a sweep (a single level, or levels of mixed kinds). A sweep by concurrency
/// against one by rate is one move, not comparable.
pub fn compare(a: &[Level], b: &[Level]) -> Vec<KneeMove> {
    let (ka, kb) = (knees(a), knees(b));
    if ka.is_empty() && kb.is_empty() {
        return Vec::new();
    }
    let (sa, sb) = (axis_and_top(a), axis_and_top(b));
    let (Some((axis_a, top_a)), Some((axis_b, top_b))) = (sa, sb) else {
        return Vec::new();
    };
    if ka.is_empty() || kb.is_empty() || axis_a != axis_b {
        let what = |k: &[Knee], axis| {
            if k.is_empty() {
                "is no sweep (one level)".to_string()
            } else {
                format!("is a sweep by {axis}")
            }
        };
        return vec![KneeMove {
            figure: String::new(),
            a: None,
            b: None,
            shift: Shift::NotComparable,
            line: format!(
                "knees not comparable: A {} and B {}",
                what(&ka, axis_a),
                what(&kb, axis_b)
            ),
        }];
    }
    ka.iter()
        .zip(&kb)
        .map(|(x, y)| moved(x, y, top_a, top_b))
        .collect()
}

/// How one figure's knee moved from `x` (A's) to `y` (B's), the sweeps' highest loads
/// `top_a` and `top_b`.
fn moved(x: &Knee, y: &Knee, top_a: f64, top_b: f64) -> KneeMove {
    let name = |l: f64| load_name(&x.axis, l);
    let f = &x.figure;
    let flat =
        |k: &Knee| k.at.is_none() && k.absent.as_deref().is_some_and(|w| w.starts_with(FLAT));
    let (shift, line) = match (&x.at, &y.at, &x.past, &y.past) {
        (Some(p), Some(q), ..) => {
            let shift = match p.load.total_cmp(&q.load) {
                std::cmp::Ordering::Greater => Shift::Earlier,
                std::cmp::Ordering::Less => Shift::Later,
                std::cmp::Ordering::Equal => Shift::Same,
            };
            let line = if shift == Shift::Same {
                format!("{f} knee at {} in both: unchanged", name(p.load))
            } else {
                format!(
                    "{f} knee moved from {} to {}: {}",
                    name(p.load),
                    name(q.load),
                    shift.words()
                )
            };
            (shift, line)
        }
        (Some(p), None, Some(past), _) if flat(y) && top_b >= past.load => (
            Shift::Gone,
            format!(
                "{f} knee at {} in A, none in B (flat up to {}): gone, better",
                name(p.load),
                name(top_b)
            ),
        ),
        (None, Some(q), _, Some(past)) if flat(x) && top_a >= past.load => (
            Shift::New,
            format!(
                "{f} knee at {} in B, none in A (flat up to {}): new, WORSE",
                name(q.load),
                name(top_a)
            ),
        ),
        (None, None, ..) if flat(x) && flat(y) => {
            (Shift::Neither, format!("{f}: no knee in either"))
        }
        _ => {
            let side = |k: &Knee, top: f64| match &k.at {
                Some(p) => format!("at {}", name(p.load)),
                None => format!(
                    "{} (up to {})",
                    k.absent.as_deref().unwrap_or("none"),
                    name(top)
                ),
            };
            (
                Shift::NotComparable,
                format!(
                    "{f} knee: A {}, B {}: not comparable",
                    side(x, top_a),
                    side(y, top_b)
                ),
            )
        }
    };
    KneeMove {
        figure: f.clone(),
        a: x.at.clone(),
        b: y.at.clone(),
        shift,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> String {
        format!("{v} ms")
    }

    #[test]
    fn the_knee_is_the_last_level_within_twice_the_lowest_loads_value() {
        let curve = [
            (1.0, 10.0),
            (2.0, 12.0),
            (4.0, 19.9),
            (8.0, 20.1),
            (16.0, 60.0),
        ];
        let k = knee("ITL p99", "concurrency", &curve);
        assert_eq!(k.base_ms, Some(10.0));
        assert_eq!(
            k.at,
            Some(Point {
                load: 4.0,
                ms: 19.9
            })
        );
        assert_eq!(
            k.past,
            Some(Point {
                load: 8.0,
                ms: 20.1
            })
        );
        assert_eq!(k.line(ms), "ITL p99 bends at c=4: 19.9 ms → 20.1 ms at c=8");
        let r = knee("TTFT p90", "rate", &curve[..3]);
        assert_eq!(
            r.line(ms),
            "TTFT p90: none: flat, never more than 2x its value at the lowest load (at most 1.99x)"
        );
    }

    #[test]
    fn too_few_levels_or_a_first_level_past_it_have_no_knee() {
        let k = knee("ITL p99", "concurrency", &[(1.0, 10.0), (2.0, 30.0)]);
        assert_eq!(
            k.absent.as_deref(),
            Some("none: 2 levels have ITL p99, a knee needs 3")
        );
        // Twice exactly is not past it.
        let k = knee("ITL p99", "rate", &[(1.0, 10.0), (2.0, 20.0), (5.0, 20.5)]);
        assert_eq!(
            k.line(ms),
            "ITL p99 bends at rate=2/s: 20 ms → 20.5 ms at rate=5/s"
        );
        let zero = knee("TTFT p90", "rate", &[(1.0, 0.0), (2.0, 0.0), (3.0, 0.0)]);
        assert_eq!(
            zero.absent.as_deref(),
            Some("none: its value at the lowest load is 0 ms")
        );
    }

    #[test]
    fn levels_are_put_in_order_of_load_and_mixed_sweeps_have_none() {
        let level = |c: u32, itl: f64| Level {
            concurrency: Some(c),
            rate: None,
            itl_p99: Some(itl),
            ttft_p90: None,
        };
        // A --find-max's probes come in the order they ran.
        let levels = [
            level(8, 50.0),
            level(1, 10.0),
            level(4, 12.0),
            level(2, 11.0),
        ];
        let ks = knees(&levels);
        assert_eq!(ks.len(), 2);
        assert_eq!(
            ks[0].at,
            Some(Point {
                load: 4.0,
                ms: 12.0
            })
        );
        assert_eq!(
            ks[1].absent.as_deref(),
            Some("none: 0 levels have TTFT p90, a knee needs 3")
        );
        let mut mixed = levels.to_vec();
        mixed[0].concurrency = None;
        mixed[0].rate = Some(3.0);
        assert!(knees(&mixed).is_empty());
        assert!(knees(&levels[..1]).is_empty());
    }

    fn sweep(loads: &[u32], itl: &[f64]) -> Vec<Level> {
        loads
            .iter()
            .zip(itl)
            .map(|(&c, &v)| Level {
                concurrency: Some(c),
                rate: None,
                itl_p99: Some(v),
                ttft_p90: Some(10.0),
            })
            .collect()
    }

    #[test]
    fn a_knee_that_moves_to_a_lower_load_is_worse_and_to_a_higher_better() {
        let a = sweep(&[1, 2, 4, 8, 16, 32], &[10.0, 11.0, 12.0, 13.0, 14.0, 50.0]);
        let b = sweep(&[1, 2, 4, 8, 16, 32], &[10.0, 11.0, 12.0, 13.0, 40.0, 90.0]);
        let m = compare(&a, &b);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0].line,
            "ITL p99 knee moved from c=16 to c=8: earlier, WORSE"
        );
        assert_eq!(
            (
                m[0].shift,
                m[0].a.as_ref().map(|p| p.load),
                m[0].b.as_ref().map(|p| p.load)
            ),
            (Shift::Earlier, Some(16.0), Some(8.0))
        );
        assert_eq!(m[1].line, "TTFT p90: no knee in either");
        assert_eq!(m[1].shift, Shift::Neither);
        let back = compare(&b, &a);
        assert_eq!(
            back[0].line,
            "ITL p99 knee moved from c=8 to c=16: later, better"
        );
        assert_eq!(
            compare(&a, &a)[0].line,
            "ITL p99 knee at c=16 in both: unchanged"
        );
    }

    #[test]
    fn a_knee_on_one_side_is_gone_or_new_only_when_the_other_sweep_reached_its_load() {
        let bends = sweep(&[1, 2, 4, 8], &[10.0, 11.0, 12.0, 30.0]);
        let flat = sweep(&[1, 2, 4, 8, 16], &[10.0, 11.0, 12.0, 13.0, 14.0]);
        let m = compare(&bends, &flat);
        assert_eq!(
            m[0].line,
            "ITL p99 knee at c=4 in A, none in B (flat up to c=16): gone, better"
        );
        assert_eq!(m[0].shift, Shift::Gone);
        let m = compare(&flat, &bends);
        assert_eq!(
            m[0].line,
            "ITL p99 knee at c=4 in B, none in A (flat up to c=16): new, WORSE"
        );
        // B stops at c=4, below A's first level past the knee (c=8): it cannot say.
        let short = sweep(&[1, 2, 4], &[10.0, 11.0, 12.0]);
        let m = compare(&bends, &short);
        assert_eq!(m[0].shift, Shift::NotComparable);
        assert_eq!(
            m[0].line,
            "ITL p99 knee: A at c=4, B none: flat, never more than 2x its value at the lowest load (at most 1.20x) (up to c=4): not comparable"
        );
    }

    #[test]
    fn a_sweep_of_rate_and_one_of_concurrency_are_not_comparable() {
        let c = sweep(&[1, 2, 4], &[10.0, 11.0, 30.0]);
        let r: Vec<Level> = c
            .iter()
            .map(|l| Level {
                concurrency: None,
                rate: l.concurrency.map(f64::from),
                ..*l
            })
            .collect();
        let m = compare(&c, &r);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].shift, Shift::NotComparable);
        assert_eq!(
            m[0].line,
            "knees not comparable: A is a sweep by concurrency and B is a sweep by rate"
        );
        let one = compare(&c, &c[..1]);
        assert_eq!(
            one[0].line,
            "knees not comparable: A is a sweep by concurrency and B is no sweep (one level)"
        );
        assert!(compare(&c[..1], &c[..1]).is_empty());
    }
}
