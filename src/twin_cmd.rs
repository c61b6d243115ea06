//! `cadence twin`: the endpoint's twin learned from records (`fit`), the pure work in
//! [`cadence_engine::twin`]; here runs are read and the file written.

use std::path::Path;

use cadence_engine::twin;

use crate::cli::{TwinArgs, TwinCheckArgs, TwinCommand, TwinFitArgs};
use crate::exit::{usage, Exit};

pub fn run(args: TwinArgs) -> anyhow::Result<Exit> {
    match args.command {
        TwinCommand::Fit(f) => fit(&f),
        TwinCommand::Check(c) => check(&c),
    }
}

fn fit(args: &TwinFitArgs) -> anyhow::Result<Exit> {
    let mut runs = Vec::new();
    for p in &args.runs {
        runs.push(cadence_run::records::read_all(p)?);
    }
    let names: Vec<String> = args.runs.iter().map(|p| p.display().to_string()).collect();
    let records: Vec<_> = runs.iter_mut().map(|r| std::mem::take(&mut r.1)).collect();
    let mut t = twin::fit(&records, &names.join(", ")).map_err(|e| usage(e.to_string()))?;
    // Its error on its own loads, each predicted as it was run.
    let runs: Vec<twin::check::Run> = runs
        .into_iter()
        .zip(records)
        .zip(names)
        .map(|(((loaded, _), records), name)| run_from(name, loaded, records, 0))
        .collect();
    let t0 = std::sync::Arc::new(t.clone());
    t.in_sample = twin::confidence::in_sample(&t0, &runs, 0);
    std::fs::write(&args.output, t.to_toml())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", args.output.display()))?;
    let written = format!("written to {}\n", args.output.display());
    crate::output::print_stdout(&(t.summary() + &written))?;
    Ok(Exit::Ok)
}

/// A run for the check: its levels, records and arrivals.
fn run_of(path: &Path, seed: u64) -> anyhow::Result<twin::check::Run> {
    let (loaded, records) = cadence_run::records::read_all(path)?;
    Ok(run_from(path.display().to_string(), loaded, records, seed))
}

fn run_from(
    name: String,
    loaded: cadence_run::Loaded,
    records: Vec<cadence_core::RequestRecord>,
    seed: u64,
) -> twin::check::Run {
    twin::check::Run {
        name,
        level_ids: loaded.records.map(|r| r.level_ids).unwrap_or_default(),
        seed: loaded.report.run.seed.unwrap_or(seed),
        constant: loaded.report.run.mode == "open_loop_constant",
        report: loaded.report,
        records,
    }
}

fn check(args: &TwinCheckArgs) -> anyhow::Result<Exit> {
    let fit = run_of(&args.fit, args.seed)?;
    let held = args
        .heldout
        .iter()
        .map(|p| run_of(p, args.seed))
        .collect::<Result<Vec<_>, _>>()?;
    let base = crate::engine_opts::resolve(&args.engine, args.seed)?;
    let out = twin::check::check(&fit, &held, base.as_ref(), args.seed)
        .map_err(|e| usage(e.to_string()))?;
    crate::output::print_stdout(&out)?;
    Ok(Exit::Ok)
}
