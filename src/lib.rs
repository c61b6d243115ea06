//! The `cadence` command-line tool, as a library: the binary calls [`main`], tests call
//! the subcommands directly.

pub mod agent_replay;
pub mod bench_cmd;
pub mod builtin_sim;
pub mod calibrate;
pub mod cli;
pub mod compare_cmd;
pub mod engine_opts;
pub mod exit;
pub mod fidelity;
pub mod inputs;
pub mod output;
pub mod plan_cmd;
pub mod proxy_cmd;
pub mod report_cmd;
pub mod run_meta;
pub mod shard;
pub mod signal;
pub mod sim_cmd;
pub mod top_cmd;
pub mod twin_cmd;
pub mod watch_cmd;
pub mod workload;

use clap::{CommandFactory, FromArgMatches};
use cli::{Cli, Command};
use exit::Exit;

/// The metric definitions, shown under `cadence bench --help`.
fn definitions_help() -> String {
    let mut s = String::from("Metric definitions (each report repeats them):\n");
    for (name, formula) in cadence_core::report::definitions() {
        s.push_str(&format!("  {name}: {formula}\n"));
    }
    s.push_str(&format!("\nExit codes: {}", exit::EXIT_CODES_HELP));
    s
}

/// Parses the command line, runs the subcommand, and returns its exit code.
pub fn main() -> std::process::ExitCode {
    let cmd = Cli::command().mut_subcommand("bench", |c| c.after_long_help(definitions_help()));
    let matches = cmd.get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    init_tracing();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.worker_threads(cores))
        // Off until a command turns it on (`bench`, `fidelity`): see `coalesce`.
        .on_thread_park(cadence_bench::coalesce::before_park)
        .on_thread_unpark(cadence_bench::coalesce::after_unpark)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Error.into();
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Bench(args) => bench_cmd::run(*args).await,
            Command::Sim(args) => sim_cmd::run(*args).await,
            Command::Fidelity(args) => fidelity::run(args).await,
            Command::Proxy(args) => proxy_cmd::run(*args).await,
            Command::Report(args) => report_cmd::run(args),
            Command::Compare(args) => compare_cmd::run(args),
            Command::Plan(args) => plan_cmd::run(*args),
            Command::Top(args) => top_cmd::run(args).await,
            Command::Watch(args) => watch_cmd::run(*args).await,
            Command::Twin(args) => twin_cmd::run(args),
        }
    });
    // Request tasks still parked on a dead connection must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::of_error(&e).into()
        }
    }
}

fn init_tracing() {
    // Warnings from every crate; the watch's info events too (each probe, retention,
    // shipping: what `cadence watch` says as it goes, `--quiet` turning them off).
    let filter = tracing_subscriber::EnvFilter::try_from_env("CADENCE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,cadence_watch=info"));
    // Colour only on a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}
