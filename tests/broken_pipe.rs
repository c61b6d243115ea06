//! A reader that goes away (`cadence report run.jsonl | head`) ends the output quietly:
//! no panic, no backtrace, the run's own exit code.

use std::process::{Command, Stdio};

/// Runs `cadence ARGS` with stdout a pipe whose read end is already closed.
fn with_closed_stdout(args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_quietly_with_the_runs_exit_code() {
    for args in [
        &["plan", "--list-presets"][..],
        &[
            "plan",
            "--preset",
            "tiny@cpu",
            "-n",
            "20",
            "--markdown",
            "-",
        ][..],
    ] {
        let out = with_closed_stdout(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn the_files_asked_for_are_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("plan.json");
    let out = with_closed_stdout(&[
        "plan",
        "--preset",
        "tiny@cpu",
        "-n",
        "20",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["levels"][0]["requests"]["succeeded"], 20);
}
