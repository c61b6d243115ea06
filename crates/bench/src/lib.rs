//! The load generator: an executor that timestamps every body read before parsing,
//! a runner that drives load shapes and accounts for every request, and a sink that
//! writes records as the run goes.

#![warn(missing_docs)]

pub mod agent;
pub mod agent_trace;
pub mod arrivals;
pub mod body;
pub mod coalesce;
pub mod cpu;
pub mod dataset;
pub mod exec;
pub mod fdlimit;
pub mod floor;
pub mod progress;
pub mod prompts;
pub mod propagate;
pub mod runner;
pub mod scrape;
pub mod search;
pub mod session;
pub mod shard;
pub mod sink;
mod stoppable;
pub mod target;
pub mod tokenizer;
pub mod trace;
pub mod workload;

pub use arrivals::ArrivalProcess;
pub use exec::{Cancel, Timeouts};
pub use runner::{
    run, run_placed, Load, Placement, RunContext, RunPlan, RunSummary, StopReason, SKIPPED,
};
