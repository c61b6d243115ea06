//! Issue 19 part 6: pointing `cadence bench` at a port where nothing listens names the
//! target as unreachable, with its address and the cause, instead of sending the user
//! to `--model`; and an error chain says each cause once.

mod common;

use common::cadence;
use predicates::prelude::*;
use std::net::TcpListener;

#[test]
fn a_target_where_nothing_listens_is_named_unreachable() {
    // A port that was just free: bound, then closed, so nothing listens there.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    cadence()
        .args(["bench", &format!("http://{addr}/v1"), "-n", "1", "--quiet"])
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains(format!("cannot reach the target at {addr}"))
                .and(predicate::str::contains("connection refused"))
                .and(predicate::str::contains("nothing is listening"))
                .and(predicate::str::contains("--model").not()),
        );
}

/// An error and its sources as anyhow's `{:#}` writes them: each level's text, joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[test]
fn an_error_chain_says_each_cause_once() {
    let io = || std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use");
    let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let path = std::path::PathBuf::from("r.jsonl");
    let unreachable = cadence_transport::Unreachable {
        address: "127.0.0.1:9".into(),
        cause: "connection refused".into(),
    };
    let errors: Vec<(Box<dyn std::error::Error>, &str)> = vec![
        (
            Box::new(cadence_transport::get::GetError::Unreachable(unreachable)),
            "connection refused",
        ),
        (
            Box::new(cadence_records::ReadError::Open {
                path: path.clone(),
                error: io(),
            }),
            "address in use",
        ),
        (
            Box::new(cadence_records::RecordsError::Open {
                path: path.clone(),
                error: io(),
            }),
            "address in use",
        ),
        (
            Box::new(cadence_records::RecordsError::Write { path, error: io() }),
            "address in use",
        ),
        (
            Box::new(cadence_proxy::ProxyError::Bind { addr, error: io() }),
            "address in use",
        ),
        (
            Box::new(cadence_watch::HubError::Listen { addr, error: io() }),
            "address in use",
        ),
        (
            Box::new(cadence_watch::WatchError::Listen { addr, error: io() }),
            "address in use",
        ),
        (
            Box::new(cadence_sim::ConfigError::Engine(
                cadence_engine::SpecError::NotPositive("tflops"),
            )),
            "tflops must be a positive number",
        ),
    ];
    for (e, cause) in errors {
        let said = chain(e.as_ref());
        assert_eq!(said.matches(cause).count(), 1, "{said}");
    }
}
