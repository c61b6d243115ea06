//! Writing a report: the console table on stdout and every file the output flags ask
//! for (JSON, HTML, Markdown, CSV), the same for `bench`, `plan` and `report`.

use crate::cli::OutputArgs;
use crate::load::RecordsSource;
use anyhow::Context;
use cadence_core::report::Report;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Prints the console report on stdout (in colour on a terminal).
pub fn print_console(report: &Report) -> anyhow::Result<()> {
    print_stdout(&cadence_report::console::render(
        report,
        std::io::stdout().is_terminal(),
    ))
}

/// Writes `text` to stdout. A reader that went away (`cadence report run.jsonl | head`)
/// is not an error: what it no longer wants is dropped quietly, and the files asked
/// for are still written.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to stdout"),
    }
}

/// Writes `text` to the file at `path`, or to stdout when the path is `-`.
pub fn write_or_print(path: &Path, text: &str) -> anyhow::Result<()> {
    if path.as_os_str() == "-" {
        print_stdout(text)
    } else {
        Ok(std::fs::write(path, text)?)
    }
}

/// Writes every requested file. Per-request CSV needs the records (streamed from
/// `records` one at a time); without them only the level rows are written, and the
/// console says so.
pub fn write_outputs(
    report: &Report,
    records: Option<&RecordsSource>,
    json: Option<&Path>,
    out: &OutputArgs,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        std::fs::write(path, cadence_report::json::render(report))
            .with_context(|| format!("cannot write the JSON report to {}", path.display()))?;
    }
    if let Some(path) = &out.html {
        std::fs::write(path, cadence_report::html::render(report))
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
    }
    if let Some(path) = &out.markdown {
        write_or_print(path, &cadence_report::markdown::render(report))
            .with_context(|| format!("cannot write the Markdown to {}", path.display()))?;
    }
    if let Some(path) = &out.csv {
        let (levels_path, requests_path) = csv_paths(path);
        if let Some(dir) = levels_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(&levels_path, cadence_report::csv::levels(report))
            .with_context(|| format!("cannot write {}", levels_path.display()))?;
        match records {
            Some(source) => write_requests_csv(report, source, &requests_path)
                .with_context(|| format!("cannot write {}", requests_path.display()))?,
            None => eprintln!(
                "Note: per-request CSV needs the records (`bench --records`); {} has the levels only.",
                levels_path.display()
            ),
        }
    }
    Ok(())
}

/// The per-request CSV, a row per record as the records stream by.
fn write_requests_csv(report: &Report, source: &RecordsSource, path: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    let names = source.names(report);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut first = true;
    for r in source.read() {
        let text = cadence_report::csv::requests(std::slice::from_ref(&r?), &names);
        // Each piece starts with the header; the file has it once.
        let rows = match (first, text.split_once('\n')) {
            (false, Some((_, rows))) => rows,
            _ => text.as_str(),
        };
        out.write_all(rows.as_bytes())?;
        first = false;
    }
    if first {
        out.write_all(cadence_report::csv::requests(&[], &names).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// Where a run's records are written for its outputs: `--records` when given, else a
/// temporary file when the per-request CSV needs them (it streams them back), else
/// nowhere. The temporary file (compressed) goes when the returned guard is dropped.
pub fn records_path(
    records: Option<&Path>,
    out: &OutputArgs,
) -> anyhow::Result<(Option<PathBuf>, Option<tempfile::TempPath>)> {
    if let Some(p) = records {
        return Ok((Some(p.to_path_buf()), None));
    }
    if out.csv.is_none() {
        return Ok((None, None));
    }
    let temp = tempfile::Builder::new()
        .prefix("cadence-records-")
        .suffix(".jsonl.zst")
        .tempfile()
        .context("cannot create a temporary file for the per-request CSV")?
        .into_temp_path();
    Ok((Some(temp.to_path_buf()), Some(temp)))
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
