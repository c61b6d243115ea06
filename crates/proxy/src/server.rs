//! Wiring: the client-facing HTTP/1.1 listener (limits, header timeout, smuggling
//! guard), the metrics listener (`/metrics`, `/stats`, `/health`), the alert loop and
//! graceful shutdown that drains streams and flushes records.

use crate::alert::{Alerts, Transition};
use crate::forward;
use crate::framing_guard::{GuardedIo, Verdicts};
use crate::live::{LagWindow, LiveWindow, WindowPart, WindowStats};
use crate::metrics::Metrics;
use crate::records::RecordWriter;
use crate::shared::Shared;
use crate::{ProxyConfig, ProxyError};
use cadence_transport::Clock;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// A running proxy.
pub struct Proxy {
    /// Where clients connect (the real port when bound to port 0).
    pub addr: SocketAddr,
    /// Where `/metrics` and `/stats` are served.
    pub metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    in_flight_done: mpsc::Receiver<()>,
    started_unix_ms: u64,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish()
    }
}

/// Binds the listeners, opens the records file, and serves in background tasks.
pub async fn spawn(config: ProxyConfig) -> Result<Proxy, ProxyError> {
    let (listener, addr, metrics_listener) = bind(&config).await?;
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (clock, started_unix_ms, records, otlp) = start_records(&config)?;
    let records_status = records.as_ref().and_then(RecordWriter::status);
    let (in_flight_tx, in_flight_done) = mpsc::channel(1);
    let (stop, stopped) = watch::channel(false);
    let mut shared = shared_state(config, clock, records, in_flight_tx, stopped.clone());
    shared.propagation = shared
        .config
        .tracing
        .as_ref()
        .map(|t| cadence_otlp::run::propagation(t.sample));
    shared.otlp = Mutex::new(otlp);
    let shared = Arc::new(shared);
    let tasks = start_tasks(&shared, listener, metrics_listener, records_status, stopped);
    Ok(Proxy {
        addr,
        metrics_addr,
        shared,
        stop,
        tasks,
        in_flight_done,
        started_unix_ms,
    })
}

/// Decides where the proxy listens: the client listener (refused if the upstream
/// leads back to it, a loop) and the optional metrics listener.
async fn bind(
    config: &ProxyConfig,
) -> Result<(TcpListener, SocketAddr, Option<TcpListener>), ProxyError> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|error| ProxyError::Bind {
            addr: config.listen,
            error,
        })?;
    let addr = listener.local_addr().map_err(|error| ProxyError::Bind {
        addr: config.listen,
        error,
    })?;
    if points_at(&config.upstream, addr).await {
        return Err(ProxyError::Loop {
            upstream: cadence_core::secret::redact_url(&config.upstream.to_string()),
            listen: addr,
        });
    }
    let metrics_listener = match config.metrics_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|error| ProxyError::Bind { addr: a, error })?,
        ),
        None => None,
    };
    Ok((listener, addr, metrics_listener))
}

/// Decides the shared state's sizes: the upstream client's pool, histogram buckets
/// from the alert bounds and timeouts, and the rolling window kept for the alerts.
fn shared_state(
    config: ProxyConfig,
    clock: Clock,
    records: Option<RecordWriter>,
    in_flight_tx: mpsc::Sender<()>,
    stop: watch::Receiver<bool>,
) -> Shared {
    // The upstream's reads keep their kernel receive time (`--timestamps`): a chunk's
    // time is when it reached the proxy, not when the proxy read it. Bytes held back by
    // a slow client are placed by `forward` (the gap that holds the wait).
    let connect = cadence_transport::client::ClientConfig {
        pool_size: 1024,
        connect_timeout: Duration::from_secs(10),
        http2: false,
    };
    let client = match &config.upstream_tls {
        Some(tls) => {
            cadence_transport::client::build_with_tls(&connect, config.timestamps, tls.clone())
        }
        None => cadence_transport::client::build_with(&connect, config.timestamps),
    };
    // Alert bounds become bucket bounds, and the top finite bucket stays above the
    // longest TTFT the timeouts allow (upstream headers + idle).
    let longest =
        (config.limits.upstream_header_timeout + config.limits.idle_timeout).as_secs_f64();
    let alert_bounds: Vec<f64> = config
        .alerts
        .iter()
        .filter_map(|r| r.bound_seconds())
        .chain((longest >= 1200.0).then_some(longest.ceil() + 1.0))
        .collect();
    let max_age = config
        .alerts
        .iter()
        .map(|r| r.window)
        .chain([crate::alert::MAX_WINDOW])
        .max()
        .unwrap_or(crate::alert::MAX_WINDOW);
    Shared {
        models: crate::metrics::ModelLabels::new(config.models.clone()),
        live: Mutex::new(LiveWindow::new(
            max_age.as_nanos() as u64,
            config.stats_budget,
        )),
        // The longest `/stats` window.
        lag: Mutex::new(LagWindow::new(Duration::from_secs(300).as_nanos() as u64)),
        alerts: Mutex::new(Alerts::new(config.alerts.clone())),
        metrics: Metrics::new(&alert_bounds),
        config,
        client,
        clock,
        next_index: AtomicU64::new(0),
        records,
        propagation: None,
        otlp: Mutex::new(None),
        in_flight: Mutex::new(Some(in_flight_tx)),
        via_id: format!("cadence-proxy-{:016x}", instance_id()),
        cut: AtomicBool::new(false),
        stop,
    }
}

/// Decides which background tasks run: the accept loop and lag probe always, the
/// metrics server, the records watch and the alert loop when configured.
fn start_tasks(
    shared: &Arc<Shared>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    records_status: Option<crate::WriterStatus>,
    stopped: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    tasks.spawn(accept_loop(listener, shared.clone(), stopped.clone()));
    if let Some(l) = metrics_listener {
        tasks.spawn(crate::metrics_server::serve(
            l,
            shared.clone(),
            stopped.clone(),
        ));
    }
    tasks.spawn(lag_loop(shared.clone(), stopped.clone()));
    if let Some(status) = records_status {
        tasks.spawn(watch_records(status, stopped.clone()));
    }
    if !shared.config.alerts.is_empty() {
        tasks.spawn(alert_loop(shared.clone(), stopped));
    }
    tasks
}

/// The run clock, its 0 on the wall clock, the record thread (the records file, whose
/// anchor puts this run's records on one timeline with earlier runs appended to it, and
/// the OTLP sink) and the OTLP exports (`--otlp`: spans, metrics), their origin the
/// clock's 0.
fn start_records(config: &ProxyConfig) -> Result<Started, ProxyError> {
    let target = cadence_otlp::run::Target {
        endpoint: &config.upstream,
        operation: "chat",
        model: "",
        stall_threshold: Duration::from_nanos(cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS),
        chunk_events: config.tracing.as_ref().map_or(0, |t| t.chunk_events),
        kind: cadence_otlp::proto::SpanKind::Server,
    };
    let spans = config.tracing.as_ref().map(|t| t.otlp.clone());
    let otlp = cadence_otlp::signals::start(spans, config.otlp_metrics.clone(), target)
        .map_err(|error| ProxyError::Otlp { error })?;
    let clock = Clock::start();
    let (export, sinks) = otlp.unzip();
    export
        .iter()
        .for_each(cadence_otlp::signals::Exports::set_origin_now);
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let anchor = cadence_core::runlog::Anchor {
        unix_ms: started_unix_ms,
    };
    let records = if config.records.is_some() || sinks.is_some() {
        Some(RecordWriter::with_spans(
            config.records.clone(),
            anchor,
            sinks,
        )?)
    } else {
        None
    };
    Ok((clock, started_unix_ms, records, export))
}

/// What [`start_records`] starts.
type Started = (
    Clock,
    u64,
    Option<RecordWriter>,
    Option<cadence_otlp::signals::Exports>,
);

/// Names a records write error (a full disk) the moment it happens, not at shutdown.
async fn watch_records(status: crate::WriterStatus, mut stopped: watch::Receiver<bool>) {
    tokio::select! {
        e = status.failed() => tracing::error!("cadence proxy: {e}"),
        _ = until_stopped(&mut stopped) => {}
    }
}

impl Proxy {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The current `/stats` document.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::to_value(crate::metrics_server::stats(&self.shared)).unwrap_or_default()
    }

    /// Stops accepting, lets in-flight streams finish for up to the drain timeout (then
    /// cuts them; they are recorded as aborted), and flushes the records file.
    /// Returns the number of records written.
    pub async fn shutdown(self) -> Result<u64, crate::RecordsError> {
        self.stop().await.records
    }

    /// [`Proxy::shutdown`], and with `--otlp` the spans still queued sent (waiting at
    /// most the export timeout): what came of both.
    pub async fn stop(mut self) -> Stopped {
        let _ = self.stop.send(true);
        let drain = self.shared.config.limits.drain_timeout;
        // Connection tasks end when their streams end, or at the drain timeout.
        let _ = tokio::time::timeout(drain + Duration::from_secs(1), async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        self.shared.cut.store(true, Ordering::Relaxed);
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        if let Ok(mut g) = self.shared.in_flight.lock() {
            g.take();
        }
        // Every stream task holds a token; all dropped means all recorded.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.in_flight_done.recv()).await;
        let export = self.shared.otlp.lock().ok().and_then(|mut g| g.take());
        let records = match Arc::try_unwrap(self.shared) {
            Ok(s) => match &s.records {
                Some(w) => {
                    // Level and run lines make the file a complete `cadence report` source.
                    let (level, run) = meta_lines(&s, self.started_unix_ms);
                    w.send_meta(level);
                    w.send_meta(run);
                    s.records.expect("checked").finish()
                }
                None => Ok(0),
            },
            Err(_) => {
                tracing::warn!("cadence proxy: some request tasks outlived shutdown");
                Ok(0)
            }
        };
        // The record thread has made its last spans (open sessions closed): send them,
        // and the metrics' last export.
        let (otlp, otlp_metrics) = export.map_or((None, None), |e| e.finish());
        Stopped {
            records,
            otlp,
            otlp_metrics,
        }
    }
}

/// What a stopped proxy says of its run.
#[derive(Debug)]
pub struct Stopped {
    /// Records written (0 without a records file), or why the file failed.
    pub records: Result<u64, crate::RecordsError>,
    /// The span export's figures (`--otlp`): spans made, exported, dropped and why.
    pub otlp: Option<cadence_core::report::OtlpExport>,
    /// The metrics export's figures (`--otlp-signals` with `metrics`).
    pub otlp_metrics: Option<cadence_core::report::OtlpMetricsExport>,
}

impl Stopped {
    /// What the proxy says of its OTLP exports at its end (a loss, else what went).
    pub fn said(&self) -> Vec<String> {
        let (spans, metrics) = (self.otlp.as_ref(), self.otlp_metrics.as_ref());
        cadence_otlp::signals::said(spans, metrics, false).0
    }
}

/// Whether `upstream` names the address this proxy listens on (itself).
async fn points_at(upstream: &http::Uri, listen: SocketAddr) -> bool {
    let Some(host) = upstream.host() else {
        return false;
    };
    let default_port = if upstream.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let port = upstream.port_u16().unwrap_or(default_port);
    if port != listen.port() {
        return false;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(addrs) = tokio::net::lookup_host((host, port)).await else {
        return false;
    };
    let local = |ip: std::net::IpAddr| ip.is_loopback() || ip.is_unspecified();
    addrs.into_iter().any(|a| {
        a.ip() == listen.ip()
            || (listen.ip().is_unspecified() && local(a.ip()))
            || (a.ip().is_unspecified() && local(listen.ip()))
    })
}

/// A number that tells this proxy instance from any other (time, process id and the
/// standard library's random hash keys).
fn instance_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let builder = Arc::new(shared.config.limits.http1());
    let slots = connection_slots(&shared);
    let mut backoff = AcceptBackoff::default();
    let mut conns = JoinSet::new();
    loop {
        let (stream, _peer) = tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = listener.accept() => match r {
                Ok(x) => {
                    backoff.succeeded();
                    x
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    backoff.failed(&e).await;
                    continue;
                }
            },
        };
        let Some(slot) = slots.take().await else {
            refuse_connection(&shared, stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let verdicts = Verdicts::default();
        let io = TokioIo::new(GuardedIo::new(stream, verdicts.clone()));
        let s = shared.clone();
        let conn_slot = slot.clone();
        let svc = service_fn(move |req| {
            let conflict = verdicts.next();
            let s = s.clone();
            let slot = conn_slot.clone();
            slot.request_started();
            async move { Ok::<_, Infallible>(forward::handle(s, conflict, slot, req).await) }
        });
        let builder = builder.clone();
        let mut stop = stopped.clone();
        let drain = shared.config.limits.drain_timeout;
        let cut_flag = shared.clone();
        conns.spawn(async move {
            let conn = builder.serve_connection(io, svc).with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => count_refused_head(&cut_flag, r),
                // Closed to make room for a new connection (FAULTS 99).
                _ = slot.state.evict.notified() => {}
                _ = until_stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    if tokio::time::timeout(drain, conn.as_mut()).await.is_err() {
                        cut_flag.cut.store(true, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    // Drain the connections (each bounded by the drain timeout).
    while conns.join_next().await.is_some() {}
}

/// The client connections this proxy holds at once: `--max-connections`, lowered to
/// what the descriptor limit allows (FAULTS 99).
fn connection_slots(shared: &Shared) -> Arc<crate::slots::Slots> {
    let wanted = shared.config.limits.max_connections;
    let fd_limit = crate::slots::fd_limit();
    let cap = crate::slots::cap_for_fd_limit(wanted, fd_limit);
    if cap < wanted {
        tracing::warn!(
            "cadence proxy: at most {cap} client connections at once (not {wanted}): the \
             descriptor limit is {} and each may need an upstream connection too; raise \
             `ulimit -n` for more",
            fd_limit.unwrap_or(0)
        );
    }
    crate::slots::Slots::new(cap)
}

/// Answers a connection beyond the cap `503` without reading it, and closes it.
fn refuse_connection(shared: &Shared, stream: tokio::net::TcpStream) {
    const BODY: &str = "{\"error\":{\"message\":\"too many connections to this cadence proxy\",\"type\":\"cadence_proxy\"}}\n";
    shared.metrics.rejected("connection_limit");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// How the accept loop waits after a failed `accept` (out of descriptors, mostly):
/// 10 ms, doubling to 1 s, back to 10 ms after a success; logged at most once per 10 s
/// with the number of failures since the last line (FAULTS 100).
struct AcceptBackoff {
    delay: Duration,
    failures: u64,
    logged: Option<tokio::time::Instant>,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff {
            delay: Self::FIRST,
            failures: 0,
            logged: None,
        }
    }
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MOST: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(10);

    fn succeeded(&mut self) {
        self.delay = Self::FIRST;
    }

    async fn failed(&mut self, e: &std::io::Error) {
        self.failures += 1;
        let now = tokio::time::Instant::now();
        if self
            .logged
            .is_none_or(|t| now.duration_since(t) >= Self::LOG_EVERY)
        {
            tracing::warn!(
                "cadence proxy: accept failed: {e} ({} time(s) since the last such line); \
                 retrying in up to {:?}",
                self.failures,
                Self::MOST
            );
            self.logged = Some(now);
            self.failures = 0;
        }
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Self::MOST);
    }
}

/// Counts a request head hyper refused itself (it answered 400 or 431 and closed):
/// the proxy's rejections are all in `cadence_rejected_requests_total` (FAULTS 108).
fn count_refused_head(shared: &Shared, ended: Result<(), hyper::Error>) {
    let Err(e) = ended else { return };
    if e.is_parse_too_large() {
        shared.metrics.rejected("head_too_large");
    } else if e.is_parse() {
        shared.metrics.rejected("malformed_head");
    }
}

/// The records file's level and run lines for the whole time the proxy ran: one
/// level (`live`) whose intended load is what arrived; the target and the command line
/// are the caller's ([`crate::RunFacts`]).
fn meta_lines(s: &Shared, started_unix_ms: u64) -> (String, String) {
    use cadence_core::runlog::{level_line, run_line, LevelMeta, RunChecks, RunMeta};
    let level = LevelMeta::new(0, "live traffic");
    let models = if s.config.models.is_empty() {
        "any (no --model allow-list)".to_string()
    } else {
        s.config.models.join(", ")
    };
    let mut run = RunMeta {
        run: cadence_core::RunInfo::new(
            s.config.run.target.clone(),
            "as proxied (chat, completions)",
            models,
            "proxy",
            started_unix_ms,
        ),
        checks: RunChecks::default(),
        search: None,
    };
    run.run.duration_s = s.clock.now_ns() as f64 / 1e9;
    run.run.command = s.config.run.command.clone();
    (level_line(&level), run_line(&run))
}

/// Resolves once shutdown was asked for (or the proxy handle is gone).
async fn until_stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Watches the proxy's own event loop (`cadence_transport::lag`): every tick goes to the
/// `cadence_proxy_loop_lag_seconds` histogram and the `/stats` window, and a stall long
/// enough to bend ITL figures is logged, at most once a minute.
async fn lag_loop(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    const WARN_OVER: Duration = Duration::from_millis(50);
    let mut last_warned: Option<u64> = None;
    let tick = |lag: Duration| {
        let now = shared.clock.now_ns();
        shared.metrics.loop_lag(lag);
        if let Ok(mut w) = shared.lag.lock() {
            w.push(now, lag.as_nanos() as u64);
        }
        if lag >= WARN_OVER && last_warned.is_none_or(|t| now.saturating_sub(t) >= 60_000_000_000) {
            last_warned = Some(now);
            tracing::warn!(
                "cadence proxy: its event loop stalled for {:.1} ms (CPU starved?); chunk \
                 times read meanwhile are late by up to that much (see /stats self_check)",
                lag.as_secs_f64() * 1e3
            );
        }
    };
    tokio::select! {
        _ = until_stopped(&mut stopped) => {}
        _ = cadence_transport::lag::watch(cadence_transport::lag::PERIOD, tick) => {}
    }
}

async fn alert_loop(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(shared.config.alert_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => return,
            _ = tick.tick() => {}
        }
        let now = shared.clock.now_ns();
        // Copy each window the rules need under the lock, summarize outside it.
        let windows: Vec<u64> = {
            let Ok(alerts) = shared.alerts.lock() else {
                return;
            };
            let mut w: Vec<u64> = alerts.rules().map(|r| r.window.as_nanos() as u64).collect();
            w.sort_unstable();
            w.dedup();
            w
        };
        let parts: Vec<(u64, WindowPart)> = {
            let Ok(mut live) = shared.live.lock() else {
                return;
            };
            live.evict(now);
            windows.iter().map(|&w| (w, live.window(now, w))).collect()
        };
        let summaries: Vec<(u64, WindowStats)> =
            parts.iter().map(|(w, p)| (*w, p.finish())).collect();
        let transitions = {
            let Ok(mut alerts) = shared.alerts.lock() else {
                return;
            };
            alerts.evaluate(now, |rule| {
                let w = rule.window.as_nanos() as u64;
                summaries
                    .iter()
                    .find(|(k, _)| *k == w)
                    .and_then(|(_, s)| rule.observe(&s.summary))
            })
        };
        for t in transitions {
            report_transition(&shared, t);
        }
    }
}

fn report_transition(shared: &Arc<Shared>, t: Transition) {
    let value = t
        .value
        .map_or("no samples".to_string(), |v| format!("{v:.3} {}", t.unit));
    if t.status == "firing" {
        tracing::warn!(alert = %t.alert, value = %value, "cadence proxy: alert firing");
    } else {
        tracing::warn!(alert = %t.alert, value = %value, "cadence proxy: alert resolved");
    }
    let Some(url) = shared.config.alert_webhook.clone() else {
        return;
    };
    let body = serde_json::to_vec(&t).unwrap_or_default();
    cadence_transport::get::post_json_in_background(&shared.client, &url, body, |e| {
        tracing::warn!("cadence proxy: the alert webhook failed: {e}")
    });
}
