//! Where a run's results go, for `bench`, `plan` and `report`: the console table on
//! stdout and every file the output flags ask for (JSON, HTML, Markdown, CSV). Paths are
//! checked before the first request, and one failing output (a full disk, a closed
//! stdout) never costs the others: every output is still attempted, each failure is
//! named, and a reader that hung up (`| head`) is not an error at all.

use crate::cli::OutputArgs;
use crate::exit::{usage, Exit};
use anyhow::Context;
use cadence_core::report::Report;
use cadence_run::RecordsSource;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The outputs a run was asked for, by flag, in the order they are checked.
pub fn named(
    json: Option<&Path>,
    records: Option<&Path>,
    out: &OutputArgs,
) -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    v.extend(json.map(|p| ("--json", p.to_path_buf())));
    v.extend(records.map(|p| ("--records", p.to_path_buf())));
    v.extend(out.html.as_ref().map(|p| ("--html", p.clone())));
    v.extend(
        out.markdown
            .as_ref()
            .filter(|p| p.as_os_str() != "-")
            .map(|p| ("--markdown", p.clone())),
    );
    if let Some(csv) = &out.csv {
        let (levels, requests) = csv_paths(csv);
        match levels.parent() {
            // `--csv DIR/` for a new directory: the directory itself is what is created.
            Some(dir) if csv.to_string_lossy().ends_with('/') && !dir.exists() => {
                v.push(("--csv", dir.to_path_buf()));
            }
            _ => {
                v.push(("--csv", levels));
                v.push(("--csv", requests));
            }
        }
    }
    v
}

/// Refuses (a usage error, before anything is sent or written) an output that cannot be
/// written: a directory, a missing parent directory, no permission; two outputs on one
/// path; and an output that is one of the `inputs`.
pub fn preflight(inputs: &[PathBuf], outputs: &[(&'static str, PathBuf)]) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for (flag, path) in outputs {
        let id = identity(path);
        if let Some(input) = inputs.iter().find(|i| identity(i) == id) {
            return Err(usage(format!(
                "{flag} {} would write over the input {}: choose another path",
                path.display(),
                input.display()
            )));
        }
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == id) {
            return Err(usage(format!(
                "{flag} and {other} both write to {}: give each output its own path",
                path.display()
            )));
        }
        writable(path).map_err(|why| usage(format!("{flag} {}: {why}", path.display())))?;
        seen.push((flag, id));
    }
    Ok(())
}

/// The path as the file system resolves it, for comparing outputs and inputs.
fn identity(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let parent = parent.map_or_else(|| std::fs::canonicalize("."), std::fs::canonicalize);
    match (parent, path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

/// Whether `path` can be written, without truncating what is there (a file created to
/// find out is removed again).
fn writable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a directory".into());
    }
    // A FIFO, a terminal or `/dev/stdout` is opened once, by the writer: opening a FIFO
    // here would wait for its reader and then hand it an EOF (FAULTS 119).
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Ok(());
    }
    if path.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("cannot be written: {e}"));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent.filter(|d| !d.is_dir()) {
        return Err(format!(
            "the directory {} does not exist (Cadence does not create it)",
            dir.display()
        ));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("cannot be created: {e}"))?;
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// Set once stdout's reader has gone: nothing more is printed there.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout. A reader that went away (`cadence report run.jsonl | head`)
/// is not an error: what it no longer wants, and the rest of stdout, is dropped quietly,
/// and the files asked for are still written. Any other failure is returned, named.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
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

/// Prints the console report (in colour on a terminal): to stdout, or to stderr when
/// `--markdown -` has stdout, so a pipe gets the Markdown alone.
pub fn print_console(report: &Report, out: &OutputArgs) -> Result<(), String> {
    let view = if out.detail {
        cadence_report::console::View::Detail
    } else {
        cadence_report::console::View::Summary
    };
    let text = cadence_report::console::render_with(report, std::io::stdout().is_terminal(), view);
    if out.markdown.as_ref().is_some_and(|p| p.as_os_str() == "-") {
        let mut err = std::io::stderr().lock();
        return err
            .write_all(text.as_bytes())
            .map_err(|e| format!("cannot write the report to stderr: {e}"));
    }
    print_stdout(&text).map_err(|e| format!("{e:#}"))
}

/// Delivers a finished report: the console, then every requested file, each attempted
/// whatever happened to the others; `failures` so far (e.g. the records file) join the
/// ones met here. The run's exit code, or an error naming every failure (exit 1).
pub fn deliver(
    report: &Report,
    records: Option<&RecordsSource>,
    json: Option<&Path>,
    out: &OutputArgs,
    exit: Exit,
    mut failures: Vec<String>,
) -> anyhow::Result<Exit> {
    failures.extend(print_console(report, out).err());
    failures.extend(write_outputs(report, records, json, out));
    conclude(exit, failures)
}

/// The run's exit code once every output was attempted: the failures are named on
/// stderr and make it an error (exit 1).
fn conclude(exit: Exit, failures: Vec<String>) -> anyhow::Result<Exit> {
    if failures.is_empty() {
        return Ok(exit);
    }
    Err(anyhow::anyhow!(
        "{} (every other output was written)",
        failures.join("; ")
    ))
}

/// Writes every requested file, each attempted whatever happened to the others, and
/// returns the failures in words (empty when all were written). Per-request CSV needs
/// `records`; without them only the level rows are written, and the console says so.
pub fn write_outputs(
    report: &Report,
    records: Option<&RecordsSource>,
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
            Some(source) => {
                if let Err(e) = write_requests_csv(report, source, &requests_path) {
                    failures.push(format!(
                        "cannot write the CSV requests to {}: {e:#}",
                        requests_path.display()
                    ));
                }
            }
            None => eprintln!(
                "Note: per-request CSV needs the records (`bench --records`); {} has the levels only.",
                levels_path.display()
            ),
        }
    }
    if out.markdown.as_ref().is_some_and(|p| p.as_os_str() == "-") {
        let md = cadence_report::markdown::render(report);
        failures.extend(print_stdout(&md).err().map(|e| e.to_string()));
    }
    failures
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

    #[test]
    fn preflight_refuses_clashes_missing_directories_and_inputs() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.json");
        let ok = [("--json", a.clone()), ("--html", d.path().join("b.html"))];
        preflight(&[], &ok).unwrap();
        assert!(!a.exists(), "the probe file is removed");
        let same = [("--json", a.clone()), ("--html", d.path().join("./a.json"))];
        let e = preflight(&[], &same).unwrap_err().to_string();
        assert!(e.contains("--html and --json both write to"), "{e}");
        std::fs::write(&a, "input").unwrap();
        let e = preflight(std::slice::from_ref(&a), &[("--json", a.clone())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("would write over the input"), "{e}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "input", "untouched");
        let missing = [("--csv", d.path().join("x/y/levels.csv"))];
        let e = preflight(&[], &missing).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let e = preflight(&[], &[("--json", d.path().to_path_buf())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
    }
}
