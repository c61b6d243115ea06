//! `cadence watch`: read the config (or, with none, watch the built-in simulator), open
//! the database, serve the page, and probe until Ctrl-C or SIGTERM; `cadence watch
//! report` reads the database offline. The watching itself lives in `cadence_watch`.

use crate::builtin_sim::BuiltinSim;
use crate::cli::{
    EngineOpts, SharedStoreArgs, WatchArgs, WatchCommand, WatchReportArgs, WatchServeArgs,
};
use crate::exit::{usage, Exit};
use cadence_watch::config::{Config, Probe, SharedSpec, Target};
use cadence_watch::probe::{now_ms, Prepared};
use cadence_watch::report::Format;
use cadence_watch::shared::SharedConfig;
use cadence_watch::watcher;
use cadence_watch::{webhook, HubError, Store, StoreError, WatchError};
use std::sync::Arc;
use std::time::Duration;

/// A target's `url` that stands for the built-in simulator (started in-process).
pub const BUILTIN: &str = "builtin";

pub async fn run(args: WatchArgs) -> anyhow::Result<Exit> {
    match &args.command {
        Some(WatchCommand::Report(r)) => return report(r).await,
        Some(WatchCommand::Serve(s)) => return serve(s).await,
        None => {}
    }
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| usage(e.to_string()))?,
        None => default_config(),
    };
    let (sim, sim_model) = start_builtin(&mut config, &args)?;
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
    let otlp = cadence_watch::otlp::Otlp::start(&args.otlp.flags())?.map(Arc::new);
    let store = Store::open(&args.db).map_err(store_error)?;
    let shared = shared_store(&args, &config)?;
    if let Some(pw) = &args.shared.shared_password_env {
        for t in &config.targets {
            let at = format!("target {:?}", t.name);
            if let Some(k) = &t.key_env {
                cadence_watch::config::key_env_is_not_the_stores(&at, k, Some(pw))
                    .map_err(|e| usage(e.to_string()))?;
            }
        }
    }
    let setup = cadence_watch::Setup {
        targets: prepared,
        store,
        db: args.db.clone(),
        listen: args.listen,
        options: watcher::Options {
            retain: args.retain,
            webhook: hook.clone(),
            verbose: !args.quiet,
            written: None,
            once: args.once,
            otlp: otlp.clone(),
        },
        shared: shared.clone(),
    };
    let n = setup.targets.len();
    let watch = cadence_watch::spawn(setup).await.map_err(watch_error)?;
    if let Some((sc, vantage)) = &shared {
        eprintln!(
            "cadence watch: vantage {vantage}, feeding the shared store {}",
            sc.display()
        );
    }
    // With --once the page goes with the process, a moment later: no address for it.
    let page = if args.once {
        String::new()
    } else {
        format!("; page at http://{}/", watch.addr)
    };
    eprintln!(
        "cadence watch: {n} target(s), probes kept in {}{page}",
        args.db.display()
    );
    if let Some(h) = &hook {
        eprintln!("cadence watch: incidents are posted to {}", h.display());
    }
    let result = watch.until(crate::signal::stop_signal()).await;
    let undelivered = match &hook {
        Some(h) => webhooks_settled(h).await,
        None => 0,
    };
    if let Some(o) = otlp {
        let (spans, metrics) = tokio::task::spawn_blocking(move || o.finish()).await?;
        let lines = cadence_otlp::signals::said(spans.as_ref(), metrics.as_ref(), args.quiet).0;
        lines.iter().for_each(|l| eprintln!("{l}"));
    }
    drop(sim);
    ended(result?, args.once, undelivered)
}

/// How long a watcher's end waits for its incident webhooks still in flight.
const WEBHOOK_WAIT: Duration = Duration::from_secs(5);

/// Waits (bounded) for the incident webhooks still in flight, and says any that did
/// not arrive (each failure was logged with its cause as it happened); gives how many
/// did not.
async fn webhooks_settled(hook: &webhook::Webhook) -> usize {
    let s = hook.settle(WEBHOOK_WAIT).await;
    for line in s.said(&hook.display(), WEBHOOK_WAIT) {
        eprintln!("{line}");
    }
    s.failed + s.unfinished
}

/// What the watcher's end says, and its exit: with `--once`, 3 when a target breached
/// its SLOs, 130 when a signal cut it short, else 1 when an incident webhook was not
/// delivered (`undelivered`: failed or unanswered), which the summary also says.
fn ended(end: cadence_watch::Ended, once: bool, undelivered: usize) -> anyhow::Result<Exit> {
    let verdicts = end.verdicts;
    if !once {
        eprintln!("cadence watch: stopped; every finished probe is in the database.");
        return Ok(Exit::Ok);
    }
    if end.interrupted {
        eprintln!(
            "cadence watch --once: interrupted; {} of {} target(s) probed, every finished probe is in the database.",
            verdicts.iter().flatten().count(),
            verdicts.len()
        );
        return Ok(Exit::Interrupted);
    }
    let probed = verdicts.iter().flatten().count();
    let breached = verdicts.iter().flatten().filter(|ok| !**ok).count();
    let closed = match verdicts.len() - probed {
        0 => String::new(),
        n => format!(" ({n} outside their hours)"),
    };
    let hooks = match undelivered {
        0 => String::new(),
        n => format!(", {n} incident webhook(s) not delivered"),
    };
    eprintln!(
        "cadence watch --once: {probed} of {} target(s) probed{closed}, {breached} breached their SLOs{hooks}; the probes are in the database.",
        verdicts.len()
    );
    if probed == 0 {
        eprintln!("cadence watch --once: nothing was probed, so nothing was checked (exit 4)");
        return Ok(Exit::Invalid);
    }
    Ok(if breached > 0 {
        Exit::SloBreached
    } else if undelivered > 0 {
        Exit::Error
    } else {
        Exit::Ok
    })
}

/// With no CONFIG: the built-in simulator, probed every 10 s.
fn default_config() -> Config {
    Config {
        targets: vec![Target {
            name: "builtin-sim".into(),
            url: BUILTIN.into(),
            api: None,
            model: None,
            key_env: None,
            headers: Vec::new(),
            ca_file: None,
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
        vantage: None,
        shared: None,
    }
}

/// The built-in simulator, once, when a target names it (with the config's faults);
/// those targets then point at it. Gives the running simulator and its model.
fn start_builtin(
    config: &mut Config,
    args: &WatchArgs,
) -> anyhow::Result<(Option<BuiltinSim>, Option<String>)> {
    if !config.targets.iter().any(|t| t.url == BUILTIN) {
        return Ok((None, None));
    }
    let mut c = crate::builtin_sim::config(0, &EngineOpts::default())?;
    c.freeze = config
        .builtin_freeze
        .map(|(at, duration)| cadence_sim::Freeze { at, duration });
    c.slow = config.builtin_slow.map(|s| cadence_sim::Slow {
        at: s.at,
        duration: s.duration,
        factor: s.factor,
    });
    let model = c.model.clone();
    let s = BuiltinSim::start(c)?;
    for t in config.targets.iter_mut().filter(|t| t.url == BUILTIN) {
        t.url = format!("http://{}/v1/chat/completions", s.addr);
    }
    if !args.quiet {
        eprintln!(
            "{}watching the built-in simulator at http://{} (engine {model}).",
            if args.config.is_none() {
                "No CONFIG given: "
            } else {
                ""
            },
            s.addr,
        );
    }
    Ok((Some(s), Some(model)))
}

/// The shared store `--shared` (or the config) names, and this watcher's vantage
/// there; `None` without one.
fn shared_store(
    args: &WatchArgs,
    config: &Config,
) -> anyhow::Result<Option<(SharedConfig, String)>> {
    let Some(sc) = shared_config(&args.shared, config.shared.as_ref())? else {
        return Ok(None);
    };
    let vantage = match args.vantage.clone().or(config.vantage.clone()) {
        Some(v) if cadence_watch::config::valid_name(&v) => v,
        Some(v) => {
            return Err(usage(format!(
                "--vantage {v:?}: letters, digits, '-', '_' and '.' only (it is a label)"
            )))
        }
        None => host_name(),
    };
    Ok(Some((sc, vantage)))
}

/// A page address that cannot be bound is a usage error (exit 2), as is a database
/// that cannot be used as given.
fn watch_error(e: WatchError) -> anyhow::Error {
    match e {
        WatchError::Listen { .. } => usage(e.to_string()),
        WatchError::Store(e) => store_error(e),
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

/// The shared store from the flags, each over the config's key; `None` when neither
/// names one.
fn shared_config(
    flags: &SharedStoreArgs,
    config: Option<&SharedSpec>,
) -> anyhow::Result<Option<SharedConfig>> {
    let Some(url) = flags.shared.clone().or(config.map(|c| c.url.clone())) else {
        return Ok(None);
    };
    let password_env = flags
        .shared_password_env
        .clone()
        .or(config.and_then(|c| c.password_env.clone()));
    let ca = flags
        .shared_ca
        .clone()
        .or(config.and_then(|c| c.ca_file.clone()));
    SharedConfig::with_ca(&url, password_env.as_deref(), ca.as_deref())
        .map(Some)
        .map_err(|e| usage(e.to_string()))
}

/// The vantage when none is named: the host's name (kept to the label's letters).
fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default();
    let name: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "default".into()
    } else {
        name
    }
}

/// `cadence watch serve`: the shared store's page, no probing.
async fn serve(a: &WatchServeArgs) -> anyhow::Result<Exit> {
    let Some(sc) = shared_config(&a.shared, None)? else {
        return Err(usage(
            "cadence watch serve needs --shared URL (the store the watchers feed)",
        ));
    };
    let setup = cadence_watch::HubSetup {
        shared: sc.clone(),
        listen: a.listen,
        retain: a.retain,
    };
    let started = async {
        cadence_watch::spawn_hub(setup).await.map_err(|e| match e {
            HubError::Listen { .. } => usage(e.to_string()),
            HubError::Store(e) => anyhow::anyhow!(e),
        })
    };
    let hub = match or_signal("watch serve", started).await? {
        Ok(hub) => hub,
        Err(interrupted) => return Ok(interrupted),
    };
    eprintln!(
        "cadence watch serve: every vantage of {}; page at http://{}/",
        sc.display(),
        hub.addr
    );
    hub.until(crate::signal::stop_signal()).await;
    Ok(Exit::Ok)
}

/// `work`'s value, unless Ctrl-C or SIGTERM comes first: then `what` is said as
/// interrupted and `Err(Exit::Interrupted)` given (exit 130), so a store that does not
/// answer never holds the command past a signal.
async fn or_signal<T>(
    what: &str,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<Result<T, Exit>> {
    tokio::select! {
        r = work => r.map(Ok),
        () = crate::signal::stop_signal() => {
            eprintln!("cadence {what}: interrupted while waiting for the shared store");
            Ok(Err(Exit::Interrupted))
        }
    }
}

async fn report(r: &WatchReportArgs) -> anyhow::Result<Exit> {
    let now = now_ms();
    let since = now - r.since.as_millis() as i64;
    if let Some(sc) = shared_config(&r.shared, None)? {
        let read = async {
            let store = sc.connect().await?;
            let probes = store.probes(None, since).await?;
            let vantages = store.vantages().await?;
            anyhow::Ok((probes, vantages))
        };
        let (probes, vantages) = match or_signal("watch report", read).await? {
            Ok(read) => read,
            Err(interrupted) => return Ok(interrupted),
        };
        return write_report(r, |format| {
            cadence_watch::report::render_vantages(&probes, &vantages, since, now, format)
        });
    }
    let store = Store::open_read(&r.db).map_err(store_error)?;
    let probes = store.probes(None, since).map_err(store_error)?;
    write_report(r, |format| {
        cadence_watch::report::render(&probes, since, now, format)
    })
}

/// Writes the report in each format asked for (the console's when none went to stdout).
fn write_report(r: &WatchReportArgs, render: impl Fn(Format) -> String) -> anyhow::Result<Exit> {
    let mut console = true;
    for (path, format) in [
        (&r.markdown, Format::Markdown),
        (&r.html, Format::Html),
        (&r.json, Format::Json),
    ] {
        let Some(path) = path else { continue };
        let text = render(format);
        if path.as_os_str() == "-" {
            print!("{text}");
            console = false;
        } else {
            std::fs::write(path, text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        }
    }
    if console {
        print!("{}", render(Format::Console));
    }
    Ok(Exit::Ok)
}
