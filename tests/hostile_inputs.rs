//! The third hostile sweep's file inputs and sizes (FAULTS rows from 142): every file
//! Cadence reads whole is read up to a stated ceiling, so `/dev/zero` given as any of
//! them is an error naming it, the ceiling and the flag that raises it, within a
//! bounded read.

mod common;

use common::cadence;
use std::path::Path;
use std::time::Duration;

/// Runs `cadence ARGS`, expecting a refusal whose message names /dev/zero's ceiling.
fn refused(args: &[&str], ceiling: &str) -> String {
    let out = cadence()
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains("/dev/zero"), "{args:?}: {err}");
    assert!(err.contains("holds more than"), "{args:?}: {err}");
    assert!(err.contains(ceiling), "{args:?}: {err}");
    err
}

#[test]
fn f142_dev_zero_as_a_bench_input_is_refused_at_its_ceiling() {
    let mib = "1048576 bytes";
    for input in [
        &["--dataset", "/dev/zero"][..],
        &["--trace", "/dev/zero"],
        &["--agent-trace", "/dev/zero"],
        &["--corpus", "/dev/zero", "--input-tokens", "8"],
    ] {
        let flag = input[0];
        let args = [
            &["bench", "--requests", "1", "--max-input", "1MiB"][..],
            input,
        ]
        .concat();
        let err = refused(&args, mib);
        assert!(err.contains("(raise it with --max-input)"), "{flag}: {err}");
    }
    let sixteen = "16777216 bytes";
    refused(
        &[
            "bench",
            "--requests",
            "1",
            "--agent",
            "--tools",
            "/dev/zero",
        ],
        sixteen,
    );
    refused(
        &[
            "bench",
            "--requests",
            "1",
            "--ca-file",
            "/dev/zero",
            "https://127.0.0.1:9/v1/chat/completions",
        ],
        sixteen,
    );
    refused(&["plan", "--engine", "/dev/zero"], sixteen);
}

/// A watch config of one builtin target with `extra` in its table.
fn watch_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("watch.toml");
    std::fs::write(
        &path,
        format!("[[target]]\nname = \"sim\"\nurl = \"builtin\"\n{extra}"),
    )
    .unwrap();
    path
}

#[test]
fn f142_dev_zero_as_a_watch_input_is_refused_at_its_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let db = db.to_str().unwrap();
    refused(
        &["watch", "--once", "--db", db, "/dev/zero"],
        "16777216 bytes",
    );
    let ca = watch_config(dir.path(), "ca_file = \"/dev/zero\"\n");
    refused(
        &["watch", "--once", "--db", db, ca.to_str().unwrap()],
        "16777216 bytes",
    );
}
