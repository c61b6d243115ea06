//! The knee of a sweep: the load past which ITL p99 or TTFT p90 leaves its low-load
//! value behind (queueing starts, a batch fills). A reader of a sweep wants that load
//! named, not read off a chart; `compare` says where it moved.

use serde::{Deserialize, Serialize};

/// The factor over the lowest load's value past which a level is past the knee.
pub const FACTOR: f64 = 2.0;

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
    let (axis, loads): (&str, Vec<Option<f64>>) = if levels.iter().all(|l| l.concurrency.is_some())
    {
        (
            "concurrency",
            levels
                .iter()
                .map(|l| l.concurrency.map(f64::from))
                .collect(),
        )
    } else if levels.iter().all(|l| l.rate.is_some()) {
        ("rate", levels.iter().map(|l| l.rate).collect())
    } else {
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
                .filter_map(|(l, x)| Some(((*x)?, read(l)?)))
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
                format!("none: flat, never more than {FACTOR}x its value at the lowest load (at most {ratio:.2}x)")
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
}
