//! The simulator started in-process when `cadence bench` gets no URL: it runs on its
//! own thread and runtime so its token pacing does not share the client's event loop.
//! It times tokens with a small engine model, so a sweep shows ITL rising with load.

use crate::cli::EngineOpts;
use cadence_sim::{SendLog, SimConfig};
use std::net::SocketAddr;

/// The engine preset the built-in simulator runs.
pub const PRESET: &str = "tiny@cpu";

/// The built-in simulator's configuration: the engine the flags name, else the
/// [`PRESET`] engine; the sim's model is named after it.
pub fn config(seed: u64, opts: &EngineOpts) -> anyhow::Result<SimConfig> {
    let engine = match crate::engine_opts::resolve(opts, seed)? {
        Some(e) => e,
        None => {
            let mut e = cadence_engine::preset(PRESET).expect("the built-in preset exists");
            e.serving.seed = seed;
            e
        }
    };
    Ok(SimConfig {
        seed,
        model: engine.name.clone(),
        engine: Some(engine),
        inject: opts.inject.clone(),
        ..SimConfig::default()
    })
}

/// Serves `config` on a free port of 127.0.0.1. Nothing reads this sim's send log,
/// so it keeps none: a record per request would grow with every request served.
async fn spawn(config: SimConfig) -> std::io::Result<cadence_sim::SimServer> {
    config
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let state = cadence_sim::SimState::with_send_log(config, SendLog::with_capacity(0));
    cadence_sim::spawn_with_state(state, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// A running in-process simulator; dropped = shut down.
pub struct BuiltinSim {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BuiltinSim {
    pub fn start(config: SimConfig) -> anyhow::Result<BuiltinSim> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cadence-sim".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    match spawn(config).await {
                        Ok(server) => {
                            let _ = addr_tx.send(Ok(server.addr));
                            let _ = stop_rx.await;
                            server.shutdown().await;
                        }
                        Err(e) => {
                            let _ = addr_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let addr = addr_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the built-in simulator thread died before it listened"))?
            .map_err(|e| {
                anyhow::anyhow!("the built-in simulator could not listen on 127.0.0.1: {e}")
            })?;
        Ok(BuiltinSim {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for BuiltinSim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
