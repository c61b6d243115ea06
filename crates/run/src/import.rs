//! Another benchmark tool's saved output as a run `report` and `compare` load like a
//! records file: the import's records are written to a temporary records file (with a
//! level line per load level and a run line), loaded the usual way, and the report is
//! then marked with what the file lacks ([`cadence_import::mark`]), so every format and
//! every comparison treats an imported run as Cadence's own, minus the blanked figures.

use crate::load::{load_with, Loaded, Overrides};
use crate::{input, Error};
use cadence_core::report::RunInfo;
use cadence_core::runlog::{level_line, run_line, LevelMeta, RunChecks, RunMeta};
use cadence_import::{Imported, Tool};
use std::io::Write;
use std::path::Path;

/// An imported run: the loaded report and records, the import itself, and the
/// temporary directory its records file lives in (kept as long as the run is used).
pub struct ImportedLoad {
    /// The run loaded from the import's records file.
    pub loaded: Loaded,
    /// The import itself (what the file lacks, its tool, its files).
    pub imported: Imported,
    /// Where the records file lives: keep it while `loaded` is used.
    pub dir: tempfile::TempDir,
}

/// Whether `path` is one of Cadence's own files (a records file or a JSON report): its
/// first line is a record, a `cadence_*` line, or a report.
pub fn is_cadence_file(path: &Path) -> bool {
    if path.is_dir() {
        return true;
    }
    let Ok(first) = cadence_records::reader::first_line(path, 1 << 20) else {
        return false;
    };
    let t = String::from_utf8_lossy(&first);
    let t = t.trim();
    if t.starts_with("{\"cadence_") {
        return true;
    }
    if t == "{" {
        // Pretty-printed JSON: a Cadence report unless another tool's layout shows.
        return cadence_import::detect(path).ok().flatten().is_none();
    }
    serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| {
        v.get("outcome").is_some() && v.get("index").is_some()
            || v.get("schema_version").is_some() && v.get("cadence_version").is_some()
    })
}

/// `path` imported as `from` (or as detected, when it is another tool's output);
/// `None` when it is not another tool's file (a Cadence file, loaded as usual).
pub fn load(path: &Path, from: Option<Tool>, o: &Overrides) -> Result<Option<ImportedLoad>, Error> {
    let tool = match from {
        Some(t) => Some(t),
        None => cadence_import::detect(path).map_err(|e| input(e.to_string()))?,
    };
    let Some(tool) = tool else {
        return Ok(None);
    };
    let imported = cadence_import::import(path, Some(tool)).map_err(|e| input(e.to_string()))?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(format!("imported-{tool}.jsonl"));
    write_records(&file, &imported)?;
    let o = Overrides {
        exact_samples: None,
        exclude_shards: Vec::new(),
        ..o.clone()
    };
    let mut loaded = load_with(std::slice::from_ref(&file), &o)?;
    cadence_import::mark(&mut loaded.report, &imported);
    Ok(Some(ImportedLoad {
        loaded,
        imported,
        dir,
    }))
}

/// The import as a records file: its records, a level line per level, a run line.
fn write_records(file: &Path, imp: &Imported) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(file)?);
    for r in &imp.records {
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
    }
    for (i, l) in imp.levels.iter().enumerate() {
        let n = imp.records.iter().filter(|r| r.level == i as u32).count() as u64;
        let meta = LevelMeta {
            concurrency: l.concurrency,
            rate: l.rate,
            intended: Some(n),
            ..LevelMeta::new(i as u32, l.name.clone())
        };
        writeln!(w, "{}", level_line(&meta))?;
    }
    let span_s = {
        let s = imp.records.iter().filter_map(|r| r.sent_ns).min();
        let e = imp.records.iter().filter_map(|r| r.end_ns).max();
        s.zip(e)
            .map_or(0.0, |(s, e)| e.saturating_sub(s) as f64 / 1e9)
    };
    // The file's URL as a run's target is stored: without credentials.
    let mut run = RunInfo::new(
        imp.target.as_deref().map_or_else(
            || format!("imported from {}", imp.tool),
            cadence_core::secret::redact_url,
        ),
        imp.api
            .clone()
            .unwrap_or_else(|| format!("{} import", imp.tool)),
        imp.model.clone().unwrap_or_else(|| "unknown".into()),
        format!("imported:{}", imp.tool),
        imp.started_at_unix_ms.unwrap_or(0),
    );
    // Without send times the span of the records is not the run's: left unknown (0).
    let span_s = if imp.lacks(cadence_import::Lack::SendTimes) {
        0.0
    } else {
        span_s
    };
    run.duration_s = imp.duration_s.unwrap_or(span_s);
    run.command = imp.files.clone();
    let meta = RunMeta {
        run,
        checks: RunChecks::default(),
        search: None,
    };
    writeln!(w, "{}", run_line(&meta))?;
    w.flush()?;
    Ok(())
}
