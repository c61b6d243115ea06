//! Runs a sim on a local address for manual poking with curl:
//! `cargo run -p cadence-sim --example serve -- 127.0.0.1:8808`.
//! Ctrl-C stops it (streams get the configured drain timeout).

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("cadence-sim listening on http://{}", listener.local_addr()?);
    let state = cadence_sim::SimState::new(cadence_sim::SimConfig::default());
    cadence_sim::serve(listener, state, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}
