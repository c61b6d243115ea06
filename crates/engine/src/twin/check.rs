//! `cadence twin check`: the twin judged the held-out way. Fitted on one run, it
//! predicts each load of other runs (their arrivals, lengths and clients as recorded);
//! per quantile (p50, p90, p99 of TTFT, ITL, E2E) the error beside the rerun noise
//! (a second run of the same load, the same workload as `compare` judges it, against
//! the first), and beside the engine model
//! calibrated on the same fit run when one is given.

use std::sync::Arc;

use cadence_core::differences::{differences, mean_input, DiffKind, LevelPair};
use cadence_core::stats::quantile_sorted;
use cadence_core::{Report, RequestRecord};

use super::{Model, Twin};
use crate::calibrate::{measured_levels, Fallbacks, SweepError};
use crate::fit::{self, Level, PARAMS};
use crate::{Arrivals, EngineSpec};

/// The quantiles judged.
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];
/// The figures judged, in the order of [`figures`].
pub const FIGURES: [&str; 9] = [
    "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p90", "ITL p99", "E2E p50", "E2E p90",
    "E2E p99",
];
/// Model runs the engine's calibration may take.
const EVALS: u32 = 1500;

/// A run as the check reads it: its report (what was run, its levels), the records'
/// level index of each level, every record, its arrivals' seed and whether its open
/// loop was evenly spaced.
#[derive(Debug, Clone)]
pub struct Run {
    /// How the output names it (its file).
    pub name: String,
    /// Its report: the command, target and model beside its levels.
    pub report: Report,
    /// The records' level index of each report level.
    pub level_ids: Vec<u32>,
    /// Every record.
    pub records: Vec<RequestRecord>,
    /// The seed its Poisson arrivals were drawn with.
    pub seed: u64,
    /// Its open loop was evenly spaced (`--arrivals constant`).
    pub constant: bool,
}

/// Flags whose difference is a run's list of loads, not its level's load: the level's
/// own concurrency or rate is compared instead.
const LOAD_LISTS: [&str; 2] = ["--concurrency", "--rate"];

/// The records of `run`'s report levels named `name` (pooled by load).
fn named<'a>(run: &'a Run, name: &'a str) -> impl Iterator<Item = &'a RequestRecord> {
    let ids: Vec<u32> = (0..run.report.levels.len())
        .filter(|&i| run.report.levels[i].name == name)
        .filter_map(|i| run.level_ids.get(i).copied())
        .collect();
    run.records.iter().filter(move |r| ids.contains(&r.level))
}

/// What makes `b`'s level `name` other than a rerun of `a`'s, each in words, `a`'s
/// value first (`--turns: not given against 3`): a workload or target difference as `compare` finds
/// it (arrivals, sessions, lengths asked and measured, sampling, cache; URL, model,
/// API, tool), another seed excepted. Empty: a rerun.
pub fn differences_at(a: &Run, b: &Run, name: &str) -> Vec<String> {
    let at = |run: &Run| run.report.levels.iter().position(|l| l.name == name);
    let (Some(i), Some(j)) = (at(a), at(b)) else {
        return vec![format!("{name}: not a level of both")];
    };
    let pair = LevelPair {
        a: i,
        b: j,
        input_tokens: (mean_input(named(a, name)), mean_input(named(b, name))),
    };
    differences(&a.report, &b.report, &[pair])
        .into_iter()
        .filter(|d| d.kind != DiffKind::Draws && !LOAD_LISTS.contains(&d.what.as_str()))
        .map(|d| format!("{}: {} against {}", d.what, d.a, d.b))
        .collect()
}

/// TTFT, ITL and E2E at each of [`QUANTILES`] (ms), over succeeded, non-warm-up
/// records by the report's formulas; `None` without a streamed request.
pub fn figures<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Option<[f64; 9]> {
    let mut out = [0.0; 9];
    for (k, v) in fit::samples(records).iter().enumerate() {
        for (j, q) in QUANTILES.iter().enumerate() {
            out[3 * k + j] = quantile_sorted(v, *q)?;
        }
    }
    Some(out)
}

/// A run's loads: each level's arrivals and workload (its records'), and its measured
/// figures.
pub fn loads(run: &Run, notes: &mut Vec<String>) -> Result<Vec<(Level, [f64; 9])>, SweepError> {
    let of_level = |i: usize| -> Vec<RequestRecord> {
        let id = run.level_ids.get(i).copied();
        run.records
            .iter()
            .filter(|r| Some(r.level) == id)
            .cloned()
            .collect()
    };
    let fallbacks = Fallbacks {
        input_tokens: 512,
        turnaround_ns: 0,
        seed: run.seed,
    };
    let levels = measured_levels(
        &run.report.levels,
        Some(|i| Ok(of_level(i))),
        fallbacks,
        notes,
    )?;
    let mut out = Vec::new();
    for mut l in levels {
        if let (true, Arrivals::Poisson { rate, .. }) = (run.constant, l.arrivals) {
            l.arrivals = Arrivals::Constant { rate };
        }
        // The level's records: every report level of that name (pooled by load).
        let measured =
            figures(named(run, &l.name)).ok_or_else(|| SweepError::NoStreams(l.name.clone()))?;
        out.push((l, measured));
    }
    Ok(out)
}

/// The engine model `base` calibrated on the fit run's levels, as `plan --calibrate`
/// fits it; `None` with fewer than 3 loads to fit.
pub fn calibrated(base: &EngineSpec, fit_loads: &[(Level, [f64; 9])]) -> Option<EngineSpec> {
    let levels: Vec<&Level> = fit_loads.iter().map(|(l, _)| l).collect();
    (levels.len() >= 3).then(|| fit::fit(base, &levels, PARAMS, EVALS).spec)
}

/// One held-out load's row group: measured, the rerun, the twin's and the engine's
/// predictions, and the twin's extrapolation warning.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The load's name (`rate=3/s`).
    pub name: String,
    /// The first held-out run's figures.
    pub measured: [f64; 9],
    /// A second run of the same load, when given.
    pub rerun: Option<[f64; 9]>,
    /// The twin's prediction.
    pub twin: Option<[f64; 9]>,
    /// The calibrated engine's prediction, when an engine was given.
    pub engine: Option<[f64; 9]>,
    /// When the twin went past its fit at this load.
    pub extrapolated: Option<String>,
}

/// Predicts `level` with `model`: its figures and, for a twin, its extrapolation.
fn predict(model: &Model, level: &Level) -> (Option<[f64; 9]>, Option<String>) {
    let (planned, reach) = model.plan_level(level.arrivals, &level.workload, 0, 0, 0);
    (figures(&planned.records), model.extrapolation(reach))
}

/// A held-out load: the run it is of (an index into the held-out runs), its level
/// and its measured figures.
pub type Held = (usize, Level, [f64; 9]);

/// Judges the twin (and the calibrated engine) on the held-out loads of `runs`: each
/// load once, its first run measured, a second run of the same name and workload
/// (`compare`'s differences: [`differences_at`]) its rerun. A second
/// run of the name that is another workload is a load of its own, named with its run
/// (`rate=3/s (b.jsonl)`), and a note says what differs.
pub fn judge(
    twin: Arc<Twin>,
    engine: Option<EngineSpec>,
    runs: &[Run],
    held: Vec<Held>,
    seed: u64,
) -> (Vec<Judged>, Vec<String>) {
    let twin = Model::Twin { twin, seed };
    let engine = engine.map(|s| Model::Engine(Box::new(s)));
    let mut out: Vec<Judged> = Vec::new();
    // Each judged load's level name and run.
    let mut of: Vec<(String, usize)> = Vec::new();
    let mut notes = Vec::new();
    for (run, level, measured) in held {
        let same_name: Vec<usize> = (0..of.len()).filter(|&k| of[k].0 == level.name).collect();
        let differ = |k: usize| differences_at(&runs[of[k].1], &runs[run], &level.name);
        let diffs: Vec<Vec<String>> = same_name.iter().map(|&k| differ(k)).collect();
        if let Some(p) = diffs.iter().position(Vec::is_empty) {
            out[same_name[p]].rerun.get_or_insert(measured);
            continue;
        }
        let mut name = level.name.clone();
        if let (Some(&k), Some(d)) = (same_name.first(), diffs.first()) {
            name = format!("{} ({})", level.name, runs[run].name);
            notes.push(format!(
                "{}'s {} is not a rerun of {}'s, so it is judged as a load of its own: {}",
                runs[run].name,
                level.name,
                runs[of[k].1].name,
                d.join("; ")
            ));
        }
        let (predicted, extrapolated) = predict(&twin, &level);
        of.push((level.name.clone(), run));
        out.push(Judged {
            name,
            measured,
            rerun: None,
            twin: predicted,
            engine: engine.as_ref().and_then(|e| predict(e, &level).0),
            extrapolated,
        });
    }
    (out, notes)
}

/// predicted / measured − 1.
fn err(p: f64, m: f64) -> Option<f64> {
    (m > 0.0).then(|| p / m - 1.0)
}

fn pct(e: Option<f64>) -> String {
    e.map_or("-".into(), |e| format!("{:+.1}%", e * 100.0))
}

/// The worst |error| over the figures and which figure it is.
pub fn worst(predicted: &[f64; 9], measured: &[f64; 9]) -> Option<(f64, &'static str)> {
    (0..9)
        .filter_map(|k| err(predicted[k], measured[k]).map(|e| (e.abs(), FIGURES[k])))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The check as text: per load, per figure, measured, the twin's prediction and error,
/// the engine's, the rerun noise and whether the twin is within it; then the worst.
pub fn render(judged: &[Judged]) -> String {
    let engine = judged.iter().any(|j| j.engine.is_some());
    let mut s = String::new();
    for j in judged {
        s.push_str(&format!("\n{}\n", j.name));
        if let Some(w) = &j.extrapolated {
            s.push_str(&format!("  {w}\n"));
        }
        s.push_str(&format!(
            "  {:<10} {:>10} {:>10} {:>8}",
            "figure", "measured", "twin", "error"
        ));
        if engine {
            s.push_str(&format!(" {:>10} {:>8}", "engine", "error"));
        }
        s.push_str(&format!(" {:>8}  {}\n", "rerun", "twin within rerun noise"));
        for k in 0..9 {
            let m = j.measured[k];
            let t = j.twin.map(|p| p[k]);
            let te = t.and_then(|p| err(p, m));
            let noise = j.rerun.and_then(|r| err(r[k], m));
            s.push_str(&format!(
                "  {:<10} {:>10} {:>10} {:>8}",
                FIGURES[k],
                ms_cell(Some(m)),
                ms_cell(t),
                pct(te)
            ));
            if engine {
                let e = j.engine.map(|p| p[k]);
                s.push_str(&format!(
                    " {:>10} {:>8}",
                    ms_cell(e),
                    pct(e.and_then(|p| err(p, m)))
                ));
            }
            let within = match (te, noise) {
                (Some(e), Some(n)) => if e.abs() <= n.abs() { "yes" } else { "no" }.to_string(),
                _ => "-".into(),
            };
            s.push_str(&format!(" {:>8}  {}\n", pct(noise), within));
        }
        let line = |who: &str, p: Option<[f64; 9]>| {
            p.and_then(|p| worst(&p, &j.measured))
                .map(|(e, f)| format!("  worst {who}: {f} {:.1} % off\n", e * 100.0))
        };
        s.extend(line("twin", j.twin));
        s.extend(line("engine", j.engine));
        s.extend(
            j.rerun
                .and_then(|r| worst(&r, &j.measured))
                .map(|(e, f)| format!("  worst rerun noise: {f} {:.1} %\n", e * 100.0)),
        );
    }
    s
}

fn ms_cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2} ms"))
}

/// Why a check could not be made: a run's loads could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{run}: {error}")]
pub struct CheckError {
    /// The run, as named.
    pub run: String,
    /// What was wrong with it.
    pub error: String,
}

/// The whole check as text: a twin fitted on `fit` (and `base` calibrated on it, when
/// given) judged on the loads of `held`, with notes on what was assumed.
pub fn check(
    fit: &Run,
    held: &[Run],
    base: Option<&EngineSpec>,
    seed: u64,
) -> Result<String, CheckError> {
    let bad = |run: &Run, e: &dyn std::fmt::Display| CheckError {
        run: run.name.clone(),
        error: e.to_string(),
    };
    let twin =
        super::fit(std::slice::from_ref(&fit.records), &fit.name).map_err(|e| bad(fit, &e))?;
    let mut notes = Vec::new();
    let engine = match base {
        Some(base) => {
            let loads = loads(fit, &mut notes).map_err(|e| bad(fit, &e))?;
            let e = calibrated(base, &loads);
            if e.is_none() {
                notes.push("the engine is not calibrated: FIT has fewer than 3 loads".into());
            }
            e
        }
        None => None,
    };
    let mut loaded = Vec::new();
    for (i, run) in held.iter().enumerate() {
        let l = loads(run, &mut notes).map_err(|e| bad(run, &e))?;
        loaded.extend(l.into_iter().map(|(level, m)| (i, level, m)));
    }
    let (judged, reruns) = judge(Arc::new(twin), engine, held, loaded, seed);
    notes.extend(reruns);
    let mut out = format!(
        "twin fitted on {}; errors are predicted / measured - 1\n",
        fit.name
    );
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&render(&judged));
    Ok(out)
}
