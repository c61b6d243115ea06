//! Issue 19 part 6: pointing `cadence bench` at a port where nothing listens names the
//! target as unreachable, with its address and the cause, instead of sending the user
//! to `--model`.

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
