//! `cadence watch` end to end: the real binary watching the built-in simulator with a
//! fast schedule on 127.0.0.1 port 0, stopped by SIGINT; the database, the page,
//! `/metrics`, `/api/targets`, `watch report`, the one-writer lock, a corrupt database,
//! and the incident webhook posted to a local receiver.

mod common;

use common::chromium;
use common::watcher::{get, render, start_watch, wait_for_probes};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("cadence")
}

/// A port on 127.0.0.1 nothing listens at, a dead target's: bound and not listening,
/// so a connection is refused, and held (keep the socket) so no other socket, such as
/// the watch's own built-in simulator, is given it. A port bound and let go was, once
/// in CI: the dead target answered 404.
fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = s.local_addr().unwrap().port();
    (s, port)
}

/// `text` as the watch config `dir/watch.toml`.
fn config_text(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("watch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn config(dir: &Path, slo: &str) -> std::path::PathBuf {
    let path = dir.join("watch.toml");
    std::fs::write(
        &path,
        format!(
            "[[target]]\nname = \"sim\"\nurl = \"builtin\"\nslo = [\"{slo}\"]\n\
             [target.probe]\ninterval = \"200ms\"\njitter = \"20ms\"\nrequests = 3\n\
             max_tokens = 16\nprompt_tokens = 16\ndeadline = \"5s\"\n"
        ),
    )
    .unwrap();
    path
}

/// `cadence watch CFG --db DB --once` run to its end (a watcher that is refused at
/// start; one that is not ends after a probe): its exit code and what it said on stderr.
fn watch_to_the_end(cfg: &Path, db: &Path) -> (Option<i32>, String) {
    let out = Command::new(bin())
        .arg("watch")
        .arg(cfg)
        .arg("--db")
        .arg(db)
        .arg("--once")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), said)
}

#[test]
fn a_watch_of_the_builtin_simulator_keeps_its_probes_and_serves_them() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "itl.p50<=1s");
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &[]);
    wait_for_probes(&db, None, 3, Duration::from_secs(30));

    // A second watcher of the same database is refused, in words, with exit 2.
    let (code, said) = watch_to_the_end(&cfg, &db);
    assert_eq!(code, Some(2));
    assert!(said.contains("another `cadence watch`"), "{said}");

    let (status, page) = get(&w.addr, "/");
    assert_eq!(status, 200);
    assert!(page.contains("/target/sim"), "{page}");
    let (status, target) = get(&w.addr, "/target/sim");
    assert_eq!(status, 200);
    assert!(target.contains("<svg"), "{target}");
    a_probe_page_lists_its_requests(&w.addr, &target);
    let no_ns = target.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for external in ["https://", "src=", "<link", "<script src", "url("] {
        assert!(!no_ns.contains(external), "the page requests {external}");
    }
    let (status, metrics) = get(&w.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("cadence_watch_slo_ok{target=\"sim\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("cadence_watch_itl_seconds{target=\"sim\",quantile=\"0.5\"}"));
    let (status, api) = get(&w.addr, "/api/targets");
    assert_eq!(status, 200);
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api[0]["name"], "sim");
    assert!(api[0]["hour"]["probes"].as_u64().unwrap() >= 3, "{api}");

    let (status, said) = w.stop();
    assert!(status.success(), "{status:?}: {said}");

    // Every finished probe is in the database, with its requests, and sound.
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let probes = store.probes(None, 0).unwrap();
    assert!(probes.len() >= 3, "{} probes in ~3 s", probes.len());
    assert!(
        probes.len() <= 20,
        "{} probes: the lane runs one at a time",
        probes.len()
    );
    for p in &probes {
        assert_eq!((p.sent, p.succeeded), (3, 3), "{p:?}");
        assert!(p.slo_ok && p.itl_p50_ms.is_some());
        assert_eq!(store.requests(p.id).unwrap().len(), 3);
    }
    // Probes of one target never overlap: each starts after the previous ended.
    for w in probes.windows(2) {
        assert!(w[1].started_ms >= w[0].ended_ms, "{w:?}");
    }
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(store);

    the_reports_show_the_probes(&db, probes.len());

    // Restart resumes: the old probes stay, new ones follow them.
    let before = probes.len();
    let w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, None, before + 1, Duration::from_secs(30));
    let (status, _) = w.stop();
    assert!(status.success());
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let after = store.probes(None, 0).unwrap();
    assert!(after.len() > before, "{} then {}", before, after.len());
    assert_eq!(after[..before], probes[..]);
}

/// Each recent probe on `target` (the page) links to its own page, which lists its
/// requests; unknown probes and targets are 404.
fn a_probe_page_lists_its_requests(addr: &str, target: &str) {
    let link = target
        .split("href=\"")
        .find_map(|s| {
            s.split('"')
                .next()
                .filter(|h| h.starts_with("/target/sim/probe/"))
        })
        .expect("a link to a probe");
    let (status, probe) = get(addr, link);
    assert_eq!(status, 200, "{probe}");
    assert_eq!(probe.matches(">succeeded<").count(), 3, "{probe}");
    assert_eq!(get(addr, "/target/sim/probe/999999").0, 404);
    assert_eq!(get(addr, "/target/nope/probe/1").0, 404);
}

/// `watch report` of `db` (its `probes` probes of the target `sim`, every one passing),
/// as console text and as JSON.
fn the_reports_show_the_probes(db: &Path, probes: usize) {
    let out = Command::new(bin())
        .args(["watch", "report", "--since", "1h", "--db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("sim ")), "{text}");
    assert!(text.contains("Incidents (0)"), "{text}");
    // The same as data, for a script.
    let out = Command::new(bin())
        .args(["watch", "report", "--since", "1h", "--json", "-", "--db"])
        .arg(db)
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["probes"].as_u64(), Some(probes as u64), "{j}");
    assert_eq!(j["targets"][0]["target"], "sim", "{j}");
    assert_eq!(j["targets"][0]["window"]["success_rate"], 1.0, "{j}");
}

#[test]
fn kill_9_loses_at_most_the_probe_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "itl.p50<=1s");
    let db = dir.path().join("w.db");
    let mut w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, None, 2, Duration::from_secs(30));
    w.child.kill().unwrap(); // SIGKILL
    w.child.wait().unwrap();
    let store = cadence_watch::Store::open_read(&db).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let probes = store.probes(None, 0).unwrap();
    assert!(probes.len() >= 2, "{} probes", probes.len());
    for p in &probes {
        // Written whole or not at all.
        assert_eq!(store.requests(p.id).unwrap().len() as u64, p.sent, "{p:?}");
    }
    drop(store);
    // The lock died with the process: a new watcher takes the database over.
    let w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, None, probes.len() + 1, Duration::from_secs(30));
    let (status, said) = w.stop();
    assert!(status.success(), "{said}");
    let store = cadence_watch::Store::open_read(&db).unwrap();
    assert!(store.probes(None, 0).unwrap().len() > probes.len());
}

#[test]
fn a_corrupt_database_is_an_error_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "itl.p50<=1s");
    let db = dir.path().join("w.db");
    std::fs::write(&db, vec![0x5au8; 4096]).unwrap();
    let (code, said) = watch_to_the_end(&cfg, &db);
    assert_eq!(code, Some(1));
    assert!(said.contains("corrupt"), "{said}");
}

#[test]
fn a_bad_config_key_is_a_usage_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[target]]\nname = \"a\"\nurl = \"builtin\"\nkey = \"sk-1\"\n",
    )
    .unwrap();
    let out = Command::new(bin()).arg("watch").arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("unknown field `key`"), "{said}");
}

#[test]
fn a_report_asked_of_both_a_database_and_the_shared_store_is_a_usage_error() {
    // Reading the store instead of the file the user named would be a silent surprise.
    let out = Command::new(bin())
        .args(["watch", "report", "--db", "mine.db"])
        .args(["--shared", "postgres://watch@127.0.0.1:1/watch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--db") && said.contains("--shared"), "{said}");
}

#[test]
fn an_slo_breach_posts_the_incident_to_the_webhook() {
    let (hook, rx) = receiver("user:hunter22@");
    let dir = tempfile::tempdir().unwrap();
    // No ITL is this short: every probe breaches.
    let cfg = config(dir.path(), "itl.p50<=1us");
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--webhook", &hook]);
    let body = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the incident is posted");
    let (status, said) = w.stop();
    assert!(status.success());
    let event: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(event["event"], "incident_start", "{event}");
    assert_eq!(event["target"], "sim");
    assert_eq!(event["probe"]["slo_ok"], false);
    // Once: later breaching probes continue the same incident.
    assert!(rx.try_recv().is_err());
    assert!(said.contains("incident started"), "{said}");
    assert!(!said.contains("hunter22"), "{said}");

    // The SLO loosened and the watcher restarted: it knows the incident is open (from
    // the database), and the first passing probe ends it.
    let cfg = config(dir.path(), "itl.p50<=1s");
    let w = start_watch(&cfg, &db, &["--webhook", &hook]);
    let body = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the incident's end is posted");
    let (status, _) = w.stop();
    assert!(status.success());
    let event: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(event["event"], "incident_end", "{event}");
    assert_eq!(event["probe"]["slo_ok"], true);
    assert!(rx.try_recv().is_err());
    let out = Command::new(bin())
        .args(["watch", "report", "--markdown", "-", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("## Incidents (1)"), "{md}");
}

#[test]
fn a_hung_target_times_out_without_stalling_the_other() {
    // Accepts connections and never answers.
    let hung = TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_addr = hung.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in hung.incoming().flatten() {
            held.push(c);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[probe]\ninterval = \"200ms\"\njitter = \"0s\"\nrequests = 2\nmax_tokens = 8\n\
             prompt_tokens = 8\ndeadline = \"600ms\"\n\
             [[target]]\nname = \"hung\"\nurl = \"http://{hung_addr}/v1/chat/completions\"\nmodel = \"m\"\n\
             [[target]]\nname = \"sim\"\nurl = \"builtin\"\n"
        ),
    )
    .unwrap();
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, Some("hung"), 1, Duration::from_secs(30));
    wait_for_probes(&db, Some("sim"), 2, Duration::from_secs(30));
    let (status, said) = w.stop();
    assert!(status.success(), "{said}");
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let hung = store.probes(Some("hung"), 0).unwrap();
    let sim = store.probes(Some("sim"), 0).unwrap();
    assert!(
        !hung.is_empty() && sim.len() >= 2,
        "{} {}",
        hung.len(),
        sim.len()
    );
    for p in &hung {
        assert!(!p.slo_ok && p.succeeded == 0, "{p:?}");
        let took = p.ended_ms - p.started_ms;
        assert!(
            took < 3_000,
            "a hung probe took {took} ms, its deadline is 600 ms"
        );
    }
    assert!(sim.iter().all(|p| p.slo_ok));
    // One lane: no two probes overlap in time, whatever their targets.
    let mut all = store.probes(None, 0).unwrap();
    all.sort_by_key(|p| p.started_ms);
    for w in all.windows(2) {
        assert!(w[1].started_ms >= w[0].ended_ms, "{w:?}");
    }
}

/// A webhook receiver on 127.0.0.1:0 that answers 200 and hands over each body; its
/// URL, with `userinfo` in it.
fn receiver(userinfo: &str) -> (String, mpsc::Receiver<String>) {
    receiver_answering(
        userinfo,
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
}

/// A server that hands over each request's body and answers `answer`, then closes.
fn receiver_answering(userinfo: &str, answer: &'static [u8]) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{userinfo}{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let l = line.to_ascii_lowercase();
                    if let Some(v) = l.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                r.read_exact(&mut body).unwrap();
                let _ = c.write_all(answer);
                let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
            });
        }
    });
    (hook, rx)
}

#[test]
fn a_simulator_freeze_opens_and_closes_one_incident() {
    let (hook, rx) = receiver("");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        "[builtin]\nfreeze_at = \"3s\"\nfreeze_for = \"1500ms\"\n\
         [[target]]\nname = \"sim\"\nurl = \"builtin\"\nslo = [\"ttft.p99<=400ms\"]\n\
         [target.probe]\ninterval = \"200ms\"\njitter = \"0s\"\nrequests = 2\n\
         max_tokens = 8\nprompt_tokens = 8\ndeadline = \"5s\"\n",
    )
    .unwrap();
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--webhook", &hook]);
    let first = rx.recv_timeout(Duration::from_secs(20));
    let second = rx.recv_timeout(Duration::from_secs(20));
    let (status, said) = w.stop();
    let (first, second) = match (first, second) {
        (Ok(a), Ok(b)) => (a, b),
        other => panic!("two posts expected, got {other:?}; the watcher said:\n{said}"),
    };
    assert!(status.success(), "{said}");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    let second: serde_json::Value = serde_json::from_str(&second).unwrap();
    assert_eq!(first["event"], "incident_start", "{first}");
    assert_eq!(second["event"], "incident_end", "{second}");
    assert!(rx.try_recv().is_err(), "one incident: two posts");
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let probes = store.probes(None, 0).unwrap();
    let incidents = cadence_watch::incident::incidents(&probes);
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].end_ms.is_some());
    assert!(
        probes.first().unwrap().slo_ok,
        "probes before the freeze pass"
    );
}

#[test]
#[ignore = "needs Chromium; scripts/test.sh installs it and runs this"]
fn chromium_renders_the_pages_and_requests_nothing_from_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "itl.p50<=1s");
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, None, 3, Duration::from_secs(30));
    let origin = format!("http://{}/", w.addr);
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (page, shot) in [
        ("", "cadence-watch-board.png"),
        ("target/sim", "cadence-watch-target.png"),
    ] {
        let url = format!("{origin}{page}");
        let (html, asked) = render(&url, &origin, dir.path(), shot);
        assert!(html.contains("cadence watch"), "{url}: {html}");
        if page.is_empty() {
            assert!(html.contains("href=\"/target/sim\""), "{html}");
        } else {
            // ITL, TTFT and by hour of day; no failures chart when nothing failed.
            assert!(html.matches("<svg").count() >= 3, "{html}");
            assert!(
                html.matches("<circle").count() >= 4,
                "no marks drawn: {html}"
            );
        }
        for u in &asked {
            assert!(u.starts_with(&origin), "{url} requested {u}");
        }
        assert!(
            asked.contains(&url),
            "the page's update fetched the page again: {asked:?}"
        );
        assert!(html.contains("updated "), "the update's note: {html}");
        let profile = dir.path().join(format!("profile-{shot}"));
        let shot = shots.join(shot);
        let _ = std::fs::remove_file(&shot);
        chromium(
            &url,
            &profile,
            &[
                "--window-size=1280,2000",
                &format!("--screenshot={}", shot.display()),
            ],
        );
        let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "no screenshot of {url}");
    }
    let (status, _) = w.stop();
    assert!(status.success());
}

/// Each of a watcher's pages at 1280 px: nothing wider than the window, every chart
/// with its axes and, where its target has an SLO on that chart's metric, the SLO's
/// line; chart text no larger than the headings. A target nothing listens at brings
/// the failures chart and an incident's shading.
#[test]
#[ignore = "needs Chromium; scripts/test.sh installs it and runs this"]
fn chromium_lays_out_each_page_at_1280_px_with_axes_and_slo_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (_held, port) = closed_port();
    let cfg = config_text(
        dir.path(),
        &format!(
            "[[target]]\nname = \"sim\"\nurl = \"builtin\"\n\
             slo = [\"itl.p50<=1s\", \"itl.p99<=2s\", \"ttft.p50<=2s\"]\n\
             [target.probe]\ninterval = \"200ms\"\njitter = \"20ms\"\nrequests = 3\n\
             max_tokens = 16\nprompt_tokens = 16\ndeadline = \"5s\"\n\
             [[target]]\nname = \"a-target-whose-name-is-long-and-whose-url-is-longer\"\n\
             url = \"http://127.0.0.1:{port}/v1/chat/completions/{}\"\nmodel = \"m\"\n\
             [target.probe]\ninterval = \"300ms\"\njitter = \"20ms\"\nrequests = 2\nmax_tokens = 8\n",
            "x".repeat(200)
        ),
    );
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--quiet"]);
    wait_for_probes(&db, Some("sim"), 4, Duration::from_secs(30));
    let dead = "a-target-whose-name-is-long-and-whose-url-is-longer";
    wait_for_probes(&db, Some(dead), 2, Duration::from_secs(30));
    let first = cadence_watch::Store::open_read(&db)
        .unwrap()
        .probes(Some("sim"), 0)
        .unwrap()[0]
        .id;
    for (path, charts, slos) in [
        ("/".to_string(), 0, 0),
        // ITL's two SLOs, TTFT's one, and ITL's two again by hour of day.
        ("/target/sim".to_string(), 3, 5),
        (format!("/target/{dead}"), 4, 0),
        (format!("/target/sim/probe/{first}"), 0, 0),
    ] {
        let (status, html) = get(&w.addr, &path);
        assert_eq!(status, 200, "{path}: {html}");
        let l = common::watcher::layout(&html, dir.path(), &path.replace('/', "_"));
        assert!(
            l.scroll_width <= 1280.0,
            "{path} is {} px wide: {}",
            l.scroll_width,
            l.wide
        );
        assert!(l.wide.is_empty(), "{path}: past the window: {}", l.wide);
        assert_eq!(l.figures, charts, "{path}");
        assert!(l.bad.is_empty(), "{path}: {}", l.bad);
        let drawn = l.dom.matches("<g class=\"slo\">").count();
        assert_eq!(drawn, slos, "{path}: SLO lines");
        if charts > 0 {
            assert!(
                l.chart_text_px > 6.0 && l.chart_text_px <= l.h2_px,
                "{path}: chart text {} px, h2 {} px",
                l.chart_text_px,
                l.h2_px
            );
        }
    }
    let (_, dead_page) = get(&w.addr, &format!("/target/{dead}"));
    assert!(
        dead_page.contains("<g class=\"spans\">"),
        "the incident is shaded"
    );
    assert!(dead_page.contains("connect_error"), "{dead_page}");
    let (status, _) = w.stop();
    assert!(status.success());
}

/// The judged scenario, accelerated (90 s with ITL doubled for 30 s becomes
/// ~15 s with it doubled for 5 s): the built-in simulator's engine (ITL ~4.2 ms) runs
/// twice as slow from 5 s to 10 s after it starts, and an SLO of `itl.p50<=6ms` holds
/// only outside that window. Every probe the watcher reported is in the database, the
/// probes inside the window have twice the ITL of those outside, one incident opens
/// and closes (two webhook posts), and `/metrics` says 1, then 0, then 1.
/// `benchsuite/watch-fault.sh` runs it at full length.
#[test]
fn a_slow_down_of_the_simulator_is_one_incident_seen_by_the_database_the_webhook_and_metrics() {
    let (hook, rx) = receiver("");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        "[builtin]\nslow_at = \"5s\"\nslow_for = \"5s\"\nslow_factor = 2.0\n\
         [[target]]\nname = \"sim\"\nurl = \"builtin\"\nslo = [\"itl.p50<=6ms\"]\n\
         [target.probe]\ninterval = \"500ms\"\njitter = \"50ms\"\nrequests = 3\n\
         max_tokens = 32\nprompt_tokens = 16\ndeadline = \"5s\"\n",
    )
    .unwrap();
    let db = dir.path().join("w.db");
    let wall_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    // The simulator starts between these two (the watcher starts it, then prints its
    // page's address).
    let spawned_ms = wall_ms();
    let w = start_watch(&cfg, &db, &["--webhook", &hook]);
    let listening_ms = wall_ms();

    let (stop_tx, poller) = slo_gauge_changes(w.addr.clone());
    let first = rx.recv_timeout(Duration::from_secs(20));
    let second = rx.recv_timeout(Duration::from_secs(20));
    // A few passing probes after the incident's end.
    let held = wait_for_probes(&db, None, 0, Duration::from_secs(30));
    wait_for_probes(&db, None, held + 3, Duration::from_secs(30));
    stop_tx.send(()).unwrap();
    let gauge = poller.join().unwrap();
    let (status, said) = w.stop();
    assert!(status.success(), "{said}");
    let (first, second) = match (first, second) {
        (Ok(a), Ok(b)) => (a, b),
        other => panic!("two posts expected, got {other:?}; the watcher said:\n{said}"),
    };
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    let second: serde_json::Value = serde_json::from_str(&second).unwrap();
    assert_eq!(first["event"], "incident_start", "{first}");
    assert_eq!(second["event"], "incident_end", "{second}");
    assert!(
        rx.try_recv().is_err(),
        "one incident: two posts; said:\n{said}"
    );
    assert_eq!(gauge, [1, 0, 1], "cadence_watch_slo_ok over the run");

    // Every probe the watcher reported is in the database, whole.
    let reported = said
        .lines()
        .filter(|l| l.contains("cadence watch: sim probe:"))
        .count();
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let probes = store.probes(None, 0).unwrap();
    assert_eq!(probes.len(), reported, "{said}");
    assert!(reported >= 12, "{reported} probes in ~12 s");
    for p in &probes {
        assert_eq!((p.sent, p.succeeded), (3, 3), "{p:?}");
        assert_eq!(store.requests(p.id).unwrap().len(), 3);
    }

    // ITL p50 inside the window is twice that outside; probes across an edge are left
    // out, and so is the simulator's start-up uncertainty.
    let (from, to) = (5_000, 10_000);
    let (slow, normal) = (
        itl_p50(&probes, (spawned_ms, listening_ms), (from, to), true),
        itl_p50(&probes, (spawned_ms, listening_ms), (from, to), false),
    );
    let ratio = slow / normal;
    assert!(
        (1.6..2.5).contains(&ratio),
        "ITL p50 {normal:.2} ms outside the window, {slow:.2} ms inside: x{ratio:.2}"
    );
    let incidents = cadence_watch::incident::incidents(&probes);
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    let i = &incidents[0];
    let end = i.end_ms.expect("the incident closed");
    // It spans the window, give or take a probe.
    assert!(
        (spawned_ms + from - 1_000..=listening_ms + from + 1_000).contains(&i.start_ms),
        "the incident opened {} ms after the start",
        i.start_ms - spawned_ms
    );
    assert!(
        (spawned_ms + to - 1_000..=listening_ms + to + 1_500).contains(&end),
        "the incident closed {} ms after the start",
        end - spawned_ms
    );
}

/// The median ITL p50 of the probes wholly inside the window `from..to` ms after the
/// start (`inside`), or wholly outside it; the start is known between `start.0` (the
/// watcher spawned) and `start.1` (its page listening), so probes across an edge either
/// way are left out.
fn itl_p50(
    probes: &[cadence_watch::store::ProbeRow],
    start: (i64, i64),
    (from, to): (i64, i64),
    inside: bool,
) -> f64 {
    let v: Vec<f64> = probes
        .iter()
        .filter(|p| {
            if inside {
                p.started_ms >= start.1 + from && p.ended_ms <= start.0 + to
            } else {
                p.ended_ms <= start.0 + from || p.started_ms >= start.1 + to
            }
        })
        .map(|p| p.itl_p50_ms.unwrap())
        .collect();
    assert!(v.len() >= 3, "{v:?}");
    cadence_core::stats::median(v).unwrap()
}

/// Polls the watcher's /metrics every 200 ms until told to stop: each change of the
/// `sim` target's SLO gauge, in order.
fn slo_gauge_changes(addr: String) -> (mpsc::Sender<()>, std::thread::JoinHandle<Vec<u8>>) {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let poller = std::thread::spawn(move || {
        let mut seen: Vec<u8> = Vec::new();
        while stop_rx.recv_timeout(Duration::from_millis(200)).is_err() {
            let (_, text) = get(&addr, "/metrics");
            let v = text.lines().find_map(|l| {
                l.strip_prefix("cadence_watch_slo_ok{target=\"sim\"} ")
                    .and_then(|v| v.trim().parse::<u8>().ok())
            });
            if let Some(v) = v {
                if seen.last() != Some(&v) {
                    seen.push(v);
                }
            }
        }
        seen
    });
    (stop_tx, poller)
}

/// A chat stream of two chunks, then the connection closes.
const TWO_CHUNKS: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" fine\"}}]}\n\ndata: [DONE]\n\n";

#[test]
fn probes_ask_the_users_prompts_with_its_extra_body() {
    let (hook, rx) = receiver_answering("", TWO_CHUNKS);
    let url = hook.replace("/hook", "/v1/chat/completions");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "{\"prompt\": \"first question\"}\n\
         {\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, \
         {\"role\": \"user\", \"content\": \"second question\"}]}\n\
         {\"prompt\": \"third question\", \"max_tokens\": 5}\n",
    )
    .unwrap();
    // The dataset's path is relative to the config file, not to where cadence runs.
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[probe]\nrequests = 3\ninterval = \"300ms\"\njitter = \"0s\"\nmax_tokens = 16\n\
             extra_body = {{ temperature = 0, ignore_eos = true }}\n\
             [[target]]\nname = \"set\"\nurl = \"{url}\"\nmodel = \"set-model\"\n\
             [target.probe]\ndataset = \"prompts.jsonl\"\n\
             [[target]]\nname = \"one\"\nurl = \"{url}\"\nmodel = \"one-model\"\n\
             [target.probe]\nprompt = \"tell me a story\"\nrequests = 1\n"
        ),
    )
    .unwrap();
    let w = start_watch(&cfg, &dir.path().join("w.db"), &["--quiet"]);
    let (mut set, mut one) = (Vec::new(), Vec::new());
    while set.len() < 6 || one.is_empty() {
        let body = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the probes' requests arrive");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        match v["model"].as_str() {
            Some("set-model") => set.push(v),
            Some("one-model") => one.push(v),
            _ => panic!("{v}"),
        }
    }
    let (status, said) = w.stop();
    assert!(status.success(), "{said}");
    let last_user = |v: &serde_json::Value| {
        let m = v["messages"].as_array().unwrap();
        m.last().unwrap()["content"].as_str().unwrap().to_string()
    };
    // Every probe asks the file's entries in order, from the first.
    let asked: Vec<String> = set.iter().map(last_user).collect();
    let once = ["first question", "second question", "third question"];
    assert_eq!(asked[..3], once);
    assert_eq!(asked[3..6], once);
    assert_eq!(set[1]["messages"][0]["content"], "be brief");
    assert_eq!(set[2]["max_tokens"], 5, "{}", set[2]);
    assert_eq!(set[0]["max_tokens"], 16, "{}", set[0]);
    assert_eq!(last_user(&one[0]), "tell me a story");
    for v in set.iter().chain(&one) {
        assert_eq!(
            (v["temperature"].as_i64(), v["ignore_eos"].as_bool()),
            (Some(0), Some(true)),
            "{v}"
        );
    }
    // The probes measured the answers: two chunks each.
    let store = cadence_watch::Store::open_read(&dir.path().join("w.db")).unwrap();
    let probes = store.probes(None, 0).unwrap();
    let kept = probes
        .iter()
        .find(|p| p.target == "set")
        .expect("a probe of set");
    assert_eq!((kept.sent, kept.succeeded), (3, 3), "{kept:?}");
}

#[test]
fn once_probes_every_target_now_and_exits_with_their_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    // Long intervals: only --once makes the probes come now.
    let target = |name: &str, slo: &str| {
        format!(
            "[[target]]\nname = \"{name}\"\nurl = \"builtin\"\nslo = [\"{slo}\"]\n\
             [target.probe]\ninterval = \"1h\"\njitter = \"1s\"\nrequests = 2\nmax_tokens = 8\n"
        )
    };
    let once = |text: String| {
        let cfg = dir.path().join("watch.toml");
        std::fs::write(&cfg, text).unwrap();
        let out = common::cadence()
            .arg("watch")
            .arg(&cfg)
            .arg("--db")
            .arg(&db)
            .arg("--once")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, said) = once(target("a", "itl.p50<=1s") + &target("b", "itl.p50<=1s"));
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("2 of 2 target(s) probed, 0 breached"),
        "{said}"
    );
    // The page goes away at exit: no address is given for it.
    assert!(!said.contains("page at"), "{said}");
    let (code, said) = once(target("a", "itl.p50<=1s") + &target("b", "ttft.p50<=1us"));
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("1 breached"), "{said}");
    // Each run probed each target once, and kept it.
    let store = cadence_watch::Store::open_read(&db).unwrap();
    for name in ["a", "b"] {
        let probes = store.probes(Some(name), 0).unwrap();
        assert_eq!(probes.len(), 2, "{name}: {probes:?}");
    }
    // A target outside its hours is said and skipped, not waited for.
    let now = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
        % 1440) as u32;
    let (start, end) = ((now + 120) % 1440, (now + 180) % 1440);
    let hours = format!(
        "hours = \"{:02}:{:02}-{:02}:{:02}\"\n",
        start / 60,
        start % 60,
        end / 60,
        end % 60
    );
    let (code, said) = once(target("a", "itl.p50<=1s") + &target("b", "itl.p50<=1s") + &hours);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("b: outside its hours, not probed"), "{said}");
    assert!(said.contains("1 of 2 target(s) probed"), "{said}");
    // Every target outside its hours: nothing was checked, which is no pass (exit 4).
    let (code, said) =
        once(target("a", "itl.p50<=1s") + &hours + &target("b", "itl.p50<=1s") + &hours);
    assert_eq!(code, Some(4), "{said}");
    assert!(
        said.contains("0 of 2 target(s) probed (2 outside their hours)"),
        "{said}"
    );
    assert!(said.contains("nothing was probed"), "{said}");
}

/// `watch --once` whose incident webhook failed (the receiver answered 500, or refused
/// the connection): the summary says how many were not delivered, and a run that would
/// exit 0 exits 1; a breach still exits 3 (FAULTS 150).
#[test]
fn once_with_an_undelivered_webhook_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let once = |slo: &str, hook: &str| {
        let out = common::cadence()
            .arg("watch")
            .arg(config(dir.path(), slo))
            .arg("--db")
            .arg(&db)
            .args(["--once", "--webhook", hook])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), said)
    };
    let (error, posts) = receiver_answering(
        "",
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    // A breach opens an incident; its post fails: still 3, and said.
    let (code, said) = once("ttft.p50<=1us", &error);
    assert_eq!(code, Some(3), "{said}");
    assert!(posts.recv_timeout(Duration::from_secs(5)).is_ok());
    assert!(
        said.contains("1 breached their SLOs, 1 incident webhook(s) not delivered"),
        "{said}"
    );
    // The SLO met again closes it; its post fails: exit 1, not 0.
    let (code, said) = once("ttft.p50<=1s", &error);
    assert_eq!(code, Some(1), "{said}");
    assert!(posts.recv_timeout(Duration::from_secs(5)).is_ok());
    assert!(
        said.contains("0 breached their SLOs, 1 incident webhook(s) not delivered"),
        "{said}"
    );
    // A receiver that refuses the connection: the same.
    let (_held, refused_port) = closed_port();
    let refused = format!("http://127.0.0.1:{refused_port}/hook");
    assert_eq!(once("ttft.p50<=1us", &refused).0, Some(3));
    let (code, said) = once("ttft.p50<=1s", &refused);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("1 incident webhook(s) not delivered"),
        "{said}"
    );
    // Delivered: 0.
    let (ok, _posts) = receiver("");
    assert_eq!(once("ttft.p50<=1us", &ok).0, Some(3));
    let (code, said) = once("ttft.p50<=1s", &ok);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("not delivered"), "{said}");
}

/// A target nothing listens at: its probe's line, and the incident's, name the failure
/// class (`connect_error`), not only that nothing succeeded.
#[test]
fn a_dead_targets_line_names_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_held, port) = closed_port();
    let cfg = config_text(
        dir.path(),
        &format!(
            "[[target]]\nname = \"dead\"\nurl = \"http://127.0.0.1:{port}/v1/chat/completions\"\n\
             model = \"m\"\n[target.probe]\ninterval = \"1h\"\nrequests = 2\nmax_tokens = 8\n"
        ),
    );
    let (code, said) = watch_to_the_end(&cfg, &dir.path().join("w.db"));
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains("dead probe: 0/2 ok (2 connect_error)"),
        "{said}"
    );
    assert!(
        said.contains("no request succeeded: 2 connect_error"),
        "{said}"
    );
}

#[test]
fn another_applications_database_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "itl.p50<=1s");
    // An SQLite file of another application: its own table, no user_version.
    let db = dir.path().join("other.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/watch/other-app.db");
    std::fs::copy(&fixture, &db).unwrap();
    let before = std::fs::read(&db).unwrap();
    let (code, said) = watch_to_the_end(&cfg, &db);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&db.display().to_string()), "{said}");
    assert!(said.contains("not a cadence watch database"), "{said}");
    assert!(said.contains("notes"), "{said}");
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert!(!dir.path().join("other.db-wal").exists());
}
