//! The transport under both the load generator (`cadence-bench`) and the proxy
//! (`cadence-proxy`): one HTTP client (hyper's pool, and a lean HTTP/1.1 path read in
//! the request's task), one rule for resending after a stale connection, one
//! classification of client errors into outcome classes, the run clock, the event-loop
//! lag probe, the kernel receive timestamps of the client's reads, and the one bounded
//! GET of a run's side requests. Kept apart so the proxy needs none of the load
//! generator.

#![warn(missing_docs)]

pub mod chunk_time;
pub mod classify;
pub mod client;
pub mod clock;
pub mod get;
pub mod h1;
pub mod lag;
pub mod resend;
mod reuse;
pub mod rxstamp;
pub mod tls;
pub mod wrapped;

pub use chunk_time::Stamper;
pub use classify::{
    classify_client_error, classify_h1_error, error_chain, unreachable, Unreachable,
};
pub use client::{ClientConfig, HyperClient};
pub use clock::Clock;
pub use resend::send_resending_if_stale;
pub use rxstamp::{RxStamp, RxStamps, Timestamps};
