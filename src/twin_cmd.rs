//! `cadence twin`: the endpoint's twin learned from records (`fit`), the pure work in
//! [`cadence_engine::twin`]; here runs are read and the file written.

use std::path::Path;

use cadence_core::RequestRecord;
use cadence_engine::twin;

use crate::cli::{TwinArgs, TwinCheckArgs, TwinCommand, TwinFitArgs};
use crate::exit::{usage, Exit};

pub fn run(args: TwinArgs) -> anyhow::Result<Exit> {
    match args.command {
        TwinCommand::Fit(f) => fit(&f),
        TwinCommand::Check(c) => check(&c),
    }
}

/// A run's records, another tool's saved run imported first; a saved JSON report
/// holds no chunk times and is refused by name.
pub fn records(path: &Path) -> anyhow::Result<(cadence_run::Loaded, Vec<RequestRecord>)> {
    let (loaded, _dir) = match cadence_run::import::load(path, None, &[], None, None, &[])? {
        Some(i) => (i.loaded, Some(i.dir)),
        None => (
            cadence_run::load(&[path.to_path_buf()], &[], None, None)?,
            None,
        ),
    };
    let Some(src) = &loaded.records else {
        return Err(usage(format!(
            "{}: a saved JSON report holds no chunk times; the twin learns from records (cadence bench --records, the proxy's, or an import)",
            path.display()
        )));
    };
    let recs = src.read().collect::<Result<Vec<_>, _>>()?;
    Ok((loaded, recs))
}

fn fit(args: &TwinFitArgs) -> anyhow::Result<Exit> {
    let mut runs = Vec::new();
    for p in &args.runs {
        runs.push(records(p)?.1);
    }
    let names: Vec<String> = args.runs.iter().map(|p| p.display().to_string()).collect();
    let t = twin::fit(&runs, &names.join(", ")).map_err(|e| usage(e.to_string()))?;
    std::fs::write(&args.output, t.to_toml())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", args.output.display()))?;
    crate::output::print_stdout(&format!(
        "twin of {}: {} requests, {} gaps; {} slots{}; seen up to {} running, {} tokens of context, {} uncached prompt tokens\nwritten to {}\n",
        t.source,
        t.requests,
        t.gaps,
        t.slots,
        if t.slots_seen { " (seen full)" } else { " or more (never seen full)" },
        t.max_running,
        t.max_context,
        t.max_prompt,
        args.output.display()
    ))?;
    Ok(Exit::Ok)
}

/// A run for the check: its levels, records and arrivals.
fn run_of(path: &Path, seed: u64) -> anyhow::Result<twin::check::Run> {
    let (loaded, records) = records(path)?;
    Ok(twin::check::Run {
        name: path.display().to_string(),
        level_ids: loaded.records.map(|r| r.level_ids).unwrap_or_default(),
        seed: loaded.report.run.seed.unwrap_or(seed),
        constant: loaded.report.run.mode == "open_loop_constant",
        levels: loaded.report.levels,
        records,
    })
}

fn check(args: &TwinCheckArgs) -> anyhow::Result<Exit> {
    let fit_run = run_of(&args.fit, args.seed)?;
    let bad = |p: &Path, e: &dyn std::fmt::Display| usage(format!("{}: {e}", p.display()));
    let t = twin::fit(std::slice::from_ref(&fit_run.records), &fit_run.name)
        .map_err(|e| bad(&args.fit, &e))?;
    let mut notes = Vec::new();
    let engine = match crate::engine_opts::resolve(&args.engine, args.seed)? {
        Some(base) => {
            let loads = twin::check::loads(&fit_run, &mut notes).map_err(|e| bad(&args.fit, &e))?;
            let e = twin::check::calibrated(&base, &loads);
            if e.is_none() {
                notes.push("the engine is not calibrated: FIT has fewer than 3 loads".into());
            }
            e
        }
        None => None,
    };
    let mut held = Vec::new();
    for p in &args.heldout {
        held.extend(
            twin::check::loads(&run_of(p, args.seed)?, &mut notes).map_err(|e| bad(p, &e))?,
        );
    }
    let judged = twin::check::judge(std::sync::Arc::new(t), engine, held, args.seed);
    let mut out = format!(
        "twin fitted on {}; errors are predicted / measured - 1\n",
        args.fit.display()
    );
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&twin::check::render(&judged));
    crate::output::print_stdout(&out)?;
    Ok(Exit::Ok)
}
