//! Loading a run back: a saved JSON report, or records files streamed twice (their
//! level and run lines, then the records one at a time into the level aggregators), so
//! files of any size load in bounded memory. `report` and `compare` share it.

use crate::fleet::FleetScan;
use crate::{input, Error};
use cadence_core::report::{Report, RunInfo, SearchReport};
use cadence_core::runlog::{LevelMeta, RecordsLine, RunMeta, DEFAULT_MAX_LATE};
use cadence_core::sessions::WhatIf;
use cadence_core::slo::DEFAULT_MAX_ERROR_RATE;
use cadence_core::{
    Checks, Convention, FleetReport, LevelAggregators, RecordSink, RequestRecord, Slo,
};
use cadence_records::reader::first_line;
use cadence_records::{ReadError, RecordsReader};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A loaded input: a report, and where its records can be read again when the input
/// held them (never the records themselves: files of any size load in bounded memory).
pub struct Loaded {
    /// The report rebuilt from the records, or the saved one.
    pub report: Report,
    /// Where the records can be read again; `None` for a saved JSON report.
    pub records: Option<RecordsSource>,
    /// What the rebuilt report earns (SLO breach, invalid run, incomplete fleet).
    pub verdict: Verdict,
}

/// What a loaded run earns, for the exit code: a rebuilt report of an interrupted run
/// is a complete answer about what it holds (`Ok`), and a search's probes above its
/// frontier breach by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Valid, and within its SLOs.
    Ok,
    /// An SLO was breached.
    SloBreached,
    /// The run's figures are not valid.
    Invalid,
    /// A fleet's merged run with a shard missing, failed, interrupted or apart.
    Incomplete,
}

/// Records files read as one stream, on one timeline, as often as a caller needs.
#[derive(Debug, Clone)]
pub struct RecordsSource {
    /// The files, read in this order.
    pub files: Vec<PathBuf>,
    /// The earliest wall-clock anchor of the files (proxy runs), see `RecordsReader`.
    pub base_unix_ms: Option<u64>,
    /// The records' level index of each of the report's levels, in the report's order.
    pub level_ids: Vec<u32>,
}

impl RecordsSource {
    /// The one records file a run just wrote, holding `levels` in order.
    pub fn written(path: PathBuf, levels: &[LevelMeta]) -> RecordsSource {
        RecordsSource {
            files: vec![path],
            base_unix_ms: None,
            level_ids: levels.iter().map(|m| m.level).collect(),
        }
    }

    /// Every request record, in file order.
    pub fn read(&self) -> impl Iterator<Item = Result<RequestRecord, Error>> {
        RecordsReader::open(&self.files)
            .on_one_timeline(self.base_unix_ms)
            .records(|_| {})
            .map(|r| r.map_err(read_error))
    }

    /// At most `max` records of the report's `report_index`-th level, a seeded uniform
    /// sample when it has more (reservoir sampling, the same sample on every read), and
    /// how many records the level has.
    pub fn level_sample(
        &self,
        report_index: usize,
        max: usize,
    ) -> Result<(Vec<RequestRecord>, u64), Error> {
        let Some(&lv) = self.level_ids.get(report_index) else {
            return Ok((Vec::new(), 0));
        };
        let mut rng = cadence_core::rng::SplitMix64::new(0x5EED ^ u64::from(lv));
        let mut out = Vec::new();
        let mut seen = 0u64;
        for r in self.read() {
            let r = r?;
            if r.level != lv {
                continue;
            }
            if out.len() < max {
                out.push(r);
            } else if let Some(slot) = out.get_mut(rng.below(seen as usize + 1)) {
                *slot = r;
            }
            seen += 1;
        }
        Ok((out, seen))
    }

    /// The level index → name pairs of `report` (whose levels follow `level_ids`).
    pub fn names(&self, report: &Report) -> Vec<(u32, String)> {
        self.level_ids
            .iter()
            .copied()
            .zip(report.levels.iter().map(|l| l.name.clone()))
            .collect()
    }
}

/// Bad input is a usage error naming the file (and line).
fn read_error(e: ReadError) -> Error {
    input(e.to_string())
}

/// Whether `path` holds a saved JSON report rather than records: a report is one JSON
/// object (pretty-printed, so its first line is `{`); a records file's first line is a
/// whole record or metadata line.
fn is_json_report(path: &Path) -> Result<bool, Error> {
    let first = first_line(path, 1 << 20).map_err(read_error)?;
    let first = first.trim_ascii();
    if first == b"{" {
        return Ok(true);
    }
    Ok(serde_json::from_slice::<serde_json::Value>(first)
        .ok()
        .is_some_and(|v| v.get("schema_version").is_some() && v.get("levels").is_some()))
}

/// Reads and parses one or more inputs into a report. Records files are streamed
/// twice: once for their level and run lines, once for the records, which go one at a
/// time into the level aggregators.
pub fn load(
    files: &[PathBuf],
    slos: &[Slo],
    convention: Option<Convention>,
    max_error_rate: Option<f64>,
) -> Result<Loaded, Error> {
    let o = Overrides {
        slos: slos.to_vec(),
        convention,
        max_error_rate,
        ..Overrides::default()
    };
    load_with(files, &o)
}

/// What a command asks of a saved run in place of what its run line saved (`cadence
/// report`'s flags); each one left unset keeps the saved one.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// SLOs to check instead of the run's.
    pub slos: Vec<Slo>,
    /// The convention the summary tables lead with.
    pub convention: Option<Convention>,
    /// The error ceiling, a share.
    pub max_error_rate: Option<f64>,
    /// A level's budget of exactly kept values (default: the run line's, else
    /// [`cadence_core::DEFAULT_EXACT_SAMPLES`]).
    pub exact_samples: Option<u64>,
    /// A fleet's shards left out ([`crate::fleet`]).
    pub exclude_shards: Vec<u32>,
    /// What-ifs in place of the run line's.
    pub what_if: Vec<WhatIf>,
    /// The plateau's share of the concurrency asked (0 off), recomputed from the
    /// records; a saved JSON report cannot give one.
    pub plateau: Option<f64>,
}

/// [`load`] with each of `o` set in place of the run line's. Directories stand for
/// their records files; a fleet's shards merge into one run.
pub fn load_with(files: &[PathBuf], o: &Overrides) -> Result<Loaded, Error> {
    let files = &crate::fleet::expand(files)?;
    if let Some(f) = only_json_report(files)? {
        if let Some(share) = o.plateau {
            return Err(input(format!(
                "--plateau {share} recomputes each level's steady state from its records, and {} is a saved JSON report (its plateau is the one it was saved with): give the records file (bench --records)",
                f.display()
            )));
        }
        return load_json_report(f, &o.slos, o.convention);
    }
    let fleet = FleetScan::scan(files, &o.exclude_shards)?;
    let (scan, feed_files) = match &fleet {
        Some(f) => (
            Scan {
                levels: f.levels(),
                run: f.run(),
                base_unix_ms: f.base_unix_ms(),
                anchors: 0,
            },
            f.files(),
        ),
        None => (scan(files)?, files.to_vec()),
    };
    let mut warnings = Vec::new();
    let (info, mut checks, search) = saved_checks(scan.run, o.exact_samples, &mut warnings)?;
    override_checks(&mut checks, o);
    let mut source = RecordsSource {
        files: feed_files,
        base_unix_ms: scan.base_unix_ms,
        level_ids: Vec::new(),
    };
    let (fed, fleet) = match fleet {
        Some(f) => {
            let (fed, report) = feed_fleet(&f, &scan.levels, &source, &checks)?;
            (fed, Some(report))
        }
        None => (feed(&source, &checks)?, None),
    };
    warnings.extend(fed.damage.iter().cloned());
    if fed.records == 0 {
        return Err(input(format!(
            "{} holds no request records",
            files[0].display()
        )));
    }
    warnings.extend(merge_warnings(files.len(), fleet.is_some(), scan.anchors));
    let levels = with_unnamed_levels(scan.levels, &fed.level_ids);
    source.level_ids = levels.iter().map(|m| m.level).collect();
    let (mut report, verdict) = cadence_core::assemble(info, &levels, &fed.aggs, &checks);
    let mut verdict = rebuilt_verdict(verdict, search.as_ref());
    report.search = search;
    report.warnings.extend(warnings);
    if let Some((fleet, fleet_warnings)) = fleet {
        report.warnings.extend(fleet_warnings);
        if !fleet.complete {
            verdict = Verdict::Incomplete;
        }
        report.fleet = Some(fleet);
    }
    Ok(Loaded {
        report,
        records: Some(source),
        verdict,
    })
}

/// The JSON report among `files`, when one is; a JSON report beside any other file is
/// refused (it holds no samples to merge).
fn only_json_report(files: &[PathBuf]) -> Result<Option<&PathBuf>, Error> {
    let mut json = None;
    for f in files {
        if is_json_report(f)? {
            json = json.or(Some(f));
        }
    }
    if json.is_some() && files.len() > 1 {
        return Err(input(
            "give one JSON report, or one or more records files (JSON reports cannot be merged: they hold no samples)",
        ));
    }
    Ok(json)
}

/// The run line's checks, with what the command line gives in their place.
fn override_checks(checks: &mut Checks, o: &Overrides) {
    if !o.slos.is_empty() {
        checks.slos = o.slos.clone();
    }
    if let Some(m) = o.max_error_rate {
        checks.max_error_rate = m;
    }
    if !o.what_if.is_empty() {
        checks.what_if = o.what_if.clone();
    }
    if o.convention.is_some() {
        checks.convention = o.convention;
    }
    if let Some(share) = o.plateau {
        checks.plateau = share;
    }
}

/// What a reader of a report rebuilt from several files (not a fleet's shards) or
/// several proxy runs is told about how they were joined.
fn merge_warnings(files: usize, fleet: bool, anchors: u64) -> Vec<String> {
    let mut warnings = Vec::new();
    if files > 1 && !fleet {
        warnings.push(format!(
            "merged {files} records files by level: throughput windows assume their clocks started together"
        ));
    }
    if anchors > 1 {
        warnings.push(format!(
            "{anchors} proxy runs were put on one timeline by their wall-clock anchors"
        ));
    }
    warnings
}

/// A rebuilt report's verdict: an interrupted run's report is a complete answer about
/// what it holds, and with --find-max (as in bench) probes above the frontier breach by
/// design.
fn rebuilt_verdict(verdict: cadence_core::Verdict, search: Option<&SearchReport>) -> Verdict {
    match verdict {
        cadence_core::Verdict::SloBreached if search.is_some_and(|s| s.best.is_some()) => {
            Verdict::Ok
        }
        cadence_core::Verdict::SloBreached => Verdict::SloBreached,
        cadence_core::Verdict::Invalid => Verdict::Invalid,
        cadence_core::Verdict::Ok | cadence_core::Verdict::Interrupted => Verdict::Ok,
    }
}

/// A saved JSON report, re-judged against `slos` when given.
fn load_json_report(
    f: &Path,
    slos: &[Slo],
    convention: Option<Convention>,
) -> Result<Loaded, Error> {
    let text = cadence_core::input::read_text(f, cadence_core::input::LARGE.named("report"))
        .map_err(|e| input(e.to_string()))?;
    let mut report: Report = serde_json::from_str(&text).map_err(|e| {
        input(format!(
            "{} looks like a JSON report but does not match this version's layout: {e}",
            f.display()
        ))
    })?;
    if !slos.is_empty() {
        for l in &mut report.levels {
            l.slos = slos.iter().map(|s| s.evaluate(&l.summary)).collect();
            l.goodput = None;
        }
        report.warnings.push(
            "SLOs re-checked from a JSON report: goodput needs the records and is left out".into(),
        );
    }
    if let Some(c) = convention {
        report.convention = Some(c.name().to_string());
    }
    let breached = report.levels.iter().any(|l| l.slos.iter().any(|s| !s.pass));
    Ok(Loaded {
        report,
        records: None,
        verdict: if breached {
            Verdict::SloBreached
        } else {
            Verdict::Ok
        },
    })
}

/// What the first pass over records files finds: everything but the records.
struct Scan {
    /// Level lines merged by level (intended summed across files), in file order.
    levels: Vec<LevelMeta>,
    /// The first run line.
    run: Option<RunMeta>,
    /// The earliest wall-clock anchor, and how many there were.
    base_unix_ms: Option<u64>,
    anchors: u64,
}

fn scan(files: &[PathBuf]) -> Result<Scan, Error> {
    let mut out = Scan {
        levels: Vec::new(),
        run: None,
        base_unix_ms: None,
        anchors: 0,
    };
    let mut intended: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for line in RecordsReader::open(files).meta_only() {
        match line.map_err(read_error)? {
            RecordsLine::Level(m) => match out.levels.iter().any(|l| l.level == m.level) {
                true => {
                    let e = intended.entry(m.level).or_insert(Some(0));
                    *e = e.zip(m.intended).map(|(a, b)| a + b);
                }
                false => {
                    intended.insert(m.level, m.intended);
                    out.levels.push(m);
                }
            },
            RecordsLine::Run(r) => {
                out.run.get_or_insert(*r);
            }
            RecordsLine::Anchor(a) => {
                out.anchors += 1;
                out.base_unix_ms = Some(out.base_unix_ms.map_or(a.unix_ms, |b| b.min(a.unix_ms)));
            }
            RecordsLine::Record(_) | RecordsLine::Shard(_) => {}
        }
    }
    for l in &mut out.levels {
        l.intended = intended.get(&l.level).copied().flatten();
    }
    Ok(out)
}

/// What the second pass fed the aggregators.
struct Fed {
    aggs: LevelAggregators,
    records: u64,
    level_ids: BTreeSet<u32>,
    /// What was skipped, in words ([`Damage::warning`]).
    damage: Vec<String>,
}

/// The second pass: every record, one at a time, into the level aggregators.
fn feed(source: &RecordsSource, checks: &Checks) -> Result<Fed, Error> {
    let mut aggs = checks.aggregators();
    let mut records = 0u64;
    let mut level_ids = BTreeSet::new();
    let mut reader = RecordsReader::open(&source.files).on_one_timeline(source.base_unix_ms);
    for line in reader.by_ref() {
        if let RecordsLine::Record(r) = line.map_err(read_error)? {
            records += 1;
            level_ids.insert(r.level);
            aggs.accept(&r);
        }
    }
    Ok(Fed {
        aggs,
        records,
        level_ids,
        damage: reader.damage().warning().into_iter().collect(),
    })
}

/// The second pass over a fleet: each merged shard's records into aggregators of its
/// own (its self-checks are read off them), merged into the fleet's; the fleet's
/// section of the report and its warnings.
fn feed_fleet(
    fleet: &FleetScan,
    levels: &[LevelMeta],
    source: &RecordsSource,
    checks: &Checks,
) -> Result<(Fed, (FleetReport, Vec<String>)), Error> {
    let names: BTreeMap<u32, String> = levels.iter().map(|m| (m.level, m.name.clone())).collect();
    let mut total = Fed {
        aggs: checks.aggregators(),
        records: 0,
        level_ids: BTreeSet::new(),
        damage: Vec::new(),
    };
    let mut rows = Vec::new();
    for shard in &fleet.merged {
        let part = RecordsSource {
            files: shard.files.clone(),
            base_unix_ms: source.base_unix_ms,
            level_ids: Vec::new(),
        };
        let fed = feed(&part, checks)?;
        rows.extend(crate::fleet::shard_checks(shard, &names, Some(&fed.aggs)));
        total.aggs.merge(&fed.aggs);
        total.records += fed.records;
        total.level_ids.extend(fed.level_ids);
        total.damage.extend(fed.damage);
    }
    for shard in &fleet.excluded {
        rows.extend(crate::fleet::shard_checks(shard, &names, None));
    }
    rows.sort_by_key(|r| r.shard);
    Ok((total, crate::fleet::report(fleet, rows)))
}

/// Levels that have records but no level line (a run that crashed mid-level, or an
/// older file) get a plain name; all sorted by level.
fn with_unnamed_levels(mut levels: Vec<LevelMeta>, seen: &BTreeSet<u32>) -> Vec<LevelMeta> {
    for &lv in seen {
        if !levels.iter().any(|m| m.level == lv) {
            levels.push(LevelMeta {
                warnings: vec!["no level line in the records file: the intended load is unknown, so intended = sent + dropped".into()],
                ..LevelMeta::new(lv, format!("level {lv}"))
            });
        }
    }
    levels.sort_by_key(|m| m.level);
    levels
}

/// What the run line says the run was and was judged against; a file without one gets
/// "unknown" and the defaults, with a warning.
fn saved_checks(
    run: Option<RunMeta>,
    exact_samples: Option<u64>,
    warnings: &mut Vec<String>,
) -> Result<(RunInfo, Checks, Option<SearchReport>), Error> {
    Ok(match run {
        Some(meta) => {
            let stall = Duration::from_nanos(cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS);
            let c = &meta.checks;
            let checks = Checks {
                stall_threshold: saved_ms(
                    c.stall_threshold_ms,
                    1e-6,
                    stall,
                    "stall threshold",
                    warnings,
                ),
                slos: meta
                    .checks
                    .slos
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()
                    .map_err(|e: cadence_core::SloParseError| {
                        input(format!("the run line's SLO does not parse: {e}"))
                    })?,
                max_late: meta.checks.max_late,
                time_bucket: saved_ms(
                    c.time_bucket_ms,
                    1.0,
                    Duration::from_secs(1),
                    "time bucket",
                    warnings,
                ),
                convention: meta
                    .checks
                    .convention
                    .as_deref()
                    .and_then(|c| c.parse().ok()),
                max_error_rate: meta
                    .checks
                    .max_error_rate
                    .filter(|m| (0.0..=1.0).contains(m))
                    .unwrap_or(DEFAULT_MAX_ERROR_RATE),
                exact_samples: exact_samples
                    .or(c.exact_samples)
                    .unwrap_or(cadence_core::DEFAULT_EXACT_SAMPLES),
                // A what-if that no longer parses is left out, with a warning.
                what_if: c
                    .what_if
                    .iter()
                    .filter_map(|w| match w.parse() {
                        Ok(w) => Some(w),
                        Err(e) => {
                            warnings.push(format!("the run line's what-if is skipped: {e}"));
                            None
                        }
                    })
                    .collect(),
                plateau: c
                    .plateau
                    .filter(|s| (0.0..=1.0).contains(s))
                    .unwrap_or(cadence_core::plateau::DEFAULT_SHARE),
            };
            (meta.run, checks, meta.search)
        }
        None => {
            warnings.push(
                "the records file has no run line (an older file, or the run did not finish): the target, model and command are unknown".into(),
            );
            let info = RunInfo::unknown();
            let checks = Checks {
                stall_threshold: Duration::from_nanos(
                    cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS,
                ),
                slos: Vec::new(),
                max_late: DEFAULT_MAX_LATE,
                time_bucket: Duration::from_secs(1),
                convention: None,
                max_error_rate: DEFAULT_MAX_ERROR_RATE,
                exact_samples: exact_samples.unwrap_or(cadence_core::DEFAULT_EXACT_SAMPLES),
                what_if: Vec::new(),
                plateau: cadence_core::plateau::DEFAULT_SHARE,
            };
            (info, checks, None)
        }
    })
}

/// A duration the run line holds in ms, when a run could have used it (at least
/// `min_ms`, at most a year); else `default`, with a warning. A hand-edited or hostile
/// file cannot make a zero-width time bucket or a panic.
fn saved_ms(
    ms: f64,
    min_ms: f64,
    default: Duration,
    what: &str,
    warnings: &mut Vec<String>,
) -> Duration {
    match Duration::try_from_secs_f64(ms / 1e3) {
        Ok(d) if ms >= min_ms && d <= cadence_core::duration::MAX_DURATION => d,
        _ => {
            warnings.push(format!(
                "the run line's {what} ({ms} ms) is not one a run can use: {default:?} is used instead"
            ));
            default
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::Outcome;
    use std::io::Write;

    #[test]
    fn a_level_sample_is_uniform_seeded_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        for i in 0..1_000u64 {
            let mut r = RequestRecord::new(i, Outcome::Succeeded);
            r.level = (i % 2) as u32;
            writeln!(f, "{}", serde_json::to_string(&r).unwrap()).unwrap();
        }
        drop(f);
        let src = RecordsSource {
            files: vec![path],
            base_unix_ms: None,
            level_ids: vec![0, 1],
        };
        let (all, n) = src.level_sample(1, 10_000).unwrap();
        assert_eq!((all.len(), n), (500, 500), "under the cap: every record");
        assert!(all.iter().all(|r| r.level == 1));
        let (s, n) = src.level_sample(1, 50).unwrap();
        assert_eq!((s.len(), n), (50, 500));
        assert!(s.iter().all(|r| r.level == 1));
        let ids = |v: &[RequestRecord]| v.iter().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(ids(&s), ids(&src.level_sample(1, 50).unwrap().0), "seeded");
        // Uniform: the sample reaches across the whole level, not only its start.
        let late = s.iter().filter(|r| r.index >= 500).count();
        assert!(
            (10..=40).contains(&late),
            "{late} of 50 from the second half"
        );
    }
}

#[cfg(test)]
mod fleet_tests {
    use super::*;
    use crate::fleet::{expand, FleetScan};
    use cadence_core::report::RunInfo;
    use cadence_core::runlog::{anchor_line, level_line, run_line, shard_line, Anchor, RunChecks};
    use cadence_core::runlog::{ShardLevel, ShardMeta};
    use cadence_core::{Chunk, Outcome, RequestRecord};
    use std::path::Path;

    const MS: u64 = 1_000_000;

    /// Request `i`: sent at `i` × 100 ms + `at` ms, six chunks `gap` ms apart.
    fn rec(index: u64, at_ms: u64, gap_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        let sent = (at_ms + index * 100) * MS;
        r.sent_ns = Some(sent);
        r.chunks = (0..6)
            .map(|k| Chunk(sent + (20 + k * gap_ms) * MS, Some(1)))
            .collect();
        r.end_ns = Some(sent + (20 + 6 * gap_ms) * MS);
        r
    }

    fn level(concurrency: u32, intended: u64, warnings: &[&str]) -> LevelMeta {
        LevelMeta {
            concurrency: Some(concurrency),
            intended: Some(intended),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            ..LevelMeta::new(0, format!("concurrency={concurrency}"))
        }
    }

    /// A shard's records file as `bench --shard` writes it (`finished`: with its
    /// level and run lines).
    fn shard_file(
        dir: &Path,
        index: u32,
        count: u32,
        recs: &[RequestRecord],
        meta: &LevelMeta,
        finished: bool,
    ) -> PathBuf {
        let path = dir.join(format!("shard-{index}.jsonl"));
        let id = ShardMeta {
            index,
            count,
            start_at_unix_ms: Some(1_000_000),
            level: None,
        };
        let mut lines = vec![
            anchor_line(Anchor {
                unix_ms: 1_000_000 + u64::from(index),
            }),
            shard_line(&id),
        ];
        lines.extend(recs.iter().map(|r| serde_json::to_string(r).unwrap()));
        if finished {
            lines.push(level_line(meta));
            lines.push(shard_line(&ShardMeta {
                level: Some(ShardLevel {
                    level: 0,
                    planned_start_unix_ms: Some(1_000_000),
                    start_skew_ms: 250.0 * f64::from(index),
                    loop_lag_p99_ms: 0.5,
                    loop_lag_max_ms: 1.0,
                    cpu_share: Some(0.1),
                }),
                ..id
            }));
            lines.push(run_line(&RunMeta {
                run: RunInfo::new("http://t/v1", "chat", "m", "closed_loop", 1_000_000),
                checks: RunChecks::default(),
                search: None,
            }));
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }

    #[test]
    fn shards_merge_exactly_into_what_one_file_of_all_their_records_gives() {
        let dir = tempfile::tempdir().unwrap();
        let a: Vec<RequestRecord> = (0..5).map(|i| rec(i * 2, 0, 10 + i)).collect();
        let b: Vec<RequestRecord> = (0..4).map(|i| rec(i * 2 + 1, 0, 30 + i)).collect();
        let files = [
            shard_file(dir.path(), 0, 2, &a, &level(3, 5, &["lagged"]), true),
            shard_file(dir.path(), 1, 2, &b, &level(2, 4, &[]), true),
        ];
        let fleet = load(&files, &[], None, None).unwrap();
        let r = &fleet.report;
        assert_eq!(r.levels[0].name, "concurrency=5", "the fleet's load: 3 + 2");
        let req = &r.levels[0].summary.requests;
        assert_eq!((req.intended, req.sent, req.succeeded), (9, 9, 9));
        assert!(r.levels[0]
            .summary
            .warnings
            .contains(&"shard 0: lagged".to_string()));
        // One file of all the records, on shard 1's timeline shifted by its anchor
        // (1 ms later), aggregates to the same distributions.
        let shifted: Vec<RequestRecord> = b
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.sent_ns = r.sent_ns.map(|t| t + MS);
                r.end_ns = r.end_ns.map(|t| t + MS);
                r.chunks.iter_mut().for_each(|c| c.0 += MS);
                r
            })
            .collect();
        let all = dir.path().join("all.jsonl");
        let mut lines: Vec<String> = a
            .iter()
            .chain(&shifted)
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        lines.push(level_line(&level(5, 9, &[])));
        std::fs::write(&all, lines.join("\n") + "\n").unwrap();
        let one = load(&[all], &[], None, None).unwrap().report;
        let (m, o) = (&r.levels[0].summary, &one.levels[0].summary);
        assert_eq!(m.itl, o.itl);
        assert_eq!(m.ttft, o.ttft);
        assert_eq!(m.e2e, o.e2e);
        assert_eq!(m.throughput, o.throughput);
        // The shard table: shard 1 started 250 ms late, and is named for it.
        let f = r.fleet.as_ref().unwrap();
        assert!(f.complete);
        assert_eq!(f.checks[1].sent, Some(4));
        assert_eq!(f.checks[1].flags, ["started 250 ms late"]);
        assert!(r.warnings.iter().any(|w| w.contains("--exclude-shard 1")));
    }

    #[test]
    fn a_shard_twice_or_of_another_run_is_refused_and_a_dead_one_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let one = [rec(0, 0, 10)];
        let s0 = shard_file(dir.path(), 0, 3, &one, &level(1, 1, &[]), true);
        let again = shard_file(other.path(), 0, 3, &one, &level(1, 1, &[]), true);
        let e = FleetScan::scan(&[s0.clone(), again], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("shard 0 appears twice"), "{e}");
        let four = shard_file(other.path(), 1, 4, &one, &level(1, 1, &[]), true);
        let e = FleetScan::scan(&[s0.clone(), four], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("another fleet run"), "{e}");
        let died = shard_file(dir.path(), 2, 3, &one, &level(1, 1, &[]), false);
        let scan = FleetScan::scan(&[s0.clone(), died], &[]).unwrap().unwrap();
        let missing: Vec<(u32, bool)> = scan
            .missing
            .iter()
            .map(|m| (m.index, m.why.contains("failed")))
            .collect();
        assert_eq!(missing, [(1, false), (2, true)]);
        let e = FleetScan::scan(&[s0], &[7]).unwrap_err().to_string();
        assert!(e.contains("shards 0 to 2"), "{e}");
        // A directory stands for its records files, or its subdirectories'.
        assert_eq!(expand(&[dir.path().to_path_buf()]).unwrap().len(), 2);
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("shard-0")).unwrap();
        std::fs::copy(
            dir.path().join("shard-0.jsonl"),
            root.path().join("shard-0/r.jsonl"),
        )
        .unwrap();
        std::fs::create_dir(root.path().join("shard-1")).unwrap();
        assert_eq!(expand(&[root.path().to_path_buf()]).unwrap().len(), 1);
        assert!(expand(&[root.path().join("shard-1")]).is_err());
    }
}
