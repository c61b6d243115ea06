//! The client's own open-file limit. Each request in flight holds a socket (and the
//! built-in simulator another), so a low soft limit would fail requests as if the server
//! refused them. Before a run the soft limit is raised toward the hard one; a run that
//! still cannot fit is refused up front; a request that hit the limit anyway is the
//! client's failure (`client_limit`), never the server's.

/// Descriptors a run needs beyond one per connection: the runtime, the records file,
/// the pacing thread, stdio, the tokenizer's files and slack.
pub const RESERVE: u64 = 64;

/// Open files a run needs: one socket per request in flight, two when the built-in
/// simulator holds the other end in this process, plus [`RESERVE`].
pub fn needed(in_flight: u64, builtin_sim: bool) -> u64 {
    in_flight
        .saturating_mul(if builtin_sim { 2 } else { 1 })
        .saturating_add(RESERVE)
}

/// Why a limit of `soft` (hard `hard`, `None` = unlimited) cannot carry a run that needs
/// `needed` open files, with how to raise it; `None` when it can.
pub fn shortfall(soft: u64, hard: Option<u64>, needed: u64) -> Option<String> {
    (soft < needed).then(|| {
        let hard = hard.map_or_else(|| "unlimited".to_string(), |h| h.to_string());
        format!(
            "this run needs about {needed} open files (one socket per request in flight, plus {RESERVE}) but the process may open only {soft} (hard limit {hard}): raise it with `ulimit -n {needed}` (a hard limit needs root, or /etc/security/limits.conf, or LimitNOFILE= under systemd), or lower the concurrency"
        )
    })
}

/// Raises the soft open-file limit toward the hard one and returns (soft, hard) as they
/// then are; `None` where the platform has no such limit.
#[cfg(unix)]
pub fn raise() -> Option<(u64, Option<u64>)> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let soft = before.current?;
    if before.maximum.is_none_or(|h| h > soft) {
        // An unlimited hard limit is not a valid soft one everywhere (macOS caps it at
        // OPEN_MAX): try the hard limit, then a high finite value.
        for target in [before.maximum, Some(1 << 20), Some(10_240)] {
            let Some(t) = target.filter(|&t| t > soft) else {
                continue;
            };
            let new = Rlimit {
                current: Some(t),
                maximum: before.maximum,
            };
            if setrlimit(Resource::Nofile, new).is_ok() {
                break;
            }
        }
    }
    let after = getrlimit(Resource::Nofile);
    Some((after.current.unwrap_or(u64::MAX), after.maximum))
}

#[cfg(not(unix))]
pub fn raise() -> Option<(u64, Option<u64>)> {
    None
}

/// Raises the limit and checks that `needed` open files fit: the refusal in words when
/// they do not.
pub fn ensure(needed: u64) -> Result<(), String> {
    match raise() {
        Some((soft, hard)) => shortfall(soft, hard, needed).map_or(Ok(()), Err),
        None => Ok(()),
    }
}

pub use cadence_transport::classify::is_own_limit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_run_needs_and_the_refusal() {
        assert_eq!(needed(1000, false), 1064);
        assert_eq!(needed(1000, true), 2064);
        assert_eq!(needed(u64::MAX, true), u64::MAX, "saturates");
        assert_eq!(shortfall(4096, Some(4096), 1064), None);
        let why = shortfall(256, Some(256), 1064).unwrap();
        assert!(why.contains("about 1064 open files"), "{why}");
        assert!(why.contains("only 256 (hard limit 256)"), "{why}");
        assert!(why.contains("ulimit -n 1064"), "{why}");
        assert!(shortfall(256, None, 1064).unwrap().contains("unlimited"));
    }

    #[cfg(unix)]
    #[test]
    fn emfile_anywhere_in_the_chain_is_the_clients_own_limit() {
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let emfile = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        assert!(is_own_limit(&Wrap(emfile)));
        let nested = std::io::Error::other(std::io::Error::from_raw_os_error(
            rustix::io::Errno::NFILE.raw_os_error(),
        ));
        assert!(is_own_limit(&nested));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_own_limit(&Wrap(refused)));
    }

    #[cfg(unix)]
    #[test]
    fn raising_never_lowers_the_limit() {
        let before = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let (soft, hard) = raise().unwrap();
        assert!(before.current.is_none_or(|b| soft >= b));
        assert_eq!(hard, before.maximum);
    }
}
