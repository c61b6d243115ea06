//! `cadence sim --twin`'s word on its own accuracy: requests that went past what the
//! twin was fitted on (more running, a deeper context, a longer prompt) are timed by
//! extrapolation; they are counted on `/metrics` and said once on the log, so a client
//! of the served twin learns which of its figures are guesses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cadence_engine::twin::{extrapolation, Reach, Twin};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The counters of a served twin (clones share them).
#[derive(Clone)]
pub struct TwinMetrics {
    twin: Arc<Twin>,
    served: Counter,
    extrapolated: Counter,
    said: Arc<AtomicBool>,
}

impl std::fmt::Debug for TwinMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwinMetrics").finish_non_exhaustive()
    }
}

impl TwinMetrics {
    /// The families in `registry`, for `twin`.
    pub fn register(registry: &mut Registry, twin: Arc<Twin>) -> TwinMetrics {
        let m = TwinMetrics {
            twin,
            served: Counter::default(),
            extrapolated: Counter::default(),
            said: Arc::new(AtomicBool::new(false)),
        };
        registry.register(
            "cadence_twin_requests",
            "Requests the twin served to their end",
            m.served.clone(),
        );
        registry.register(
            "cadence_twin_extrapolated_requests",
            "Requests that went past what the twin was fitted on (more running, a deeper context or a longer uncached prompt): their timing is extrapolated",
            m.extrapolated.clone(),
        );
        m
    }

    /// Brings the counters to the twin's `reach` so far; the first time requests go
    /// past the fit, says so (once) with how far. Returns that warning when said.
    pub fn observe(&self, reach: Reach) -> Option<String> {
        let served = reach.requests.saturating_sub(self.served.get());
        self.served.inc_by(served);
        let beyond = reach.beyond.saturating_sub(self.extrapolated.get());
        self.extrapolated.inc_by(beyond);
        if reach.beyond == 0 || self.said.swap(true, Ordering::Relaxed) {
            return None;
        }
        let w = extrapolation(&reach, &self.twin)?;
        tracing::warn!(
            "cadence sim --twin: {w} (counted as cadence_twin_extrapolated_requests_total)"
        );
        Some(w)
    }

    /// Requests counted as extrapolated so far.
    pub fn extrapolated(&self) -> u64 {
        self.extrapolated.get()
    }
}
