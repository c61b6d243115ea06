//! The ground floor of Cadence: the per-request record every source produces, the
//! outcome classes of FAULTS.md, exact and bucketed distributions, durations, seeded
//! generators and secret redaction. The crates that only read or write records (the
//! wire parser, the transport, the simulator) stand on this alone, apart from the
//! analysis in `cadence-core`. Pure but for one thing: no socket, clock or async
//! runtime, and no file but the one capped reader of every file input ([`input`]).

#![warn(missing_docs)]

pub mod dist;
pub mod duration;
pub mod input;
pub mod outcome;
pub mod record;
pub mod rng;
pub mod secret;
pub mod sink;
pub mod stats;
pub mod trace;
pub mod wallclock;

pub use dist::DistAcc;
pub use duration::{parse_duration, parse_duration_spelled, DurationError};
pub use outcome::Outcome;
pub use record::{
    Chunk, InputTokenSource, ProxyInfo, RecordSource, RequestRecord, ServerTiming, StampClock,
    StreamCounters, TokenCount, TokenSource, TokenSources, ToolChoice, CHUNK_SLACK,
};
pub use sink::RecordSink;
pub use stats::{Bucketing, Distribution, PERCENTILE_RULE};
