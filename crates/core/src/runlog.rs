//! The records file (`--records`) as a replay source: besides one JSON line per request
//! it holds a line per finished level and one for the run, so `cadence report` can
//! rebuild the very report the bench printed. Files without them (older ones, or a
//! crashed run) still load; the missing facts get plain defaults.

use crate::report::{RunInfo, SearchReport};
use crate::RequestRecord;
use serde::{Deserialize, Serialize};

/// What `bench` knew about a level beyond its records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelMeta {
    /// The records' `level` field.
    pub level: u32,
    /// The level's name as printed (e.g. `concurrency=8`, `rate=5/s`).
    pub name: String,
    /// Closed loop: the clients kept in flight; `None` for an open loop or when unknown
    /// (a proxy's live traffic, an import whose tool does not say).
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Open loop: the arrival rate, requests/s; `None` for a closed loop or when unknown.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Requests the load intended, warm-up excluded (`None`: sent + dropped).
    #[serde(default)]
    pub intended: Option<u64>,
    /// Why the level ended before its plan, in words; `None` when it ran its course.
    #[serde(default)]
    pub stopped_early: Option<String>,
    /// Warnings from the run itself (event-loop lag, CPU, watchdog, aborted streams).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The watchdog had to end requests: the level's figures are not valid.
    #[serde(default)]
    pub invalid: bool,
    /// The level was cut short by Ctrl-C.
    #[serde(default)]
    pub interrupted: bool,
    /// The server's own metrics scraped during the level (`--server-metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Box<crate::server::ServerScrape>>,
    /// The machine's timer floor while an open-loop level sent (the pacing verdict's
    /// yardstick); absent for closed loops and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<crate::pacing::TimerFloor>,
}

impl LevelMeta {
    /// Level `level` named `name` with nothing else known: no load figures, no
    /// warnings, valid, not interrupted (fill the rest by struct update).
    pub fn new(level: u32, name: impl Into<String>) -> LevelMeta {
        LevelMeta {
            level,
            name: name.into(),
            concurrency: None,
            rate: None,
            intended: None,
            stopped_early: None,
            warnings: Vec::new(),
            invalid: false,
            interrupted: false,
            server: None,
            floor: None,
        }
    }
}

/// A level's name from its load, as every run names it (`concurrency=8`, `rate=5/s`),
/// so a fleet's merged level reads as a lone run of the summed load; `None` without one.
pub fn load_name(concurrency: Option<u32>, rate: Option<f64>) -> Option<String> {
    match (concurrency, rate) {
        (Some(concurrency), _) => Some(format!("concurrency={concurrency}")),
        (None, Some(rate)) => Some(format!("rate={rate}/s")),
        (None, None) => None,
    }
}

/// What a run was judged against, as given on the command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunChecks {
    /// `--stall-threshold`, ms: ITL gaps longer than this are stalls.
    pub stall_threshold_ms: f64,
    /// The `--slo` expressions.
    #[serde(default)]
    pub slos: Vec<String>,
    /// `--max-late` as a fraction.
    pub max_late: f64,
    /// `--time-bucket`: the width of the time series' buckets, ms.
    pub time_bucket_ms: f64,
    /// `--convention`, when given.
    #[serde(default)]
    pub convention: Option<String>,
    /// `--max-error-rate` as a fraction; absent in older files (the default applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_rate: Option<f64>,
    /// `--exact-samples` when not the default, so `cadence report` keeps the run's
    /// budget; absent in older files and for the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_samples: Option<u64>,
    /// `--what-if` re-pricings of the sessions, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what_if: Vec<String>,
    /// `--plateau` when not the default ([`crate::plateau::DEFAULT_SHARE`]); absent in
    /// older files and for the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plateau: Option<f64>,
}

/// `--max-late`'s default, the one every source of runs uses: an open-loop level whose
/// share of sends more than 1 ms late (or dropped) is above 0.1 % is invalid.
pub const DEFAULT_MAX_LATE: f64 = 0.001;

impl Default for RunChecks {
    /// The checks of a run given no flags: the default stall threshold and late-send
    /// limit, 1 s time buckets, no SLOs, Cadence's own convention.
    fn default() -> Self {
        RunChecks {
            stall_threshold_ms: crate::metrics::DEFAULT_STALL_THRESHOLD_NS as f64 / 1e6,
            slos: Vec::new(),
            max_late: DEFAULT_MAX_LATE,
            time_bucket_ms: 1000.0,
            convention: None,
            max_error_rate: None,
            exact_samples: None,
            plateau: None,
            what_if: Vec::new(),
        }
    }
}

/// The run line, written when the run ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// What was run.
    pub run: RunInfo,
    /// What the levels were judged against.
    pub checks: RunChecks,
    /// The `--find-max` search's answer; `None` when the run did not search.
    #[serde(default)]
    pub search: Option<SearchReport>,
}

/// Where a run's clock starts on the wall clock: written first by every proxy run, so
/// runs appended to one file are put on one timeline when read back (each run's
/// record times count from its own start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// The wall-clock time (ms since the Unix epoch) of the run clock's 0.
    pub unix_ms: u64,
}

/// Which shard of a fleet wrote a records file (`bench --shard I/N`): the line after
/// its anchor, so even a shard that died mid-run is known by its index; then again as
/// each level ends, with what the shard saw of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardMeta {
    /// The shard's index, from 0.
    pub index: u32,
    /// Shards in the fleet.
    pub count: u32,
    /// The fleet's shared start (`--start-at`), ms since the Unix epoch; absent when
    /// each shard started on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_ms: Option<u64>,
    /// Present on the lines written as each level ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<ShardLevel>,
}

/// What one shard saw of one level: its share, its start and its own self-checks, so a
/// merged report can name a shard that started late or was overloaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardLevel {
    /// The records' `level` field.
    pub level: u32,
    /// When the level was to start, ms since the Unix epoch (this machine's clock).
    #[serde(default)]
    pub planned_start_unix_ms: Option<u64>,
    /// How late the shard started the level (0: on time).
    pub start_skew_ms: f64,
    /// The client's event-loop lag p99 during the level, ms.
    pub loop_lag_p99_ms: f64,
    /// The largest event-loop lag during the level, ms.
    pub loop_lag_max_ms: f64,
    /// CPU time / wall time / cores during the level, when known.
    #[serde(default)]
    pub cpu_share: Option<f64>,
}

/// One line of a records file.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordsLine {
    /// A request record.
    Record(Box<RequestRecord>),
    /// A level's line, written as the level ends.
    Level(LevelMeta),
    /// The run line, written as the run ends.
    Run(Box<RunMeta>),
    /// Records after it (until the next anchor) count from this wall-clock time.
    Anchor(Anchor),
    /// The file is one shard of a fleet's run (see [`ShardMeta`]).
    Shard(Box<ShardMeta>),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelLine {
    cadence_level: LevelMeta,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunLine {
    cadence_run: RunMeta,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnchorLine {
    cadence_anchor: Anchor,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShardLine {
    cadence_shard: ShardMeta,
}

/// The JSON line (no newline) for a shard's identity or one of its levels.
pub fn shard_line(meta: &ShardMeta) -> String {
    serde_json::to_string(&ShardLine {
        cadence_shard: meta.clone(),
    })
    .expect("plain data serializes")
}

/// The JSON line (no newline) for a run's wall-clock anchor.
pub fn anchor_line(anchor: Anchor) -> String {
    serde_json::to_string(&AnchorLine {
        cadence_anchor: anchor,
    })
    .expect("plain data serializes")
}

/// The JSON line (no newline) for a level.
pub fn level_line(meta: &LevelMeta) -> String {
    serde_json::to_string(&LevelLine {
        cadence_level: meta.clone(),
    })
    .expect("plain data serializes")
}

/// The JSON line (no newline) for the run.
pub fn run_line(meta: &RunMeta) -> String {
    serde_json::to_string(&RunLine {
        cadence_run: meta.clone(),
    })
    .expect("plain data serializes")
}

/// Parses one line of a records file. Meta lines are objects whose first key is
/// `cadence_level`, `cadence_run`, `cadence_anchor` or `cadence_shard`; every other
/// line is a request record.
pub fn parse_line(line: &str) -> Result<RecordsLine, serde_json::Error> {
    let t = line.trim_start();
    if t.starts_with("{\"cadence_level\"") {
        Ok(RecordsLine::Level(
            serde_json::from_str::<LevelLine>(t)?.cadence_level,
        ))
    } else if t.starts_with("{\"cadence_run\"") {
        Ok(RecordsLine::Run(Box::new(
            serde_json::from_str::<RunLine>(t)?.cadence_run,
        )))
    } else if t.starts_with("{\"cadence_anchor\"") {
        Ok(RecordsLine::Anchor(
            serde_json::from_str::<AnchorLine>(t)?.cadence_anchor,
        ))
    } else if t.starts_with("{\"cadence_shard\"") {
        Ok(RecordsLine::Shard(Box::new(
            serde_json::from_str::<ShardLine>(t)?.cadence_shard,
        )))
    } else {
        let mut rec: RequestRecord = serde_json::from_str(t)?;
        rec.upgrade_outcome();
        Ok(RecordsLine::Record(Box::new(rec)))
    }
}

/// A whole records file, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordsFile {
    /// The run line; `None` when the file has none (an older file, or a crashed run).
    pub run: Option<RunMeta>,
    /// The level lines, in file order.
    pub levels: Vec<LevelMeta>,
    /// The request records, in file order.
    pub records: Vec<RequestRecord>,
}

/// Parses a records file: blank lines are skipped; a bad line is an error naming its
/// number (1-based), except a cut-off last line (a crash mid-write), which is dropped
/// and reported in `truncated_tail`.
pub fn parse_records_file(text: &str) -> Result<(RecordsFile, bool), (usize, serde_json::Error)> {
    let mut out = RecordsFile::default();
    let lines: Vec<&str> = text.lines().collect();
    let mut truncated_tail = false;
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(RecordsLine::Record(r)) => out.records.push(*r),
            Ok(RecordsLine::Level(l)) => out.levels.push(l),
            Ok(RecordsLine::Run(r)) => out.run = Some(*r),
            Ok(RecordsLine::Anchor(_) | RecordsLine::Shard(_)) => {}
            Err(e) if i + 1 == lines.len() && !text.ends_with('\n') && e.is_eof() => {
                truncated_tail = true;
            }
            Err(e) => return Err((i + 1, e)),
        }
    }
    Ok((out, truncated_tail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    fn meta() -> LevelMeta {
        LevelMeta {
            concurrency: Some(4),
            intended: Some(10),
            warnings: vec!["lag".into()],
            ..LevelMeta::new(1, "concurrency=4")
        }
    }

    #[test]
    fn meta_lines_and_records_are_told_apart() {
        let rec = RequestRecord::new(3, Outcome::Succeeded);
        let text = format!(
            "{}\n\n{}\n",
            serde_json::to_string(&rec).unwrap(),
            level_line(&meta())
        );
        let (f, cut) = parse_records_file(&text).unwrap();
        assert!(!cut);
        assert_eq!(f.records, vec![rec]);
        assert_eq!(f.levels, vec![meta()]);
        assert!(
            f.run.is_none(),
            "an older file without a run line still loads"
        );
    }

    #[test]
    fn a_cut_off_last_line_is_dropped_a_bad_middle_line_is_an_error() {
        let rec = serde_json::to_string(&RequestRecord::new(0, Outcome::Succeeded)).unwrap();
        let (f, cut) = parse_records_file(&format!("{rec}\n{}", &rec[..10])).unwrap();
        assert!(cut);
        assert_eq!(f.records.len(), 1);
        let (line, _) = parse_records_file(&format!("{rec}\nnot json\n{rec}\n")).unwrap_err();
        assert_eq!(line, 2);
    }

    #[test]
    fn an_old_unsent_abort_reads_as_a_dropped_arrival() {
        let old = r#"{"index":4,"outcome":"aborted_at_deadline","scheduled_ns":100}"#;
        let sent = r#"{"index":5,"outcome":"aborted_at_deadline","sent_ns":100}"#;
        let (f, _) = parse_records_file(&format!("{old}\n{sent}\n")).unwrap();
        let outcomes: Vec<Outcome> = f.records.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes, [Outcome::Dropped, Outcome::AbortedAtDeadline]);
    }
}
