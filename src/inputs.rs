//! The binary's file inputs read through the one capped reader
//! (`cadence_core::input`), their errors usage errors (exit 2) naming the file, the
//! ceiling and `--max-input` where it raises it.

use crate::cli::WorkloadArgs;
use crate::exit::usage;
use cadence_core::input::{read_text, Ceiling};
use std::path::Path;

/// The text of `path`, at most `ceiling.max` bytes; more, or none, is a usage error.
pub fn read(path: &Path, ceiling: Ceiling) -> anyhow::Result<String> {
    read_text(path, ceiling).map_err(|e| usage(e.to_string()))
}

/// The ceiling of a large input (`--dataset`, `--trace`, `--agent-trace`,
/// `--corpus`) named `what`: `--max-input`.
pub fn large(w: &WorkloadArgs, what: &'static str) -> Ceiling {
    Ceiling {
        what,
        max: w.max_input,
        flag: Some("--max-input"),
    }
}
