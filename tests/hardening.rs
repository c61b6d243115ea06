//! The hostile-input sweep, one test per fault (FAULTS rows 57–63): mass failure,
//! failing outputs, SIGTERM, the client's own limits, hostile numbers, short answers and
//! the smaller items. Servers are threads on 127.0.0.1 port 0 (or the built-in sim);
//! every run is bounded in requests and time.

mod common;

use common::{cadence, read_records, record_lines, validate};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How the hand-written test server answers.
#[derive(Clone, Copy)]
struct Behaviour {
    /// Streams above this many at once get a 503.
    max_streams: usize,
    /// Content chunks per stream (then a finish chunk and `[DONE]`).
    chunks: usize,
    /// Pause before each chunk.
    itl: Duration,
    /// Claim `content-encoding: gzip` and send bytes that are not SSE.
    gzip: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            max_streams: usize::MAX,
            chunks: 3,
            itl: Duration::from_millis(2),
            gzip: false,
        }
    }
}

/// An HTTP/1.1 chat-completions server on 127.0.0.1:0, one thread per connection,
/// `connection: close` on every answer. Lives as long as the test process.
fn server(b: Behaviour) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(s) = conn else { continue };
            let active = active.clone();
            std::thread::spawn(move || answer(s, b, &active));
        }
    });
    addr
}

/// Reads one request (head and `content-length` body); `None` when it is not HTTP/1.
fn read_request(s: &mut TcpStream) -> Option<()> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut byte).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    if !head.starts_with("post") && !head.starts_with("get") {
        return None;
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < len {
        let n = s.read(&mut byte).ok().filter(|&n| n > 0)?;
        have += n;
    }
    Some(())
}

fn answer(mut s: TcpStream, b: Behaviour, active: &AtomicUsize) {
    if read_request(&mut s).is_none() {
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n");
        return;
    }
    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
    if now > b.max_streams {
        active.fetch_sub(1, Ordering::SeqCst);
        let body = r#"{"error":{"message":"overloaded"}}"#;
        let _ = write!(
            s,
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let encoding = if b.gzip {
        "content-encoding: gzip\r\n"
    } else {
        ""
    };
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{encoding}connection: close\r\n\r\n"
    );
    if b.gzip {
        // A gzip member header and deflate bytes: not text.
        let _ = s.write_all(&[0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0x03, 0xab, 0x56, 0x4a]);
        active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    for _ in 0..b.chunks {
        std::thread::sleep(b.itl);
        let _ =
            s.write_all(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n");
    }
    // The slot is free before the client can see the end of the stream.
    active.fetch_sub(1, Ordering::SeqCst);
    let _ = s.write_all(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/v1")
}

/// `cadence bench URL --model m --api chat EXTRA…` against `addr`, through [`run`].
fn bench_chat(
    addr: SocketAddr,
    extra: &[&str],
    dir: &Path,
) -> (Option<i32>, Option<Value>, String, String) {
    let url = url(addr);
    let mut args = vec!["bench", url.as_str(), "--model", "m", "--api", "chat"];
    args.extend_from_slice(extra);
    run(&args, dir)
}

/// An API key and a header value no output may ever hold.
const CANARY: &str = "canary-KEY-20e4c1d9";

/// Runs `cadence ARGS --quiet --json DIR/r.json` with a canary API key and header:
/// exit code, report (if written), stdout and stderr, none of which holds the canary.
fn run(args: &[&str], dir: &Path) -> (Option<i32>, Option<Value>, String, String) {
    let json = dir.join("r.json");
    let _ = std::fs::remove_file(&json);
    let out = cadence()
        .env("OPENAI_API_KEY", CANARY)
        .args(args)
        .args(["-H", &format!("x-api-key: {CANARY}")])
        .arg("--quiet")
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    for (what, s) in [
        ("stdout", String::from_utf8_lossy(&out.stdout)),
        ("stderr", String::from_utf8_lossy(&out.stderr)),
        ("report", text.as_str().into()),
    ] {
        assert!(!s.contains(CANARY), "the canary leaked into {what}: {s}");
    }
    let report = (!text.is_empty()).then(|| {
        validate(&text);
        serde_json::from_str(&text).unwrap()
    });
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

// ---- FAULTS 57 ----

#[test]
fn mass_failure_exits_nonzero_by_default() {
    let addr = server(Behaviour {
        max_streams: 2,
        ..Behaviour::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let base = [
        "bench",
        &url(addr),
        "--model",
        "m",
        "--api",
        "chat",
        "-c",
        "8",
        "-n",
        "40",
    ];
    let mut args = base.to_vec();
    args.extend(["--slo", "itl.p99<=50ms"]);
    let (code, v, stdout, _) = run(&args, dir.path());
    let v = v.expect("report written");
    let failed = v["levels"][0]["requests"]["failed"]["http_5xx"]
        .as_u64()
        .unwrap();
    assert!(failed > 20, "most requests were refused: {failed}");
    assert_eq!(
        code,
        Some(3),
        "an error rate over the default ceiling fails the run: {stdout}"
    );
    assert!(stdout.contains("error rate"), "{stdout}");

    // Raised, the ceiling no longer fails the run...
    let mut args = base.to_vec();
    args.extend(["--max-error-rate", "100%"]);
    let (code, _, stdout, _) = run(&args, dir.path());
    assert_eq!(code, Some(0), "{stdout}");

    // ...and the error rate is an SLO like any other, overall and per class.
    let mut args = base.to_vec();
    args.extend([
        "--max-error-rate",
        "100%",
        "--slo",
        "errors.rate<=10%",
        "--slo",
        "errors.http_5xx.rate<=0.1",
        "--slo",
        "errors.http_429.rate<=0%",
    ]);
    let (code, v, stdout, _) = run(&args, dir.path());
    assert_eq!(code, Some(3), "{stdout}");
    let v = v.unwrap();
    let slos = &v["levels"][0]["slos"];
    assert_eq!(slos[0]["slo"], "errors.rate<=10%");
    assert_eq!(slos[0]["pass"], false);
    // The share refused depends on how the 8 streams meet the 2 slots (timing); the SLO
    // must observe exactly the report's own share.
    let req = &v["levels"][0]["requests"];
    let share = 100.0 * req["failed"]["http_5xx"].as_f64().unwrap() / req["sent"].as_f64().unwrap();
    let observed = slos[0]["observed"].as_f64().unwrap();
    assert!(
        observed > 10.0 && (observed - share).abs() < 1e-9,
        "{slos} vs {share}"
    );
    assert_eq!(slos[0]["unit"], "%");
    assert_eq!(slos[1]["pass"], false);
    assert_eq!(slos[2]["pass"], true, "no 429 at all: {slos}");
}

#[test]
fn find_max_never_passes_a_mostly_failing_level() {
    let addr = server(Behaviour {
        max_streams: 2,
        itl: Duration::from_millis(5),
        ..Behaviour::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stdout, _) = bench_chat(
        addr,
        &[
            "--find-max",
            "concurrency",
            "--max-probes",
            "4",
            "-n",
            "12",
            "--slo",
            "itl.p99<=10s",
        ],
        dir.path(),
    );
    let v = v.expect("report written");
    let best = v["search"]["best"].as_f64().unwrap_or(0.0);
    assert!(
        (1.0..4.0).contains(&best),
        "capacity is 2 streams; found {best}: {stdout}"
    );
    assert_eq!(code, Some(0), "{stdout}");
}

// ---- FAULTS 58 ----

/// A small records file from the built-in simulator, in `dir`.
fn records_file(dir: &Path) -> std::path::PathBuf {
    let records = dir.join("run.jsonl");
    cadence()
        .args([
            "bench",
            "-n",
            "3",
            "-c",
            "1",
            "--max-tokens",
            "3",
            "--quiet",
        ])
        .arg("--records")
        .arg(&records)
        .assert()
        .code(0);
    records
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_records_disk_keeps_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stdout, stderr) = run(
        &[
            "bench",
            "-n",
            "3",
            "-c",
            "1",
            "--max-tokens",
            "3",
            "--records",
            "/dev/full",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stdout.contains("TTFT"),
        "the console report is printed: {stdout}"
    );
    assert!(
        stderr.contains("/dev/full"),
        "the failed output is named: {stderr}"
    );
    let v = v.expect("the JSON report is still written");
    assert_eq!(v["levels"][0]["requests"]["succeeded"], 3);
}

#[cfg(target_os = "linux")]
#[test]
fn a_failing_stdout_still_writes_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "bench",
            "-n",
            "2",
            "-c",
            "1",
            "--max-tokens",
            "3",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("stdout"),
        "the failed output is named: {stderr}"
    );
    validate(&std::fs::read_to_string(&json).expect("JSON written"));
}

#[test]
fn output_paths_are_checked_before_the_first_request() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("r.jsonl");
    let missing = dir.path().join("no-such-dir").join("r.html");
    let out = cadence()
        .args([
            "bench",
            "-n",
            "2",
            "--max-tokens",
            "3",
            "--quiet",
            "--records",
        ])
        .arg(&records)
        .arg("--html")
        .arg(&missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-such-dir"), "{stderr}");
    let sent = std::fs::read_to_string(&records).unwrap_or_default();
    assert_eq!(record_lines(&sent).count(), 0, "nothing was sent: {sent}");

    // Two outputs on one path.
    let same = dir.path().join("same");
    let out = cadence()
        .args(["bench", "-n", "2", "--max-tokens", "3", "--quiet", "--json"])
        .arg(&same)
        .arg("--html")
        .arg(&same)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("same"), "{stderr}");
    assert!(!same.exists(), "nothing written");
}

#[test]
fn report_never_writes_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let records = records_file(dir.path());
    let before = std::fs::read_to_string(&records).unwrap();
    for flag in ["--json", "--html", "--markdown", "--csv"] {
        let out = cadence()
            .arg("report")
            .arg(&records)
            .arg(flag)
            .arg(&records)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}: {out:?}");
        assert_eq!(std::fs::read_to_string(&records).unwrap(), before, "{flag}");
    }
}

#[cfg(unix)]
#[test]
fn a_broken_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let records = records_file(dir.path());
    let json = dir.path().join("r.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .arg("report")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `| true`: the reader is gone before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "quiet: {stderr}");
    validate(&std::fs::read_to_string(&json).expect("the files are still written"));
}

// ---- FAULTS 59 ----

#[cfg(unix)]
#[test]
fn sigterm_is_ctrl_c() {
    let (_, dir) = common::bench_stopped_by("-TERM", "1000");
    let (json, records) = (dir.path().join("r.json"), dir.path().join("r.jsonl"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["run"]["interrupted"], true);
    let sent = v["levels"][0]["requests"]["sent"].as_u64().unwrap();
    assert_eq!(read_records(&records).len() as u64, sent);
}

// ---- FAULTS 60 ----

#[cfg(unix)]
fn with_nofile(limit: &str, args: &[&str]) -> std::process::Output {
    let bin = assert_cmd::cargo::cargo_bin("cadence");
    let mut script = format!("ulimit {limit} || exit 99; exec '{}'", bin.display());
    for a in args {
        script.push_str(&format!(" '{a}'"));
    }
    std::process::Command::new("sh")
        .args(["-c", &script])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

#[cfg(unix)]
#[test]
fn too_few_open_files_is_refused_up_front() {
    let addr = server(Behaviour::default());
    let out = with_nofile(
        "-n 128",
        &[
            "bench",
            &url(addr),
            "--model",
            "m",
            "-c",
            "1000",
            "-n",
            "1000",
            "--quiet",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("open files") && stderr.contains("ulimit -n"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn the_soft_open_file_limit_is_raised() {
    let hard = std::process::Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    if hard != "unlimited" && hard.parse::<u64>().unwrap_or(0) < 1024 {
        eprintln!("skipped: the hard open-file limit is {hard}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let json = json.to_str().unwrap();
    let addr = server(Behaviour::default());
    let out = with_nofile(
        "-Sn 64",
        &[
            "bench",
            &url(addr),
            "--model",
            "m",
            "-c",
            "200",
            "-n",
            "200",
            "--quiet",
            "--json",
            json,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["levels"][0]["requests"]["succeeded"], 200, "{stderr}");
}

// ---- FAULTS 61 ----

/// Rewrites every request record of a records file with `f`.
fn edit_records(path: &Path, f: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("{\"cadence_") {
            out.push_str(line);
        } else {
            let mut v: Value = serde_json::from_str(line).unwrap();
            f(&mut v);
            out.push_str(&v.to_string());
        }
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// `cadence ARGS` with at most 2 GiB of address space: a runaway allocation fails
/// fast instead of taking the machine's memory.
#[cfg(unix)]
fn bounded(args: &[&str]) -> std::process::Output {
    with_nofile("-v 2097152", args)
}

#[cfg(unix)]
#[test]
fn hostile_flags_are_usage_errors() {
    for (flag, value) in [
        ("--time-bucket", "0s"),
        ("--time-bucket", "1ns"),
        ("--grace", "1000000000s"),
        ("--connect-timeout", "0s"),
        ("--timeout", "0s"),
        ("--stall-threshold", "0s"),
        ("--warmup", "18446744073709551615"),
        ("--requests", "18446744073709551615"),
        ("--rate", "1e300"),
    ] {
        let mut args = vec!["bench", "--max-tokens", "2", "--quiet", flag, value];
        if flag != "--requests" {
            args.extend(["-n", "1"]);
        }
        let out = bounded(&args);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {out:?}");
    }
}

#[cfg(unix)]
#[test]
fn hostile_records_cannot_crash_report() {
    let dir = tempfile::tempdir().unwrap();
    let records = records_file(dir.path());
    let path = records.to_str().unwrap();
    // Times far in the future: bounded time-series buckets.
    edit_records(&records, |v| v["end_ns"] = serde_json::json!(1e18 as u64));
    let out = bounded(&["report", path]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // Usage counts at the top of u64: sums saturate.
    let records = records_file(dir.path());
    edit_records(&records, |v| {
        v["output_tokens"]["count"] = serde_json::json!(u64::MAX);
        v["token_sources"]["usage"] = serde_json::json!(u64::MAX);
        v["input_tokens"] = serde_json::json!(u64::MAX);
    });
    let out = bounded(&[
        "report",
        path,
        "--json",
        dir.path().join("r.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // A run line with a zero time bucket (what `--time-bucket 0s` once wrote).
    let records = records_file(dir.path());
    let text = std::fs::read_to_string(&records)
        .unwrap()
        .replace("\"time_bucket_ms\":1000.0", "\"time_bucket_ms\":0.0");
    std::fs::write(&records, text).unwrap();
    let out = bounded(&["report", path]);
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
}

// ---- FAULTS 62 ----

#[test]
fn short_answers_are_counted_and_named() {
    let addr = server(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stdout, _) = bench_chat(
        addr,
        &[
            "-n",
            "4",
            "-c",
            "1",
            "--max-tokens",
            "8",
            "--extra-body",
            r#"{"ignore_eos": true}"#,
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let level = &v.unwrap()["levels"][0];
    assert_eq!(level["counters"]["short_answers"], 4, "{level}");
    let warnings = level["warnings"].to_string();
    assert!(
        warnings.contains("4 of 4") && warnings.contains("fewer output tokens"),
        "{warnings}"
    );

    // Without a demand for the full length, a short answer is an ordinary one.
    let (code, v, _, _) = bench_chat(addr, &["-n", "2", "--max-tokens", "8"], dir.path());
    assert_eq!(code, Some(0));
    let level = &v.unwrap()["levels"][0];
    assert!(level["counters"].get("short_answers").is_none(), "{level}");
}

// ---- FAULTS 63 ----

#[test]
fn rate_times_duration_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stdout, _) = run(
        &[
            "bench",
            "--rate",
            "10",
            "-d",
            "1s",
            "--max-tokens",
            "2",
            "--max-late",
            "100%",
        ],
        dir.path(),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        v.unwrap()["levels"][0]["requests"]["intended"],
        10,
        "{stdout}"
    );
}

#[test]
fn gzip_https_and_http2_mismatches_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let gz = server(Behaviour {
        gzip: true,
        ..Behaviour::default()
    });
    let plain = server(Behaviour::default());
    let cases = [
        (url(gz), vec![], "content-encoding: gzip"),
        (format!("https://{plain}/v1"), vec![], "plain HTTP"),
        (url(plain), vec!["--http2"], "--http2"),
    ];
    for (target, extra, needle) in cases {
        let mut args = vec![
            "bench",
            &target,
            "--model",
            "m",
            "--api",
            "chat",
            "-n",
            "1",
            "--connect-timeout",
            "5s",
        ];
        args.extend(extra.iter().copied());
        let (code, v, stdout, _) = run(&args, dir.path());
        assert_eq!(code, Some(4), "{target}: {stdout}");
        let warnings = v.unwrap()["levels"][0]["warnings"].to_string();
        assert!(warnings.contains(needle), "{target}: {warnings}");
    }
}

#[test]
fn csv_does_not_create_missing_parents() {
    let dir = tempfile::tempdir().unwrap();
    let records = records_file(dir.path());
    let deep = dir.path().join("a").join("b").join("out.csv");
    let out = cadence()
        .arg("report")
        .arg(&records)
        .arg("--csv")
        .arg(&deep)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!dir.path().join("a").exists(), "no directory created");
    // A new directory whose parent exists is what `--csv DIR/` asks for.
    let new_dir = format!("{}/", dir.path().join("csv").display());
    cadence()
        .arg("report")
        .arg(&records)
        .args(["--csv", &new_dir])
        .assert()
        .code(0);
    assert!(dir.path().join("csv/levels.csv").exists());
}

#[test]
fn markdown_to_stdout_is_alone_there() {
    let dir = tempfile::tempdir().unwrap();
    let records = records_file(dir.path());
    let out = cadence()
        .arg("report")
        .arg(&records)
        .args(["--markdown", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("### Cadence"), "{stdout}");
    assert!(
        !stdout.contains("TTFT (content)"),
        "no console table on stdout: {stdout}"
    );
}

#[test]
fn a_ramp_the_run_never_finishes_is_refused() {
    let out = cadence()
        .args(["bench", "--rate", "20", "--ramp-up", "30s", "--quiet"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--ramp-up"), "{stderr}");
}

#[test]
fn the_readme_ramp_up_example_reaches_its_rate() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.contains("--ramp-up"))
        .expect("README has a --ramp-up example");
    let words: Vec<&str> = line.split_whitespace().collect();
    let value = |names: &[&str]| {
        words
            .iter()
            .position(|w| names.contains(w))
            .map(|i| words[i + 1])
    };
    let rate: f64 = value(&["--rate", "-r"]).unwrap().parse().unwrap();
    let ramp = cadence_core::parse_duration(value(&["--ramp-up"]).unwrap()).unwrap();
    // The ramp sends rate·ramp/2 requests before the full rate; the default is 64.
    let during_ramp = rate * ramp.as_secs_f64() / 2.0;
    let reaches = match (value(&["-n", "--requests"]), value(&["-d", "--duration"])) {
        (Some(n), _) => n.parse::<f64>().unwrap() > during_ramp,
        (None, Some(d)) => cadence_core::parse_duration(d).unwrap() > ramp,
        (None, None) => 64.0 > during_ramp,
    };
    assert!(reaches, "the example ends before its ramp does: {line}");
}
