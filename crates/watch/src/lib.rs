//! `cadence watch`: the endpoints you depend on, measured through the day. Small
//! probes on a schedule through the bench runner, kept in SQLite, served as a page with
//! charts, Prometheus metrics and incident webhooks, and reported offline.

#![warn(missing_docs)]

pub mod board;
mod columns;
pub mod config;
pub mod conn;
pub mod hub;
pub mod incident;
pub mod lifecycle;
pub mod metrics;
pub mod otlp;
pub mod page;
pub mod probe;
pub mod report;
mod rows;
pub mod shared;
pub mod shipper;
pub mod store;
mod untrusted;
pub mod vantage;
pub mod watcher;
pub mod web;
pub mod webhook;

pub use config::{Config, ConfigError, Probe, Target};
pub use hub::{spawn_hub, Hub, HubError, HubSetup};
pub use lifecycle::{spawn, Ended, Setup, Watch, WatchError};
pub use store::{Store, StoreError, SCHEMA_VERSION};
