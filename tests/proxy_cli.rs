//! `cadence proxy` end to end as a process: usage errors exit 2 with a clear message;
//! in front of `cadence sim` it forwards a stream, and SIGINT drains and flushes the
//! records file before a clean exit.

mod common;
use common::{fast_sim, interrupt_and_wait, spawn_listening, Killed};

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
        (
            vec!["--upstream", "http://127.0.0.1:1", "--max-chunks", "0"],
            "must be between 1 and",
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
    let (_sim, sim_url) = fast_sim();
    let (mut proxy, proxy_url) = common::recording_proxy(&sim_url, &records);
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
            text.contains("kernel receive time (1 of 1 request)"),
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

/// `cadence proxy ARGS` with its stdout's first line read (the listening URL) and its
/// stderr going to `log`; `shell` runs first in the same shell (e.g. `ulimit -n 256`).
fn spawn_proxy_logged(shell: &str, args: &[&str], log: &std::path::Path) -> (Killed, String) {
    let bin = assert_cmd::cargo::cargo_bin("cadence");
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{shell}\nexec \"$0\" proxy \"$@\""))
        .arg(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}: {}", std::fs::read_to_string(log).unwrap()))
        .to_string();
    (Killed(child), url)
}

/// The `metrics on http://ADDR/metrics` address from the proxy's log, once written.
fn metrics_addr_in(log: &std::path::Path) -> String {
    for _ in 0..200 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // Only a whole line: read while the proxy writes it, the address can be cut
        // short ("127.0.0.", an invalid socket address in CI once).
        if let Some((addr, _)) = text
            .split("metrics on http://")
            .nth(1)
            .and_then(|rest| rest.split_once("/metrics"))
        {
            return addr.to_string();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!(
        "no metrics address in {}",
        std::fs::read_to_string(log).unwrap()
    );
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`), read to the end
/// within `wait`; what came back.
fn exchange(addr: &str, method: &str, path: &str, body: &str, wait: Duration) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

const STREAM_BODY: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}"#;

/// FAULTS 99 and 100: 300 clients that send a head and part of a body, then nothing,
/// against a proxy allowed 256 descriptors: a request that comes after them is served,
/// `/stats` answers, and the log holds no flood of accept failures.
#[cfg(target_os = "linux")]
#[test]
fn f99_slow_clients_under_a_low_descriptor_limit_leave_room_for_real_requests() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let (_sim, sim_url) = spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        "2ms",
        "--itl",
        "1ms",
    ]);
    let (_proxy, url) = spawn_proxy_logged(
        "ulimit -n 256 || exit 97",
        &[
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--upstream",
            &sim_url,
        ],
        &log,
    );
    let addr = url.strip_prefix("http://").unwrap().to_string();
    let metrics = metrics_addr_in(&log);
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let _ = s.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"mo",
        );
        slow.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let start = std::time::Instant::now();
    let got = exchange(
        &addr,
        "POST",
        "/v1/chat/completions",
        STREAM_BODY,
        Duration::from_secs(10),
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("data: [DONE]"), "{got}");
    let stats = exchange(&metrics, "GET", "/stats", "", Duration::from_secs(10));
    assert!(stats.starts_with("HTTP/1.1 200"), "{stats}");
    assert!(stats.contains("\"windows\""), "{stats}");
    eprintln!("served in {:?} behind 300 slow clients", start.elapsed());
    drop(slow);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("at most 96 client connections"),
        "the cap is fitted to the limit: {text}"
    );
    let accept_lines = text.matches("accept failed").count();
    assert!(
        accept_lines <= 2,
        "{accept_lines} accept failures logged: {text}"
    );
}

/// FAULTS 101: credentials in `--upstream` and `--alert-webhook` are printed nowhere
/// and stored nowhere, whichever error is reported.
#[test]
fn f101_credentials_in_the_upstream_and_webhook_urls_show_nowhere() {
    const SECRETS: [&str; 4] = ["PASS1234", "TOK5678", "QS9999", "UP4321"];
    for bad in [
        "user:PASS1234@127.0.0.1:9",
        "http://user:PASS1234@127.0.0.1:9/v1?api_key=UP4321",
        "http://user:PASS1234@[::1/v1",
    ] {
        let out = cadence()
            .args(["proxy", "--upstream", bad])
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        for s in SECRETS {
            assert!(!err.contains(s), "{s} printed: {err}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let records = dir.path().join("live.jsonl");
    let (_sim, sim_url) = spawn_listening(&["sim", "--addr", "127.0.0.1:0", "--ttft", "5ms"]);
    let upstream = sim_url.replace("http://", "http://user:PASS1234@");
    let (mut proxy, url) = spawn_proxy_logged(
        "",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--records",
            records.to_str().unwrap(),
            "--alert",
            "ttft.p50>1ms",
            "--alert-webhook",
            "http://bot:TOK5678@127.0.0.1:1/hook?token=QS9999",
        ],
        &log,
    );
    let addr = url.strip_prefix("http://").unwrap();
    let got = exchange(
        addr,
        "POST",
        "/v1/chat/completions",
        STREAM_BODY,
        Duration::from_secs(10),
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // The alert fires and its webhook (nothing listens) fails: logged.
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains("alert webhook") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(text.contains("alert webhook"), "{text}");
    interrupt_and_wait(&mut proxy.0).expect("the proxy exits on SIGINT");
    let text = std::fs::read_to_string(&log).unwrap();
    let stored = std::fs::read_to_string(&records).unwrap();
    assert!(stored.contains("\"command\""), "{stored}");
    for s in SECRETS {
        assert!(!text.contains(s), "{s} printed: {text}");
        assert!(!stored.contains(s), "{s} stored: {stored}");
    }
}

/// FAULTS 107: a webhook URL with a query string is accepted, posted to as given, and
/// shown without its query values.
#[test]
fn f107_a_webhook_url_with_a_query_is_accepted() {
    let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_addr = hook.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = hook.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
        tx.send(line).unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let (_sim, sim_url) = spawn_listening(&["sim", "--addr", "127.0.0.1:0", "--ttft", "5ms"]);
    let webhook = format!("http://{hook_addr}/hook?token=QS9999&channel=ops");
    let (mut proxy, url) = spawn_proxy_logged(
        "",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &sim_url,
            "--alert",
            "ttft.p50>1ms",
            "--alert-webhook",
            &webhook,
        ],
        &log,
    );
    let addr = url.strip_prefix("http://").unwrap();
    let got = exchange(
        addr,
        "POST",
        "/v1/chat/completions",
        STREAM_BODY,
        Duration::from_secs(10),
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    let line = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the alert was posted");
    assert_eq!(
        line.trim_end(),
        "POST /hook?token=QS9999&channel=ops HTTP/1.1"
    );
    interrupt_and_wait(&mut proxy.0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("alerts posted to"), "{text}");
    assert!(!text.contains("QS9999"), "{text}");
}
