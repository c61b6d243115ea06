//! A run's figures as OTLP metrics, a pure accumulator: each finished record adds to
//! cumulative histograms named as the GenAI conventions name the client's figures
//! (duration, time to first chunk, time per output chunk, token usage), with bounds
//! from 50 µs so a 1–5 ms gap lands in a bucket of its own, and counts them exactly.

use crate::metrics_proto::{self as mp, AggregationTemporality};
use crate::proto::KeyValue;
use crate::span::Shape;
use cadence_core::per_request::{self, itl_gaps};
use cadence_core::{Outcome, RequestRecord};
use std::collections::BTreeMap;

/// The bounds of the time histograms, in µs: from 50 µs, every round figure an ITL or
/// TTFT objective is written in up to 1 s (each at most 1.5× the one before, so a
/// quantile read from the buckets is off by less than half a bucket), then to 20 min,
/// past the longest default timeout. A superset of the proxy's Prometheus bounds.
pub const TIME_BOUNDS_US: &[u64] = &[
    50,
    75,
    100,
    150,
    200,
    250,
    300,
    400,
    500,
    750,
    1_000,
    1_250,
    1_500,
    2_000,
    2_500,
    3_000,
    4_000,
    5_000,
    6_000,
    7_500,
    10_000,
    12_500,
    15_000,
    20_000,
    25_000,
    30_000,
    40_000,
    50_000,
    60_000,
    75_000,
    100_000,
    125_000,
    150_000,
    200_000,
    250_000,
    300_000,
    400_000,
    500_000,
    750_000,
    1_000_000,
    1_500_000,
    2_000_000,
    2_500_000,
    3_000_000,
    5_000_000,
    7_500_000,
    10_000_000,
    15_000_000,
    20_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
    600_000_000,
    1_200_000_000,
];

/// The bounds of `gen_ai.client.token.usage`, as the conventions advise (powers of 4).
pub const TOKEN_BOUNDS: &[u64] = &[
    1, 4, 16, 64, 256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304, 16_777_216,
    67_108_864,
];

/// `gen_ai.client.operation.duration`: send to end, every sent request.
pub const DURATION: &str = "gen_ai.client.operation.duration";
/// `gen_ai.client.operation.time_to_first_chunk`: TTFT.
pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// `gen_ai.client.operation.time_per_output_chunk`: each gap between chunks (ITL).
pub const TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";
/// `gen_ai.client.token.usage`: input and output tokens per request.
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// TPOT, which the conventions name for servers only.
pub const TIME_PER_OUTPUT_TOKEN: &str = "cadence.client.time_per_output_token";
/// Waits over the stall threshold, for the first chunk and between chunks.
pub const STALLS: &str = "cadence.client.stalls";

/// One histogram: values in whole ns (times) or tokens, bucketed and summed exactly
/// as integers.
#[derive(Debug, Clone, PartialEq)]
pub struct Hist {
    bounds: &'static [u64],
    /// The value of one bound unit: 1,000 (µs bounds, ns values) or 1 (tokens).
    unit: u64,
    /// Counts per bucket: `bounds.len() + 1` of them.
    pub counts: Vec<u64>,
    /// Values recorded.
    pub count: u64,
    /// Their sum.
    pub sum: u128,
    /// The least and greatest.
    pub min_max: Option<(u64, u64)>,
}

impl Hist {
    fn new(bounds: &'static [u64], unit: u64) -> Hist {
        Hist {
            bounds,
            unit,
            counts: vec![0; bounds.len() + 1],
            count: 0,
            sum: 0,
            min_max: None,
        }
    }

    /// Adds `v` (ns or tokens): bucket `i` holds `bounds[i-1] < v <= bounds[i]`.
    pub fn push(&mut self, v: u64) {
        let unit = self.unit;
        let i = self.bounds.partition_point(|&b| b.saturating_mul(unit) < v);
        self.counts[i] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min_max = Some(
            self.min_max
                .map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))),
        );
    }
}

/// The most series (distinct models and targets) a run's instruments keep apart; a
/// request past them is counted under the model `other`, so a client naming a new
/// model in every request costs no memory.
pub const MAX_SERIES: usize = 64;

/// Which series a value belongs to, besides the run's own attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    level: u32,
    /// Its attributes over the run's ([`Instruments::series`]).
    series: u16,
    /// `error.type` (a failure's outcome) or `gen_ai.token.type`; `None` when neither.
    tag: Option<&'static str>,
}

/// The run's metrics so far, per level (and per outcome or token type).
#[derive(Debug, Clone, Default)]
pub struct Instruments {
    /// Each series' attributes that differ from the run's: the model a proxied request
    /// named, a watch target's own (empty: the run's alone).
    series: Vec<Vec<KeyValue>>,
    duration: BTreeMap<Key, Hist>,
    ttft: BTreeMap<Key, Hist>,
    itl: BTreeMap<Key, Hist>,
    tpot: BTreeMap<Key, Hist>,
    tokens: BTreeMap<Key, Hist>,
    stalls: BTreeMap<Key, u64>,
    stall_threshold_ns: u64,
}

/// A time in ms by the per-request formulas, back to whole ns (exact below 2^52 ns).
fn ns(ms: f64) -> u64 {
    (ms * per_request::NS_PER_MS).round() as u64
}

fn time_hist(map: &mut BTreeMap<Key, Hist>, key: Key, v_ns: u64) {
    map.entry(key)
        .or_insert_with(|| Hist::new(TIME_BOUNDS_US, 1_000))
        .push(v_ns);
}

impl Instruments {
    /// Waits strictly longer than `stall_threshold_ns` are stalls (`--stall-threshold`).
    pub fn new(stall_threshold_ns: u64) -> Instruments {
        Instruments {
            stall_threshold_ns,
            ..Instruments::default()
        }
    }

    /// The series of attributes `over` the run's, made when new (up to [`MAX_SERIES`],
    /// then the same with the model `other`).
    fn series_of(&mut self, mut over: Vec<KeyValue>) -> u16 {
        if let Some(i) = self.series.iter().position(|s| *s == over) {
            return i as u16;
        }
        if self.series.len() >= MAX_SERIES {
            for kv in over.iter_mut().filter(|kv| kv.key == MODEL) {
                *kv = crate::span::string(MODEL, "other");
            }
            if let Some(i) = self.series.iter().position(|s| *s == over) {
                return i as u16;
            }
        }
        self.series.push(over);
        (self.series.len() - 1) as u16
    }

    /// Adds one finished record as the report counts it, in the run's series (or the
    /// model's a proxied request named): a warm-up request or one never sent adds
    /// nothing; a failure adds its duration under its `error.type`; a success adds
    /// every figure.
    pub fn push(&mut self, r: &RequestRecord) {
        let model = r.proxy.as_ref().and_then(|p| p.model.as_deref());
        let operation = crate::span::record_operation(r);
        let over = [
            operation.map(|o| crate::span::string(OPERATION, o)),
            model.map(|m| crate::span::string(MODEL, m)),
        ];
        self.push_in(r, over.into_iter().flatten().collect());
    }

    /// [`Instruments::push`] into the series of `shape` (a watch target's: its model,
    /// server and name) rather than the run's.
    pub fn push_as(&mut self, r: &RequestRecord, shape: &Shape) {
        let over = run_attributes(shape, crate::span::model_of(r, shape));
        self.push_in(r, over);
    }

    fn push_in(&mut self, r: &RequestRecord, over: Vec<KeyValue>) {
        if r.warmup || !r.was_sent() {
            return;
        }
        let level = r.level;
        let series = self.series_of(over);
        let mut bad = 0;
        let e2e = per_request::e2e_ms(r, &mut bad);
        if r.outcome != Outcome::Succeeded {
            if let Some(d) = e2e {
                let key = Key {
                    level,
                    series,
                    tag: Some(r.outcome.name()),
                };
                time_hist(&mut self.duration, key, ns(d));
            }
            return;
        }
        let key = Key {
            level,
            series,
            tag: None,
        };
        if let Some(d) = e2e {
            time_hist(&mut self.duration, key, ns(d));
        }
        if let Some(t) = per_request::ttft_ms(r, &mut bad) {
            time_hist(&mut self.ttft, key, ns(t));
        }
        let first_wait = r.sent_ns.zip(r.first_chunk_ns());
        let mut first = 0;
        if first_wait.is_some_and(|(s, f)| f.saturating_sub(s) > self.stall_threshold_ns) {
            first = 1;
        }
        let mut gaps = 0;
        for (g, _) in itl_gaps(r, &mut bad) {
            time_hist(&mut self.itl, key, g);
            gaps += u64::from(g > self.stall_threshold_ns);
        }
        for (tag, n) in [("first_token", first), ("gap", gaps)] {
            *self
                .stalls
                .entry(Key {
                    level,
                    series,
                    tag: Some(tag),
                })
                .or_default() += n;
        }
        if let Some((t, _)) = per_request::tpot_and_speed(r, &mut bad) {
            time_hist(&mut self.tpot, key, ns(t));
        }
        let tokens = [
            ("input", r.input_tokens),
            ("output", Some(r.output_token_count().count)),
        ];
        for (kind, n) in tokens {
            if let Some(n) = n {
                self.tokens
                    .entry(Key {
                        level,
                        series,
                        tag: Some(kind),
                    })
                    .or_insert_with(|| Hist::new(TOKEN_BOUNDS, 1))
                    .push(n);
            }
        }
    }
}

/// How one instrument is named and described, and which tag its series carry.
struct Spec {
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    /// The attribute a series' tag goes under.
    tag: &'static str,
}

const SPECS: [Spec; 5] = [
    Spec {
        name: DURATION,
        description: "Send to end of each sent request (failures under error.type)",
        unit: "s",
        tag: "error.type",
    },
    Spec {
        name: TIME_TO_FIRST_CHUNK,
        description: "Send to the first content-bearing chunk (TTFT), succeeded requests",
        unit: "s",
        tag: "",
    },
    Spec {
        name: TIME_PER_OUTPUT_CHUNK,
        description: "Each gap between consecutive chunks (ITL), succeeded requests",
        unit: "s",
        tag: "",
    },
    Spec {
        name: TIME_PER_OUTPUT_TOKEN,
        description: "First to last chunk over output tokens − 1 (TPOT), succeeded requests",
        unit: "s",
        tag: "",
    },
    Spec {
        name: TOKEN_USAGE,
        description: "Input and output tokens of each succeeded request",
        unit: "{token}",
        tag: "gen_ai.token.type",
    },
];

const MODEL: &str = "gen_ai.request.model";
const OPERATION: &str = "gen_ai.operation.name";

/// The attributes every series of a run carries, its model `model` (no userinfo:
/// `server.address` is the endpoint's host alone).
fn run_attributes(shape: &Shape, model: &str) -> Vec<KeyValue> {
    let mut a = vec![
        crate::span::string(OPERATION, shape.operation),
        crate::span::string(MODEL, model),
    ];
    if let Some((host, port)) = &shape.server {
        a.push(crate::span::string("server.address", host));
        a.push(crate::span::int("server.port", u64::from(*port)));
    }
    if let Some(t) = &shape.target {
        a.push(crate::span::string("cadence.target", t));
    }
    a
}

/// The run's attributes with a series' own in their place (or added).
fn overridden(run: &[KeyValue], over: &[KeyValue]) -> Vec<KeyValue> {
    let mut a = run.to_vec();
    for kv in over {
        match a.iter_mut().find(|x| x.key == kv.key) {
            Some(x) => *x = kv.clone(),
            None => a.push(kv.clone()),
        }
    }
    a
}

fn series_attributes(
    series: &[Vec<KeyValue>],
    run: &[KeyValue],
    key: Key,
    tag: &str,
) -> Vec<KeyValue> {
    let over = series.get(usize::from(key.series));
    let mut a = overridden(run, over.map_or(&[][..], Vec::as_slice));
    a.push(crate::span::int("cadence.level", u64::from(key.level)));
    if let Some(v) = key.tag {
        a.push(crate::span::string(tag, v));
    }
    a
}

impl Hist {
    /// The data point, in seconds for times, with `attributes`, cumulative from `start`
    /// to `now` (ns since the Unix epoch).
    fn point(&self, attributes: Vec<KeyValue>, start: u64, now: u64) -> mp::HistogramDataPoint {
        let per = if self.unit == 1 { 1.0 } else { 1e9 };
        let bound_per = per / self.unit as f64;
        mp::HistogramDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: self.count,
            sum: Some(self.sum as f64 / per),
            bucket_counts: self.counts.clone(),
            explicit_bounds: self.bounds.iter().map(|&b| b as f64 / bound_per).collect(),
            min: self.min_max.map(|(lo, _)| lo as f64 / per),
            max: self.min_max.map(|(_, hi)| hi as f64 / per),
        }
    }
}

impl Instruments {
    fn hists(&self) -> [&BTreeMap<Key, Hist>; 5] {
        [
            &self.duration,
            &self.ttft,
            &self.itl,
            &self.tpot,
            &self.tokens,
        ]
    }

    /// The metrics so far, cumulative from `start` to `now` (ns since the Unix epoch);
    /// an instrument nothing was recorded in is left out.
    pub fn snapshot(&self, shape: &Shape, start: u64, now: u64) -> Vec<mp::Metric> {
        let run = run_attributes(shape, &shape.model);
        let cumulative = AggregationTemporality::Cumulative as i32;
        let mut out = Vec::new();
        for (spec, map) in SPECS.iter().zip(self.hists()) {
            if map.is_empty() {
                continue;
            }
            let data_points = map
                .iter()
                .map(|(k, h)| {
                    let attributes = series_attributes(&self.series, &run, *k, spec.tag);
                    h.point(attributes, start, now)
                })
                .collect();
            out.push(mp::Metric {
                name: spec.name.into(),
                description: spec.description.into(),
                unit: spec.unit.into(),
                data: Some(mp::Data::Histogram(mp::Histogram {
                    data_points,
                    aggregation_temporality: cumulative,
                })),
            });
        }
        if !self.stalls.is_empty() {
            let data_points = self
                .stalls
                .iter()
                .map(|(k, &n)| mp::NumberDataPoint {
                    attributes: series_attributes(&self.series, &run, *k, "cadence.stall.kind"),
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    as_int: i64::try_from(n).unwrap_or(i64::MAX),
                })
                .collect();
            out.push(mp::Metric {
                name: STALLS.into(),
                description: "Waits over the stall threshold: for the first chunk, between chunks"
                    .into(),
                unit: "{stall}".into(),
                data: Some(mp::Data::Sum(mp::Sum {
                    data_points,
                    aggregation_temporality: cumulative,
                    is_monotonic: true,
                })),
            });
        }
        out
    }

    /// Data points a snapshot holds.
    pub fn data_points(&self) -> usize {
        self.hists().iter().map(|m| m.len()).sum::<usize>() + self.stalls.len()
    }
}
