//! The facts of a run that every report carries and only the binary can know: when it
//! started, the command line (secrets removed), the client machine, the load's mode.

use crate::cli::ArrivalsArg;
use cadence_bench::target::redact_url;
use cadence_core::secret::redact_patterns;
use cadence_transport::client;
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as ms since the Unix epoch (the report's `started_at_unix_ms`).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The report's `mode` of a load: closed loop, or an open loop by its arrivals.
pub fn mode(open_loop: bool, arrivals: ArrivalsArg) -> &'static str {
    match (open_loop, arrivals) {
        (false, _) => "closed_loop",
        (true, ArrivalsArg::Constant) => "open_loop_constant",
        (true, ArrivalsArg::Poisson) => "open_loop_poisson",
    }
}

/// The client machine in one line: OS, architecture, cores and CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let mut s = format!(
        "{} {}, {cores} cores",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    if let Some(cpu) = cpu {
        s.push_str(", ");
        s.push_str(&cpu);
    }
    s
}

/// The command line as it may be stored: header values, URL credentials and query
/// values, and anything key-shaped are removed.
pub fn redacted_command(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut header_next = false;
    for a in args {
        if header_next {
            out.push(format!("{}: [REDACTED]", client::header_name_only(&a)));
            header_next = false;
        } else if a == "-H" || a == "--header" {
            out.push(a);
            header_next = true;
        } else if let Some(v) = a.strip_prefix("--header=") {
            out.push(format!(
                "--header={}: [REDACTED]",
                client::header_name_only(v)
            ));
        } else if a.contains("://") {
            out.push(redact_url(&a));
        } else {
            out.push(redact_patterns(&a));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_loses_secrets() {
        let argv = [
            "cadence",
            "bench",
            "https://u:pw@h/v1?key=abc",
            "-H",
            "x-api-key: s3cr3t",
            "--header=Authorization: Bearer t0k",
            "--extra-body",
            r#"{"api_key=zzz": 1}"#,
        ]
        .map(String::from);
        let out = redacted_command(argv).join(" ");
        for secret in ["pw", "abc", "s3cr3t", "t0k", "zzz"] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
        assert!(out.contains("x-api-key: [REDACTED]"), "{out}");
    }
}
