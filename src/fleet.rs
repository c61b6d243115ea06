//! Merging a fleet's shards into one run (`cadence report results/` or `shard-*/`):
//! directories name their records files, each file says which shard wrote it, and the
//! shards' levels merge into the fleet's (accounting summed, distributions merged).
//! A shard that never started or failed is named by its index and makes the merged run
//! incomplete; each shard's self-checks are listed so an overloaded one can be excluded.

use crate::exit::usage;
use cadence_bench::Load;
use cadence_core::assemble::{CPU_SHARE_WARN, LOOP_LAG_WARN};
use cadence_core::metrics::LevelOptions;
use cadence_core::runlog::{LevelMeta, RecordsLine, RunMeta, ShardLevel, ShardMeta};
use cadence_core::{FleetReport, LevelAggregators, MissingShard, ShardCheck, TimerFloor};
use cadence_records::RecordsReader;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A start this much later than planned names the shard.
const LATE_START_MS: f64 = 100.0;

/// Whether a file name is a records file's (`.jsonl`, `.jsonl.zst`, `.ndjson`).
fn is_records_name(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [".jsonl", ".jsonl.zst", ".ndjson", ".ndjson.zst"]
        .iter()
        .any(|e| name.ends_with(e))
}

/// The records files of a directory, sorted by name.
fn records_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let read = std::fs::read_dir(dir)
        .map_err(|e| usage(format!("cannot read the directory {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_records_name(p))
        .collect();
    files.sort();
    Ok(files)
}

/// The inputs with every directory replaced by its records files, or, when it has
/// none, by those of its subdirectories (a fleet's results volume holding one
/// directory per shard). An empty directory adds nothing: a shard that never wrote is
/// named as missing by the merge, not here.
pub fn expand(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if !input.is_dir() {
            out.push(input.clone());
            continue;
        }
        let own = records_in(input)?;
        if !own.is_empty() {
            out.extend(own);
            continue;
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(input)
            .map_err(|e| {
                usage(format!(
                    "cannot read the directory {}: {e}",
                    input.display()
                ))
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        for d in subdirs {
            out.extend(records_in(&d)?);
        }
    }
    if out.is_empty() {
        return Err(usage(format!(
            "{} holds no records files (*.jsonl, *.jsonl.zst)",
            inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(out)
}

/// What the first pass found in one shard's files.
#[derive(Debug, Clone)]
pub struct ShardFiles {
    pub index: u32,
    pub files: Vec<PathBuf>,
    pub run: Option<RunMeta>,
    pub levels: Vec<LevelMeta>,
    pub seen: Vec<ShardLevel>,
    /// The wall-clock anchor of the shard's clock.
    pub anchor_unix_ms: Option<u64>,
}

/// A fleet's records, shard by shard.
#[derive(Debug, Clone)]
pub struct FleetScan {
    pub count: u32,
    /// Shards that finished (a run line), to merge, by index.
    pub merged: Vec<ShardFiles>,
    pub missing: Vec<MissingShard>,
    /// Shards left out on purpose, with what their records said (not read).
    pub excluded: Vec<ShardFiles>,
}

/// One file's meta lines.
struct FileMeta {
    shard: Option<ShardMeta>,
    run: Option<RunMeta>,
    levels: Vec<LevelMeta>,
    seen: Vec<ShardLevel>,
    anchor: Option<u64>,
    lines: u64,
}

fn file_meta(path: &Path) -> anyhow::Result<FileMeta> {
    let mut m = FileMeta {
        shard: None,
        run: None,
        levels: Vec::new(),
        seen: Vec::new(),
        anchor: None,
        lines: 0,
    };
    for line in RecordsReader::open(&[path.to_path_buf()]).meta_only() {
        m.lines += 1;
        match line.map_err(|e| usage(e.to_string()))? {
            RecordsLine::Shard(s) => match s.level.clone() {
                Some(l) => m.seen.push(l),
                None => m.shard = Some(*s),
            },
            RecordsLine::Run(r) => m.run = Some(*r),
            RecordsLine::Level(l) => m.levels.push(l),
            RecordsLine::Anchor(a) => {
                m.anchor.get_or_insert(a.unix_ms);
            }
            RecordsLine::Record(_) => {}
        }
    }
    Ok(m)
}

impl FleetScan {
    /// The shards of `files`, or `None` when they are no fleet's (no shard lines).
    /// `exclude` names shards to leave out. Files of different fleets, a shard twice,
    /// or a file that is no shard's among shards' are usage errors.
    pub fn scan(files: &[PathBuf], exclude: &[u32]) -> anyhow::Result<Option<FleetScan>> {
        let mut metas = Vec::new();
        for f in files {
            metas.push((f.clone(), file_meta(f)?));
        }
        let Some(first) = metas.iter().find_map(|(_, m)| m.shard.clone()) else {
            if let Some(i) = exclude.first() {
                return Err(usage(format!(
                    "--exclude-shard {i}: the records are no fleet's shards (no bench --shard run wrote them)"
                )));
            }
            return Ok(None);
        };
        let mut by_index: BTreeMap<u32, ShardFiles> = BTreeMap::new();
        for (path, m) in metas {
            let Some(s) = m.shard else {
                if m.lines == 0 && m.anchor.is_none() {
                    continue; // An empty file: a shard that never wrote.
                }
                return Err(usage(format!(
                    "{} is not a shard's records, but the other files are: merge a fleet's shards only",
                    path.display()
                )));
            };
            if s.count != first.count || s.start_at_unix_ms != first.start_at_unix_ms {
                return Err(usage(format!(
                    "{} is shard {} of another fleet run ({} shards, start {:?} vs {} shards, start {:?}): merge one run's shards only",
                    path.display(),
                    s.index,
                    s.count,
                    s.start_at_unix_ms,
                    first.count,
                    first.start_at_unix_ms
                )));
            }
            let entry = by_index.entry(s.index).or_insert_with(|| ShardFiles {
                index: s.index,
                files: Vec::new(),
                run: None,
                levels: Vec::new(),
                seen: Vec::new(),
                anchor_unix_ms: m.anchor,
            });
            if entry.run.is_some() && m.run.is_some() {
                return Err(usage(format!(
                    "shard {} appears twice ({} and {}): merge one run's shards only",
                    s.index,
                    entry.files[0].display(),
                    path.display()
                )));
            }
            entry.files.push(path);
            entry.run = entry.run.take().or(m.run);
            entry.levels.extend(m.levels);
            entry.seen.extend(m.seen);
        }
        Self::sort(first.count, by_index, exclude).map(Some)
    }

    /// Sorts the shards found into merged, missing (never started, or failed) and
    /// excluded.
    fn sort(
        count: u32,
        mut found: BTreeMap<u32, ShardFiles>,
        exclude: &[u32],
    ) -> anyhow::Result<FleetScan> {
        if let Some(i) = exclude.iter().find(|&&i| i >= count) {
            return Err(usage(format!(
                "--exclude-shard {i}: the fleet has shards 0 to {}",
                count - 1
            )));
        }
        let mut scan = FleetScan {
            count,
            merged: Vec::new(),
            missing: Vec::new(),
            excluded: Vec::new(),
        };
        for index in 0..count {
            match found.remove(&index) {
                Some(s) if exclude.contains(&index) => scan.excluded.push(s),
                Some(s) if s.run.is_some() => scan.merged.push(s),
                Some(_) => scan.missing.push(MissingShard {
                    index,
                    why: "its records end without a run line: the shard failed or was stopped before its end (left out)".into(),
                }),
                None if exclude.contains(&index) => {}
                None => scan.missing.push(MissingShard {
                    index,
                    why: "no records: the shard never started, or its records were not given".into(),
                }),
            }
        }
        if scan.merged.is_empty() {
            return Err(usage(format!(
                "no shard of the fleet's {count} finished: nothing to merge ({})",
                scan.missing
                    .iter()
                    .map(|m| format!("shard {}: {}", m.index, m.why))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        Ok(scan)
    }

    /// The merged shards' files, in shard order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.merged.iter().flat_map(|s| s.files.clone()).collect()
    }

    /// The earliest wall-clock anchor of the merged shards: the fleet's timeline's 0.
    pub fn base_unix_ms(&self) -> Option<u64> {
        self.merged.iter().filter_map(|s| s.anchor_unix_ms).min()
    }

    /// The run line the merged run is described by: the first merged shard's, from
    /// the earliest start, for as long as the longest shard ran.
    pub fn run(&self) -> Option<RunMeta> {
        let mut run = self.merged.first()?.run.clone()?;
        let runs = self.merged.iter().filter_map(|s| s.run.as_ref());
        run.run.started_at_unix_ms = runs
            .clone()
            .map(|r| r.run.started_at_unix_ms)
            .min()
            .unwrap_or(run.run.started_at_unix_ms);
        run.run.duration_s = runs.clone().map(|r| r.run.duration_s).fold(0.0, f64::max);
        run.run.interrupted = runs.clone().any(|r| r.run.interrupted);
        if let Some(m) = &run.run.machine {
            run.run.machine = Some(format!("{} shards, each: {m}", self.count));
        }
        Some(run)
    }

    /// The fleet's levels: each merged shard's level lines summed (intended,
    /// concurrency, rate), their warnings named by shard.
    pub fn levels(&self) -> Vec<LevelMeta> {
        let mut out: BTreeMap<u32, LevelMeta> = BTreeMap::new();
        for s in &self.merged {
            for m in &s.levels {
                let named: Vec<String> = m
                    .warnings
                    .iter()
                    .map(|w| format!("shard {}: {w}", s.index))
                    .collect();
                let early = m
                    .stopped_early
                    .as_ref()
                    .map(|w| format!("shard {}: {w}", s.index));
                match out.get_mut(&m.level) {
                    None => {
                        let mut first = m.clone();
                        first.warnings = named;
                        first.stopped_early = early;
                        out.insert(m.level, first);
                    }
                    Some(l) => {
                        l.intended = l.intended.zip(m.intended).map(|(a, b)| a + b);
                        l.concurrency = l.concurrency.zip(m.concurrency).map(|(a, b)| a + b);
                        l.rate = l.rate.zip(m.rate).map(|(a, b)| a + b);
                        l.warnings.extend(named);
                        l.stopped_early = l.stopped_early.take().or(early);
                        l.invalid |= m.invalid;
                        l.interrupted |= m.interrupted;
                        l.floor = TimerFloor::merged(l.floor, m.floor);
                    }
                }
            }
        }
        out.into_values().map(fleet_named).collect()
    }
}

/// A merged level named by its summed load, as a lone run of that load is named.
fn fleet_named(mut m: LevelMeta) -> LevelMeta {
    // Shares of a divided rate add up to the rate within float rounding.
    m.rate = m.rate.map(|r| (r * 1e6).round() / 1e6);
    let load = match (m.concurrency, m.rate) {
        (Some(concurrency), _) => Some(Load::Closed { concurrency }),
        (None, Some(rate)) => Some(Load::Open {
            rate,
            process: cadence_bench::ArrivalProcess::Constant,
            max_concurrency: None,
            ramp_up: std::time::Duration::ZERO,
        }),
        (None, None) => None,
    };
    if let Some(load) = load {
        m.name = load.label();
    }
    m
}

/// One shard's rows of the fleet table: what its level lines and (when its records
/// were read) its own aggregators say, with what looks wrong in words.
pub fn shard_checks(
    shard: &ShardFiles,
    names: &BTreeMap<u32, String>,
    aggs: Option<&LevelAggregators>,
) -> Vec<ShardCheck> {
    let mut rows = Vec::new();
    for m in &shard.levels {
        let seen = shard.seen.iter().find(|s| s.level == m.level);
        let figures = aggs
            .and_then(|a| a.get(m.level))
            .map(|a| a.finish(&LevelOptions::default()));
        let sent = figures.as_ref().map(|f| f.summary.requests.sent);
        // Judged as the shard's own report judges it: against the floor it measured.
        let pacing = figures.as_ref().and_then(|f| f.pacing).map(|mut p| {
            p.judge(m.floor, None);
            p
        });
        let mut row = ShardCheck {
            shard: shard.index,
            level: names
                .get(&m.level)
                .cloned()
                .unwrap_or_else(|| m.name.clone()),
            sent: sent.or(aggs.map(|_| 0)),
            succeeded: figures
                .as_ref()
                .map(|f| f.summary.requests.succeeded)
                .or(aggs.map(|_| 0)),
            start_skew_ms: seen.map(|s| s.start_skew_ms),
            pacing_lag_p99_ms: pacing.map(|p| p.lag_p99_ms),
            late_share: pacing.and_then(|p| p.late_share()),
            loop_lag_p99_ms: seen.map(|s| s.loop_lag_p99_ms),
            cpu_share: seen.and_then(|s| s.cpu_share),
            flags: Vec::new(),
        };
        row.flags = flags(&row, pacing.is_some_and(|p| p.invalid));
        rows.push(row);
    }
    rows
}

/// What a shard's row says is wrong; `fell_behind`: its pacing verdict is invalid.
fn flags(row: &ShardCheck, fell_behind: bool) -> Vec<String> {
    let mut f = Vec::new();
    if let Some(skew) = row.start_skew_ms.filter(|&s| s > LATE_START_MS) {
        f.push(format!("started {:.0} ms late", skew));
    }
    if fell_behind {
        f.push("fell behind its arrival schedule".into());
    }
    if row
        .loop_lag_p99_ms
        .is_some_and(|l| l > LOOP_LAG_WARN.as_secs_f64() * 1e3)
    {
        f.push("event loop lagged".into());
    }
    if row.cpu_share.is_some_and(|c| c > CPU_SHARE_WARN) {
        f.push("CPU-bound".into());
    }
    f
}

/// The fleet's section of the report, and its run-wide warnings.
pub fn report(scan: &FleetScan, checks: Vec<ShardCheck>) -> (FleetReport, Vec<String>) {
    let mut warnings = Vec::new();
    for m in &scan.missing {
        warnings.push(format!(
            "shard {} of {} is missing ({}): the merged run is incomplete",
            m.index, scan.count, m.why
        ));
    }
    if !scan.excluded.is_empty() {
        let ex: Vec<String> = scan.excluded.iter().map(|s| s.index.to_string()).collect();
        warnings.push(format!(
            "shard(s) {} left out by --exclude-shard: the figures are {} of the fleet's {} shards, and their load",
            ex.join(", "),
            scan.merged.len(),
            scan.count
        ));
    }
    let merged = |i: u32| scan.merged.iter().any(|s| s.index == i);
    for c in checks
        .iter()
        .filter(|c| !c.flags.is_empty() && merged(c.shard))
    {
        warnings.push(format!(
            "shard {} at {}: {} (cadence report --exclude-shard {} leaves it out)",
            c.shard,
            c.level,
            c.flags.join(", "),
            c.shard
        ));
    }
    let fleet = FleetReport {
        shards: scan.count,
        merged: scan.merged.iter().map(|s| s.index).collect(),
        missing: scan.missing.clone(),
        excluded: scan.excluded.iter().map(|s| s.index).collect(),
        complete: scan.missing.is_empty(),
        checks,
    };
    (fleet, warnings)
}
