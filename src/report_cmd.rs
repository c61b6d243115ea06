//! `cadence report FILE…`: the replay source. Rebuilds a report from saved records
//! files (the bench's `--records`, which end with the run's metadata) or a saved JSON
//! report, and writes it in any format.

use crate::cli::ReportArgs;
use crate::exit::Exit;
use crate::load::load_with;
use crate::output::{print_console, write_outputs};

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let loaded = load_with(
        &args.files,
        &args.slos,
        args.outputs.convention,
        args.outputs.exact_samples(),
    )?;
    print_console(&loaded.report)?;
    write_outputs(
        &loaded.report,
        loaded.records.as_ref(),
        args.json.as_deref(),
        &args.outputs,
    )?;
    Ok(loaded.exit)
}
