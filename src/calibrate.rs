//! `cadence plan --calibrate RUN`: a measured sweep read back (records or a JSON
//! report), the engine's free parameters fitted to its TTFT and ITL percentiles
//! ([`cadence_engine::fit`]), and the fitted engine printed as TOML with its error per
//! level and its predictions at other loads.

use std::path::Path;
use std::time::Instant;

use cadence_core::{summarize_level, LevelOptions};
use cadence_engine::calibrate::{holdout_index, measured_levels, Fallbacks};
use cadence_engine::fit::{self, Figures, Level, FIGURES, PARAMS};
use cadence_engine::{plan_level, Arrivals, EngineSpec};
use cadence_report::cell::{cell, figure, fmt_ms, Unit};
use cadence_report::table::Table;

use crate::cli::PlanArgs;
use crate::exit::{usage, Exit};

/// Model runs one fit may take (each replays every fitted level).
const EVALS: u32 = 1500;
/// Levels a fit needs at least.
const MIN_LEVELS: usize = 3;

/// Fits `base` to the sweep in `run` and prints the fit; `loads` are the (name,
/// arrivals) to predict at, the run's own loads when empty.
pub fn run(
    args: &PlanArgs,
    base: EngineSpec,
    run: &Path,
    loads: Vec<(String, Arrivals)>,
) -> anyhow::Result<Exit> {
    let loaded = cadence_run::load(&[run.to_path_buf()], &[], None, None)?;
    let mut notes = Vec::new();
    let fallbacks = Fallbacks {
        input_tokens: args.input_tokens.fixed().unwrap_or(512).max(1),
        turnaround_ns: args.client_turnaround.as_nanos() as u64,
        seed: args.seed,
    };
    let records = loaded.records.as_ref().map(|src| {
        move |i: usize| {
            src.level_sample(i, usize::MAX)
                .map(|(recs, _)| recs)
                .map_err(|e| e.to_string())
        }
    });
    let levels = measured_levels(&loaded.report.levels, records, fallbacks, &mut notes)
        .map_err(|e| usage(format!("{}: {e}", run.display())))?;
    if levels.len() < MIN_LEVELS {
        return Err(usage(format!(
            "{}: {} level(s); calibration needs a sweep of at least {MIN_LEVELS} (e.g. cadence bench -c 1,2,4,8)",
            run.display(),
            levels.len()
        )));
    }
    let held = args
        .holdout
        .as_deref()
        .map(|h| holdout_index(&levels, h))
        .transpose()
        .map_err(|e| usage(e.to_string()))?;
    let fitted: Vec<&Level> = (0..levels.len())
        .filter(|&i| Some(i) != held)
        .map(|i| &levels[i])
        .collect();
    if fitted.len() < MIN_LEVELS {
        return Err(usage(format!(
            "--holdout leaves {} levels to fit; a fit needs at least {MIN_LEVELS}",
            fitted.len()
        )));
    }
    let started = Instant::now();
    let f = fit::fit(&base, &fitted, PARAMS, EVALS);
    let mut spec = f.spec.clone();
    spec.name = format!("{} (calibrated)", base.name);
    let mut out = format!(
        "calibrating {} to {}: {} levels, fitted on {}{}\n",
        base.name,
        run.display(),
        levels.len(),
        fitted.len(),
        held.map_or(String::new(), |i| format!(", {} held out", levels[i].name))
    );
    for n in &notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let figures = 4 * fitted.len();
    out.push_str(&format!(
        "fit: {figures} figures, rms error {:.1} %, {} model runs in {:.1} s\n\n",
        (f.cost / figures as f64).sqrt() * 100.0,
        f.evals,
        started.elapsed().as_secs_f64()
    ));
    out.push_str(&parameter_table(&base, &spec));
    out.push('\n');
    out.push_str(&error_table(&spec, &levels, held, &loaded.report.levels));
    let toml = fit::to_toml(&spec);
    out.push_str("\n# the fitted engine (cadence plan --engine FILE, cadence sim --engine FILE)\n");
    out.push_str(&toml);
    out.push('\n');
    out.push_str(&prediction_table(&spec, &levels, loads));
    if let Some(path) = &args.save_engine {
        std::fs::write(path, &toml)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    crate::output::print_stdout(&out)?;
    Ok(Exit::Ok)
}

/// Each fitted parameter: the base's value, the fitted one and the bounds.
fn parameter_table(base: &EngineSpec, fitted: &EngineSpec) -> String {
    let mut t = Table::new(0)
        .left("parameter", 32)
        .right("base", 12)
        .right("fitted", 12)
        .left("bounds", 0)
        .gap(3);
    for p in PARAMS {
        t.row([
            p.name.to_string(),
            short((p.get)(base)),
            short((p.get)(fitted)),
            format!("{}..{}", p.lo, p.hi),
        ]);
    }
    t.text()
}

/// A value with 4 significant digits.
fn short(v: f64) -> String {
    if v.abs() < 1e-6 {
        return "0".into();
    }
    let digits = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// Per level, each figure: model / measured and the error; the held-out level marked.
/// Beside the fitted TTFT and ITL, output tok/s and E2E p50 (not fitted: how far the
/// engine is off where it was not asked to match), each by the report's own formulas,
/// measured from the run's report (`run`, by level name).
fn error_table(
    spec: &EngineSpec,
    levels: &[Level],
    held: Option<usize>,
    run: &[cadence_core::LevelReport],
) -> String {
    let mut t = Table::new(0).left("level (model / run)", 22);
    for f in FIGURES.iter().chain(&["tok/s", "E2E p50"]) {
        t = t.right(f, 24);
    }
    let pair = |p: Option<f64>, m: Option<f64>, unit: Unit| {
        let err = p.zip(m).filter(|(_, m)| *m > 0.0).map(|(p, m)| p / m - 1.0);
        format!(
            "{} / {} {}",
            cell(p, unit),
            cell(m, unit),
            cell(err, Unit::Change(1))
        )
    };
    for (i, l) in levels.iter().enumerate() {
        let name = if Some(i) == held {
            format!("{} (held out)", l.name)
        } else {
            l.name.clone()
        };
        let planned = plan_level(spec, l.arrivals, &l.workload, 0, 0, 0);
        let Some(p) = Figures::of_records(&planned.records) else {
            t.note_row(&name, "the model refuses every request of this level");
            continue;
        };
        let (pv, mv) = (p.values(), l.measured.values());
        let mut cells: Vec<String> = (0..4)
            .map(|k| pair(Some(pv[k]), Some(mv[k]), Unit::Ms))
            .collect();
        let model = summarize_level(&planned.records, &LevelOptions::default());
        let measured = run.iter().find(|r| r.name == l.name).map(|r| &r.summary);
        cells.push(pair(
            model.throughput.output_tokens_per_s,
            measured.and_then(|m| m.throughput.output_tokens_per_s),
            Unit::Number,
        ));
        cells.push(pair(
            model.e2e.map(|d| d.p50),
            measured.and_then(|m| m.e2e).map(|d| d.p50),
            Unit::Ms,
        ));
        t.row(std::iter::once(name).chain(cells));
    }
    t.text()
}

/// The fitted engine at `loads` (when empty, the run's own loads), each level with the
/// run's requests (every level's lengths in turn, as many as its largest level).
fn prediction_table(spec: &EngineSpec, levels: &[Level], loads: Vec<(String, Arrivals)>) -> String {
    let mut workload = levels[0].workload.clone();
    workload.warmup = 0;
    workload.requests = levels
        .iter()
        .map(|l| l.workload.requests)
        .max()
        .unwrap_or(1);
    workload.lengths = levels
        .iter()
        .flat_map(|l| {
            let skip = if l.workload.lengths.is_empty() {
                0
            } else {
                l.workload.warmup as usize
            };
            l.workload.lengths.iter().skip(skip).copied()
        })
        .collect();
    let loads = if loads.is_empty() {
        levels
            .iter()
            .map(|l| (l.name.clone(), l.arrivals))
            .collect()
    } else {
        loads
    };
    let mut t = Table::new(0)
        .left("level", 22)
        .right("TTFT p50", 10)
        .right("TTFT p90", 10)
        .right("ITL p50", 10)
        .right("ITL p90", 10)
        .right("tok/s", 10);
    for (name, arrivals) in loads {
        let planned = plan_level(spec, arrivals, &workload, 0, 0, 0);
        match Figures::of_records(&planned.records) {
            Some(p) => {
                let tok_s = figure(
                    cadence_engine::measured::tokens_per_s(&planned.records),
                    Unit::Number,
                );
                t.row(
                    std::iter::once(name.clone())
                        .chain(p.values().map(fmt_ms))
                        .chain([tok_s]),
                );
            }
            None => t.note_row(&name, "the model refuses every request"),
        }
    }
    format!(
        "predicted ({} requests per level, the run's lengths):\n{}",
        workload.requests,
        t.text()
    )
}
