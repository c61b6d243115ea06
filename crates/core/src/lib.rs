//! Cadence's analysis and report model: the statistics, SLO rules, time series,
//! sessions, conventions and report assembled from records. The ground floor it stands
//! on (the record, outcomes, distributions, durations, redaction) is `cadence-base`,
//! re-exported here under the same paths (its one capped file reader, `input`, too).
//! Nothing here touches a socket, a clock, a file or an async runtime.

#![warn(missing_docs)]

pub use cadence_base::{
    dist, duration, input, outcome, record, rng, secret, sink, stats, trace, wallclock,
};

pub mod arrivals;
pub mod assemble;
pub mod attribution;
pub mod bursts;
pub mod charts;
pub mod compare;
pub mod conventions;
pub mod differences;
pub mod fidelity;
pub mod imported;
pub mod json;
pub mod knee;
pub mod level;
pub mod metrics;
pub mod pacing;
pub mod per_request;
pub mod plateau;
pub mod report;
pub mod runlog;
pub mod server;
pub mod sessions;
pub mod slo;
pub mod time_split;
pub mod timeseries;

pub use assemble::{assemble, level_meta, Checks, LevelFacts, Verdict};
pub use bursts::{Bursts, BurstsAcc, ChunkSize};
pub use charts::{chart_data, ChartData, ChartsAcc};
pub use conventions::{convention_views, Convention, ConventionView, ConventionsAcc};
pub use dist::DistAcc;
pub use duration::{parse_duration, parse_duration_spelled, DurationError};
pub use imported::{ImportedFigure, ImportedRun};
pub use level::{
    LevelAggregator, LevelAggregators, LevelConfig, LevelFigures, DEFAULT_EXACT_SAMPLES,
};
pub use metrics::{
    summarize_level, AccountingError, ClockCheck, Counters, LevelOptions, LevelSummary,
    OutputTokens, PromptCache, RequestCounts, SourceAgreement, Stalls, SummaryAcc, Throughput,
    TurnSummary,
};
pub use outcome::Outcome;
pub use pacing::{pacing, Pacing, PacingAcc, TimerFloor, TimerFloorAcc};
pub use plateau::{Plateau, PlateauAcc, PlateauWindow};
pub use record::{
    Chunk, InputTokenSource, ProxyInfo, RecordSource, RequestRecord, ServerTiming, StampClock,
    StreamCounters, TokenCount, TokenSource, TokenSources, ToolChoice, CHUNK_SLACK,
};
pub use report::{
    definitions, level_report, FleetReport, LevelReport, MissingShard, Report, RunInfo,
    SearchProbe, SearchReport, ShardCheck, SCHEMA_VERSION,
};
pub use sink::RecordSink;
pub use slo::{
    goodput, Goodput, GoodputAcc, Slo, SloMetric, SloOp, SloParseError, SloResult, SloStat,
};
pub use stats::{Bucketing, Distribution, PERCENTILE_RULE};
pub use time_split::{RequestSplit, SlowRequest, TimeSplit, TimeSplitAcc};
pub use timeseries::{time_series, TimeBucket, TimeSeriesAcc};

/// Test helpers shared by the crate's unit tests.
#[cfg(test)]
pub(crate) mod testrng {
    /// A deterministic generator (a 64-bit LCG): each call gives a value in `0..m`.
    pub(crate) fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut s = seed;
        move |m: u64| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) % m
        }
    }
}
