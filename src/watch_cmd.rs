//! `cadence watch`: read the config (or, with none, watch the built-in simulator), open
//! the database, serve the page, and probe until Ctrl-C or SIGTERM; `cadence watch
//! report` reads the database offline. The watching itself lives in `cadence_watch`.

use crate::builtin_sim::BuiltinSim;
use crate::cli::{EngineOpts, WatchArgs, WatchCommand, WatchReportArgs};
use crate::exit::{usage, Exit};
use cadence_watch::config::{Config, Probe, Target};
use cadence_watch::metrics::Metrics;
use cadence_watch::probe::{now_ms, Prepared};
use cadence_watch::report::Format;
use cadence_watch::watcher::{self, Shared, TargetInfo};
use cadence_watch::{web, webhook, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// A target's `url` that stands for the built-in simulator (started in-process).
pub const BUILTIN: &str = "builtin";

pub async fn run(args: WatchArgs) -> anyhow::Result<Exit> {
    if let Some(WatchCommand::Report(r)) = &args.command {
        return report(r);
    }
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| usage(e.to_string()))?,
        None => Config {
            targets: vec![Target {
                name: "builtin-sim".into(),
                url: BUILTIN.into(),
                api: None,
                model: None,
                key_env: None,
                headers: Vec::new(),
                slos: vec!["ttft.p50<=1s".parse().expect("a valid SLO")],
                probe: Probe {
                    interval: Duration::from_secs(10),
                    jitter: Duration::from_secs(1),
                    deadline: Duration::from_secs(30),
                    ..Probe::default()
                },
            }],
            webhook: None,
            builtin_freeze: None,
            builtin_slow: None,
        },
    };
    // The built-in simulator, once, when a target names it.
    let mut sim = None;
    let mut sim_model = None;
    if config.targets.iter().any(|t| t.url == BUILTIN) {
        let mut c = crate::builtin_sim::config(0, &EngineOpts::default())?;
        c.freeze = config
            .builtin_freeze
            .map(|(at, duration)| cadence_sim::Freeze { at, duration });
        c.slow = config.builtin_slow.map(|s| cadence_sim::Slow {
            at: s.at,
            duration: s.duration,
            factor: s.factor,
        });
        sim_model = Some(c.model.clone());
        let s = BuiltinSim::start(c)?;
        for t in config.targets.iter_mut().filter(|t| t.url == BUILTIN) {
            t.url = format!("http://{}/v1/chat/completions", s.addr);
        }
        if !args.quiet {
            eprintln!(
                "{}watching the built-in simulator at http://{} (engine {}).",
                if args.config.is_none() {
                    "No CONFIG given: "
                } else {
                    ""
                },
                s.addr,
                sim_model.as_deref().unwrap_or("")
            );
        }
        sim = Some(s);
    }
    let hook = match args.webhook.as_deref().or(config.webhook.as_deref()) {
        Some(u) => Some(webhook::Webhook::new(webhook::parse(u).map_err(usage)?)),
        None => None,
    };
    let prepared = config
        .targets
        .iter()
        .map(|t| Prepared::new(t, sim_model.as_deref()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(e.to_string()))?;
    let store = Store::open(&args.db).map_err(store_error)?;
    let shared = Arc::new(Shared {
        db: args.db.clone(),
        targets: prepared.iter().map(TargetInfo::of).collect(),
        metrics: Metrics::new(),
    });
    let server = web::serve(args.listen, shared.clone())
        .await
        .map_err(|e| usage(format!("cannot listen on {}: {e}", args.listen)))?;
    eprintln!(
        "cadence watch: {} target(s), probes kept in {}; page at http://{}/",
        prepared.len(),
        args.db.display(),
        server.addr
    );
    if let Some(h) = &hook {
        eprintln!("cadence watch: incidents are posted to {}", h.display());
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::signal::stop_signal().await;
        let _ = stop_tx.send(true);
    });
    let opts = watcher::Options {
        retain: args.retain,
        webhook: hook,
        verbose: !args.quiet,
    };
    let result = watcher::run(prepared, store, shared, opts, stop_rx).await;
    drop(server);
    drop(sim);
    match result {
        Ok(()) => {
            eprintln!("cadence watch: stopped; every finished probe is in the database.");
            Ok(Exit::Ok)
        }
        Err(e) => Err(anyhow::anyhow!(e)),
    }
}

/// A database that cannot be used as given is a usage error (exit 2: another watcher
/// holds it, or it is newer than this build); one that failed is an error (exit 1).
fn store_error(e: StoreError) -> anyhow::Error {
    if e.is_usage() {
        usage(e.to_string())
    } else {
        anyhow::anyhow!(e)
    }
}

fn report(r: &WatchReportArgs) -> anyhow::Result<Exit> {
    let store = Store::open_read(&r.db).map_err(store_error)?;
    let now = now_ms();
    let since = now - r.since.as_millis() as i64;
    let probes = store.probes(None, since).map_err(store_error)?;
    let mut console = true;
    for (path, format) in [(&r.markdown, Format::Markdown), (&r.html, Format::Html)] {
        let Some(path) = path else { continue };
        let text = cadence_watch::report::render(&probes, since, now, format);
        if path.as_os_str() == "-" {
            print!("{text}");
            console = false;
        } else {
            std::fs::write(path, text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        }
    }
    if console {
        print!(
            "{}",
            cadence_watch::report::render(&probes, since, now, Format::Console)
        );
    }
    Ok(Exit::Ok)
}
