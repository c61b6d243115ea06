//! The state one sim serves from (its config, send log, request counter, engine and
//! the switch that cuts live streams), apart from the routes: the HTTP endpoints and
//! the WebSocket one both take it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::SimConfig;
use crate::engine_mode::{EngineHandle, EngineMetrics};
use crate::send_log::SendLog;
use crate::stream::Kill;
use crate::warp::{SimClock, Warp};

/// Shared state of one sim: its config, send log, request counter and the
/// switch that cuts live streams at the end of a drain. Cheap to clone.
#[derive(Clone)]
pub struct SimState {
    inner: Arc<Inner>,
}

struct Inner {
    config: SimConfig,
    metrics: Arc<EngineMetrics>,
    engine: std::sync::OnceLock<EngineHandle>,
    tracer: std::sync::OnceLock<crate::trace::Tracer>,
    log: SendLog,
    clock: SimClock,
    next_request: AtomicU64,
    kill: watch::Sender<bool>,
}

impl std::fmt::Debug for SimState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimState")
            .field("config", &self.inner.config)
            .field("requests", &self.inner.next_request.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SimState {
    /// A state with an in-memory send log (see [`SendLog::new`]).
    pub fn new(config: SimConfig) -> Self {
        SimState::with_send_log(config, SendLog::new())
    }

    /// A state recording into `log` (e.g. one with a file sink).
    pub fn with_send_log(config: SimConfig, log: SendLog) -> Self {
        SimState {
            inner: Arc::new(Inner {
                metrics: Arc::new(
                    EngineMetrics::new(&config.model, config.engine.is_some())
                        .with_speculation(config.spec_accept_len.map(crate::plan::draft_tokens))
                        .with_twin(config.twin.clone())
                        .with_pd_transfer(config.pd_transfer.is_some()),
                ),
                engine: std::sync::OnceLock::new(),
                tracer: std::sync::OnceLock::new(),
                clock: SimClock {
                    epoch: Instant::from_std(log.epoch()),
                    warp: Warp::new(config.freeze, config.slow),
                },
                config,
                log,
                next_request: AtomicU64::new(0),
                kill: watch::channel(false).0,
            }),
        }
    }

    /// Exports each request's server span with `tracer` (`--otlp`); a second call
    /// changes nothing.
    pub fn trace_with(&self, tracer: crate::trace::Tracer) {
        let _ = self.inner.tracer.set(tracer);
    }

    /// The span exporter, when the sim traces.
    pub(crate) fn tracer(&self) -> Option<&crate::trace::Tracer> {
        self.inner.tracer.get()
    }

    /// The configuration the sim serves with.
    pub fn config(&self) -> &SimConfig {
        &self.inner.config
    }

    /// The log of what was sent and when: the fidelity check's ground truth.
    pub fn send_log(&self) -> &SendLog {
        &self.inner.log
    }

    /// Requests received so far (the next arrival index).
    pub fn requests(&self) -> u64 {
        self.inner.next_request.load(Ordering::Relaxed)
    }

    /// Ends every live stream now with a body error (the connection is cut)
    /// and makes waiting handlers give up. Used when a drain times out.
    pub fn abort_streams(&self) {
        self.inner.kill.send_replace(true);
    }

    /// Counts a request and gives it its number (`x-cadence-request` when set).
    pub(crate) fn next_request(&self, given: Option<u64>) -> u64 {
        self.inner.metrics.requests.inc();
        self.number(given)
    }

    /// A request's number: `x-cadence-request` when set, else the next arrival's.
    pub(crate) fn number(&self, given: Option<u64>) -> u64 {
        given.unwrap_or_else(|| self.inner.next_request.fetch_add(1, Ordering::Relaxed))
    }

    /// The sim's start and its clock under the freeze and slow-down faults.
    pub(crate) fn clock(&self) -> &SimClock {
        &self.inner.clock
    }

    pub(crate) fn kill(&self) -> Kill {
        Kill(self.inner.kill.subscribe())
    }

    /// The server-side metrics served at `/metrics`.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.inner.metrics
    }

    /// The engine task (started on first use, inside the runtime), if configured.
    pub(crate) fn engine(&self) -> Option<&EngineHandle> {
        let spec = self.inner.config.engine.as_ref()?;
        Some(self.inner.engine.get_or_init(|| {
            EngineHandle::spawn(
                spec.clone(),
                self.inner.metrics.clone(),
                self.inner.clock.clone(),
                self.inner.config.inject.clone(),
                self.inner.config.twin.clone(),
            )
        }))
    }
}
