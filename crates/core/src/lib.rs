//! Cadence's pure core: the per-request record every source produces, the outcome
//! classes of FAULTS.md, and the statistics and report model computed from records.
//! Nothing here touches a socket, a clock, a file or an async runtime.

pub mod metrics;
pub mod outcome;
pub mod record;
pub mod report;
pub mod stats;

pub use metrics::{
    summarize_level, AccountingError, Counters, LevelOptions, LevelSummary, OutputTokens,
    RequestCounts, Stalls, Throughput,
};
pub use outcome::Outcome;
pub use record::{Chunk, RequestRecord, StreamCounters, TokenCount, TokenSource};
pub use report::{definitions, level_report, LevelReport, Report, RunInfo, SCHEMA_VERSION};
pub use stats::{Distribution, PERCENTILE_RULE};
