//! The pacing verdict against the machine's own floor, end to end: a client whose whole
//! machine stalls now and then (every thread of it stopped, as a hypervisor's steal or
//! a busy neighbour would) has late sends over --max-late, yet its floor explains them
//! and the run stays valid; and `--coalesce-wakes` is refused where it would hold sends.

mod common;

use common::{cadence, spawn_listening, usage_error};
use serde_json::Value;
use std::time::{Duration, Instant};

#[cfg(unix)]
#[test]
fn a_healthy_client_on_a_stalling_machine_stays_valid() {
    let (_sim, url) = spawn_listening(&["sim", "--addr", "127.0.0.1:0", "--max-tokens", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "bench",
            &format!("{url}/v1"),
            "--model",
            "m",
            "--rate",
            "100",
        ])
        .args(["-d", "3s", "--quiet", "--json"])
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let signal = |s: &str| {
        std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .is_ok_and(|st| st.success())
    };
    // Every 250 ms the whole client stops for 6 ms: sends scheduled inside go late, and
    // so do the floor thread's deadlines.
    let t = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "bench did not end");
        std::thread::sleep(Duration::from_millis(250));
        if signal("-STOP") {
            std::thread::sleep(Duration::from_millis(6));
            signal("-CONT");
        }
    };
    let err = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).to_string();
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let p = &r["levels"][0]["pacing"];
    let (late, sent) = (p["late"].as_f64().unwrap(), p["sent"].as_f64().unwrap());
    assert!(
        late > 0.001 * sent,
        "the stalls made more sends late than --max-late alone allows: {p}"
    );
    assert!(p["floor"]["late"].as_u64().unwrap() > 0, "{p}");
    assert!(late <= p["allowed_late"].as_f64().unwrap(), "{p}");
    assert_eq!(p["invalid"], false);
    common::validate_report(&r);
}

#[test]
fn coalescing_is_refused_where_it_would_hold_a_send() {
    for args in [
        &["bench", "--rate", "5", "--coalesce-wakes", "2ms"][..],
        &["bench", "--find-max", "rate", "--slo", "ttft.p99<1s"],
        &["bench", "-c", "2", "--turns", "2", "--input-tokens", "8"][..],
    ] {
        let mut a = args.to_vec();
        if !a.contains(&"--coalesce-wakes") {
            a.extend(["--coalesce-wakes", "1ms"]);
        }
        if a.contains(&"--turns") {
            a.extend(["--think-time", "10ms"]);
        }
        usage_error(&a, "--coalesce-wakes cannot be used with");
    }
    // A closed loop may coalesce, and by default nothing does.
    cadence()
        .args(["bench", "-n", "4", "-c", "2", "--max-tokens", "3"])
        .args(["--coalesce-wakes", "1ms", "--quiet"])
        .assert()
        .success();
}
