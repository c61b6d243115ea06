//! How far to trust a twin's answer, said beside the answer: its error on the runs it
//! was fitted on (measured at the fit, kept in the file) and how much its own seeded
//! draws move a plan's figures. A held-out error needs a held-out run: `twin check`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::check::{figures, loads, worst, Run, FIGURES};
use super::{Model, Twin};
use crate::drive::{Arrivals, Workload};

/// The twin's error on its own runs' loads: each load predicted as it was run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InSample {
    /// Loads predicted.
    pub loads: u32,
    /// The worst |predicted / measured − 1| over every load's p50, p90 and p99 of
    /// TTFT, ITL and E2E.
    pub worst: f64,
    /// Which figure that was (`TTFT p99`).
    pub figure: String,
    /// At which load (`concurrency=4`).
    pub load: String,
}

/// The twin's in-sample error over the loads of `runs` (the runs it was fitted on),
/// seeded by `seed`; `None` when no run has a load to predict (records without
/// levels, such as a proxy's live traffic).
pub fn in_sample(twin: &Arc<Twin>, runs: &[Run], seed: u64) -> Option<InSample> {
    let model = Model::Twin {
        twin: twin.clone(),
        seed,
    };
    let mut out: Option<InSample> = None;
    let mut n = 0u32;
    for run in runs {
        for (level, measured) in loads(run, &mut Vec::new()).ok()? {
            let planned = model.plan_level(level.arrivals, &level.workload, 0, 0, 0).0;
            let Some((e, figure)) = figures(&planned.records).and_then(|p| worst(&p, &measured))
            else {
                continue;
            };
            n += 1;
            if out.as_ref().is_none_or(|o| e > o.worst) {
                out = Some(InSample {
                    loads: 0,
                    worst: e,
                    figure: figure.into(),
                    load: level.name.clone(),
                });
            }
        }
    }
    out.map(|o| InSample { loads: n, ..o })
}

/// Draws other than `seed`'s that [`draw_spread`] plans.
const OTHER_SEEDS: u64 = 2;

/// How much the twin's draws move a plan: each level planned with `seed` and two other
/// seeds, the widest (max − min) / median over the levels' nine figures, and which
/// figure and level it was. `None` when no level streamed.
pub fn draw_spread(
    twin: &Arc<Twin>,
    levels: &[(String, Arrivals)],
    workload: &Workload,
    seed: u64,
) -> Option<(f64, &'static str, String)> {
    let mut out: Option<(f64, &'static str, String)> = None;
    for (i, (name, arrivals)) in levels.iter().enumerate() {
        let runs: Vec<[f64; 9]> = (0..=OTHER_SEEDS)
            .filter_map(|k| {
                let model = Model::Twin {
                    twin: twin.clone(),
                    seed: seed.wrapping_add(k),
                };
                let planned = model.plan_level(*arrivals, workload, i as u32, 0, 0).0;
                figures(&planned.records)
            })
            .collect();
        for (k, figure) in FIGURES.iter().enumerate() {
            let mut v: Vec<f64> = runs.iter().map(|r| r[k]).collect();
            v.sort_unstable_by(f64::total_cmp);
            let (Some(lo), Some(hi)) = (v.first(), v.last()) else {
                continue;
            };
            let mid = v[v.len() / 2];
            let spread = if mid > 0.0 { (hi - lo) / mid } else { 0.0 };
            if out.as_ref().is_none_or(|o| spread > o.0) {
                out = Some((spread, figure, name.clone()));
            }
        }
    }
    out
}

/// The plan's confidence line for a twin: its in-sample error (or that the file does
/// not hold one), its draws' spread, and where a held-out error comes from.
pub fn line(twin: &Twin, spread: Option<(f64, &'static str, String)>) -> String {
    let fit = match &twin.in_sample {
        Some(s) => format!(
            "on the {} load{} it was fitted on, the twin came within {:.1} % on every p50, p90 and p99 of TTFT, ITL and E2E (worst: {} at {})",
            s.loads,
            if s.loads == 1 { "" } else { "s" },
            s.worst * 100.0,
            s.figure,
            s.load
        ),
        None => "its error on the runs it was fitted on is not in the file (fit it again to have it)".into(),
    };
    let draws = spread.map_or(String::new(), |(s, figure, level)| {
        format!(
            "; its own draws move this plan's figures by up to {:.1} % ({figure} at {level}, {} seeds)",
            s * 100.0,
            OTHER_SEEDS + 1
        )
    });
    format!(
        "how far to trust it: {fit}{draws}; levels past the fit are marked extrapolated; its error on a load it did not see: cadence twin check FIT HELDOUT"
    )
}
