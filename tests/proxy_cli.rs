//! `cadence proxy` end to end as a process: usage errors exit 2 with a clear message;
//! in front of `cadence sim` it forwards a stream, and SIGINT drains and flushes the
//! records file before a clean exit.

mod common;
use common::{interrupt_and_wait, spawn_listening, Killed};

use assert_cmd::Command;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::Duration;

fn cadence() -> Command {
    Command::cargo_bin("cadence").unwrap()
}

#[test]
fn proxy_usage_errors_exit_2_with_the_reason() {
    for (args, want) in [
        (vec!["--upstream", "ftp://x"], "invalid upstream URL"),
        (
            vec!["--upstream", "http://127.0.0.1:1", "--alert", "itl.p50>50"],
            "needs a unit",
        ),
        (
            vec![
                "--upstream",
                "http://127.0.0.1:1",
                "--alert",
                "itl.p50>50ms for soon",
            ],
            "not a duration",
        ),
        (
            vec![
                "--upstream",
                "http://127.0.0.1:1",
                "--alert-webhook",
                "http://127.0.0.1:2/",
            ],
            "needs at least one --alert",
        ),
    ] {
        let out = cadence()
            .arg("proxy")
            .args(&args)
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn proxy_in_front_of_sim_forwards_and_flushes_records_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("live.jsonl");
    let (_sim, sim_url) = spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        "5ms",
        "--itl",
        "2ms",
    ]);
    let (mut proxy, proxy_url) = spawn_listening(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &sim_url,
        "--records",
        records.to_str().unwrap(),
    ]);
    let addr = proxy_url.strip_prefix("http://").unwrap();
    let body =
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}"#;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("data: [DONE]"), "{got}");

    let status = interrupt_and_wait(&mut proxy.0);
    assert_eq!(
        status.expect("proxy did not exit on SIGINT").code(),
        Some(0)
    );
    let text = std::fs::read_to_string(&records).unwrap();
    let recs = cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records;
    assert_eq!(recs.len(), 1, "{text}");
    assert_eq!(recs[0].source, cadence_core::RecordSource::Proxy);
    assert_eq!(recs[0].outcome, cadence_core::Outcome::Succeeded);
    assert_eq!(recs[0].chunks.len(), 5);
    // `cadence report` rebuilds a report from the live records, run line included.
    let out = cadence()
        .args(["report", records.to_str().unwrap()])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("1 sent, 1 succeeded"), "{text}");
    assert!(text.contains("proxy"), "{text}");
    assert!(!text.contains("no run line"), "{text}");
    // The proxy's upstream reads carry the kernel's receive time: the report's Clock
    // check says so.
    if cfg!(target_os = "linux") {
        assert_eq!(recs[0].clock, Some(cadence_core::StampClock::Kernel));
        assert!(
            text.contains("kernel receive time (1 of 1 requests)"),
            "{text}"
        );
    }
}

/// A log written to a file (not a terminal) carries no colour escapes.
#[test]
fn proxy_logs_to_a_file_have_no_ansi_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:1",
        ])
        .env("CADENCE_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let child = Killed(child);
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap()
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    std::thread::sleep(Duration::from_millis(200));
    drop(child);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("request finished"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour escapes in a log file: {text:?}"
    );
}
