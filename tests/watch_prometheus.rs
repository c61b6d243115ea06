//! The deploy kit's watch rules and Grafana dashboard against a real Prometheus scraping
//! a real `cadence watch`: promtool's unit tests feed the rules hand-written series, so
//! only this shows that the names and labels they use are the ones the watcher exposes.
//! A target that breaches puts `CadenceWatchSloBreached` in the pending state (its
//! `for:` is longer than a test), every rule evaluates without error, and every query
//! of the dashboard's watcher panels returns data.

mod common;

use common::watcher::{deploy_metric_names, get, start_watch};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Prom(Child);
impl Drop for Prom {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Prometheus API answer (JSON).
fn api(prom: &str, path: &str) -> serde_json::Value {
    let (status, body) = get(prom, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: {body}"))
}

/// An instant query's result vector.
fn query(prom: &str, q: &str) -> Vec<serde_json::Value> {
    let v = api(
        prom,
        &format!(
            "/api/v1/query?query={}",
            percent_encoding::utf8_percent_encode(q, percent_encoding::NON_ALPHANUMERIC)
        ),
    );
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Polls `check` every 250 ms until it holds, or panics naming `what` after `within`.
fn until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn start_prometheus(dir: &Path, scrape: &str, rules: &Path) -> (Prom, String) {
    let bin = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "the `prometheus` binary is needed for this test and was not found on PATH: install \
         the Debian package (as scripts/test.sh does) or set PROMETHEUS=/path/to/prometheus"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: watch\n    static_configs:\n      - targets: ['{scrape}']\n",
            rules.display()
        ),
    )
    .unwrap();
    let child = Command::new(&bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("start prometheus");
    (Prom(child), format!("127.0.0.1:{port}"))
}

#[test]
#[ignore = "needs Prometheus; scripts/test.sh installs it and runs this"]
fn the_watch_rules_and_dashboard_work_on_what_a_watcher_exposes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        "[probe]\ninterval = \"300ms\"\njitter = \"30ms\"\nrequests = 2\nmax_tokens = 8\n\
         prompt_tokens = 8\ndeadline = \"5s\"\n\
         [[target]]\nname = \"steady\"\nurl = \"builtin\"\nslo = [\"itl.p50<=1s\"]\n\
         [[target]]\nname = \"strict\"\nurl = \"builtin\"\nslo = [\"itl.p50<=1us\"]\n",
    )
    .unwrap();
    let w = start_watch(&cfg, &dir.path().join("w.db"), &["--quiet"]);
    let rules = root.join("deploy/prometheus/cadence-watch-rules.yml");
    let (_prom, prom) = start_prometheus(dir.path(), &w.addr, &rules);

    until("both targets scraped", Duration::from_secs(60), || {
        std::net::TcpStream::connect(&prom).is_ok()
            && get(&prom, "/-/ready").0 == 200
            && query(&prom, "cadence_watch_slo_ok").len() == 2
    });
    alerts_and_rules(&prom);
    dashboard_queries(&prom, root);

    // Every watcher series the kit names is one the watcher exposes.
    let (_, metrics) = get(&w.addr, "/metrics");
    let exposed = common::watcher::metric_names(&metrics);
    for name in deploy_metric_names(root) {
        if name.starts_with("cadence_watch_vantage_") || name.starts_with("cadence_watch_shared_") {
            continue;
        }
        assert!(
            exposed.contains(&name),
            "{name} is not in the watcher's /metrics"
        );
    }
}

/// The breaching target's alert is pending and the passing one has none; every rule
/// has been evaluated, none with an error.
fn alerts_and_rules(prom: &str) {
    until(
        "CadenceWatchSloBreached pending for strict",
        Duration::from_secs(30),
        || {
            let alerts = api(prom, "/api/v1/alerts");
            let alerts = alerts["data"]["alerts"].as_array().unwrap().clone();
            let breached: Vec<_> = alerts
                .iter()
                .filter(|a| a["labels"]["alertname"] == "CadenceWatchSloBreached")
                .map(|a| (a["labels"]["target"].clone(), a["state"].clone()))
                .collect();
            breached == [("strict".into(), "pending".into())]
        },
    );
    until("every rule evaluated", Duration::from_secs(30), || {
        let v = api(prom, "/api/v1/rules");
        let groups = v["data"]["groups"].as_array().unwrap();
        let rules: Vec<_> = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().iter())
            .collect();
        assert!(rules.len() >= 5, "{v}");
        for r in &rules {
            assert_ne!(r["health"], "err", "{}: {}", r["name"], r["lastError"]);
        }
        rules.iter().all(|r| r["health"] == "ok")
    });
}

/// Every query of the dashboard runs; the watcher's panels show data for both targets
/// (the shared store's and the vantages' need --shared and the hub: tests/watch_shared.rs
/// checks their names on those /metrics).
fn dashboard_queries(prom: &str, root: &Path) {
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/cadence-watch-dashboard.json")).unwrap(),
    )
    .unwrap();
    until(
        "two scrapes of each counter",
        Duration::from_secs(30),
        || {
            let q = "sum by (target) (increase(cadence_watch_probes_total[1m]))";
            query(prom, q).len() == 2
        },
    );
    let mut shown = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let q = expr
                .replace("$__rate_interval", "1m")
                .replace("$target", ".*")
                .replace("$vantage", ".*");
            let result = query(prom, &q);
            if expr.contains("cadence_watch_vantage_") || expr.contains("cadence_watch_shared_") {
                continue;
            }
            let targets: std::collections::BTreeSet<_> = result
                .iter()
                .filter_map(|s| s["metric"]["target"].as_str())
                .collect();
            assert!(
                targets.contains("steady") && targets.contains("strict"),
                "{}: {expr} → {result:?}",
                panel["title"]
            );
            shown += 1;
        }
    }
    assert!(shown >= 10, "{shown} queries with data");
}
