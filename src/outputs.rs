//! Where a run's results go, checked before the first request and written so that one
//! failing output (a full disk, a closed stdout) never costs the others: every output is
//! still attempted, each failure is named, and a reader that hung up (`| head`) is not an
//! error at all.

use crate::exit::usage;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The outputs a run was asked for, by flag, in the order they are checked.
pub fn named(
    json: Option<&Path>,
    records: Option<&Path>,
    out: &crate::report_cmd::OutputArgs,
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
        let (levels, requests) = crate::report_cmd::csv_paths(csv);
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

/// Prints `text` to stdout. A reader that hung up (broken pipe) is not an error: the
/// rest of stdout is skipped quietly. Any other failure is returned, named.
pub fn print(text: &str) -> Result<(), String> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(format!("cannot write the report to stdout: {e}")),
    }
}

/// Prints the console report: to stdout, or to stderr when `--markdown -` has stdout,
/// so a pipe gets the Markdown alone.
pub fn console(text: &str, out: &crate::report_cmd::OutputArgs) -> Result<(), String> {
    if out.markdown.as_ref().is_some_and(|p| p.as_os_str() == "-") {
        let mut err = std::io::stderr().lock();
        return err
            .write_all(text.as_bytes())
            .map_err(|e| format!("cannot write the report to stderr: {e}"));
    }
    print(text)
}

/// The run's exit code once every output was attempted: the failures are named on
/// stderr and make it an error (exit 1).
pub fn conclude(
    exit: crate::exit::Exit,
    failures: Vec<String>,
) -> anyhow::Result<crate::exit::Exit> {
    if failures.is_empty() {
        return Ok(exit);
    }
    Err(anyhow::anyhow!(
        "{} (every other output was written)",
        failures.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
