//! Several watchers, one shared store, end to end: two `cadence watch` processes
//! (vantages east and west, each probing its own built-in simulator) feed one
//! PostgreSQL database; `cadence watch serve` and each watcher's page compare them,
//! `cadence watch report --shared` reports them, and a watcher whose store is away
//! keeps its probes and ships them when it is back. Needs CADENCE_TEST_POSTGRES
//! (scripts/test.sh starts a server); ignored unless asked for.

mod common;

use common::watcher::{get, render, start_cadence, start_watch, Watcher};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A fresh database on the test server (`CADENCE_TEST_POSTGRES`). The tests that call
/// this are `#[ignore]`d; asked for without a server, they fail saying how to get one.
fn database(name: &str) -> String {
    let admin = std::env::var("CADENCE_TEST_POSTGRES")
        .expect("CADENCE_TEST_POSTGRES is not set: scripts/test.sh starts a server and sets it");
    let db = format!("watchx_{}_{name}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        let out = Command::new("psql")
            .args([admin.as_str(), "-v", "ON_ERROR_STOP=1", "-qc", &sql])
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    format!("{admin} dbname={db}")
}

fn config(dir: &Path, vantage: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{vantage}.toml"));
    std::fs::write(
        &path,
        format!(
            "vantage = \"{vantage}\"\n\
             [[target]]\nname = \"sim\"\nurl = \"builtin\"\nslo = [\"ttft.p50<=2s\"]\n\
             [target.probe]\ninterval = \"300ms\"\njitter = \"30ms\"\nrequests = 2\n\
             max_tokens = 8\nprompt_tokens = 8\ndeadline = \"5s\"\n"
        ),
    )
    .unwrap();
    path
}

fn watch(config: &Path, db: &Path, shared: &str) -> Watcher {
    start_watch(config, db, &["--shared", shared])
}

/// The number after `name ` in OpenMetrics text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

/// The probes a watcher's own database holds (its `watch report` over the last hour).
fn probes_in(db: &Path) -> u64 {
    let out = Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(["watch", "report", "--since", "1h", "--db"])
        .arg(db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let title = text.lines().next().unwrap_or_default();
    let (before, _) = title.split_once(" probes of ").expect(title);
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
fn two_vantages_feed_one_store_and_every_page_compares_them() {
    let shared = database("two");
    let dir = tempfile::tempdir().unwrap();
    let east = watch(
        &config(dir.path(), "east"),
        &dir.path().join("east.db"),
        &shared,
    );
    let west = watch(
        &config(dir.path(), "west"),
        &dir.path().join("west.db"),
        &shared,
    );
    let hub = start_cadence(&[
        OsStr::new("watch"),
        OsStr::new("serve"),
        OsStr::new("--shared"),
        OsStr::new(&shared),
    ]);
    // Both vantages reach the hub's page, with the target compared between them.
    let page = hub.wait_for("/", Duration::from_secs(30), |b| {
        b.matches("<td>sim</td>").count() >= 1
            && b.contains("<td>east</td>")
            && b.contains("<td>west</td>")
            && b.matches("href=\"/target/sim\"").count() == 2
    });
    assert!(page.contains("vs best"), "{page}");
    // Each vantage's own simulator is on its loopback: not a name for two endpoints.
    assert!(!page.contains("is not one endpoint"), "{page}");
    let (status, target) = get(&hub.addr, "/target/sim");
    assert_eq!(status, 200);
    assert_eq!(target.matches("<svg").count(), 2, "ITL and TTFT by vantage");
    // A watcher's own page carries the comparison beside its own figures.
    let own = east.wait_for("/", Duration::from_secs(10), |b| {
        b.contains("From every vantage") && b.contains("<td>west</td>")
    });
    assert!(own.contains("vantage <b>east</b>"), "{own}");
    let (_, api) = get(&hub.addr, "/api/vantages");
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    let names: Vec<&str> = api["vantages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["east", "west"]);
    // Chromium renders the hub's pages with their charts, asking only the hub.
    let origin = format!("http://{}/", hub.addr);
    for (page, name) in [("", "hub"), ("target/sim", "hub-target")] {
        let url = format!("{origin}{page}");
        let (html, asked) = render(&url, &origin, dir.path(), name);
        assert!(html.contains("<td>east</td>"), "{url}: {html}");
        if !page.is_empty() {
            assert_eq!(html.matches("<svg").count(), 2, "{html}");
            assert!(html.matches("<circle").count() >= 4, "no marks: {html}");
        }
        assert!(asked.iter().all(|u| u.starts_with(&origin)), "{asked:?}");
        assert!(asked.contains(&url), "the page updates itself: {asked:?}");
    }
    // The hub's /metrics: each vantage's latest probe, labelled by target and vantage.
    let (_, m) = get(&hub.addr, "/metrics");
    for v in ["east", "west"] {
        let series = format!("cadence_watch_vantage_slo_ok{{target=\"sim\",vantage=\"{v}\"}} 1");
        assert!(m.contains(&series), "{series} in {m}");
    }
    kit_names_are_exposed(&m, &get(&east.addr, "/metrics").1);
    let (status, words) = get(&hub.addr, "/api/targets");
    assert_eq!(status, 404);
    assert!(words.contains("/api/vantages"), "{words}");

    let (s, said) = east.stop();
    assert!(s.success(), "{said}");
    let (s, said) = west.stop();
    assert!(s.success(), "{said}");
    drop(hub);
    // Every probe each watcher kept is in the shared store, once: the report counts
    // the two local files' probes.
    let local = probes_in(&dir.path().join("east.db")) + probes_in(&dir.path().join("west.db"));
    let out = Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(["watch", "report", "--since", "1h", "--shared", &shared])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("{local} probes from 2 vantages (east, west)")),
        "{local} local probes; {text}"
    );
}

#[test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
fn a_watcher_whose_store_is_away_keeps_its_probes_and_ships_them_later() {
    let shared = database("away");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "north");
    let db = dir.path().join("north.db");
    // Away: a socket directory with no server in it.
    let away = format!("host={} user=cadence dbname=x", dir.path().display());
    let w = watch(&cfg, &db, &away);
    let metrics = w.wait_for("/metrics", Duration::from_secs(30), |b| {
        gauge(b, "cadence_watch_shared_pending_probes").unwrap_or(0.0) >= 3.0
    });
    assert_eq!(gauge(&metrics, "cadence_watch_shared_up"), Some(0.0));
    let (_, page) = get(&w.addr, "/");
    assert!(page.contains("shipping fails"), "{page}");
    assert!(
        page.contains("returns when the shared store answers"),
        "{page}"
    );
    let (s, said) = w.stop();
    assert!(s.success(), "{said}");
    assert!(said.contains("cannot ship to the shared store"), "{said}");
    let kept = probes_in(&db);
    assert!(kept >= 3);

    // Back: the probes taken while it was away go first, then the new ones.
    let w = watch(&cfg, &db, &shared);
    w.wait_for("/metrics", Duration::from_secs(30), |b| {
        gauge(b, "cadence_watch_shared_up") == Some(1.0)
            && gauge(b, "cadence_watch_shared_pending_probes") == Some(0.0)
    });
    let (s, said) = w.stop();
    assert!(s.success(), "{said}");
    let out = Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "watch",
            "report",
            "--since",
            "1h",
            "--shared",
            &shared,
            "--markdown",
            "-",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let now_kept = probes_in(&db);
    assert!(
        text.contains(&format!("{now_kept} probes from 1 vantages (north)")),
        "{now_kept} local probes; {text}"
    );
}

/// The deploy kit's vantage rules and dashboard panels use names the hub's /metrics
/// has, and its shared-store ones names a watcher's has (tests/watch_prometheus.rs
/// checks the rest against a real Prometheus).
fn kit_names_are_exposed(hub_metrics: &str, watcher_metrics: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hub = common::watcher::metric_names(hub_metrics);
    let watcher = common::watcher::metric_names(watcher_metrics);
    for name in common::watcher::deploy_metric_names(root) {
        if name.starts_with("cadence_watch_vantage_") {
            assert!(hub.contains(&name), "{name} is not in the hub's /metrics");
        } else if name.starts_with("cadence_watch_shared_") {
            assert!(
                watcher.contains(&name),
                "{name} is not in the watcher's /metrics"
            );
        }
    }
}
