//! `cadence report FILE…`: the replay source. Rebuilds a report from saved records
//! files (the bench's `--records`, which end with the run's metadata) or a saved JSON
//! report, and writes it in any format. A fleet's shard directories merge into one run.

use crate::cli::ReportArgs;
use crate::exit::Exit;
use crate::load::load_with;
use crate::output::{deliver, named, preflight};

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let outputs = named(args.json.as_deref(), None, &args.outputs);
    // Directories (a fleet's shards) stand for their records files.
    let files = crate::fleet::expand(&args.files)?;
    preflight(&files, &outputs)?;
    let loaded = load_with(
        &files,
        &args.slos,
        args.outputs.convention,
        args.max_error_rate,
        args.outputs.exact_samples,
        &args.exclude_shards,
        &args.outputs.what_if,
    )?;
    deliver(
        &loaded.report,
        loaded.records.as_ref(),
        args.json.as_deref(),
        &args.outputs,
        loaded.exit,
        Vec::new(),
    )
}
