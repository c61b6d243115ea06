//! Checks that the sim keeps its own schedule under concurrency: N clients on
//! loopback stream M tokens each, then each chunk's send time (send log) is
//! compared with its planned offset. Run in release:
//! `cargo run --release -p cadence-benchsuite --bin schedule_check -- 500 64`.

use std::time::Duration;

use bytes::Bytes;
use cadence_sim::{spawn, Dist, SimConfig};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let streams: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let tokens: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let config = SimConfig {
        ttft: Dist::Fixed(Duration::from_millis(30)),
        itl: Dist::Fixed(Duration::from_millis(10)),
        ..SimConfig::default()
    };
    let server = spawn(config.clone(), "127.0.0.1:0".parse().unwrap()).await?;
    let url = format!("{}/v1/chat/completions", server.url());
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(streams)
        .build_http();
    let body = format!(r#"{{"stream":true,"max_tokens":{tokens},"messages":[]}}"#);
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                let req = http::Request::post(url)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let mut b = client.request(req).await.unwrap().into_body();
                while let Some(f) = b.frame().await {
                    f.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut late: Vec<u64> = Vec::new();
    for s in server.send_log.snapshot() {
        let planned = cadence_sim::planned_delays(&config, s.request, tokens);
        let mut at = 0u64;
        for (d, sent) in planned.iter().zip(&s.chunks_ns) {
            at += d.as_nanos() as u64;
            late.push((sent - s.received_ns).saturating_sub(at));
        }
    }
    late.sort_unstable();
    let pct = |p: f64| late[((late.len() - 1) as f64 * p) as usize] as f64 / 1e6;
    println!(
        "{streams} streams x {tokens} tokens: chunk lateness vs plan p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    server.shutdown().await;
    Ok(())
}
