//! `cadence report FILE…`: the replay source. Rebuilds a report from a saved records
//! file (the bench's `--records`, which ends with the run's metadata) or a saved JSON
//! report, and writes it in any format.

use crate::cli::ReportArgs;
use crate::exit::Exit;
use crate::load::load;
use crate::output::{print_console, write_outputs};

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let loaded = load(&args.files, &args.slos, args.outputs.convention)?;
    print_console(&loaded.report)?;
    write_outputs(
        &loaded.report,
        loaded.records.as_deref(),
        args.json.as_deref(),
        &args.outputs,
    )?;
    Ok(loaded.exit)
}
