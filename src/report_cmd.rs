//! `cadence report FILE…`: the replay source. Rebuilds a report from a saved records
//! file (the bench's `--records`, which ends with the run's metadata) or a saved JSON
//! report, and writes it in any format; `bench` shares the output flags and writers.

use crate::bench_cmd::{build_report, Checks};
use crate::exit::{usage, Exit};
use cadence_core::report::{Report, RunInfo};
use cadence_core::runlog::{parse_records_file, LevelMeta, RecordsFile};
use cadence_core::slo::DEFAULT_MAX_ERROR_RATE;
use cadence_core::{Convention, RequestRecord, Slo};
use clap::Args;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn parse_convention(s: &str) -> Result<Convention, String> {
    s.parse()
}

fn parse_slo(s: &str) -> Result<Slo, String> {
    s.parse()
        .map_err(|e: cadence_core::SloParseError| e.to_string())
}

/// Output flags shared by `bench` and `report`.
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Write a self-contained HTML report with SVG charts here (no network needed to view).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Write CSV: one row per level and one per request. A directory (existing, or a
    /// path ending in /) gets levels.csv and requests.csv; FILE.csv gets the levels and
    /// FILE.requests.csv the requests.
    #[arg(long, value_name = "DIR-or-FILE")]
    pub csv: Option<PathBuf>,

    /// Write a Markdown summary (for a PR comment) here; '-' prints it to stdout.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Lead the summary tables with ITL and TPOT as this tool defines them: cadence,
    /// vllm (= sglang), aiperf (= genai-perf), guidellm, llmperf. The compatibility
    /// table always shows all of them.
    #[arg(long, value_name = "NAME", value_parser = parse_convention)]
    pub convention: Option<Convention>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A saved JSON report (`bench --json`) or records files (`bench --records`);
    /// several records files (e.g. from several client machines) are merged by level.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// Judge the run against these SLOs instead of the ones it was run with
    /// (repeatable). From a JSON report, goodput cannot be recomputed.
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo)]
    pub slos: Vec<Slo>,

    /// Judge the error-rate ceiling at this share instead of the run's own
    /// `--max-error-rate` (default 5 %): `5%` or `0.05`.
    #[arg(long, value_parser = crate::cli::parse_share)]
    pub max_error_rate: Option<f64>,
}

/// A loaded input: a report, and its records when the input held them.
pub struct Loaded {
    pub report: Report,
    pub records: Option<Vec<RequestRecord>>,
    /// The records' level index of each of the report's levels (with `records`).
    pub level_ids: Vec<u32>,
    /// The exit code the rebuilt report earns (SLO breach, invalid run).
    pub exit: Exit,
}

/// Whether `text` is a saved JSON report rather than a records file.
fn is_json_report(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .is_some_and(|v| v.get("schema_version").is_some() && v.get("levels").is_some())
}

/// Reads and parses one or more inputs into a report. Bad input is a usage error that
/// names the file (and line).
pub fn load(
    files: &[PathBuf],
    slos: &[Slo],
    convention: Option<Convention>,
    max_error_rate: Option<f64>,
) -> anyhow::Result<Loaded> {
    let mut texts = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| usage(format!("cannot read {}: {e}", f.display())))?;
        texts.push((f, text));
    }
    if texts.iter().any(|(_, t)| is_json_report(t)) {
        if texts.len() > 1 {
            return Err(usage(
                "give one JSON report, or one or more records files (JSON reports cannot be merged: they hold no samples)",
            ));
        }
        let (f, text) = &texts[0];
        let mut report: Report = serde_json::from_str(text).map_err(|e| {
            usage(format!(
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
                "SLOs re-checked from a JSON report: goodput needs the records and is left out"
                    .into(),
            );
        }
        if let Some(c) = convention {
            report.convention = Some(c.name().to_string());
        }
        let breached = report.levels.iter().any(|l| l.slos.iter().any(|s| !s.pass));
        return Ok(Loaded {
            report,
            records: None,
            level_ids: Vec::new(),
            exit: if breached {
                Exit::SloBreached
            } else {
                Exit::Ok
            },
        });
    }
    let mut merged = RecordsFile::default();
    let mut warnings = Vec::new();
    let mut intended: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for (f, text) in &texts {
        let (file, truncated) = parse_records_file(text).map_err(|(line, e)| {
            usage(format!(
                "{} line {line} is neither a request record nor a Cadence metadata line: {e}",
                f.display()
            ))
        })?;
        if truncated {
            warnings.push(format!(
                "{}: the last line was cut off (the run did not finish writing it) and is left out",
                f.display()
            ));
        }
        for m in file.levels {
            match merged.levels.iter_mut().find(|l| l.level == m.level) {
                Some(_) => {
                    let e = intended.entry(m.level).or_insert(Some(0));
                    *e = e.zip(m.intended).map(|(a, b)| a + b);
                }
                None => {
                    intended.insert(m.level, m.intended);
                    merged.levels.push(m);
                }
            }
        }
        if merged.run.is_none() {
            merged.run = file.run;
        }
        merged.records.extend(file.records);
    }
    for l in &mut merged.levels {
        l.intended = intended.get(&l.level).copied().flatten();
    }
    if merged.records.is_empty() {
        return Err(usage(format!(
            "{} holds no request records",
            files[0].display()
        )));
    }
    if texts.len() > 1 {
        warnings.push(format!(
            "merged {} records files by level: throughput windows assume their clocks started together",
            texts.len()
        ));
    }
    // Levels that have records but no level line (a run that crashed mid-level, or an
    // older file) get a plain name.
    let mut seen: Vec<u32> = merged.records.iter().map(|r| r.level).collect();
    seen.sort_unstable();
    seen.dedup();
    for lv in seen {
        if !merged.levels.iter().any(|m| m.level == lv) {
            merged.levels.push(LevelMeta {
                level: lv,
                name: format!("level {lv}"),
                concurrency: None,
                rate: None,
                intended: None,
                stopped_early: None,
                warnings: vec!["no level line in the records file: the intended load is unknown, so intended = sent + dropped".into()],
                invalid: false,
                interrupted: false,
            });
        }
    }
    merged.levels.sort_by_key(|m| m.level);
    let (info, mut checks, search) = match merged.run {
        Some(meta) => {
            let stall = Duration::from_nanos(cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS);
            let c = &meta.checks;
            let checks = Checks {
                stall_threshold: saved_ms(
                    c.stall_threshold_ms,
                    1e-6,
                    stall,
                    "stall threshold",
                    &mut warnings,
                ),
                slos: meta
                    .checks
                    .slos
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()
                    .map_err(|e: cadence_core::SloParseError| {
                        usage(format!("the run line's SLO does not parse: {e}"))
                    })?,
                max_late: meta.checks.max_late,
                time_bucket: saved_ms(
                    c.time_bucket_ms,
                    1.0,
                    Duration::from_secs(1),
                    "time bucket",
                    &mut warnings,
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
            };
            (meta.run, checks, meta.search)
        }
        None => {
            warnings.push(
                "the records file has no run line (an older file, or the run did not finish): the target, model and command are unknown".into(),
            );
            let info = RunInfo {
                target: "unknown".into(),
                api: "unknown".into(),
                model: "unknown".into(),
                mode: "unknown".into(),
                started_at_unix_ms: 0,
                duration_s: 0.0,
                command: Vec::new(),
                builtin_sim: false,
                interrupted: false,
                machine: None,
            };
            let checks = Checks {
                stall_threshold: Duration::from_nanos(
                    cadence_core::metrics::DEFAULT_STALL_THRESHOLD_NS,
                ),
                slos: Vec::new(),
                max_late: 0.001,
                time_bucket: Duration::from_secs(1),
                convention: None,
                max_error_rate: DEFAULT_MAX_ERROR_RATE,
            };
            (info, checks, None)
        }
    };
    if !slos.is_empty() {
        checks.slos = slos.to_vec();
    }
    if let Some(m) = max_error_rate {
        checks.max_error_rate = m;
    }
    if convention.is_some() {
        checks.convention = convention;
    }
    let (mut report, mut exit) = build_report(info, &merged.levels, &merged.records, &checks);
    // As in bench: with --find-max, probes above the frontier breach by design.
    if exit == Exit::SloBreached && search.as_ref().is_some_and(|s| s.best.is_some()) {
        exit = Exit::Ok;
    }
    report.search = search;
    report.warnings.extend(warnings);
    Ok(Loaded {
        report,
        records: Some(merged.records),
        level_ids: merged.levels.iter().map(|m| m.level).collect(),
        // A rebuilt report of an interrupted run is a complete answer about what it holds.
        exit: if exit == Exit::Interrupted {
            Exit::Ok
        } else {
            exit
        },
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
        Ok(d) if ms >= min_ms && d <= crate::cli::MAX_DURATION => d,
        _ => {
            warnings.push(format!(
                "the run line's {what} ({ms} ms) is not one a run can use: {} is used instead",
                humantime::format_duration(default)
            ));
            default
        }
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    let outputs = crate::outputs::named(args.json.as_deref(), None, &args.outputs);
    crate::outputs::preflight(&args.files, &outputs)?;
    let loaded = load(
        &args.files,
        &args.slos,
        args.outputs.convention,
        args.max_error_rate,
    )?;
    let console = cadence_report::console::render(&loaded.report, std::io::stdout().is_terminal());
    let mut failures: Vec<String> = crate::outputs::console(&console, &args.outputs)
        .err()
        .into_iter()
        .collect();
    failures.extend(write_outputs(
        &loaded.report,
        loaded.records.as_deref(),
        args.json.as_deref(),
        &args.outputs,
    ));
    crate::outputs::conclude(loaded.exit, failures)
}

/// Writes every requested file, each attempted whatever happened to the others, and
/// returns the failures in words (empty when all were written). Per-request CSV needs
/// `records`; without them only the level rows are written, and the console says so.
pub fn write_outputs(
    report: &Report,
    records: Option<&[RequestRecord]>,
    json: Option<&Path>,
    out: &OutputArgs,
) -> Vec<String> {
    let mut failures = Vec::new();
    if let Some(dir) = out.csv.as_deref().map(csv_paths).and_then(|(l, _)| {
        l.parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
    }) {
        // Only `--csv DIR/` itself is created; its parent must exist (checked up front).
        if let Err(e) = std::fs::create_dir(&dir) {
            failures.push(format!("cannot create {}: {e}", dir.display()));
        }
    }
    let mut write = |what: &str, path: &Path, text: String| {
        if let Err(e) = std::fs::write(path, text) {
            failures.push(format!("cannot write {what} to {}: {e}", path.display()));
        }
    };
    if let Some(path) = json {
        write(
            "the JSON report",
            path,
            cadence_report::json::render(report),
        );
    }
    if let Some(path) = &out.html {
        write(
            "the HTML report",
            path,
            cadence_report::html::render(report),
        );
    }
    if let Some(path) = out.markdown.as_ref().filter(|p| p.as_os_str() != "-") {
        write(
            "the Markdown",
            path,
            cadence_report::markdown::render(report),
        );
    }
    if let Some(path) = &out.csv {
        let (levels_path, requests_path) = csv_paths(path);
        write(
            "the CSV levels",
            &levels_path,
            cadence_report::csv::levels(report),
        );
        match records {
            Some(recs) => {
                let names: Vec<(u32, String)> = level_names(report, recs);
                let text = cadence_report::csv::requests(recs, &names);
                write("the CSV requests", &requests_path, text);
            }
            None => eprintln!(
                "Note: per-request CSV needs the records (`bench --records`); {} has the levels only.",
                levels_path.display()
            ),
        }
    }
    if out.markdown.as_ref().is_some_and(|p| p.as_os_str() == "-") {
        let md = cadence_report::markdown::render(report);
        failures.extend(crate::outputs::print(&md).err());
    }
    failures
}

/// The level index → name pairs of a report whose levels follow the records' order.
fn level_names(report: &Report, recs: &[RequestRecord]) -> Vec<(u32, String)> {
    let mut idx: Vec<u32> = recs.iter().map(|r| r.level).collect();
    idx.sort_unstable();
    idx.dedup();
    idx.into_iter()
        .zip(report.levels.iter().map(|l| l.name.clone()))
        .collect()
}

/// Where `--csv PATH` puts the level and request tables.
pub fn csv_paths(path: &Path) -> (PathBuf, PathBuf) {
    let is_dir = path.is_dir() || path.to_string_lossy().ends_with('/');
    if is_dir {
        (path.join("levels.csv"), path.join("requests.csv"))
    } else {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cadence".into());
        (
            path.to_path_buf(),
            path.with_file_name(format!("{stem}.requests.csv")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_paths_for_a_directory_and_a_file() {
        let d = tempfile::tempdir().unwrap();
        let (l, r) = csv_paths(d.path());
        assert_eq!(l, d.path().join("levels.csv"));
        assert_eq!(r, d.path().join("requests.csv"));
        let (l, r) = csv_paths(Path::new("out/new/"));
        assert_eq!(l, Path::new("out/new/levels.csv"));
        assert_eq!(r, Path::new("out/new/requests.csv"));
        let (l, r) = csv_paths(Path::new("x/run.csv"));
        assert_eq!(l, Path::new("x/run.csv"));
        assert_eq!(r, Path::new("x/run.requests.csv"));
    }
}
