//! `cadence report FILE…`: the replay source. Rebuilds a report from saved records
//! files (the bench's `--records`, which end with the run's metadata) or a saved JSON
//! report, and writes it in any format. A fleet's shard directories merge into one run.
//! Another tool's saved output (vLLM, AIPerf, GuideLLM, LLMPerf) is imported first
//! ([`cadence_run::import`]); `--llmd-benchmark` also writes the llm-d report format.

use crate::cli::ReportArgs;
use crate::exit::{usage, Exit};
use crate::output::{deliver, named, preflight};
use anyhow::Context;
use cadence_run::{load_with, Overrides};

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let outputs = named(args.json.as_deref(), None, &args.outputs);
    // Directories (a fleet's shards) stand for their records files.
    let files = cadence_run::expand_within(&args.files, args.max_spool)?;
    preflight(&files, &outputs)?;
    let o = Overrides {
        slos: args.slos.clone(),
        convention: args.outputs.convention,
        max_error_rate: args.max_error_rate,
        exact_samples: args.outputs.exact_samples,
        exclude_shards: args.exclude_shards.clone(),
        what_if: args.outputs.what_if.clone(),
        plateau: args.outputs.plateau,
    };
    let imported = match files.as_slice() {
        [one] => cadence_run::import::load(one, args.from, &o)?,
        _ if args.from.is_some() => {
            return Err(usage("--from imports one file at a time"));
        }
        _ => None,
    };
    // An import's records file lives in `_dir`, kept until the report is delivered.
    let (loaded, _dir) = match imported {
        Some(i) => (i.loaded, Some(i.dir)),
        None => (load_with(&files, &o)?, None),
    };
    if let Some(path) = &args.llmd_benchmark {
        write_llmd(path, &loaded.report)?;
    }
    deliver(
        &loaded.report,
        loaded.records.as_ref(),
        args.json.as_deref(),
        &args.outputs,
        loaded.verdict.into(),
        Vec::new(),
    )
}

/// The llm-d report of each level: `path` for a run of one level, else `path` with the
/// level's number before the extension (`out.json` -> `out.0.json`, `out.1.json`).
fn write_llmd(path: &std::path::Path, report: &cadence_core::Report) -> anyhow::Result<()> {
    let reports = cadence_import::llmd::render(report);
    let one = reports.len() == 1;
    for (i, (_, text)) in reports.iter().enumerate() {
        let p = if one {
            path.to_path_buf()
        } else {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("json");
            path.with_extension(format!("{i}.{ext}"))
        };
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}
