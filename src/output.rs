//! Writing a report: the console table on stdout and every file the output flags ask
//! for (JSON, HTML, Markdown, CSV), the same for `bench`, `plan` and `report`.

use crate::cli::OutputArgs;
use anyhow::Context;
use cadence_core::report::Report;
use cadence_core::RequestRecord;
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

/// Writes every requested file. Per-request CSV needs `records`; without them only the
/// level rows are written, and the console says so.
pub fn write_outputs(
    report: &Report,
    records: Option<&[RequestRecord]>,
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
            Some(recs) => {
                let names: Vec<(u32, String)> = level_names(report, recs);
                std::fs::write(&requests_path, cadence_report::csv::requests(recs, &names))
                    .with_context(|| format!("cannot write {}", requests_path.display()))?;
            }
            None => eprintln!(
                "Note: per-request CSV needs the records (`bench --records`); {} has the levels only.",
                levels_path.display()
            ),
        }
    }
    Ok(())
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
