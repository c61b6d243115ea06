//! `cadence report FILE…`: the replay source. Rebuilds a report from a saved records
//! file (the bench's `--records`, which ends with the run's metadata) or a saved JSON
//! report, and writes it in any format.

use crate::cli::ReportArgs;
use crate::exit::Exit;
use crate::load::load;
use crate::output::{deliver, named, preflight};

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let outputs = named(args.json.as_deref(), None, &args.outputs);
    preflight(&args.files, &outputs)?;
    let loaded = load(
        &args.files,
        &args.slos,
        args.outputs.convention,
        args.max_error_rate,
    )?;
    deliver(
        &loaded.report,
        loaded.records.as_deref(),
        args.json.as_deref(),
        &args.outputs,
        loaded.exit,
        Vec::new(),
    )
}
