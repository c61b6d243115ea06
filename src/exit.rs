//! Exit codes: distinct for success, fatal error, bad usage, SLO breach, an invalid run
//! and an interrupted one, so scripts and CI can tell them apart.

/// The process exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The run completed and its figures are valid.
    Ok = 0,
    /// Cadence could not do what was asked (I/O, internal error).
    Error = 1,
    /// Bad command-line usage or configuration.
    Usage = 2,
    /// An SLO was breached: one given with `--slo`, or the error-rate ceiling
    /// (`--max-error-rate`).
    SloBreached = 3,
    /// The run's figures are not valid: no request succeeded, the accounting did not
    /// add up, or the watchdog had to end the run.
    Invalid = 4,
    /// `cadence compare`: a `--fail-on` rule found a regression beyond noise.
    Regression = 5,
    /// `cadence report` of a fleet: a shard is missing (never started, or failed), so
    /// the merged run is incomplete; the report of what was merged is still written.
    Incomplete = 6,
    /// Interrupted by Ctrl-C or SIGTERM; the report of what was measured was still written.
    Interrupted = 130,
}

pub const EXIT_CODES_HELP: &str = "0 ok; 1 error (watch --once: an incident webhook not delivered); 2 bad usage; 3 SLO breached (--slo, or failures over --max-error-rate); 4 run invalid (no request succeeded, accounting mismatch, watchdog; watch --once: no target probed); 5 compare found a regression (--fail-on); 6 a fleet's merged run is incomplete (a shard missing, failed, interrupted or not running with the others); 130 interrupted by Ctrl-C or SIGTERM (report still written)";

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

impl From<cadence_core::Verdict> for Exit {
    fn from(v: cadence_core::Verdict) -> Self {
        match v {
            cadence_core::Verdict::Ok => Exit::Ok,
            cadence_core::Verdict::SloBreached => Exit::SloBreached,
            cadence_core::Verdict::Invalid => Exit::Invalid,
            cadence_core::Verdict::Interrupted => Exit::Interrupted,
        }
    }
}

impl From<cadence_run::Verdict> for Exit {
    fn from(v: cadence_run::Verdict) -> Self {
        match v {
            cadence_run::Verdict::Ok => Exit::Ok,
            cadence_run::Verdict::SloBreached => Exit::SloBreached,
            cadence_run::Verdict::Invalid => Exit::Invalid,
            cadence_run::Verdict::Incomplete => Exit::Incomplete,
        }
    }
}

/// The exit code of a fatal error: bad usage for a configuration error or an input
/// that is no run ([`cadence_run::Error::Input`]), else an error.
pub fn of_error(e: &anyhow::Error) -> Exit {
    let input = matches!(
        e.downcast_ref::<cadence_run::Error>(),
        Some(cadence_run::Error::Input(_))
    );
    let otlp = e.downcast_ref::<cadence_otlp::run::StartError>();
    if input || otlp.is_some_and(|e| e.is_usage()) || e.downcast_ref::<UsageError>().is_some() {
        Exit::Usage
    } else {
        Exit::Error
    }
}

/// A configuration error found after clap's parsing (exit code 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand: a usage error as an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
