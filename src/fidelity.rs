//! `cadence fidelity`: the end-to-end check that the client measures what the server
//! did. A `cadence sim` child process streams on a fixed schedule and logs the moment it
//! wrote each chunk; the real client benchmarks it; the pooled gaps of both are
//! compared ([`cadence_core::fidelity`]).

use crate::cli::FidelityArgs;
use crate::exit::{usage, Exit};
use crate::output::print_stdout;
use anyhow::Context;
use cadence_bench::body::BodySpec;
use cadence_bench::progress::Progress;
use cadence_bench::sink::{BenchSinks, KeepAll};
use cadence_bench::target::Target;
use cadence_bench::workload::{RequestFactory, DEFAULT_PROMPT};
use cadence_bench::{Load, RunContext, RunPlan, Timeouts};
use cadence_core::fidelity::{judge, LevelResult};
use cadence_core::secret::Redactor;
use cadence_core::RequestRecord;
use cadence_records::RecordThread;
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::Clock;
use cadence_wire::Api;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub async fn run(args: FidelityArgs) -> anyhow::Result<Exit> {
    if args.concurrency.contains(&0) || args.rounds == 0 || args.tokens < 2 {
        return Err(usage(
            "--concurrency levels and --rounds must be at least 1, --tokens at least 2",
        ));
    }
    // As `bench` with its default kernel stamps.
    let _coalesce = cadence_bench::coalesce::enable(args.coalesce_wakes);
    let exe = std::env::current_exe()
        .context("cannot find the cadence executable to start the simulator")?;
    let dir = tempfile_dir()?;
    let mut results = Vec::new();
    print_stdout(&format!(
        "Fidelity: sim ITL fixed {:?}, {} tokens per request; truth = the simulator's send log\n",
        args.itl, args.tokens
    ))?;
    print_stdout(&format!(
        "{:>8} {:>9} {:>9} {:>11} {:>11} {:>8} {:>11} {:>11} {:>9}  verdict\n",
        "streams",
        "requests",
        "gaps",
        "true p50",
        "meas. p50",
        "err",
        "true p99",
        "meas. p99",
        "err"
    ))?;
    let mut clocks = String::new();
    for &c in &args.concurrency {
        let log = dir.join(format!("send-{c}.jsonl"));
        let r = level(&exe, &log, c, &args).await?;
        print_stdout(&format!(
            "{:>8} {:>9} {:>9} {:>9.3}ms {:>9.3}ms {:>7.2}% {:>9.3}ms {:>9.3}ms {:>7.3}ms  {}\n",
            r.concurrency,
            r.requests,
            r.gaps,
            r.true_p50_ms,
            r.measured_p50_ms,
            r.p50_error_pct,
            r.true_p99_ms,
            r.measured_p99_ms,
            r.p99_error_ms,
            if r.pass {
                "pass".to_string()
            } else {
                format!("FAIL (bounds {}% / {} ms)", r.bound_p50_pct, r.bound_p99_ms)
            } + &r
                .scrapes
                .map_or(String::new(), |n| format!(", {n} scrapes"))
        ))?;
        clocks.push_str(&clock_row(&r));
        results.push(r);
    }
    print_stdout(&format!(
        "\nBoth clocks, same runs (kernel: the kernel's receive time, on requests it stamped; user: the client's read time)\n{:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8}  client read delay p50 / p99 / max\n{clocks}",
        "streams", "stamped", "kernel p50", "p99", "user p50", "p99", "multi"
    ))?;
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if results.iter().all(|r| r.pass) {
        Exit::Ok
    } else {
        Exit::Invalid
    })
}

/// One level's kernel and user clocks side by side.
fn clock_row(r: &LevelResult) -> String {
    let delay = r.read_delay_ms.map_or("–".to_string(), |[p50, p99, max]| {
        format!("{p50:.3} / {p99:.3} / {max:.3} ms")
    });
    format!(
        "{:>8} {:>8} {:>9.2}% {:>8.3}ms {:>9.2}% {:>8.3}ms {:>8}  {delay}\n",
        r.concurrency,
        r.kernel_requests,
        r.p50_error_pct,
        r.p99_error_ms,
        r.user_p50_error_pct,
        r.user_p99_error_ms,
        r.multi_event_reads,
    )
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("cadence-fidelity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// A child process that is stopped when dropped.
struct SimChild(Child);

impl SimChild {
    fn start(exe: &Path, log: &Path, args: &FidelityArgs) -> anyhow::Result<(SimChild, String)> {
        let itl = format!("fixed:{}ms", args.itl.as_secs_f64() * 1e3);
        let mut child = Command::new(exe)
            .args([
                "sim",
                "--addr",
                "127.0.0.1:0",
                "--ttft",
                "fixed:20ms",
                "--itl",
                &itl,
            ])
            .args(["--max-tokens", &args.tokens.to_string(), "--send-log"])
            .arg(log)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start the simulator process")?;
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the simulator did not say where it listens (got '{}')",
                    line.trim()
                )
            })?;
        Ok((SimChild(child), url))
    }

    /// Asks the simulator to stop (SIGINT, so it flushes its log) and waits.
    fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        for _ in 0..100 {
            if self.0.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("the simulator did not stop within 5 s")
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

async fn level(
    exe: &Path,
    log: &Path,
    concurrency: u32,
    args: &FidelityArgs,
) -> anyhow::Result<LevelResult> {
    let (sim, url) = SimChild::start(exe, log, args)?;
    let target = Target::resolve(&url, Some(Api::Chat)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let requests = concurrency as u64 * args.rounds;
    let progress = Progress::new(None, false);
    let cx = Arc::new(client_context(
        &target,
        concurrency,
        args.tokens,
        progress.clone(),
    )?);
    let plan = RunPlan {
        load: Load::Closed { concurrency },
        requests: Some(requests),
        duration: None,
        warmup: 0,
        grace: Duration::from_secs(5),
        level: 0,
        stop_when_saturated: false,
    };
    let clock = Clock::start();
    let (dashboard, live) = args
        .dashboard
        .then(|| cadence_tui::dashboard::headless(&progress, clock, &plan))
        .unzip();
    let mut sinks = BenchSinks::new(None, progress, KeepAll::default())?;
    if let Some(live) = live {
        sinks = sinks.with_live(live);
    }
    let (sender, sink) = RecordThread::start(sinks)?;
    let scraper = match args.scrape_interval {
        Some(every) => {
            let config = cadence_bench::scrape::ScrapeConfig::new(
                "auto",
                &target.endpoint,
                every,
                Duration::from_secs(2),
            )
            .map_err(anyhow::Error::msg)?;
            Some(cadence_bench::scrape::Scraper::start(config, clock).await?)
        }
        None => None,
    };
    cadence_bench::run(cx, &plan, clock, sender, std::future::pending()).await;
    let scrapes = match scraper {
        Some(s) => s.finish().await.map(|s| s.samples.len() as u64),
        None => None,
    };
    let records = sink.finish()?.levels.0;
    if let Some(d) = dashboard {
        d.finish();
    }
    sim.stop()?;
    let truth: Vec<RequestRecord> = read_send_log(log)?
        .iter()
        .map(cadence_sim::SentStream::record)
        .collect();
    Ok(judge(concurrency, requests, &records, &truth, scrapes)?)
}

/// The real client, set up to benchmark the simulator at `target` with `concurrency`
/// streams of `tokens` tokens.
fn client_context(
    target: &Target,
    concurrency: u32,
    tokens: u32,
    progress: Progress,
) -> anyhow::Result<RunContext> {
    let http = client::build(&ClientConfig {
        pool_size: concurrency as usize,
        connect_timeout: Duration::from_secs(10),
        http2: false,
    });
    Ok(RunContext {
        client: http,
        factory: RequestFactory::new(
            target.endpoint.clone(),
            client::base_headers(None, &[]).map_err(anyhow::Error::msg)?,
            BodySpec {
                api: Api::Chat,
                model: "fidelity".into(),
                max_tokens: Some(tokens),
                extra: None,
                path: String::new(),
            },
            vec![DEFAULT_PROMPT.to_string()],
        ),
        timeouts: Timeouts::default(),
        api: Api::Chat,
        strict: false,
        redactor: Redactor::default(),
        progress,
        tokenizer: None,
        propagation: None,
    })
}

/// The simulator's send log: one sent stream per line.
fn read_send_log(log: &Path) -> anyhow::Result<Vec<cadence_sim::SentStream>> {
    let text = cadence_core::input::read_text(log, cadence_core::input::LARGE.named("send log"))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("the send log is not JSON lines of sent streams")
}
