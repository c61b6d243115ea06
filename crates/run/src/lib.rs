//! A run on disk: records files or a saved JSON report loaded back into a report
//! (streamed, in bounded memory), a fleet's shards merged into one run, and another
//! tool's saved output imported as records. `report`, `compare` and `plan --calibrate`
//! load runs through it; the binary only maps its answers to exit codes.

#![warn(missing_docs)]

pub mod fleet;
pub mod import;
pub mod load;
pub mod records;

pub use fleet::{expand, expand_within, spooled, FleetScan, DEFAULT_MAX_SPOOL};
pub use import::{is_cadence_file, ImportedLoad};
pub use load::{load, load_with, Loaded, Overrides, RecordsSource, Verdict};

/// Why a run could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is not a run this version can load: a file missing or malformed,
    /// shards that are not one fleet run's, inputs that cannot be merged. The user's to
    /// fix (the binary's bad-usage exit).
    #[error("{0}")]
    Input(String),
    /// The machine failed: a temporary file could not be made, written or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Shorthand: an input error.
pub(crate) fn input(msg: impl Into<String>) -> Error {
    Error::Input(msg.into())
}
