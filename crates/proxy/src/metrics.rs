//! The proxy's Prometheus metrics (`prometheus-client`, OpenMetrics text): latency
//! histograms in seconds with bounded labels, request and token counters, and a gauge
//! of streams in flight. Every observation comes from a finished `RequestRecord` by
//! core's definitions, so Prometheus and `cadence report` agree on what ITL means.

use cadence_core::{per_request, Outcome, RequestRecord};
use cadence_otlp::signals::Counted;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;

/// Bucket bounds in seconds: from 0.5 ms, dense where ITL and TTFT SLOs live (every
/// round SLO from 1 ms to 1 s is a bound, so `le` answers "how many met it" exactly),
/// up to 1200 s, above the longest default timeout. Alert bounds are added.
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06,
    0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
];

/// The route a request took, a fixed set so the label stays bounded: the dialect its
/// path names, or other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// A path one of the dialects serves (named `chat`, `anthropic`, …).
    Api(cadence_wire::Api),
    /// Any other path.
    Other,
}

impl Route {
    /// By path suffix, so `/v1/chat/completions` and `/openai/v1/chat/completions` match.
    pub fn of_path(path: &str) -> Route {
        match cadence_wire::Api::from_path(path) {
            None => Route::Other,
            Some(api) => Route::Api(api),
        }
    }

    /// The `route` label value: the dialect's name, or `other`.
    pub fn name(self) -> &'static str {
        match self {
            Route::Api(api) => api.name(),
            Route::Other => "other",
        }
    }

    /// The dialect its streams are decoded with.
    pub fn api(self) -> Option<cadence_wire::Api> {
        match self {
            Route::Api(api) => Some(api),
            Route::Other => None,
        }
    }
}

/// Maps request model names to label values: names on the allow-list pass, every other
/// name (and a missing one) becomes `other`, so a client cannot blow up the series
/// count (FAULTS 47).
#[derive(Debug, Clone, Default)]
pub struct ModelLabels {
    allowed: Vec<String>,
}

impl ModelLabels {
    /// Labels the `allowed` names as themselves (`--model`, repeatable).
    pub fn new(allowed: Vec<String>) -> Self {
        ModelLabels { allowed }
    }

    /// The label value of a request's model: itself when allowed, else `other`.
    pub fn label(&self, model: Option<&str>) -> String {
        match model {
            Some(m) if self.allowed.iter().any(|a| a == m) => m.to_string(),
            _ => "other".to_string(),
        }
    }
}

/// The labels of the per-stream series: latency, tokens, streams in flight.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    /// The model label ([`ModelLabels::label`]).
    pub model: String,
    /// The route label ([`Route::name`]).
    pub route: String,
}

/// The labels of the per-request series: request counts and durations.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The model label ([`ModelLabels::label`]).
    pub model: String,
    /// The route label ([`Route::name`]).
    pub route: String,
    /// The outcome class (`succeeded`, `http_5xx`, …).
    pub outcome: String,
}

type Hist<L> = Family<L, Histogram, Buckets>;

/// Builds each labelled histogram with the proxy's bucket bounds.
#[derive(Debug, Clone)]
pub struct Buckets(Arc<Vec<f64>>);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// All series the proxy exports.
pub struct Metrics {
    registry: Registry,
    ttft: Hist<StreamLabels>,
    itl: Hist<StreamLabels>,
    tpot: Hist<StreamLabels>,
    duration: Hist<OutcomeLabels>,
    requests: Family<OutcomeLabels, Counter>,
    output_tokens: Family<StreamLabels, Counter>,
    active: Family<StreamLabels, Gauge>,
    client_disconnects: Counter,
    rejected: Family<RejectLabels, Counter>,
    loop_lag: Histogram,
    upstream_resends: Counter,
    unmeasured: Counter,
    truncated: Family<StreamLabels, Counter>,
    otlp: Family<OtlpLabels, Counter>,
    otlp_metric_exports: Family<OtlpLabels, Counter>,
    /// Held while `otlp` and `otlp_metric_exports` catch up with the exporter's figures, so two scrapes at once
    /// add each span once.
    otlp_sync: std::sync::Mutex<()>,
}

/// The label of `otlp_spans` and `otlp_metric_exports`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpLabels {
    /// What came of a span: `exported`, `dropped_queue_full`, `dropped_failed`
    /// (its POST failed) or `rejected` (the collector refused it); of a metrics
    /// export: `exported` or `failed`.
    pub result: String,
}

/// The label of `rejected_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// Why the proxy answered itself: `connection_limit`, `head_too_large`, `body_too_large`,
    /// `conflicting_length`, `loop`, ….
    pub reason: String,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// `DEFAULT_BUCKETS` plus `extra` bounds (seconds), sorted, without duplicates.
pub fn buckets_with(extra: &[f64]) -> Vec<f64> {
    let mut b: Vec<f64> = DEFAULT_BUCKETS
        .iter()
        .copied()
        .chain(extra.iter().copied().filter(|x| x.is_finite() && *x > 0.0))
        .collect();
    b.sort_by(f64::total_cmp);
    b.dedup_by(|a, b| (*a - *b).abs() <= 1e-12 * b.abs());
    b
}

impl Metrics {
    /// `extra_bounds_s`: thresholds (seconds) that must be bucket bounds, e.g. alert
    /// bounds.
    pub fn new(extra_bounds_s: &[f64]) -> Metrics {
        let b = Buckets(Arc::new(buckets_with(extra_bounds_s)));
        let ttft: Hist<StreamLabels> = Family::new_with_constructor(b.clone());
        let itl: Hist<StreamLabels> = Family::new_with_constructor(b.clone());
        let tpot: Hist<StreamLabels> = Family::new_with_constructor(b.clone());
        let duration: Hist<OutcomeLabels> = Family::new_with_constructor(b);
        let requests = Family::<OutcomeLabels, Counter>::default();
        let output_tokens = Family::<StreamLabels, Counter>::default();
        let active = Family::<StreamLabels, Gauge>::default();
        let client_disconnects = Counter::default();
        let rejected = Family::<RejectLabels, Counter>::default();
        let loop_lag = Histogram::new(DEFAULT_BUCKETS.iter().copied());
        let upstream_resends = Counter::default();
        let unmeasured = Counter::default();
        let truncated = Family::<StreamLabels, Counter>::default();
        let otlp = Family::<OtlpLabels, Counter>::default();
        let otlp_metric_exports = Family::<OtlpLabels, Counter>::default();

        let mut m = Metrics {
            registry: Registry::with_prefix("cadence"),
            ttft,
            itl,
            tpot,
            duration,
            requests,
            output_tokens,
            active,
            client_disconnects,
            rejected,
            loop_lag,
            upstream_resends,
            unmeasured,
            truncated,
            otlp,
            otlp_metric_exports,
            otlp_sync: std::sync::Mutex::new(()),
        };
        m.register_latencies();
        m.register_counts();
        m
    }

    /// The stream latency histograms (seconds).
    fn register_latencies(&mut self) {
        let r = &mut self.registry;
        r.register_with_unit(
            "ttft",
            "Time to first token: first content-bearing chunk minus request sent upstream (succeeded streams)",
            Unit::Seconds,
            self.ttft.clone(),
        );
        r.register_with_unit(
            "itl",
            "Inter-token latency: every gap between consecutive content-bearing chunks (succeeded streams)",
            Unit::Seconds,
            self.itl.clone(),
        );
        r.register_with_unit(
            "tpot",
            "Time per output token per request: (last chunk - first chunk) / (output tokens - 1)",
            Unit::Seconds,
            self.tpot.clone(),
        );
        r.register_with_unit(
            "request_duration",
            "Request sent upstream to the end of the response, every outcome",
            Unit::Seconds,
            self.duration.clone(),
        );
    }

    /// Requests, tokens, streams and the proxy's own decisions, counted; then the
    /// proxy's own loop lag (registered last, so `/metrics` keeps its order).
    fn register_counts(&mut self) {
        let r = &mut self.registry;
        r.register(
            "requests",
            "Proxied requests by outcome (succeeded or one failure class)",
            self.requests.clone(),
        );
        r.register(
            "output_tokens",
            "Output tokens received, including partial output of failed requests",
            self.output_tokens.clone(),
        );
        r.register(
            "active_streams",
            "Requests in flight through the proxy",
            self.active.clone(),
        );
        r.register(
            "client_disconnects",
            "Clients that went away mid-response (upstream request cancelled)",
            self.client_disconnects.clone(),
        );
        r.register(
            "rejected_requests",
            "Requests the proxy answered itself without forwarding, by reason",
            self.rejected.clone(),
        );
        r.register(
            "upstream_resends",
            "Requests sent upstream a second time because the pooled connection was found closed before any response byte",
            self.upstream_resends.clone(),
        );
        r.register(
            "unmeasured_requests",
            "Requests forwarded on routes that are not measured (health checks, model lists, ...)",
            self.unmeasured.clone(),
        );
        r.register(
            "truncated_measurements",
            "Streams relayed whole whose record stopped keeping chunks at --max-chunks: it times the first ones and counts the rest",
            self.truncated.clone(),
        );
        r.register(
            "otlp_spans",
            "Spans of measured requests sent to the OTLP collector (--otlp), by result: exported, or dropped because the queue was full, the POST failed or the collector rejected them",
            self.otlp.clone(),
        );
        r.register(
            "otlp_metric_exports",
            "Exports of the live traffic's metrics to the OTLP collector (--otlp), by result: exported or failed (each a cumulative snapshot the next one makes good)",
            self.otlp_metric_exports.clone(),
        );
        r.register_with_unit(
            "proxy_loop_lag",
            "How late the proxy's 10 ms timer fired: chunk timestamps taken meanwhile are late by up to this",
            Unit::Seconds,
            self.loop_lag.clone(),
        );
    }

    /// A request was sent upstream a second time (its pooled connection was found closed).
    pub fn upstream_resent(&self) {
        self.upstream_resends.inc();
    }

    /// A request on a route that is not measured was forwarded.
    pub fn unmeasured(&self) {
        self.unmeasured.inc();
    }

    /// The exporters' figures so far (`--otlp`: spans, metric exports), which only
    /// grow: each result's counter is brought up to them.
    pub fn otlp(
        &self,
        spans: Option<&cadence_core::report::OtlpExport>,
        metrics: Option<&cadence_core::report::OtlpMetricsExport>,
    ) {
        let _one_at_a_time = self.otlp_sync.lock();
        cadence_otlp::signals::each_result(spans, metrics, |counted, result, n| {
            let family = match counted {
                Counted::Spans => &self.otlp,
                Counted::MetricExports => &self.otlp_metric_exports,
            };
            let c = family.get_or_create(&OtlpLabels {
                result: result.into(),
            });
            c.inc_by(n.saturating_sub(c.get()));
        });
    }

    /// One tick of the event-loop lag probe.
    pub fn loop_lag(&self, lag: std::time::Duration) {
        self.loop_lag.observe(lag.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// A stream started; the returned guard decrements the gauge when dropped.
    pub fn stream_started(&self, labels: &StreamLabels) -> ActiveGuard {
        let g = self.active.get_or_create(labels).clone();
        g.inc();
        ActiveGuard(g)
    }

    /// A client went away mid-response.
    pub fn client_disconnected(&self) {
        self.client_disconnects.inc();
    }

    /// The proxy answered a request itself, for `reason` (a fixed word).
    pub fn rejected(&self, reason: &str) {
        self.rejected
            .get_or_create(&RejectLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Records one finished request. Latency histograms take succeeded requests only
    /// (core's rule: partial output of a failure is not success latency); duration,
    /// counters and tokens take every request.
    pub fn observe(&self, rec: &RequestRecord, labels: &StreamLabels) {
        let ol = OutcomeLabels {
            model: labels.model.clone(),
            route: labels.route.clone(),
            outcome: rec.outcome.name().to_string(),
        };
        self.requests.get_or_create(&ol).inc();
        // Core's per-request formulas; an interval that ends before it starts is
        // skipped, as in every report (the proxy has no level to count it in).
        let mut bad = 0;
        if let Some(e2e) = per_request::e2e_ms(rec, &mut bad) {
            self.duration.get_or_create(&ol).observe(e2e / MS_PER_S);
        }
        let tokens = rec.output_token_count().count;
        if tokens > 0 {
            self.output_tokens.get_or_create(labels).inc_by(tokens);
        }
        if rec.chunks_truncated() {
            self.truncated.get_or_create(labels).inc();
        }
        if rec.outcome != Outcome::Succeeded {
            return;
        }
        // Core's formulas leave out a gap (or the TTFT) that holds a wait on a slow
        // client (`proxy.downstream_gaps`): it is the client's, not the upstream's.
        if let Some(t) = per_request::ttft_ms(rec, &mut bad) {
            self.ttft.get_or_create(labels).observe(t / MS_PER_S);
        }
        {
            let mut gaps = per_request::itl_gaps(rec, &mut bad).peekable();
            if gaps.peek().is_some() {
                let itl = self.itl.get_or_create(labels);
                for (gap_ns, _) in gaps {
                    itl.observe(gap_ns as f64 / per_request::NS_PER_S);
                }
            }
        }
        if let Some((t, _)) = per_request::tpot_and_speed(rec, &mut bad) {
            self.tpot.get_or_create(labels).observe(t / MS_PER_S);
        }
    }
}

/// Keeps the active-streams gauge honest whatever way a request ends.
#[derive(Debug)]
pub struct ActiveGuard(Gauge);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

const MS_PER_S: f64 = 1e3;

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, TokenCount, TokenSource};

    fn labels() -> StreamLabels {
        StreamLabels {
            model: "m".into(),
            route: "chat".into(),
        }
    }

    #[test]
    fn buckets_start_at_half_a_millisecond_and_pass_the_longest_timeout() {
        let b = buckets_with(&[]);
        assert_eq!(b[0], 0.0005);
        assert!(*b.last().unwrap() > 600.0);
        for slo in [0.001, 0.01, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0] {
            assert!(b.contains(&slo), "{slo} s is a bound");
        }
        let with = buckets_with(&[0.033, 0.05]);
        assert!(with.contains(&0.033));
        assert_eq!(
            with.len(),
            b.len() + 1,
            "a bound already there is not doubled"
        );
    }

    #[test]
    fn model_label_is_allow_listed() {
        let m = ModelLabels::new(vec!["llama".into()]);
        assert_eq!(m.label(Some("llama")), "llama");
        assert_eq!(m.label(Some("llama-2")), "other");
        assert_eq!(m.label(None), "other");
    }

    #[test]
    fn routes_by_path_suffix() {
        use cadence_wire::Api;
        assert_eq!(
            Route::of_path("/v1/chat/completions"),
            Route::Api(Api::Chat)
        );
        assert_eq!(
            Route::of_path("/x/v1/completions/"),
            Route::Api(Api::Completions)
        );
        assert_eq!(Route::of_path("/api/chat"), Route::Api(Api::Ollama));
        assert_eq!(
            Route::of_path("/v2/models/m/generate_stream"),
            Route::Api(Api::Kserve)
        );
        assert_eq!(Route::of_path("/v1/models"), Route::Other);
    }

    #[test]
    fn observe_follows_core_definitions() {
        let m = Metrics::new(&[]);
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = vec![
            Chunk(40_000_000, None),
            Chunk(50_000_000, None),
            Chunk(70_000_000, None),
        ];
        r.end_ns = Some(80_000_000);
        r.output_tokens = Some(TokenCount {
            count: 5,
            source: TokenSource::Usage,
        });
        m.observe(&r, &labels());
        let text = m.encode();
        for want in [
            r#"cadence_ttft_seconds_count{model="m",route="chat"} 1"#,
            r#"cadence_ttft_seconds_sum{model="m",route="chat"} 0.04"#,
            // Gaps 10 ms and 20 ms.
            r#"cadence_itl_seconds_count{model="m",route="chat"} 2"#,
            r#"cadence_itl_seconds_sum{model="m",route="chat"} 0.03"#,
            r#"cadence_itl_seconds_bucket{le="0.015",model="m",route="chat"} 1"#,
            // TPOT = 30 ms / 4.
            r#"cadence_tpot_seconds_sum{model="m",route="chat"} 0.0075"#,
            r#"cadence_output_tokens_total{model="m",route="chat"} 5"#,
            r#"cadence_requests_total{model="m",route="chat",outcome="succeeded"} 1"#,
            r#"cadence_request_duration_seconds_sum{model="m",route="chat",outcome="succeeded"} 0.08"#,
        ] {
            assert!(text.contains(want), "missing {want}:\n{text}");
        }
    }

    #[test]
    fn failed_requests_count_but_add_no_latency() {
        let m = Metrics::new(&[]);
        let mut r = RequestRecord::new(0, Outcome::Truncated);
        r.sent_ns = Some(0);
        r.chunks = vec![Chunk(10, None), Chunk(20, None)];
        r.end_ns = Some(30);
        m.observe(&r, &labels());
        let text = m.encode();
        assert!(text.contains(r#"outcome="truncated"} 1"#), "{text}");
        assert!(!text.contains("cadence_itl_seconds_count"), "{text}");
        assert!(
            text.contains(r#"cadence_output_tokens_total{model="m",route="chat"} 2"#),
            "{text}"
        );
    }

    /// A record whose chunks stopped at the ceiling: a truncated measurement, a
    /// succeeded request, its ITL over the kept chunks, its tokens over all of them.
    #[test]
    fn a_truncated_record_is_counted_and_times_its_kept_chunks() {
        let m = Metrics::new(&[]);
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = vec![Chunk(10_000_000, None), Chunk(30_000_000, None)];
        r.end_ns = Some(90_000_000);
        m.observe(&r, &labels());
        let truncated = r#"cadence_truncated_measurements_total{model="m",route="chat"}"#;
        assert!(!m.encode().contains(truncated));
        r.counters.chunks_not_kept = 5;
        m.observe(&r, &labels());
        let text = m.encode();
        for want in [
            &format!("{truncated} 1"),
            r#"cadence_requests_total{model="m",route="chat",outcome="succeeded"} 2"#,
            r#"cadence_itl_seconds_count{model="m",route="chat"} 2"#,
            // One TPOT: the truncated record has none.
            r#"cadence_tpot_seconds_count{model="m",route="chat"} 1"#,
            r#"cadence_output_tokens_total{model="m",route="chat"} 9"#,
        ] {
            assert!(text.contains(want), "missing {want}:\n{text}");
        }
    }

    #[test]
    fn active_gauge_returns_to_zero() {
        let m = Metrics::new(&[]);
        {
            let _g = m.stream_started(&labels());
            assert!(m
                .encode()
                .contains(r#"cadence_active_streams{model="m",route="chat"} 1"#));
        }
        assert!(m
            .encode()
            .contains(r#"cadence_active_streams{model="m",route="chat"} 0"#));
    }
}
