//! What every request handler of a proxy shares (its config, client, clock, sinks and
//! shutdown switches), apart from the listeners that hand requests to them.

use crate::alert::Alerts;
use crate::live::{LagWindow, LiveWindow};
use crate::metrics::{Metrics, StreamLabels};
use crate::records::RecordWriter;
use crate::ProxyConfig;
use cadence_core::{RecordSink, RequestRecord};
use cadence_transport::client::HyperClient;
use cadence_transport::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};

/// State every request handler shares.
pub(crate) struct Shared {
    pub config: ProxyConfig,
    pub client: HyperClient,
    pub clock: Clock,
    pub next_index: AtomicU64,
    pub metrics: Metrics,
    pub models: crate::metrics::ModelLabels,
    pub live: Mutex<LiveWindow>,
    /// The proxy's own event-loop lag (see `lag_loop`).
    pub lag: Mutex<LagWindow>,
    pub alerts: Mutex<Alerts>,
    /// The record thread: the records file and the span exporter's sink.
    pub records: Option<RecordWriter>,
    /// `--otlp`: the trace context measured requests continue (`None`: not traced).
    pub propagation: Option<cadence_core::trace::Propagation>,
    /// `--otlp`: the span and metrics exports, finished at shutdown; their figures go
    /// to `/metrics`.
    pub otlp: Mutex<Option<cadence_otlp::signals::Exports>>,
    /// Cloned by every stream; shutdown waits until all clones are gone.
    pub in_flight: Mutex<Option<mpsc::Sender<()>>>,
    /// This proxy's name in the `Via` header it adds upstream: a request arriving
    /// with it already passed through here (a loop).
    pub via_id: String,
    /// Set at shutdown once the drain timeout has passed: streams still open are cut by
    /// the proxy (`aborted_at_deadline`), not left by their clients.
    pub cut: AtomicBool,
    /// Turns true when shutdown begins (WebSocket sessions, which outlive their HTTP
    /// connection, watch it to drain).
    pub stop: watch::Receiver<bool>,
}

impl Shared {
    /// The proxy's tap: hands one finished request to every sink (Prometheus, the
    /// rolling windows), then the record itself to the records file's thread.
    pub fn finish(&self, rec: RequestRecord, labels: &StreamLabels) {
        let mut metrics = |r: &RequestRecord| self.metrics.observe(r, labels);
        match self.live.lock() {
            Ok(mut live) => {
                let sinks: &mut [&mut dyn RecordSink] = &mut [&mut metrics, &mut *live];
                sinks.accept(&rec);
            }
            Err(_) => metrics.accept(&rec),
        }
        if let Some(w) = &self.records {
            w.send(rec);
        }
    }

    pub fn in_flight_token(&self) -> Option<mpsc::Sender<()>> {
        self.in_flight.lock().ok().and_then(|g| g.clone())
    }
}
