//! `cadence twin`: the endpoint's twin learned from records (`fit`), the pure work in
//! [`cadence_engine::twin`]; here runs are read and the file written.

use std::path::Path;

use cadence_core::RequestRecord;
use cadence_engine::twin;

use crate::cli::{TwinArgs, TwinCommand, TwinFitArgs};
use crate::exit::{usage, Exit};

pub fn run(args: TwinArgs) -> anyhow::Result<Exit> {
    match args.command {
        TwinCommand::Fit(f) => fit(&f),
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
