//! OpenTelemetry export of Cadence's measurements: each finished record one OTLP span
//! (GenAI conventions' names, Cadence's stream figures and stalls), sent over OTLP/HTTP
//! or OTLP/gRPC from a thread of its own so a slow collector never touches a measured request.

#![warn(missing_docs)]

pub mod config;
pub mod export;
pub mod grpc;
pub mod json;
pub mod metrics;
pub mod metrics_export;
pub mod metrics_proto;
pub mod probe;
pub mod proto;
pub mod run;
pub mod session;
pub mod signals;
pub mod sink;
pub mod span;

pub use config::{Config, Protocol, Signal, Signals};
pub use export::{Exporter, SpanQueue};
pub use metrics_export::{MetricsExporter, MetricsSink};
pub use sink::{IdGen, OtlpSink};
pub use span::{request_span, Shape, SpanIds};
