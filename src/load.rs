//! Saved runs read back: a JSON report, or one or more records files rebuilt into the
//! report the run printed. `report` and `compare` both read their inputs here.

use crate::assemble::{build_report, Checks};
use crate::exit::{usage, Exit};
use cadence_core::report::{Report, RunInfo, SearchReport};
use cadence_core::runlog::{parse_records_file, LevelMeta, RecordsFile, RunMeta, DEFAULT_MAX_LATE};
use cadence_core::slo::DEFAULT_MAX_ERROR_RATE;
use cadence_core::{Convention, RequestRecord, Slo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    let (info, mut checks, search) = saved_checks(merged.run, &mut warnings)?;
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

/// What the run line says the run was and was judged against; a file without one gets
/// "unknown" and the defaults, with a warning.
fn saved_checks(
    run: Option<RunMeta>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(RunInfo, Checks, Option<SearchReport>)> {
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
                        usage(format!("the run line's SLO does not parse: {e}"))
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
        Ok(d) if ms >= min_ms && d <= crate::cli::MAX_DURATION => d,
        _ => {
            warnings.push(format!(
                "the run line's {what} ({ms} ms) is not one a run can use: {default:?} is used instead"
            ));
            default
        }
    }
}
