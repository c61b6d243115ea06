//! The dashboards end to end: `cadence bench --tui` inside a real terminal (tmux)
//! against the built-in simulator, read with `capture-pane`, stopped with `q`; and
//! `cadence top --once` against a running proxy. The tmux test is ignored
//! unless asked for (scripts/test.sh installs tmux and runs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of this test's own (its own socket), killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "t"]).stdout).into()
    }

    /// Waits for `pred` on the screen (or a file), failing with the screen after `secs`.
    fn wait(&self, secs: u64, what: &str, mut pred: impl FnMut(&str) -> bool) -> String {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < until,
                "no {what} within {secs} s:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Single-quoted for `sh -c`.
fn quoted(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

#[test]
#[ignore = "needs tmux; scripts/test.sh installs it and runs this"]
fn bench_tui_in_tmux_stops_on_q_keeps_records_and_restores_the_terminal() {
    assert!(
        have_tmux(),
        "this test needs tmux: install it (scripts/test.sh does) and run it again"
    );
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("rec.jsonl");
    let done = dir.path().join("done.txt");
    let stty = dir.path().join("stty.txt");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cadence"));
    // The shell records the exit code and the terminal's modes after cadence exits,
    // then stays, so the pane can still be read.
    let script = format!(
        "{} bench --tui --duration 120s --concurrency 2 --grace 2s --records {}; echo $? > {}.tmp; stty -a > {}; mv {}.tmp {}; sleep 120",
        quoted(&bin),
        quoted(&records),
        quoted(&done),
        quoted(&stty),
        quoted(&done),
        quoted(&done),
    );
    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
    };
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);
    assert!(started.status.success(), "{started:?}");

    let screen = tmux.wait(60, "dashboard", |s| {
        s.contains("in flight") && s.contains("succeeded") && !s.contains("succeeded 0 ")
    });
    assert!(screen.contains("level 1 of 1  concurrency=2"), "{screen}");
    assert!(
        screen.contains("Latency") && screen.contains("Self-check"),
        "{screen}"
    );
    assert!(screen.contains("q stop"), "{screen}");
    let on_alt = tmux.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"]);
    assert_eq!(String::from_utf8_lossy(&on_alt.stdout).trim(), "1");
    // `?` shows the formulas over the dashboard, `?` again hides them.
    tmux.cmd(&["send-keys", "-t", "t", "?"]);
    tmux.wait(10, "formulas", |s| s.contains("Formulas (? to close)"));
    tmux.cmd(&["send-keys", "-t", "t", "?"]);
    tmux.wait(10, "formulas closed", |s| {
        !s.contains("Formulas (? to close)")
    });

    tmux.cmd(&["send-keys", "-t", "t", "q"]);
    let until = Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(
            Instant::now() < until,
            "cadence did not exit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let code = std::fs::read_to_string(&done).unwrap();
    // `q` stops as Ctrl-C does: the interrupted run's exit code, its report still made.
    assert_eq!(code.trim(), "130", "{}", tmux.screen());

    // The terminal is back: main screen, cooked mode with echo, the report printed on it.
    let on_alt = tmux.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"]);
    assert_eq!(String::from_utf8_lossy(&on_alt.stdout).trim(), "0");
    let modes = std::fs::read_to_string(&stty).unwrap();
    for mode in ["icanon", "echo", "isig"] {
        assert!(
            modes.split_whitespace().any(|m| m == mode),
            "{mode} not restored: {modes}"
        );
    }
    let screen = tmux.screen();
    assert!(screen.contains("Requests"), "the report follows:\n{screen}");

    assert_records_complete(&records);
}

/// The records file of an interrupted run is complete: every intended request, the
/// level and run lines.
fn assert_records_complete(records: &Path) {
    let text = std::fs::read_to_string(records).unwrap();
    let (file, _) = cadence_core::runlog::parse_records_file(&text).unwrap();
    let levels: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("{\"cadence_level\""))
        .collect();
    assert_eq!(levels.len(), 1, "{text}");
    let level: serde_json::Value = serde_json::from_str(levels[0]).unwrap();
    let intended = level["cadence_level"]["intended"].as_u64().unwrap();
    assert!(level["cadence_level"]["interrupted"].as_bool().unwrap());
    assert_eq!(file.records.len() as u64, intended, "{text}");
    assert!(intended > 0);
    assert!(
        text.lines().last().unwrap().starts_with("{\"cadence_run\""),
        "the run line closes the file"
    );
}

#[test]
fn top_once_prints_a_proxys_windows_and_alerts() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (proxy, _sim) = rt.block_on(async {
        let sim = cadence_sim::spawn(
            cadence_sim::SimConfig {
                ttft: "fixed:5ms".parse().unwrap(),
                itl: "fixed:2ms".parse().unwrap(),
                ..cadence_sim::SimConfig::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let mut config = cadence_proxy::ProxyConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            format!("http://{}", sim.addr).parse().unwrap(),
        );
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        config.alerts = vec!["ttft.p50>1ms".parse().unwrap()];
        config.alert_interval = Duration::from_millis(100);
        (cadence_proxy::spawn(config).await.unwrap(), sim)
    });
    let out = common::cadence()
        .args(["bench", &format!("http://{}/v1", proxy.addr)])
        .args(["--requests", "6", "--concurrency", "2", "--no-tui"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The alert fires at the next evaluation.
    let until = Instant::now() + Duration::from_secs(10);
    while proxy.stats()["alerts"][0]["state"] != "firing" {
        assert!(Instant::now() < until, "{}", proxy.stats());
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = format!("http://{}", proxy.metrics_addr.unwrap());
    let out = common::cadence()
        .args([
            "top", &metrics, "--once", "--width", "110", "--height", "34",
        ])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains(&format!("cadence top · {metrics}")), "{text}");
    assert!(text.contains("sent 6  succeeded 6  failed 0"), "{text}");
    assert!(text.contains("Alerts (1 firing)"), "{text}");
    assert!(text.contains("firing   ttft.p50>1ms"), "{text}");
    assert!(text.contains("Rolling windows"), "{text}");
    assert!(text.contains("5 min"), "{text}");

    // Nothing listening: a clear error, exit 1.
    let out = common::cadence()
        .args(["top", "http://127.0.0.1:1", "--once"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read http://127.0.0.1:1/stats"),
        "{err}"
    );
    // Said once: the cause is not repeated after itself.
    assert_eq!(err.matches("connection refused").count(), 1, "{err}");
    rt.block_on(async { drop(proxy.shutdown().await) });
}

#[test]
fn tui_without_a_terminal_or_with_no_tui_is_a_usage_error() {
    // Here stdout is a pipe.
    common::usage_error(&["bench", "--tui", "--requests", "1"], "stdout is not one");
    common::usage_error(&["bench", "--tui", "--no-tui"], "cannot be used with");
    common::usage_error(&["bench", "--tui", "--quiet"], "cannot be used with");
}
