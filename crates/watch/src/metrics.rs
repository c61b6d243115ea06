//! The watcher's Prometheus series, named as the proxy names its own (`prometheus-client`,
//! OpenMetrics text, a `cadence_` prefix, seconds as the unit): gauges of each target's
//! last probe, its SLO state, and counters of probes and requests.

use crate::otlp::Otlp;
use crate::shared::ShipState;
use crate::store::ProbeRow;
use cadence_core::outcome::Outcome;
use cadence_otlp::signals::Counted;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type F64Gauge = Gauge<f64, AtomicU64>;

/// The labels of a per-target series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// The target's name.
    pub target: String,
}

/// The labels of a per-target quantile.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuantileLabels {
    /// The target's name.
    pub target: String,
    /// The quantile (`0.5`, `0.99`).
    pub quantile: String,
}

/// The labels of a per-target count by result.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The target's name.
    pub target: String,
    /// The result (`pass`, `breach`).
    pub result: String,
}

/// The labels of a per-target count by outcome class.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The target's name.
    pub target: String,
    /// The outcome class, as the proxy and the records name it (`succeeded`,
    /// `http_5xx`, `aborted_at_deadline`, …: [`Outcome::name`]).
    pub outcome: String,
}

/// The labels of the hub's per-vantage series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VantageLabels {
    /// The target's name.
    pub target: String,
    /// The vantage's name.
    pub vantage: String,
}

/// The labels of the hub's per-vantage quantile.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VantageQuantileLabels {
    /// The target's name.
    pub target: String,
    /// The vantage's name.
    pub vantage: String,
    /// The quantile (`0.5`, `0.99`).
    pub quantile: String,
}

/// `watch serve`'s `/metrics`: each (target, vantage)'s latest probe in the shared
/// store as gauges labelled by both, so one scrape of the hub lets Prometheus alert on
/// any vantage, and on one vantage drifting from the others. `probes`: the store's
/// recent probes, in time order (the last of each pair is the one shown).
pub fn encode_vantages(probes: &[crate::shared::VantageProbe]) -> String {
    let mut latest: std::collections::BTreeMap<(&str, &str), &ProbeRow> = Default::default();
    for p in probes {
        latest.insert((p.probe.target.as_str(), p.vantage.as_str()), &p.probe);
    }
    let ttft = Family::<VantageQuantileLabels, F64Gauge>::default();
    let itl = Family::<VantageQuantileLabels, F64Gauge>::default();
    let slo_ok = Family::<VantageLabels, Gauge>::default();
    let last = Family::<VantageLabels, F64Gauge>::default();
    let mut r = Registry::with_prefix("cadence_watch_vantage");
    r.register_with_unit(
        "ttft",
        "Time to first token of the latest probe of this target from this vantage",
        Unit::Seconds,
        ttft.clone(),
    );
    r.register_with_unit(
        "itl",
        "Inter-token latency of the latest probe of this target from this vantage",
        Unit::Seconds,
        itl.clone(),
    );
    r.register(
        "slo_ok",
        "1 when the latest probe of this target from this vantage met its SLOs, else 0",
        slo_ok.clone(),
    );
    r.register_with_unit(
        "last_probe_timestamp",
        "Unix time the latest probe of this target from this vantage started",
        Unit::Seconds,
        last.clone(),
    );
    for ((target, vantage), p) in latest {
        let l = VantageLabels {
            target: target.into(),
            vantage: vantage.into(),
        };
        for (fam, q, v) in [
            (&ttft, "0.5", p.ttft_p50_ms),
            (&ttft, "0.99", p.ttft_p99_ms),
            (&itl, "0.5", p.itl_p50_ms),
            (&itl, "0.99", p.itl_p99_ms),
        ] {
            fam.get_or_create(&VantageQuantileLabels {
                target: target.into(),
                vantage: vantage.into(),
                quantile: q.into(),
            })
            .set(v.map_or(f64::NAN, |ms| ms / 1e3));
        }
        slo_ok.get_or_create(&l).set(i64::from(p.slo_ok));
        last.get_or_create(&l).set(p.started_ms as f64 / 1e3);
    }
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

/// Every series `/metrics` serves.
pub struct Metrics {
    registry: Registry,
    ttft: Family<QuantileLabels, F64Gauge>,
    itl: Family<QuantileLabels, F64Gauge>,
    output_speed: Family<TargetLabels, F64Gauge>,
    slo_ok: Family<TargetLabels, Gauge>,
    last_probe: Family<TargetLabels, F64Gauge>,
    probe_duration: Family<TargetLabels, F64Gauge>,
    probes: Family<ResultLabels, Counter>,
    requests: Family<OutcomeLabels, Counter>,
    loop_lag: Family<TargetLabels, F64Gauge>,
    /// The shipper's state and its two gauges, when this watcher feeds a shared store.
    ship: Option<(Arc<ShipState>, Gauge, Gauge)>,
    /// The OTLP export (`--otlp`) and its counters of spans and metric exports, brought
    /// up to its figures at each scrape (one scrape at a time, so each counts once).
    otlp: Option<OtlpCounters>,
}

/// `/metrics`' view of the OTLP export.
struct OtlpCounters {
    export: Arc<Otlp>,
    spans: Family<OtlpLabels, Counter>,
    metric_exports: Family<OtlpLabels, Counter>,
    sync: std::sync::Mutex<()>,
}

/// The label of the OTLP counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpLabels {
    /// What came of a span (`exported`, `dropped_queue_full`, `dropped_failed`,
    /// `rejected`) or of a metrics export (`exported`, `failed`).
    pub result: String,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The gauges, registered under `cadence_watch`, with no series yet.
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("cadence_watch"),
            ttft: Family::default(),
            itl: Family::default(),
            output_speed: Family::default(),
            slo_ok: Family::default(),
            last_probe: Family::default(),
            probe_duration: Family::default(),
            probes: Family::default(),
            requests: Family::default(),
            loop_lag: Family::default(),
            ship: None,
            otlp: None,
        };
        let r = &mut m.registry;
        r.register_with_unit(
            "ttft",
            "Time to first token of the target's last probe, by quantile over its requests",
            Unit::Seconds,
            m.ttft.clone(),
        );
        r.register_with_unit(
            "itl",
            "Inter-token latency of the target's last probe, by quantile over its gaps",
            Unit::Seconds,
            m.itl.clone(),
        );
        r.register(
            "output_tokens_per_second",
            "Median per-request output speed of the target's last probe",
            m.output_speed.clone(),
        );
        r.register(
            "slo_ok",
            "1 when the target's last probe met every SLO and the error ceiling, else 0",
            m.slo_ok.clone(),
        );
        r.register_with_unit(
            "last_probe_timestamp",
            "Unix time the target's last probe started",
            Unit::Seconds,
            m.last_probe.clone(),
        );
        r.register_with_unit(
            "probe_duration",
            "Wall time of the target's last probe",
            Unit::Seconds,
            m.probe_duration.clone(),
        );
        r.register(
            "probes",
            "Probes run by this watcher since it started, by SLO result (pass, breach)",
            m.probes.clone(),
        );
        r.register(
            "requests",
            "Probe requests sent by this watcher since it started, by outcome",
            m.requests.clone(),
        );
        r.register_with_unit(
            "client_loop_lag",
            "p99 lag of this watcher's event loop during the target's last probe (the client's self-check: high means the client, not the target, was slow)",
            Unit::Seconds,
            m.loop_lag.clone(),
        );
        m
    }

    /// Adds the shipper's gauges: probes waiting for the shared store, and whether its
    /// last attempt reached it.
    pub fn track_shipping(&mut self, state: Arc<ShipState>) {
        let pending = Gauge::default();
        let up = Gauge::default();
        self.registry.register(
            "shared_pending_probes",
            "Probes in this watcher's database not yet in the shared store",
            pending.clone(),
        );
        self.registry.register(
            "shared_up",
            "1 when this watcher's last attempt to ship to the shared store succeeded",
            up.clone(),
        );
        self.ship = Some((state, pending, up));
    }

    /// Adds the OTLP export's counters (`--otlp`): spans and metric exports by result.
    pub fn track_otlp(&mut self, export: Arc<Otlp>) {
        let (spans, metric_exports) = (Family::default(), Family::default());
        self.registry.register(
            "otlp_spans",
            "Spans of probes and their requests sent to the OTLP collector (--otlp), by result: exported, or dropped because the queue was full, the POST failed or the collector rejected them",
            Family::clone(&spans),
        );
        self.registry.register(
            "otlp_metric_exports",
            "Exports of the probes' metrics to the OTLP collector (--otlp), by result: exported or failed (each a cumulative snapshot the next one makes good)",
            Family::clone(&metric_exports),
        );
        self.otlp = Some(OtlpCounters {
            export,
            spans,
            metric_exports,
            sync: std::sync::Mutex::new(()),
        });
    }

    /// Sets the gauges from a target's latest probe (at start, from the database).
    pub fn set_last(&self, p: &ProbeRow) {
        let t = || p.target.clone();
        let q = |fam: &Family<QuantileLabels, F64Gauge>, quantile: &str, v: Option<f64>| {
            let g = fam.get_or_create(&QuantileLabels {
                target: t(),
                quantile: quantile.into(),
            });
            g.set(v.map_or(f64::NAN, |ms| ms / 1e3));
        };
        q(&self.ttft, "0.5", p.ttft_p50_ms);
        q(&self.ttft, "0.99", p.ttft_p99_ms);
        q(&self.itl, "0.5", p.itl_p50_ms);
        q(&self.itl, "0.99", p.itl_p99_ms);
        let l = TargetLabels { target: t() };
        self.output_speed
            .get_or_create(&l)
            .set(p.output_tok_s.unwrap_or(f64::NAN));
        self.slo_ok.get_or_create(&l).set(i64::from(p.slo_ok));
        self.last_probe
            .get_or_create(&l)
            .set(p.started_ms as f64 / 1e3);
        self.probe_duration
            .get_or_create(&l)
            .set((p.ended_ms - p.started_ms).max(0) as f64 / 1e3);
        if let Some(lag) = p.loop_lag_p99_ms {
            self.loop_lag.get_or_create(&l).set(lag / 1e3);
        }
    }

    /// Counts a probe this watcher ran, and sets the gauges from it.
    pub fn observe(&self, p: &ProbeRow) {
        self.set_last(p);
        let result = if p.slo_ok { "pass" } else { "breach" };
        self.probes
            .get_or_create(&ResultLabels {
                target: p.target.clone(),
                result: result.into(),
            })
            .inc();
        // One label set with the proxy's and the records': each outcome's own name.
        let mut by = p.failed_by_class.clone();
        by.insert(Outcome::Succeeded.name().into(), p.succeeded);
        if p.aborted > 0 {
            by.insert(Outcome::AbortedAtDeadline.name().into(), p.aborted);
        }
        for (outcome, n) in by {
            self.requests
                .get_or_create(&OutcomeLabels {
                    target: p.target.clone(),
                    outcome,
                })
                .inc_by(n);
        }
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        if let Some((state, pending, up)) = &self.ship {
            pending.set(state.pending.load(Ordering::Relaxed) as i64);
            up.set(i64::from(state.up.load(Ordering::Relaxed)));
        }
        if let Some(o) = &self.otlp {
            o.catch_up();
        }
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl OtlpCounters {
    /// Brings each counter up to the export's figures, which only grow.
    fn catch_up(&self) {
        let _one_at_a_time = self.sync.lock();
        let (spans, metrics) = self.export.summaries();
        cadence_otlp::signals::each_result(
            spans.as_ref(),
            metrics.as_ref(),
            |counted, result, n| {
                let family = match counted {
                    Counted::Spans => &self.spans,
                    Counted::MetricExports => &self.metric_exports,
                };
                let c = family.get_or_create(&OtlpLabels {
                    result: result.into(),
                });
                c.inc_by(n.saturating_sub(c.get()));
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn series_carry_the_target_label_and_seconds() {
        let m = Metrics::new();
        m.observe(&probe("a", 1_000, false));
        let text = m.encode();
        assert!(
            text.contains("cadence_watch_itl_seconds{target=\"a\",quantile=\"0.5\"} 0.01"),
            "{text}"
        );
        assert!(
            text.contains("cadence_watch_slo_ok{target=\"a\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("cadence_watch_probes_total{target=\"a\",result=\"breach\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cadence_watch_requests_total{target=\"a\",outcome=\"http_5xx\"} 1"),
            "{text}"
        );
        m.observe(&probe("a", 2_000, true));
        assert!(m.encode().contains("cadence_watch_slo_ok{target=\"a\"} 1"));
        // The outcome labels are the proxy's and the records' names.
        let mut aborted = probe("a", 3_000, true);
        aborted.succeeded = 3;
        aborted.aborted = 1;
        m.observe(&aborted);
        let text = m.encode();
        assert!(
            text.contains("cadence_watch_requests_total{target=\"a\",outcome=\"succeeded\"} 10"),
            "3 + 4 + 3: {text}"
        );
        assert!(
            text.contains(
                "cadence_watch_requests_total{target=\"a\",outcome=\"aborted_at_deadline\"} 1"
            ),
            "{text}"
        );
        assert!(!text.contains("outcome=\"success\"") && !text.contains("outcome=\"aborted\""));
        assert!(
            !m.encode().contains("shared_"),
            "no shipping, no shipping series"
        );
    }

    #[test]
    fn the_hub_serves_each_vantages_latest_probe_labelled_by_both() {
        let at = |v: &str, t: i64, ok: bool| crate::shared::VantageProbe {
            vantage: v.into(),
            probe: probe("api", t, ok),
        };
        let text = encode_vantages(&[
            at("east", 1_000, true),
            at("west", 1_500, true),
            at("east", 2_000, false),
        ]);
        assert!(
            text.contains("cadence_watch_vantage_slo_ok{target=\"api\",vantage=\"east\"} 0"),
            "the latest of east: {text}"
        );
        assert!(
            text.contains("cadence_watch_vantage_slo_ok{target=\"api\",vantage=\"west\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cadence_watch_vantage_itl_seconds{target=\"api\",vantage=\"east\",quantile=\"0.5\"} 0.01"),
            "{text}"
        );
        assert!(
            text.contains("cadence_watch_vantage_last_probe_timestamp_seconds{target=\"api\",vantage=\"east\"} 2.0"),
            "{text}"
        );
    }

    #[test]
    fn a_shipping_watcher_says_what_waits_and_whether_the_store_answers() {
        let mut m = Metrics::new();
        let state = Arc::new(ShipState::default());
        m.track_shipping(state.clone());
        state.pending.store(7, Ordering::Relaxed);
        let text = m.encode();
        assert!(
            text.contains("cadence_watch_shared_pending_probes 7"),
            "{text}"
        );
        assert!(text.contains("cadence_watch_shared_up 0"), "{text}");
        state.up.store(true, Ordering::Relaxed);
        state.pending.store(0, Ordering::Relaxed);
        let text = m.encode();
        assert!(text.contains("cadence_watch_shared_up 1"), "{text}");
        assert!(
            text.contains("cadence_watch_shared_pending_probes 0"),
            "{text}"
        );
    }
}
