//! What the proxy adds to each chunk: the simulator (with its send log, the truth of
//! when each chunk was written), the proxy and a load client run in one process on
//! three separate runtimes, so one monotonic clock times both ends. Phases alternate
//! direct → via proxy; per chunk, latency = client arrival − simulator write. The
//! added delay is the difference of the two latency distributions' percentiles, and
//! the throughput ratio is chunks/s via proxy over chunks/s direct. A third path, a
//! bare TCP relay with no HTTP in it, on the proxy's runtime, is the floor any proxy
//! pays on this machine for the extra loopback hop. `OVERHEAD_DUMP=FILE` writes every
//! chunk's `repeat path request write_ns latency_ms` for a look at when the tail
//! happens (`benchsuite/overhead-steady.py` reads it); `--relay 0` leaves the relay out.
//!
//! ```text
//! cargo run --release -p cadence-benchsuite --bin overhead -- \
//!     --streams 1000 --rounds 2 --tokens 64 --itl-ms 10 --repeats 2
//! ```

use bytes::Bytes;
use cadence_core::{Outcome, RequestRecord};
use cadence_sim::{Dist, SendLog, SimConfig, SimState};
use cadence_wire::{Api, Framing, StreamTracker, TrackerConfig};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Args {
    streams: u64,
    rounds: u64,
    tokens: u32,
    itl_ms: u64,
    repeats: u32,
    sim_threads: usize,
    proxy_threads: usize,
    client_threads: usize,
    relay: bool,
}

fn args() -> Args {
    let mut a = Args {
        streams: 1000,
        rounds: 2,
        tokens: 64,
        itl_ms: 10,
        repeats: 2,
        sim_threads: 1,
        // As `cadence proxy` runs by default: a worker per core.
        proxy_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        client_threads: 1,
        relay: true,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        let n: u64 = pair
            .get(1)
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("{} needs a number", pair[0]));
        match pair[0].as_str() {
            "--streams" => a.streams = n,
            "--rounds" => a.rounds = n,
            "--tokens" => a.tokens = n as u32,
            "--itl-ms" => a.itl_ms = n,
            "--repeats" => a.repeats = n as u32,
            "--sim-threads" => a.sim_threads = n as usize,
            "--proxy-threads" => a.proxy_threads = n as usize,
            "--client-threads" => a.client_threads = n as usize,
            "--relay" => a.relay = n != 0,
            o => panic!("unknown flag {o}"),
        }
    }
    a
}

fn runtime(threads: usize, name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// One request's chunk arrival times (ns since `origin`), keyed by its sim request id.
type Arrivals = Vec<(u64, RequestRecord)>;

async fn phase(base_url: String, first_id: u64, a: Args, origin: Instant) -> (Arrivals, Duration) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(a.streams as usize)
        .build(HttpConnector::new());
    let body = format!(
        r#"{{"model":"bench","messages":[{{"role":"user","content":"hello"}}],"max_tokens":{},"stream":true}}"#,
        a.tokens
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for slot in 0..a.streams {
        let (client, url, body) = (
            client.clone(),
            format!("{base_url}/v1/chat/completions"),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for r in 0..a.rounds {
                let id = first_id + slot * a.rounds + r;
                let req = http::Request::post(&url)
                    .header("content-type", "application/json")
                    .header("x-cadence-request", id.to_string())
                    .body(Full::new(Bytes::from(body.clone())))
                    .unwrap();
                let mut rec = RequestRecord::new(id, Outcome::TransportError);
                let mut tracker = StreamTracker::new(TrackerConfig {
                    api: Api::Chat,
                    framing: Framing::Sse,
                    strict: false,
                });
                let Ok(resp) = client.request(req).await else {
                    out.push((id, rec));
                    continue;
                };
                let mut b = resp.into_body();
                let mut failed = false;
                while let Some(f) = b.frame().await {
                    let t = origin.elapsed().as_nanos() as u64;
                    match f {
                        Ok(f) => {
                            if let Some(d) = f.data_ref() {
                                tracker.feed(t, d, &mut rec);
                            }
                        }
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                tracker.finish(origin.elapsed().as_nanos() as u64, &mut rec);
                if failed {
                    rec.outcome = Outcome::Truncated;
                }
                out.push((id, rec));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, start.elapsed())
}

/// CPU seconds (user + system) used so far by this process's threads named `name`
/// (Linux `/proc`; 0 elsewhere).
fn thread_cpu_s(name: &str) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut total = 0.0;
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... field 14 utime, 15 stime
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != name {
            continue;
        }
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ut: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0);
        let st: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
        total += (ut + st) / tick;
    }
    total
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    cadence_core::stats::quantile_sorted(sorted, p).unwrap_or(f64::NAN)
}

/// A byte relay with no HTTP in it (`copy_bidirectional` per connection): the floor
/// of what any proxy adds on this machine, one loopback hop and two syscalls a chunk.
async fn relay(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut down, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = down.set_nodelay(true);
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = up.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            });
        }
    });
    addr
}

/// What one path measured over the repeats.
#[derive(Default)]
struct Tally {
    /// Per chunk: client arrival minus simulator write, ms.
    lat: Vec<f64>,
    /// Per repeat: chunks per second.
    rate: Vec<f64>,
    /// Per repeat: CPU of the proxy runtime per chunk, µs.
    cpu_per_chunk: Vec<f64>,
    failed: u64,
}

/// Clocks and the simulator's send log, to pair each chunk with its write.
struct Clocks<'a> {
    log: &'a SendLog,
    origin: Instant,
    epoch: Instant,
}

impl Tally {
    /// Adds one phase's arrivals; returns the chunks paired with their writes. With
    /// `dump`, each chunk's latency is written as a line.
    fn add(
        &mut self,
        arrivals: &[(u64, RequestRecord)],
        clocks: &Clocks,
        mut dump: Option<(&mut dyn std::io::Write, u32, &str)>,
    ) -> u64 {
        let sent: HashMap<u64, cadence_sim::SentStream> = clocks
            .log
            .snapshot()
            .into_iter()
            .map(|s| (s.request, s))
            .collect();
        let mut chunks = 0u64;
        for (id, rec) in arrivals {
            if rec.outcome != Outcome::Succeeded {
                self.failed += 1;
                continue;
            }
            let Some(s) = sent.get(id) else { continue };
            for (c, &w) in rec.chunks.iter().zip(&s.chunks_ns) {
                // Both as instants: the client's origin + t, the log's epoch + w.
                let arrive = clocks.origin + Duration::from_nanos(c.t_ns());
                let wrote = clocks.epoch + Duration::from_nanos(w);
                let l = arrive.saturating_duration_since(wrote).as_secs_f64() * 1e3
                    - wrote.saturating_duration_since(arrive).as_secs_f64() * 1e3;
                self.lat.push(l);
                if let Some((f, rep, name)) = dump.as_mut() {
                    let _ = writeln!(f, "{rep} {name} {id} {w} {l:.4}");
                }
                chunks += 1;
            }
        }
        chunks
    }
}

/// The two tables: per-chunk latency per path, then each path over the direct one.
fn print_tables(paths: &[(&str, String)], tallies: &mut [Tally]) {
    for t in tallies.iter_mut() {
        t.lat.sort_by(f64::total_cmp);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!("\nper-chunk latency, client arrival - simulator write (ms):");
    println!(
        "{:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "path", "chunks", "p50", "p90", "p99", "p99.9", "failed"
    );
    for ((name, _), t) in paths.iter().zip(tallies.iter()) {
        let s = &t.lat;
        println!(
            "{name:>8} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9}",
            s.len(),
            pct(s, 0.5),
            pct(s, 0.9),
            pct(s, 0.99),
            pct(s, 0.999),
            t.failed
        );
    }
    println!("\nadded over direct (ms), throughput ratio, CPU of the proxy runtime per chunk:");
    println!(
        "{:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9}",
        "path", "p50", "p90", "p99", "p99.9", "ratio", "cpu us"
    );
    let direct = &tallies[0];
    for ((name, _), t) in paths.iter().zip(tallies.iter()).skip(1) {
        let d = |p: f64| pct(&t.lat, p) - pct(&direct.lat, p);
        println!(
            "{name:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7.3} {:>9.1}",
            d(0.5),
            d(0.9),
            d(0.99),
            d(0.999),
            mean(&t.rate) / mean(&direct.rate),
            mean(&t.cpu_per_chunk)
        );
    }
}

fn main() {
    let a = args();
    let sim_rt = runtime(a.sim_threads, "sim");
    let proxy_rt = runtime(a.proxy_threads, "proxy");
    let client_rt = runtime(a.client_threads, "client");
    let log = SendLog::with_capacity(10_000_000);
    let config = SimConfig {
        seed: 1,
        ttft: Dist::Fixed(Duration::from_millis(20)),
        itl: Dist::Fixed(Duration::from_millis(a.itl_ms)),
        ..SimConfig::default()
    };
    let sim = sim_rt
        .block_on(cadence_sim::spawn_with_state(
            SimState::with_send_log(config, log.clone()),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let sim_url = sim.url();
    let mut pc = cadence_proxy::ProxyConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        cadence_proxy::parse_upstream(&sim_url).unwrap(),
    );
    pc.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let proxy = proxy_rt.block_on(cadence_proxy::spawn(pc)).unwrap();
    let proxy_url = proxy.url();
    let relay_url = format!("http://{}", proxy_rt.block_on(relay(sim.addr)));
    let clocks = Clocks {
        log: &log,
        origin: Instant::now(),
        epoch: log.epoch(),
    };

    println!(
        "{} streams x {} rounds, {} tokens, sim ITL {} ms; threads: sim {}, proxy {}, client {}",
        a.streams, a.rounds, a.tokens, a.itl_ms, a.sim_threads, a.proxy_threads, a.client_threads
    );
    // Path 0 is direct; the others go through something on the "proxy" runtime.
    let mut paths = vec![
        ("direct", sim_url),
        ("relay", relay_url),
        ("proxy", proxy_url),
    ];
    if !a.relay {
        paths.remove(1);
    }
    let mut tallies: Vec<Tally> = paths.iter().map(|_| Tally::default()).collect();
    let mut next_id = 0u64;
    let mut dump = std::env::var("OVERHEAD_DUMP")
        .ok()
        .map(|p| std::io::BufWriter::new(std::fs::File::create(p).unwrap()));
    for rep in 0..a.repeats {
        for ((name, url), t) in paths.iter().zip(tallies.iter_mut()) {
            let cpu0 = thread_cpu_s("proxy");
            let (arrivals, wall) =
                client_rt.block_on(phase(url.clone(), next_id, a.clone(), clocks.origin));
            let proxy_cpu = thread_cpu_s("proxy") - cpu0;
            next_id += a.streams * a.rounds;
            let out = dump
                .as_mut()
                .map(|f| (f as &mut dyn std::io::Write, rep, *name));
            let chunks = t.add(&arrivals, &clocks, out);
            let r = chunks as f64 / wall.as_secs_f64();
            t.rate.push(r);
            t.cpu_per_chunk.push(proxy_cpu / chunks.max(1) as f64 * 1e6);
            println!(
                "  repeat {rep} {name:>6}: {} requests, {chunks} chunks in {:.2} s = {r:.0} chunks/s",
                arrivals.len(),
                wall.as_secs_f64()
            );
        }
    }
    print_tables(&paths, &mut tallies);
    drop(proxy);
    drop(sim);
}
