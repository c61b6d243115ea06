//! One probe: a small closed-loop bench level through `cadence_bench::run` (the same
//! request path, kernel receive timestamps, outcome classes and per-request timeouts as
//! `cadence bench`), summarized by core's definitions into a probe row and its request
//! rows, and judged against the target's SLOs.

use crate::config::{Probe, Prompts, Target};
use crate::otlp::Otlp;
use crate::store::{ProbeRow, RequestRow};
use cadence_bench::body::BodySpec;
use cadence_bench::dataset::{self, DatasetOptions};
use cadence_bench::progress::Progress;
use cadence_bench::prompts::{Counter, PromptGen};
use cadence_bench::workload::{RequestFactory, WorkItem};
use cadence_bench::{Load, RunContext, RunPlan, StopReason, Timeouts};
use cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS;
use cadence_core::slo::{over_error_ceiling, probe_passes};
use cadence_core::{
    per_request, summarize_level, Distribution, LevelOptions, RecordSink, RequestCounts,
};
use cadence_core::{LevelSummary, RequestRecord};
use cadence_otlp::span::Shape;
use cadence_records::{RecordThread, Sinks};
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::{Clock, Timestamps};
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;

/// A target made ready to probe: its client, request factory and credentials, built
/// once at start.
pub struct Prepared {
    /// The target as configured.
    pub target: Target,
    /// The endpoint as it may be shown (no credentials, no query values).
    pub display: String,
    cx: Arc<RunContext>,
    /// The endpoint, dialect and model, for the spans' attributes (`--otlp`).
    endpoint: http::Uri,
    api: cadence_wire::Api,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prepared({})", self.target.name)
    }
}

/// Why a target cannot be probed as configured (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("target {target:?}: {reason}")]
pub struct PrepareError {
    /// The target's name.
    pub target: String,
    /// What is wrong, in words.
    pub reason: String,
}

/// The prompt every request asks (synthetic, or the user's), or the dataset's entries
/// (single-turn, in file order: dispatch `k` of every probe sends entry `k`).
fn prompts(p: &Probe) -> Result<(Vec<String>, Vec<WorkItem>), String> {
    match &p.prompts {
        Prompts::Synthetic => {
            let gen = PromptGen::builtin(Counter::Words).map_err(|e| e.to_string())?;
            let mut rng = rand::rngs::SmallRng::seed_from_u64(0x77a7c4);
            Ok((
                vec![gen.prompt(p.prompt_tokens as usize, &mut rng, false)],
                Vec::new(),
            ))
        }
        Prompts::Text(text) => Ok((vec![text.clone()], Vec::new())),
        Prompts::Dataset(path) => {
            let at = |e: &dyn std::fmt::Display| format!("dataset {}: {e}", path.display());
            let text = cadence_core::input::read_text(path, cadence_core::input::DATASET)
                .map_err(|e| e.to_string())?;
            let items = dataset::parse_auto(&text, &Counter::Words).map_err(|e| at(&e))?;
            let items = dataset::prepare(items, &DatasetOptions::default(), &Counter::Words)
                .map_err(|e| at(&e))?;
            Ok((Vec::new(), items))
        }
    }
}

impl Prepared {
    /// `builtin_model`: the model a target without `model` sends (the built-in
    /// simulator's); `None` makes `model` required.
    pub fn new(t: &Target, builtin_model: Option<&str>) -> Result<Prepared, PrepareError> {
        let err = |reason: String| PrepareError {
            target: t.name.clone(),
            reason,
        };
        let resolved = cadence_bench::target::Target::resolve(&t.url, t.api)
            .map_err(|e| err(format!("url: {e}")))?;
        let api_key = match &t.key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return Err(err(format!(
                        "key_env = {var:?}, but the environment variable {var} is not set"
                    )))
                }
            },
        };
        let mut extra = Vec::new();
        for (k, v) in &t.headers {
            extra.push(
                client::parse_header(&format!("{k}: {v}"))
                    .map_err(|e| err(format!("headers: {e}")))?,
            );
        }
        let credentials =
            cadence_bench::target::Credentials::new(resolved.api, api_key.as_deref(), &extra)
                .map_err(err)?;
        let model = t
            .model
            .clone()
            .or(builtin_model.map(str::to_string))
            .ok_or_else(|| err("model is needed (the model name the endpoint serves)".into()))?;
        let body = BodySpec {
            api: resolved.api,
            path: resolved.endpoint.path().to_string(),
            model,
            max_tokens: Some(t.probe.max_tokens),
            extra: t.probe.extra_body.clone(),
        };
        let (prompts, items) = prompts(&t.probe).map_err(err)?;
        let mut factory = RequestFactory::new(
            resolved.endpoint.clone(),
            credentials.headers,
            body,
            prompts,
        );
        factory.items = items;
        let deadline = t.probe.deadline;
        let http = client::build_with_ca(
            &ClientConfig {
                pool_size: t.probe.concurrency as usize,
                connect_timeout: deadline.min(Duration::from_secs(10)),
                http2: false,
            },
            Timestamps::Kernel,
            t.ca_file.as_deref(),
        )
        .map_err(|e| err(format!("ca_file: {e}")))?;
        let cx = RunContext {
            client: http,
            factory,
            timeouts: Timeouts {
                connect: deadline.min(Duration::from_secs(10)),
                header: deadline,
                first_token: deadline,
                idle: deadline,
                total: deadline,
                max_response_bytes: cadence_bench::exec::DEFAULT_MAX_RESPONSE_BYTES,
                max_chunks: cadence_bench::exec::DEFAULT_MAX_CHUNKS,
            },
            api: resolved.api,
            strict: false,
            redactor: credentials.redactor,
            progress: Progress::new(None, false),
            tokenizer: None,
            propagation: None,
        };
        Ok(Prepared {
            target: t.clone(),
            display: resolved.display(),
            cx: Arc::new(cx),
            endpoint: resolved.endpoint,
            api: resolved.api,
        })
    }

    /// What this target's spans and metric series carry (`--otlp`): its name, model,
    /// operation and server (the host and port alone, never the URL's userinfo), its
    /// times from `origin_unix_ns`.
    pub fn otlp_shape(&self, origin_unix_ns: u64, chunk_events: u32) -> Shape {
        let target = cadence_otlp::run::Target {
            endpoint: &self.endpoint,
            operation: cadence_otlp::run::operation(self.api, self.endpoint.path()),
            model: &self.cx.factory.body.model,
            stall_threshold: Duration::from_nanos(DEFAULT_STALL_THRESHOLD_NS),
            chunk_events,
            kind: cadence_otlp::proto::SpanKind::Client,
        };
        Shape {
            origin_unix_ns,
            target: Some(self.target.name.clone()),
            ..cadence_otlp::run::shape(&target)
        }
    }

    /// Runs one probe, exported through `otlp` when given (after it ended). `None` when
    /// `stop` fired first (shutdown): an interrupted probe is not a measurement and is
    /// not kept.
    pub async fn run(
        &self,
        stop: impl std::future::Future<Output = ()>,
        otlp: Option<&Otlp>,
    ) -> Option<(ProbeRow, Vec<RequestRow>)> {
        let p = &self.target.probe;
        let plan = RunPlan {
            load: Load::Closed {
                concurrency: p.concurrency,
            },
            requests: Some(u64::from(p.requests)),
            // The probe deadline: sending stops, in-flight requests get a short grace,
            // then are aborted (a hung target costs one deadline, not the watcher).
            duration: Some(p.deadline),
            warmup: 0,
            grace: (p.deadline / 10).min(Duration::from_secs(2)),
            level: 0,
            stop_when_saturated: false,
        };
        let (sender, thread) = match RecordThread::start(Collect::default()) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!("cadence watch: {e}");
                return None;
            }
        };
        let clock = Clock::start();
        let started_ns = now_ns();
        let summary = cadence_bench::run(self.cx.clone(), &plan, clock, sender, stop).await;
        let ended_ns = now_ns();
        let (started_ms, ended_ms) = (
            (started_ns / 1_000_000) as i64,
            (ended_ns / 1_000_000) as i64,
        );
        let records = thread.finish().ok()?.0;
        if summary.stop == StopReason::Interrupted {
            return None;
        }
        let level = summarize_level(
            &records,
            &LevelOptions {
                intended: Some(summary.intended),
                dropped: summary.dropped,
                ..LevelOptions::default()
            },
        );
        let mut row = probe_row(&self.target, started_ms, ended_ms, &level);
        row.loop_lag_p99_ms = Some(summary.loop_lag.0.as_secs_f64() * 1e3);
        let reqs = records.iter().map(request_row).collect();
        if let Some(o) = otlp {
            let shape = self.otlp_shape(started_ns, o.chunk_events());
            o.probe(&shape, (started_ns, ended_ns), &row, &records);
        }
        Some((row, reqs))
    }
}

/// The probe's error-rate ceiling (the target's `max_error_rate`) in the watch's words:
/// the probe breaches (bench's words name its flag and exit code).
fn probe_error_ceiling(counts: &RequestCounts, max: f64) -> Option<String> {
    over_error_ceiling(counts, max)
        .map(|over| format!("{over} (the target's max_error_rate): the probe breaches"))
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    (now_ns() / 1_000_000) as i64
}

/// Unix time in nanoseconds.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The probe's aggregates and its verdict: every SLO, and the error-rate ceiling.
pub fn probe_row(t: &Target, started_ms: i64, ended_ms: i64, level: &LevelSummary) -> ProbeRow {
    let p = &t.probe;
    let mut detail: Vec<String> = t
        .slos
        .iter()
        .map(|s| {
            let r = s.evaluate(level);
            let observed = r
                .observed
                .map_or("no samples".to_string(), |v| format!("{v:.3} {}", r.unit));
            let verdict = if r.pass { "ok" } else { "BREACH" };
            format!("{}: {observed} {verdict}", r.slo)
        })
        .collect();
    if let Some(why) = probe_error_ceiling(&level.requests, p.max_error_rate) {
        detail.push(why);
    }
    if level.requests.succeeded == 0 {
        // A dead target says why: `no request succeeded: 2 connect_error`.
        let why = crate::rows::failures(&level.requests.failed, level.requests.aborted);
        detail.push(match why {
            Some(w) => format!("no request succeeded: {w}"),
            None => "no request succeeded".into(),
        });
    }
    let stat = |d: &Option<Distribution>, f: fn(&Distribution) -> f64| d.as_ref().map(f);
    ProbeRow {
        id: 0,
        target: t.name.clone(),
        started_ms,
        ended_ms,
        sent: level.requests.sent,
        succeeded: level.requests.succeeded,
        failed: level.requests.failed_total(),
        aborted: level.requests.aborted,
        failed_by_class: level.requests.failed.clone(),
        ttft_p50_ms: stat(&level.ttft, |d| d.p50),
        ttft_p99_ms: stat(&level.ttft, |d| d.p99),
        itl_p50_ms: stat(&level.itl, |d| d.p50),
        itl_p99_ms: stat(&level.itl, |d| d.p99),
        output_tok_s: stat(&level.output_speed_tok_s, |d| d.p50),
        slo_ok: probe_passes(level, &t.slos, p.max_error_rate),
        slo_detail: detail,
        clock: level.clock.as_ref().and_then(|c| {
            match (c.kernel_requests > 0, c.user_requests > 0) {
                (true, false) => Some("kernel".to_string()),
                (false, true) => Some("user".to_string()),
                (true, true) => Some("mixed".to_string()),
                (false, false) => None,
            }
        }),
        read_delay_p99_ms: level
            .clock
            .as_ref()
            .and_then(|c| c.read_delay.as_ref())
            .map(|d| d.p99),
        // The runner's figure, set by the caller.
        loop_lag_p99_ms: None,
        merged_reads: level.clock.as_ref().map(|c| c.multi_event_reads),
    }
}

/// One request's row: its outcome, TTFT, E2E, chunks, output tokens and the median and
/// longest of its own ITL gaps.
pub fn request_row(r: &RequestRecord) -> RequestRow {
    let mut bad = 0;
    let mut gaps: Vec<f64> = per_request::itl_gaps(r, &mut bad)
        .map(|(g, _)| per_request::ms(g))
        .collect();
    let itl = Distribution::from_samples(&mut gaps);
    let tokens = r.output_token_count().count;
    RequestRow {
        idx: r.index,
        outcome: r.outcome.name().to_string(),
        ttft_ms: per_request::ttft_ms(r, &mut bad),
        e2e_ms: per_request::e2e_ms(r, &mut bad),
        chunks: r.chunks.len() as u64,
        output_tokens: (r.was_sent() && (tokens > 0 || !r.chunks.is_empty())).then_some(tokens),
        itl_p50_ms: itl.as_ref().map(|d| d.p50),
        itl_max_ms: itl.as_ref().map(|d| d.max),
    }
}

/// The probe's records, kept (a probe is a handful of requests).
#[derive(Default)]
struct Collect(Vec<RequestRecord>);

impl RecordSink for Collect {
    fn accept(&mut self, record: &RequestRecord) {
        self.0.push(record.clone());
    }
}

impl Sinks for Collect {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_ceiling_is_said_in_the_watch_s_words() {
        let counts = RequestCounts {
            sent: 5,
            succeeded: 3,
            failed: [("http_5xx".to_string(), 2)].into(),
            ..RequestCounts::default()
        };
        assert_eq!(
            probe_error_ceiling(&counts, 0.05).as_deref(),
            Some("error rate 40.0 % (2 of 5 sent requests failed) is over the ceiling of 5 % (the target's max_error_rate): the probe breaches")
        );
        assert_eq!(probe_error_ceiling(&counts, 0.4), None);
    }
}
