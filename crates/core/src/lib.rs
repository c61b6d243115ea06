//! Cadence's pure core: the per-request record every source produces, the outcome
//! classes of FAULTS.md, and the statistics and report model computed from records.
//! Nothing here touches a socket, a clock, a file or an async runtime.

pub mod outcome;
pub mod record;

pub use outcome::Outcome;
pub use record::{Chunk, RequestRecord, StreamCounters, TokenCount, TokenSource};
