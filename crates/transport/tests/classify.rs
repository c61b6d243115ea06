//! Client errors from real sockets on 127.0.0.1: a port where nothing listens is a
//! connect error, and the target is named unreachable with its address and the cause.

use bytes::Bytes;
use cadence_base::Outcome;
use cadence_transport::client::{build, ClientConfig};
use cadence_transport::{classify_client_error, unreachable};
use http_body_util::Full;
use std::time::Duration;

#[tokio::test]
async fn a_port_where_nothing_listens_is_unreachable_connection_refused() {
    // A port that was just free: bound, then closed.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let uri: http::Uri = format!("http://{addr}/v1/models").parse().unwrap();
    let client = build(&ClientConfig {
        pool_size: 1,
        connect_timeout: Duration::from_secs(5),
        http2: false,
    });
    let req = http::Request::get(uri.clone())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let e = client.request(req).await.expect_err("nothing listens");
    assert_eq!(classify_client_error(&e).0, Outcome::ConnectError);
    let u = unreachable(&e, &uri).expect("a connect error");
    assert_eq!(u.address, addr.to_string());
    assert!(u.cause.starts_with("connection refused"), "{}", u.cause);
    assert_eq!(
        u.to_string(),
        format!("cannot reach the target at {addr}: {}", u.cause)
    );
}
