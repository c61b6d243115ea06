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
    psql(&admin, &format!("DROP DATABASE IF EXISTS {db}"));
    psql(&admin, &format!("CREATE DATABASE {db}"));
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

/// Chromium renders the hub's pages (at `hub`) with their charts, asking only the hub;
/// at 1280 px nothing overflows, and each chart has its axes.
fn assert_hub_pages_render(hub: &str, dir: &Path) {
    let origin = format!("http://{hub}/");
    for (page, name) in [("", "hub"), ("target/sim", "hub-target")] {
        let url = format!("{origin}{page}");
        let (html, asked) = render(&url, &origin, dir, name);
        assert!(html.contains("<td>east</td>"), "{url}: {html}");
        if !page.is_empty() {
            assert_eq!(html.matches("<svg").count(), 2, "{html}");
            assert!(html.matches("<circle").count() >= 4, "no marks: {html}");
        }
        assert!(asked.iter().all(|u| u.starts_with(&origin)), "{asked:?}");
        assert!(asked.contains(&url), "the page updates itself: {asked:?}");
        // At 1280 px nothing overflows, and each chart has its axes.
        let (_, raw) = get(hub, &format!("/{page}"));
        let l = common::watcher::layout(&raw, dir, &format!("layout-{name}"));
        assert!(
            l.scroll_width <= 1280.0 && l.wide.is_empty(),
            "{url} is {} px wide: {}",
            l.scroll_width,
            l.wide
        );
        assert!(l.bad.is_empty(), "{url}: {}", l.bad);
        assert_eq!(l.figures, if page.is_empty() { 0 } else { 2 }, "{url}");
    }
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
    // The target's SLO (ttft.p50<=2s, announced by both vantages) is drawn once, on TTFT.
    assert_eq!(target.matches("<g class=\"slo\">").count(), 1, "{target}");
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
    assert_hub_pages_render(&hub.addr, dir.path());
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

/// The shared store's probe and request tables as its first version wrote them: the
/// stores watchers already feed (the rest of its schema is as it was).
const PROBES_V1: &str = "
DROP TABLE watch_requests, watch_probes;
CREATE TABLE watch_probes (
    id BIGSERIAL PRIMARY KEY,
    vantage TEXT NOT NULL,
    target TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    ended_ms BIGINT NOT NULL,
    sent BIGINT NOT NULL,
    succeeded BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    aborted BIGINT NOT NULL,
    failed_by_class TEXT NOT NULL,
    ttft_p50_ms DOUBLE PRECISION,
    ttft_p99_ms DOUBLE PRECISION,
    itl_p50_ms DOUBLE PRECISION,
    itl_p99_ms DOUBLE PRECISION,
    output_tok_s DOUBLE PRECISION,
    slo_ok BOOLEAN NOT NULL,
    slo_detail TEXT NOT NULL,
    clock TEXT,
    read_delay_p99_ms DOUBLE PRECISION,
    loop_lag_p99_ms DOUBLE PRECISION,
    merged_reads BIGINT,
    UNIQUE (vantage, target, started_ms)
);
CREATE INDEX watch_probes_by_target_time ON watch_probes (target, started_ms);
CREATE INDEX watch_probes_by_time ON watch_probes (started_ms);
CREATE TABLE watch_requests (
    probe_id BIGINT NOT NULL REFERENCES watch_probes (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    ttft_ms DOUBLE PRECISION,
    e2e_ms DOUBLE PRECISION,
    chunks BIGINT NOT NULL,
    output_tokens BIGINT,
    itl_p50_ms DOUBLE PRECISION,
    itl_max_ms DOUBLE PRECISION,
    PRIMARY KEY (probe_id, idx)
);
";

/// What `sql` prints in `database`, one row a line.
fn psql(database: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([database, "-v", "ON_ERROR_STOP=1", "-Atqc", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every column (table, name, type, null, default) and index of a store.
fn layout(database: &str) -> String {
    psql(
        database,
        "SELECT table_name, column_name, data_type, is_nullable, column_default
           FROM information_schema.columns WHERE table_schema = 'public'
           ORDER BY table_name, ordinal_position",
    ) + &psql(
        database,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
           ORDER BY indexname",
    )
}

#[test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
fn a_store_the_first_version_made_is_laid_out_as_a_new_one_and_takes_probes() {
    use cadence_watch::shared::SharedConfig;
    use cadence_watch::store::{ProbeRow, RequestRow};
    let old = database("v1");
    let new = database("new");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let connect = |db: &str| {
        let config = SharedConfig::new(db, None).unwrap();
        rt.block_on(async move { config.connect().await.unwrap() })
    };
    drop(connect(&old));
    psql(&old, PROBES_V1);
    let probe = ProbeRow {
        id: 0,
        target: "sim".into(),
        started_ms: 1_000,
        ended_ms: 1_500,
        sent: 2,
        succeeded: 1,
        failed: 1,
        aborted: 0,
        failed_by_class: [("http_5xx".to_string(), 1)].into(),
        ttft_p50_ms: Some(20.5),
        ttft_p99_ms: None,
        itl_p50_ms: Some(5.0),
        itl_p99_ms: Some(9.0),
        output_tok_s: Some(150.0),
        slo_ok: false,
        slo_detail: vec!["ttft.p50<=10ms: 20.5 ms".into()],
        clock: Some("kernel".into()),
        read_delay_p99_ms: Some(0.05),
        loop_lag_p99_ms: None,
        merged_reads: Some(3),
    };
    let request = RequestRow {
        idx: 1,
        outcome: "succeeded".into(),
        ttft_ms: Some(20.5),
        e2e_ms: Some(80.0),
        chunks: 8,
        output_tokens: None,
        itl_p50_ms: Some(5.0),
        itl_max_ms: Some(9.0),
    };
    for db in [&old, &new] {
        let mut store = connect(db);
        let back = rt.block_on(async {
            let batch = [(probe.clone(), vec![request.clone()])];
            assert_eq!(store.push("east", &batch).await.unwrap(), 1);
            assert_eq!(store.push("east", &batch).await.unwrap(), 0, "stored once");
            let probes = store.probes(None, 0).await.unwrap();
            let reqs = store.requests(probes[0].probe.id).await.unwrap();
            (probes, reqs)
        });
        let (probes, reqs) = back;
        assert_eq!(probes.len(), 1, "{db}");
        assert_eq!(probes[0].vantage, "east");
        assert_eq!(
            probes[0].probe,
            ProbeRow {
                id: probes[0].probe.id,
                ..probe.clone()
            }
        );
        assert_eq!(reqs, vec![request.clone()]);
    }
    let (old, new) = (layout(&old), layout(&new));
    assert_eq!(new, old);
    assert!(new.contains("watch_requests|idx|integer|NO|"), "{new}");
    assert!(new.contains("watch_probes|slo_ok|boolean|NO|"), "{new}");
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

/// `cadence ARGS` against `store`, sent SIGTERM after `after`: its exit status, how
/// long it took to end after the signal, and its stderr.
fn terminated_after(
    args: &[&str],
    after: Duration,
) -> (std::process::ExitStatus, Duration, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let sent = std::time::Instant::now();
    let deadline = sent + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("cadence {args:?} did not end on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = sent.elapsed();
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    (status, took, said)
}

#[test]
fn f134_a_silent_store_holds_no_command_past_a_signal() {
    // Accepts (the kernel does) and never answers a byte.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let store = format!(
        "postgres://w@127.0.0.1:{}/d",
        silent.local_addr().unwrap().port()
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "east");
    let db = dir.path().join("east.db");
    let runs: [(&str, Vec<&str>); 3] = [
        ("watch report", vec!["watch", "report", "--shared", &store]),
        (
            "watch serve",
            vec![
                "watch",
                "serve",
                "--shared",
                &store,
                "--listen",
                "127.0.0.1:0",
            ],
        ),
        (
            "watch --once",
            vec![
                "watch",
                cfg.to_str().unwrap(),
                "--once",
                "--db",
                db.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--shared",
                &store,
            ],
        ),
    ];
    for (what, args) in runs {
        let (status, took, said) = terminated_after(&args, Duration::from_millis(1500));
        assert_eq!(status.code(), Some(130), "{what}: {said}");
        assert!(
            took < Duration::from_secs(2),
            "{what} took {took:?}: {said}"
        );
        assert!(said.contains("interrupted"), "{what}: {said}");
    }
    drop(silent);
}
