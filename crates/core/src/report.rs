//! The report model: one value holding a run's description, each level's metrics and
//! the definitions of every number. Its serde form IS the JSON report (checked against
//! `schema/report.schema.json`), and every renderer reads only this.

use crate::charts::ChartData;
use crate::conventions::ConventionView;
use crate::metrics::{formula, LevelSummary};
use crate::pacing::{self, Pacing};
use crate::slo::{self, Goodput, SloResult};
use crate::stats::PERCENTILE_RULE;
use crate::timeseries::{self, TimeBucket};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the JSON report layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// A whole run: what was measured, how, and what came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The layout's version ([`SCHEMA_VERSION`] when written).
    pub schema_version: u32,
    /// The version of Cadence that wrote the report.
    pub cadence_version: String,
    /// What was run: target, model, load shape, command line.
    pub run: RunInfo,
    /// Each level's figures, in the order they ran.
    pub levels: Vec<LevelReport>,
    /// Metric name → formula in words ([`definitions`]).
    pub definitions: BTreeMap<String, String>,
    /// Run-wide warnings in plain words (per-level ones live in each level).
    pub warnings: Vec<String>,
    /// The outcome of `--find-max`: the highest level that met every SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchReport>,
    /// The tool convention (`--convention`) whose ITL/TPOT the summary tables lead
    /// with ([`crate::Convention`]); absent: Cadence's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convention: Option<String>,
    /// A run merged from the shards of a fleet ([`FleetReport`]); absent for one
    /// machine's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
    /// A run read from another tool's saved output ([`crate::ImportedRun`]); absent for
    /// Cadence's own runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<crate::ImportedRun>,
    /// The run's spans sent over OTLP (`--otlp`): how many, and how many were dropped;
    /// absent when the run exported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpExport>,
    /// A sweep's knees: where ITL p99 and TTFT p90 bend against load
    /// ([`crate::knee`]); empty for a single level.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knees: Vec<crate::knee::Knee>,
    /// The run's metrics sent over OTLP (`--otlp`, unless `--otlp-signals` leaves them
    /// out): the exports made and whether the last, which holds the whole run, arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_metrics: Option<OtlpMetricsExport>,
}

/// What an OTLP export of the run's metrics came to. The histograms are cumulative, so
/// an export that failed is made good by the next; only the last one's loss costs
/// figures at the collector.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpMetricsExport {
    /// The metrics endpoint (no credentials).
    pub endpoint: String,
    /// `http/protobuf`, `http/json` or `grpc`.
    pub protocol: String,
    /// Exports made: one each interval while the run went on, and the last at its end.
    pub exports: u64,
    /// Of those, exports whose POST failed (no answer, a timeout, a non-2xx status).
    pub failed: u64,
    /// Data points 2xx answers said were rejected (a partial success).
    pub rejected_data_points: u64,
    /// Data points in the last export (one per histogram series).
    pub data_points: u64,
    /// Whether the last export, the run's whole figures, reached the collector.
    pub last_exported: bool,
    /// The last failure in words, secrets redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an OTLP export of the run's spans came to. Export never waits a request: a
/// span the queue or the collector could not take is dropped and counted here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExport {
    /// The traces endpoint (no credentials).
    pub endpoint: String,
    /// `http/protobuf`, `http/json` or `grpc`.
    pub protocol: String,
    /// Spans made (one per measured request).
    pub spans: u64,
    /// Spans the collector took (a 2xx answer, less any it said it rejected).
    pub exported: u64,
    /// Spans not exported: `spans − exported`.
    pub dropped: u64,
    /// Of those, spans dropped because the export queue was full (a slow collector).
    pub dropped_queue_full: u64,
    /// Of those, spans whose POST failed (no answer, a timeout, a non-2xx status).
    pub dropped_failed: u64,
    /// Of those, spans a 2xx answer said were rejected (a partial success).
    pub rejected: u64,
    /// The last failure in words, secrets redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The shards a merged run is made of: which were merged, missing or left out, and
/// each shard's self-checks per level, so one late or overloaded shard is named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetReport {
    /// Shards in the fleet.
    pub shards: u32,
    /// The indices whose records were merged.
    pub merged: Vec<u32>,
    /// Shards with no usable records: the merged run is incomplete.
    pub missing: Vec<MissingShard>,
    /// Shards left out on purpose (`cadence report --exclude-shard`).
    pub excluded: Vec<u32>,
    /// Every shard was merged or excluded on purpose: none is missing.
    pub complete: bool,
    /// One row per shard and level.
    pub checks: Vec<ShardCheck>,
}

/// A shard whose records are not in the merge, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissingShard {
    /// The shard's index, from 0.
    pub index: u32,
    /// Why its records are not in the merge, in words.
    pub why: String,
}

/// What one shard saw of one level: its share, its start and its client's health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardCheck {
    /// The shard's index, from 0.
    pub shard: u32,
    /// The merged level's name.
    pub level: String,
    /// Requests the shard sent (absent for an excluded shard, whose records were not
    /// read).
    pub sent: Option<u64>,
    /// Of those, the requests that succeeded (absent likewise).
    pub succeeded: Option<u64>,
    /// How late the shard started the level.
    pub start_skew_ms: Option<f64>,
    /// Open loop: the p99 of sent − scheduled, ms; absent for a closed loop or an
    /// excluded shard.
    pub pacing_lag_p99_ms: Option<f64>,
    /// Open loop: the share (0 to 1) of the shard's sends more than 1 ms behind schedule;
    /// absent for a closed loop, an excluded shard, or when it sent nothing.
    pub late_share: Option<f64>,
    /// The client's event-loop lag p99 during the level.
    pub loop_lag_p99_ms: Option<f64>,
    /// CPU time / wall time / cores of the shard's process during the level.
    pub cpu_share: Option<f64>,
    /// What looks wrong, in plain words (empty: nothing).
    pub flags: Vec<String>,
}

/// The SLO search's answer and the probes that led to it (each probe is also a level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchReport {
    /// `rate` or `concurrency`.
    pub axis: String,
    /// The highest probed level that met every SLO (`null`: none did).
    pub best: Option<f64>,
    /// The lowest probed level that failed (`null`: none did; the frontier is higher).
    pub first_fail: Option<f64>,
    /// Every probe, in the order it ran.
    pub probes: Vec<SearchProbe>,
}

/// One level the search probed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchProbe {
    /// The probed load: requests/s or clients, per the search's `axis`.
    pub level: f64,
    /// The level was valid and met every SLO and the error ceiling
    /// ([`crate::slo::probe_passes`]).
    pub pass: bool,
}

/// What the knee ([`crate::knee`]) reads of a report's levels.
pub fn knee_levels(levels: &[LevelReport]) -> Vec<crate::knee::Level> {
    levels
        .iter()
        .map(|l| crate::knee::Level {
            concurrency: l.concurrency,
            rate: l.rate,
            itl_p99: l.summary.itl.map(|d| d.p99),
            ttft_p90: l.summary.ttft.map(|d| d.p90),
        })
        .collect()
}

impl Report {
    /// A report with the current schema version, this crate's version (the workspace
    /// shares one) and the standard [`definitions`].
    pub fn new(run: RunInfo, levels: Vec<LevelReport>, warnings: Vec<String>) -> Report {
        let knees = crate::knee::knees(&knee_levels(&levels));
        Report {
            schema_version: SCHEMA_VERSION,
            cadence_version: env!("CARGO_PKG_VERSION").to_string(),
            run,
            levels,
            definitions: definitions(),
            warnings,
            search: None,
            convention: None,
            fleet: None,
            imported: None,
            otlp: None,
            knees,
            otlp_metrics: None,
        }
    }
}

/// What was run. Every field is filled by the caller, who also redacts secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInfo {
    /// The endpoint URL, with userinfo and secret query parameters removed.
    pub target: String,
    /// The API dialect (e.g. `openai-chat`).
    pub api: String,
    /// The model the requests named.
    pub model: String,
    /// The load shape, e.g. `closed_loop`.
    pub mode: String,
    /// Wall-clock start of the run, ms since the Unix epoch.
    pub started_at_unix_ms: u64,
    /// Wall time of the whole run, warm-up included.
    pub duration_s: f64,
    /// The command line, secrets redacted.
    pub command: Vec<String>,
    /// The target was Cadence's built-in simulated server.
    pub builtin_sim: bool,
    /// The run was cut short (Ctrl-C or a watchdog).
    pub interrupted: bool,
    /// The machine the client ran on (OS, architecture, cores, CPU model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The seed of the run's draws (prompts, lengths, arrivals), drawn when not given:
    /// `--seed` with it repeats them. Absent where no seed applies (the proxy, an
    /// import) and in reports written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl RunInfo {
    /// The one constructor: a run of `mode` against `target` (already redacted) with
    /// `api` and `model`, started at `started_at_unix_ms`. The rest starts empty (no
    /// duration, no command, no machine, not the built-in simulator, not interrupted)
    /// and the caller sets what it knows.
    pub fn new(
        target: impl Into<String>,
        api: impl Into<String>,
        model: impl Into<String>,
        mode: impl Into<String>,
        started_at_unix_ms: u64,
    ) -> RunInfo {
        RunInfo {
            target: target.into(),
            api: api.into(),
            model: model.into(),
            mode: mode.into(),
            started_at_unix_ms,
            duration_s: 0.0,
            command: Vec::new(),
            builtin_sim: false,
            interrupted: false,
            machine: None,
            seed: None,
        }
    }

    /// What a records file without a run line can say about its run: nothing.
    pub fn unknown() -> RunInfo {
        RunInfo::new("unknown", "unknown", "unknown", "unknown", 0)
    }
}

/// One load level (sweep step): its identity and its metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelReport {
    /// A readable label, e.g. `concurrency=64`.
    pub name: String,
    /// Closed-loop concurrency, when the level has one.
    pub concurrency: Option<u32>,
    /// Open-loop arrival rate in requests per second, when the level has one.
    pub rate: Option<f64>,
    /// The metrics, flattened into the level object.
    #[serde(flatten)]
    pub summary: LevelSummary,
    /// Each `--slo` evaluated on this level ([`crate::Slo::evaluate`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slos: Vec<SloResult>,
    /// Requests that met every SLO ([`crate::goodput`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// Figures per time bucket of the run ([`crate::time_series`]); JSON only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_series: Vec<TimeBucket>,
    /// Why a sweep level ended before its measurement window did, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// How well an open-loop client kept its schedule ([`crate::pacing()`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
    /// ITL and TPOT as other tools define them ([`crate::convention_views`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conventions: Vec<ConventionView>,
    /// Compact distribution shapes for charts ([`crate::chart_data`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charts: Option<ChartData>,
    /// The server's own metrics lined up with the client's ([`crate::attribution`]),
    /// when the run scraped them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Box<crate::attribution::ServerReport>>,
    /// Where the time went, from the server's own per-request timing
    /// ([`crate::time_split`]); `timed` 0 when the server reported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<crate::TimeSplit>,
    /// Chunks of several tokens: the acceptance length from the client and the server,
    /// the gap by chunk size ([`crate::bursts`]); absent when every chunk carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursts: Option<crate::Bursts>,
    /// A closed-loop level's steady state and its figures ([`crate::plateau`]);
    /// absent for an open loop or with `--plateau 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plateau: Option<crate::Plateau>,
}

/// Builds a level of the report from its summary; the caller sets `concurrency` or
/// `rate` when the level has one.
pub fn level_report(name: impl Into<String>, summary: LevelSummary) -> LevelReport {
    LevelReport {
        name: name.into(),
        concurrency: None,
        rate: None,
        summary,
        slos: Vec::new(),
        goodput: None,
        time_series: Vec::new(),
        stopped_early: None,
        pacing: None,
        conventions: Vec::new(),
        charts: None,
        server: None,
        server_timing: None,
        bursts: None,
        plateau: None,
    }
}

/// Every metric's formula in words, keyed by the metric's field name in the report.
/// The CLI's `--help`, the console and the JSON report all print these.
pub fn definitions() -> BTreeMap<String, String> {
    [
        ("ttft", formula::TTFT),
        ("ttft_content", formula::TTFT_CONTENT),
        ("ttft_response", formula::TTFT_RESPONSE),
        ("itl", formula::ITL),
        ("itl_per_token", formula::ITL_PER_TOKEN),
        ("tpot", formula::TPOT),
        ("e2e", formula::E2E),
        ("output_speed_tok_s", formula::OUTPUT_SPEED),
        ("tokens_per_chunk", formula::TOKENS_PER_CHUNK),
        ("throughput", formula::THROUGHPUT),
        ("output_tokens", formula::OUTPUT_TOKENS),
        ("stalls", formula::STALLS),
        ("token_agreement", formula::TOKEN_AGREEMENT),
        ("by_turn", formula::BY_TURN),
        ("sessions", crate::sessions::FORMULA),
        ("clock", formula::CLOCK),
        ("prompt_cache", formula::PROMPT_CACHE),
        ("requests", formula::REQUESTS),
        ("slos", slo::FORMULA),
        ("goodput", slo::GOODPUT_FORMULA),
        ("pacing", pacing::FORMULA),
        ("time_series", timeseries::FORMULA),
        ("percentiles", PERCENTILE_RULE),
        ("units", formula::UNITS),
        ("conventions", crate::conventions::FORMULA),
        ("charts", crate::charts::FORMULA),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{summarize_level, Chunk, LevelOptions, Outcome, RequestRecord};

    fn run_info() -> RunInfo {
        RunInfo {
            target: "http://127.0.0.1:8080/v1/chat/completions".into(),
            api: "openai-chat".into(),
            model: "sim".into(),
            mode: "closed_loop".into(),
            started_at_unix_ms: 1_700_000_000_000,
            duration_s: 1.5,
            command: vec!["cadence".into(), "bench".into()],
            builtin_sim: true,
            interrupted: false,
            machine: None,
            seed: None,
        }
    }

    fn report() -> Report {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = vec![Chunk(100_000_000, None), Chunk(110_000_000, None)];
        r.end_ns = Some(120_000_000);
        let s = summarize_level(&[r], &LevelOptions::default());
        let mut level = level_report("concurrency=1", s);
        level.concurrency = Some(1);
        Report::new(run_info(), vec![level], vec![])
    }

    #[test]
    fn report_round_trips_through_json() {
        let rep = report();
        let json = serde_json::to_string(&rep).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn level_fields_are_flattened_next_to_its_identity() {
        let v = serde_json::to_value(report()).unwrap();
        assert_eq!(v["schema_version"], 1);
        let level = &v["levels"][0];
        assert_eq!(level["name"], "concurrency=1");
        assert_eq!(level["concurrency"], 1);
        assert!(level["rate"].is_null());
        assert_eq!(level["ttft"]["p50_ms"], 100.0);
        assert_eq!(level["requests"]["succeeded"], 1);
        assert!(level.get("summary").is_none());
    }

    #[test]
    fn new_level_fields_are_left_out_until_set() {
        let v = serde_json::to_value(report()).unwrap();
        let level = v["levels"][0].as_object().unwrap();
        for k in ["slos", "goodput", "time_series", "stopped_early", "pacing"] {
            assert!(!level.contains_key(k), "{k} should be omitted when empty");
        }
        // And a saved report without them reads back with them empty.
        let back: Report = serde_json::from_value(v).unwrap();
        assert!(back.levels[0].slos.is_empty() && back.levels[0].pacing.is_none());
    }

    #[test]
    fn level_with_every_new_field_round_trips() {
        let mut rep = report();
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.scheduled_ns = Some(0);
        r.sent_ns = Some(3_000_000);
        r.chunks = vec![Chunk(100_000_000, None), Chunk(110_000_000, None)];
        r.end_ns = Some(120_000_000);
        let records = [r];
        let level = &mut rep.levels[0];
        let slo: crate::Slo = "itl.p99<=50ms".parse().unwrap();
        level.slos = vec![slo.evaluate(&level.summary)];
        level.goodput = Some(crate::goodput(&records, &[slo], Some(0.12)));
        level.time_series = crate::time_series(&records, 100_000_000);
        level.stopped_early = Some("error share over 50 %".into());
        level.pacing = crate::pacing(&records, 1, 0.001);
        let v = serde_json::to_value(&rep).unwrap();
        let l = &v["levels"][0];
        assert_eq!(l["slos"][0]["slo"], "itl.p99<=50ms");
        assert_eq!(l["slos"][0]["pass"], true);
        assert_eq!(l["goodput"]["good_requests"], 1);
        assert_eq!(l["time_series"].as_array().unwrap().len(), 2);
        assert_eq!(l["stopped_early"], "error share over 50 %");
        assert_eq!(l["pacing"]["late"], 1, "sent 3 ms after schedule");
        assert_eq!(l["pacing"]["dropped"], 1);
        assert_eq!(serde_json::from_value::<Report>(v).unwrap(), rep);
    }

    /// The field names of a struct as its derived `Deserialize` declares them: every
    /// field, skipped-when-empty ones included, so a new field cannot go unseen.
    fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        use serde::de::{self, Visitor};
        struct Fields(&'static [&'static str]);
        impl<'de> de::Deserializer<'de> for &mut Fields {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = fields;
                Err(de::Error::custom("fields read"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut f = Fields(&[]);
        let _ = T::deserialize(&mut f);
        assert!(!f.0.is_empty(), "not a struct with named fields");
        f.0
    }

    /// Level keys that are not metrics, so need no formula: the level's identity, the
    /// warm-up count (defined under `requests`), the decoder's tallies and free-text
    /// warnings.
    const NOT_METRICS: [&str; 8] = [
        "name",
        "concurrency",
        "rate",
        "warmup",
        "counters",
        "warnings",
        "stopped_early",
        "summary",
    ];

    /// Every key of a level that needs a definition: each field of [`LevelSummary`]
    /// (from the type itself) and each key of a level report with every optional part
    /// filled in.
    fn reported_metrics() -> Vec<String> {
        let summary = field_names::<LevelSummary>();
        let mut keys: Vec<String> = summary.iter().map(|k| k.to_string()).collect();
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.scheduled_ns = Some(0);
        r.sent_ns = Some(3_000_000);
        r.chunks = vec![Chunk(100_000_000, None), Chunk(110_000_000, None)];
        r.end_ns = Some(120_000_000);
        let records = [r];
        let mut level = level_report("c", summarize_level(&records, &LevelOptions::default()));
        let slo: crate::Slo = "itl.p99<=50ms".parse().unwrap();
        level.slos = vec![slo.evaluate(&level.summary)];
        level.goodput = Some(crate::goodput(&records, &[slo], Some(0.12)));
        level.time_series = crate::time_series(&records, 100_000_000);
        level.stopped_early = Some("saturated".into());
        level.pacing = crate::pacing(&records, 1, 0.001);
        level.conventions = crate::convention_views(&records);
        level.charts = crate::chart_data(&records);
        let v = serde_json::to_value(&level).unwrap();
        for (k, val) in v.as_object().unwrap() {
            // The summary's fields are known from the type; the level's own only
            // when the fixture fills them in.
            let own = !summary.contains(&k.as_str()) && !NOT_METRICS.contains(&k.as_str());
            let empty = val.is_null() || val.as_array().is_some_and(Vec::is_empty);
            assert!(!(own && empty), "the fixture leaves {k} empty: fill it in");
            keys.push(k.clone());
        }
        keys.retain(|k| !NOT_METRICS.contains(&k.as_str()));
        keys.sort();
        keys.dedup();
        keys
    }

    /// The keys of `metrics` with no definition in `d`.
    fn undefined<'a>(metrics: &'a [String], d: &BTreeMap<String, String>) -> Vec<&'a str> {
        metrics
            .iter()
            .map(String::as_str)
            .filter(|k| !d.contains_key(*k))
            .collect()
    }

    #[test]
    fn definitions_cover_every_reported_metric() {
        let d = definitions();
        let metrics = reported_metrics();
        for k in [
            "ttft", "itl", "tpot", "requests", "pacing", "charts", "by_turn",
        ] {
            assert!(
                metrics.iter().any(|m| m == k),
                "{k} not seen in {metrics:?}"
            );
        }
        assert_eq!(undefined(&metrics, &d), Vec::<&str>::new());
        assert!(d.contains_key("percentiles") && d.contains_key("units"));
        assert!(d["percentiles"].contains("type 7"));
        assert!(d["tpot"].contains("(output tokens - 1)"));
        assert_eq!(report().definitions, d);
    }

    #[test]
    fn a_metric_without_a_definition_is_caught() {
        let metrics = reported_metrics();
        for k in ["itl", "token_agreement", "goodput"] {
            let mut d = definitions();
            d.remove(k);
            assert_eq!(undefined(&metrics, &d), vec![k]);
        }
    }
}
