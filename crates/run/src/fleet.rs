//! Merging a fleet's shards into one run (`cadence report results/` or `shard-*/`):
//! directories name their records files, each file says which shard wrote it, and the
//! shards' levels merge into the fleet's (accounting summed, distributions merged).
//! A shard that never started or failed is named by its index and makes the merged run
//! incomplete; each shard's self-checks are listed so an overloaded one can be excluded.

use crate::{input, Error};
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
fn records_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = std::fs::read_dir(dir)
        .map_err(|e| input(format!("cannot read the directory {}: {e}", dir.display())))?;
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
/// named as missing by the merge, not here. A stream is spooled up to
/// [`DEFAULT_MAX_SPOOL`] bytes ([`spooled`]).
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    expand_within(inputs, DEFAULT_MAX_SPOOL)
}

/// [`expand`] with streams spooled up to `max_spool` bytes each (`--max-spool`).
pub fn expand_within(inputs: &[PathBuf], max_spool: u64) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for given in inputs {
        if !given.is_dir() {
            out.push(spooled(given, max_spool)?);
            continue;
        }
        let own = records_in(given)?;
        if !own.is_empty() {
            out.extend(own);
            continue;
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(given)
            .map_err(|e| {
                input(format!(
                    "cannot read the directory {}: {e}",
                    given.display()
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
        return Err(input(format!(
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
    /// The shard's index in the fleet (0-based, from its shard line).
    pub index: u32,
    /// The shard's records files (a `cat`-joined file's part for this shard counts as one).
    pub files: Vec<PathBuf>,
    /// The shard's run line; `None` when its records end without one (it failed or was
    /// stopped).
    pub run: Option<RunMeta>,
    /// The shard's level lines, in file order.
    pub levels: Vec<LevelMeta>,
    /// How the shard ran each level it started (start skew, loop lag, CPU share), from its
    /// per-level shard lines.
    pub seen: Vec<ShardLevel>,
    /// The wall-clock anchor of the shard's clock.
    pub anchor_unix_ms: Option<u64>,
}

/// A fleet's records, shard by shard.
#[derive(Debug, Clone)]
pub struct FleetScan {
    /// How many shards the fleet was run with (`--shard I/N`'s N).
    pub count: u32,
    /// Shards that finished (a run line), to merge, by index.
    pub merged: Vec<ShardFiles>,
    /// Shards without a finished run (no records, or no run line), by index, with why; the
    /// merge is incomplete without them.
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
    /// Shard header lines (a file of several shards `cat` together has more than one).
    headers: u32,
}

fn file_meta(path: &Path) -> Result<FileMeta, Error> {
    let mut m = FileMeta {
        shard: None,
        run: None,
        levels: Vec::new(),
        seen: Vec::new(),
        anchor: None,
        lines: 0,
        headers: 0,
    };
    for line in RecordsReader::open(&[path.to_path_buf()]).meta_only() {
        m.lines += 1;
        match line.map_err(|e| input(e.to_string()))? {
            RecordsLine::Shard(s) => match s.level.clone() {
                Some(l) => m.seen.push(l),
                None => {
                    m.headers += 1;
                    m.shard.get_or_insert(*s);
                }
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
    pub fn scan(files: &[PathBuf], exclude: &[u32]) -> Result<Option<FleetScan>, Error> {
        let mut metas = Vec::new();
        for f in files {
            let m = file_meta(f)?;
            if m.headers < 2 {
                metas.push((f.clone(), m));
                continue;
            }
            // Shards' files `cat` together: each shard read as its own file (FAULTS 115).
            for part in split_shards(f)? {
                let m = file_meta(&part)?;
                metas.push((part, m));
            }
        }
        let Some(first) = metas.iter().find_map(|(_, m)| m.shard.clone()) else {
            if let Some(i) = exclude.first() {
                return Err(input(format!(
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
                return Err(input(format!(
                    "{} is not a shard's records, but the other files are: merge a fleet's shards only",
                    path.display()
                )));
            };
            if s.count != first.count || !same_start(s.start_at_unix_ms, first.start_at_unix_ms) {
                return Err(input(format!(
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
                return Err(input(format!(
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
        let scan = Self::sort(first.count, by_index, exclude)?;
        scan.same_configuration()?;
        Ok(Some(scan))
    }

    /// Refuses shards whose runs differ in anything but their shard's own part
    /// (FAULTS 114): target, API, model, load mode, or the command line without the
    /// flags each shard sets for itself (`--shard`, its outputs, its start).
    fn same_configuration(&self) -> Result<(), Error> {
        let runs: Vec<(u32, &RunMeta)> = self
            .merged
            .iter()
            .chain(&self.excluded)
            .filter_map(|s| s.run.as_ref().map(|r| (s.index, r)))
            .collect();
        let Some(&(i0, r0)) = runs.first() else {
            return Ok(());
        };
        let fleet_cmd0 = fleet_command(&r0.run.command);
        for &(i, r) in &runs[1..] {
            let differs = [
                ("target", &r0.run.target, &r.run.target),
                ("API", &r0.run.api, &r.run.api),
                ("model", &r0.run.model, &r.run.model),
                ("load", &r0.run.mode, &r.run.mode),
            ]
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(what, a, b)| format!("{what} {a} vs {b}"))
            .or_else(|| {
                let cmd = fleet_command(&r.run.command);
                (!r0.run.command.is_empty() && !r.run.command.is_empty() && cmd != fleet_cmd0)
                    .then(|| format!("`{}` vs `{}`", fleet_cmd0.join(" "), cmd.join(" ")))
            });
            if let Some(d) = differs {
                return Err(input(format!(
                    "shards {i0} and {i} ran different configurations ({d}): a merge holds one fleet run's shards; report them one by one"
                )));
            }
        }
        Ok(())
    }

    /// Sorts the shards found into merged, missing (never started, or failed) and
    /// excluded.
    fn sort(
        count: u32,
        mut found: BTreeMap<u32, ShardFiles>,
        exclude: &[u32],
    ) -> Result<FleetScan, Error> {
        if let Some(i) = exclude.iter().find(|&&i| i >= count) {
            return Err(input(format!(
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
            return Err(input(format!(
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

    /// Each merged shard's window on the fleet's clock, from its first send to its
    /// last end (s), and its sent requests; `None` when a shard's records could not be
    /// read again (the merge itself reports that).
    pub fn windows(&self) -> Option<Vec<ShardWindow>> {
        let base = self.base_unix_ms();
        let mut out = Vec::new();
        for s in &self.merged {
            let mut w = ShardWindow {
                shard: s.index,
                start_s: f64::INFINITY,
                end_s: f64::NEG_INFINITY,
                sent: 0,
            };
            for line in RecordsReader::open(&s.files).on_one_timeline(base) {
                let RecordsLine::Record(r) = line.ok()? else {
                    continue;
                };
                if r.warmup || !r.was_sent() {
                    continue;
                }
                if let Some(t) = r.sent_ns {
                    w.start_s = w.start_s.min(t as f64 / 1e9);
                }
                if let Some(t) = r.end_ns {
                    w.end_s = w.end_s.max(t as f64 / 1e9);
                }
                w.sent += 1;
            }
            if w.sent > 0 && w.end_s > w.start_s {
                out.push(w);
            }
        }
        Some(out)
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

/// Shards of one fleet run agree on its start to within this (`--start-in` gives each
/// shard its own `now + D`, a few ms apart).
const SAME_START_MS: u64 = 1_000;

/// Whether two shards' planned starts are one fleet run's (FAULTS 116).
fn same_start(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) <= SAME_START_MS,
        (a, b) => a == b,
    }
}

/// The flags each shard of one fleet sets for itself, and whether they take a value.
const PER_SHARD_FLAGS: [(&str, bool); 15] = [
    ("--shard", true),
    ("--records", true),
    ("--json", true),
    ("--html", true),
    ("--csv", true),
    ("--markdown", true),
    ("--start-at", true),
    ("--start-in", true),
    ("--metrics-port", true),
    ("--quiet", false),
    ("-q", false),
    ("--tui", false),
    ("--no-tui", false),
    ("--verbose", false),
    ("-v", false),
];

/// A shard's command line without the program and the flags each shard sets for
/// itself: what every shard of one fleet run shares.
fn fleet_command(cmd: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in cmd.iter().skip(1) {
        if std::mem::take(&mut skip) {
            continue;
        }
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        match PER_SHARD_FLAGS.iter().find(|(f, _)| *f == name) {
            Some((_, takes)) => skip = *takes && !a.contains('='),
            None => out.push(a.clone()),
        }
    }
    out
}

/// Files handed over as streams (a pipe, `/dev/stdin`, `<(…)`, a FIFO) are read once,
/// here, into an unnamed temporary file, since a records file is read in two passes
/// (FAULTS 119). Its handles live until the process ends; the kernel removes it then.
static SPOOLED: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// A new unnamed temporary file, and a path it can be opened by again.
fn unnamed_temp() -> Result<(std::fs::File, PathBuf), Error> {
    use std::os::fd::AsRawFd;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("cadence-{}-{n}.jsonl", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot make a temporary file {}: {e}", path.display()),
            )
        })?;
    let _ = std::fs::remove_file(&path);
    let again = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Ok((file, again))
}

/// The most a stream given as an input is spooled by default (`--max-spool`): 4 GiB,
/// many times a long sweep's records, and a ceiling on what `report /dev/zero` or
/// `yes | report /dev/stdin` can take of `$TMPDIR`.
pub const DEFAULT_MAX_SPOOL: u64 = 4 << 30;

/// `path`, or when it is no regular file or directory (a pipe, a FIFO, a character
/// device) a regular copy of all it holds, refused (nothing kept) when it holds more
/// than `max_spool` bytes.
pub fn spooled(path: &Path, max_spool: u64) -> Result<PathBuf, Error> {
    let meta = std::fs::metadata(path)
        .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    if meta.is_file() || meta.is_dir() {
        return Ok(path.to_path_buf());
    }
    let from = std::fs::File::open(path)
        .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let (mut to, copy) = unnamed_temp()?;
    spool(from, &mut to, max_spool, path)?;
    SPOOLED.lock().unwrap_or_else(|e| e.into_inner()).push(to);
    Ok(copy)
}

/// Copies `from` into `to`, at most `max_spool` bytes: a stream with more is an input
/// error naming `path`, the ceiling and the flag that raises it.
fn spool(
    from: impl std::io::Read,
    to: &mut std::fs::File,
    max_spool: u64,
    path: &Path,
) -> Result<(), Error> {
    let mut from = from.take(max_spool);
    std::io::copy(&mut from, to).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot copy {} into a temporary file in {}: {e}",
                path.display(),
                std::env::temp_dir().display()
            ),
        )
    })?;
    // One byte more, read and not written, says the stream goes on.
    let mut from = from.into_inner();
    let more = loop {
        match from.read(&mut [0u8]) {
            Ok(n) => break n > 0,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(input(format!("cannot read {}: {e}", path.display()))),
        }
    };
    if more {
        return Err(input(format!(
            "{} holds more than {max_spool} bytes, the most a stream given as an input is \
             copied to a temporary file (raise it with --max-spool, or give a regular file)",
            path.display()
        )));
    }
    Ok(())
}

/// A file holding several shards' records one after another (`cat shard-*.jsonl`),
/// cut into one file per shard: a part starts at a shard's header line, or at the
/// wall-clock anchor just before it.
fn split_shards(path: &Path) -> Result<Vec<PathBuf>, Error> {
    use std::io::{BufRead, Write};
    let file = std::fs::File::open(path)
        .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let mut parts: Vec<(std::io::BufWriter<std::fs::File>, PathBuf)> = Vec::new();
    let mut pending_anchor: Option<Vec<u8>> = None;
    let mut seen_header = false;
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let is_header =
            line.starts_with(b"{\"cadence_shard\"") && !line.windows(8).any(|w| w == b"\"level\":");
        if line.starts_with(b"{\"cadence_anchor\"") {
            if let Some(a) = pending_anchor.replace(line.clone()) {
                write_part(&mut parts, &a)?;
            }
            continue;
        }
        if is_header && (seen_header || parts.is_empty()) {
            let (file, p) = unnamed_temp()?;
            parts.push((std::io::BufWriter::new(file), p));
        }
        seen_header |= is_header;
        if let Some(a) = pending_anchor.take() {
            write_part(&mut parts, &a)?;
        }
        write_part(&mut parts, &line)?;
    }
    if let Some(a) = pending_anchor {
        write_part(&mut parts, &a)?;
    }
    let mut out = Vec::new();
    for (w, p) in parts {
        let file = w.into_inner().map_err(|e| e.into_error())?;
        let mut f = &file;
        f.flush()?;
        SPOOLED.lock().unwrap_or_else(|e| e.into_inner()).push(file);
        out.push(p);
    }
    Ok(out)
}

fn write_part(
    parts: &mut Vec<(std::io::BufWriter<std::fs::File>, PathBuf)>,
    line: &[u8],
) -> Result<(), Error> {
    use std::io::Write;
    if parts.is_empty() {
        let (file, p) = unnamed_temp()?;
        parts.push((std::io::BufWriter::new(file), p));
    }
    let last = parts.last_mut().expect("one part at least");
    last.0.write_all(line)?;
    if !line.ends_with(b"\n") {
        last.0.write_all(b"\n")?;
    }
    Ok(())
}

/// A merged level named by its summed load, as a lone run of that load is named.
fn fleet_named(mut m: LevelMeta) -> LevelMeta {
    // Shares of a divided rate add up to the rate within float rounding.
    m.rate = m.rate.map(|r| (r * 1e6).round() / 1e6);
    if let Some(name) = cadence_core::runlog::load_name(m.concurrency, m.rate) {
        m.name = name;
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

/// One shard's stretch of the fleet's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardWindow {
    /// The shard's index.
    pub shard: u32,
    /// The shard's first send, in s on the fleet's common clock.
    pub start_s: f64,
    /// The shard's last request end, in s on the fleet's common clock.
    pub end_s: f64,
    /// Requests the shard sent (warm-up left out).
    pub sent: u64,
}

/// Shards ran together when the stretch all of them were running covers at least this
/// share of the whole span from the first start to the last end.
const MIN_OVERLAP: f64 = 0.5;

/// When the shards did not run together (FAULTS 113): each shard's window, their
/// overlap, and the rate each measured summed, since the merged figures spread the
/// requests over the whole span and understate the fleet's rate.
pub fn apart_warning(w: &[ShardWindow]) -> Option<String> {
    if w.len() < 2 {
        return None;
    }
    let first = w.iter().map(|w| w.start_s).fold(f64::INFINITY, f64::min);
    let last = w.iter().map(|w| w.end_s).fold(f64::NEG_INFINITY, f64::max);
    let latest_start = w
        .iter()
        .map(|w| w.start_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let earliest_end = w.iter().map(|w| w.end_s).fold(f64::INFINITY, f64::min);
    let span = last - first;
    let overlap = (earliest_end - latest_start).max(0.0);
    if span <= 0.0 || overlap >= MIN_OVERLAP * span {
        return None;
    }
    let rate: f64 = w
        .iter()
        .map(|w| w.sent as f64 / (w.end_s - w.start_s))
        .sum();
    let merged = w.iter().map(|w| w.sent).sum::<u64>() as f64 / span;
    Some(format!(
        "the shards did not run together: {}; all of them ran at once for {:.3} s of the {:.3} s span, so the merged figures spread their requests over time no shard shared (merged {:.3} req/s; each shard's own rate summed: {:.3} req/s): the merged run is not one run at the fleet's load",
        w.iter()
            .map(|w| format!("shard {} {:.3}–{:.3} s", w.shard, w.start_s, w.end_s))
            .collect::<Vec<_>>()
            .join(", "),
        overlap,
        span,
        merged,
        rate
    ))
}

/// The fleet's section of the report, and its run-wide warnings.
pub fn report(scan: &FleetScan, checks: Vec<ShardCheck>) -> (FleetReport, Vec<String>) {
    let windows = scan.windows();
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
    // A shard that was interrupted, or sent nothing at a level, left its share of the
    // load unmeasured: the merged run is incomplete (FAULTS 112).
    let mut partial = Vec::new();
    for s in &scan.merged {
        if let Some(r) = s.run.as_ref().filter(|r| r.run.interrupted) {
            let intended: u64 = s.levels.iter().filter_map(|l| l.intended).sum();
            let sent: Option<u64> = checks
                .iter()
                .filter(|c| c.shard == s.index)
                .map(|c| c.sent)
                .sum();
            partial.push(format!(
                "shard {} of {} was interrupted after {:.1} s{}: the merged run is incomplete",
                s.index,
                scan.count,
                r.run.duration_s,
                match sent {
                    Some(n) => format!(" (sent {n} of its {intended} intended)"),
                    None => String::new(),
                }
            ));
        }
        for c in checks
            .iter()
            .filter(|c| c.shard == s.index && c.sent == Some(0))
        {
            partial.push(format!(
                "shard {} of {} sent nothing at {} (it started after the level's end, or could not send): the merged run is incomplete",
                s.index, scan.count, c.level
            ));
        }
    }
    let together = windows.and_then(|w| apart_warning(&w));
    let complete = scan.missing.is_empty() && partial.is_empty() && together.is_none();
    warnings.extend(partial);
    warnings.extend(together);
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
        complete,
        checks,
    };
    (fleet, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn spooled_len(from: impl std::io::Read, max: u64) -> (Result<(), Error>, u64) {
        let mut to = tempfile::tempfile().unwrap();
        let r = spool(from, &mut to, max, Path::new("/dev/stdin"));
        (r, to.metadata().unwrap().len())
    }

    #[test]
    fn an_endless_stream_is_refused_at_the_ceiling_with_nothing_written_past_it() {
        let (r, len) = spooled_len(std::io::repeat(b'y'), 4096);
        assert_eq!(len, 4096);
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("/dev/stdin holds more than 4096 bytes"),
            "{msg}"
        );
        assert!(msg.contains("--max-spool"), "{msg}");
        // One byte over is over.
        let (r, len) = spooled_len(std::io::repeat(b'y').take(4097), 4096);
        assert!(matches!(r, Err(Error::Input(_))));
        assert_eq!(len, 4096);
    }

    #[test]
    fn a_stream_of_the_ceiling_or_less_is_copied_whole() {
        for n in [0, 1, 4095, 4096] {
            let (r, len) = spooled_len(std::io::repeat(b'y').take(n), 4096);
            assert!(r.is_ok(), "{n}");
            assert_eq!(len, n);
        }
    }
}
