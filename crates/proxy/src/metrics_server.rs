//! The metrics listener (`/metrics`, `/stats`, `/health`), served with the same guards
//! as the client-facing one: a request head not whole within the header timeout (or a
//! keep-alive connection silent that long) is closed, and connections are capped, so
//! a scraper that trickles or idles cannot hold the proxy's descriptors (FAULTS 152).
//! `/stats` is built here too, from the live windows, the alerts and the loop lag.

use crate::live::{LagStats, WindowPart, WindowStats};
use crate::shared::Shared;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Metrics connections served at once; more wait in the kernel's accept queue.
pub(crate) const METRICS_CONNECTIONS: usize = 64;

/// Serves the metrics routes on `listener` until `stopped`; each connection is bounded
/// by the proxy's header timeout, and a connection still open at shutdown gets a
/// second to finish its answer.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let builder = Arc::new(shared.config.limits.http1());
    let svc = TowerToHyperService::new(app(shared));
    let slots = Arc::new(Semaphore::new(METRICS_CONNECTIONS));
    let mut conns = JoinSet::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let stream = tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!("metrics listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (builder, svc, mut stop) = (builder.clone(), svc.clone(), stopped.clone());
        conns.spawn(async move {
            let _slot = slot;
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = until_stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
                }
            }
        });
    }
    while conns.join_next().await.is_some() {}
}

/// Resolves once shutdown was asked for (or the proxy handle is gone).
async fn until_stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

fn app(shared: Arc<Shared>) -> axum::Router {
    async fn metrics(State(s): State<Arc<Shared>>) -> impl IntoResponse {
        let (spans, exports) = match s.otlp.lock().ok().as_ref().and_then(|g| g.as_ref()) {
            Some(e) => (e.spans_summary(), e.metrics_summary()),
            None => (None, None),
        };
        s.metrics.otlp(spans.as_ref(), exports.as_ref());
        (
            [(
                http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            s.metrics.encode(),
        )
    }
    async fn stats_json(State(s): State<Arc<Shared>>) -> impl IntoResponse {
        axum::Json(stats(&s))
    }
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/stats", get(stats_json))
        .route("/health", get(|| async { "ok\n" }))
        .with_state(shared)
}

/// `/stats`: the rolling windows, the alerts, and the proxy's own timing health.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub uptime_s: f64,
    pub percentile_rule: &'static str,
    pub windows: Vec<WindowStats>,
    pub alerts: Vec<crate::alert::AlertStatus>,
    pub self_check: SelfCheck,
}

/// How late the proxy's 10 ms timer fired in each window: chunk timestamps taken in a
/// stall are late by up to the stall, so large values here qualify the figures above.
#[derive(Debug, Serialize)]
pub struct SelfCheck {
    pub loop_lag: Vec<LagStats>,
}

pub(crate) fn stats(shared: &Shared) -> Stats {
    let now = shared.clock.now_ns();
    let parts: Vec<WindowPart> = match shared.live.lock() {
        Ok(mut live) => {
            live.evict(now);
            [60u64, 300]
                .iter()
                .map(|s| live.window(now, s * 1_000_000_000))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    let windows = parts.iter().map(WindowPart::finish).collect();
    let loop_lag = match shared.lag.lock() {
        Ok(w) => [60u64, 300]
            .iter()
            .map(|s| w.summary(now, s * 1_000_000_000))
            .collect(),
        Err(_) => Vec::new(),
    };
    Stats {
        uptime_s: now as f64 / 1e9,
        percentile_rule: cadence_core::PERCENTILE_RULE,
        windows,
        alerts: shared.alerts.lock().map(|a| a.status()).unwrap_or_default(),
        self_check: SelfCheck { loop_lag },
    }
}
