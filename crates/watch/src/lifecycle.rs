//! A running watcher, in the proxy's shape: [`spawn`] starts the page and (with a
//! shared store) the shipper and readies the probe lane; [`Watch::until`] runs the lane
//! and stops them all in order, so the shipper's last round sees the last probe written
//! and the page answers to the end.

use crate::board::TargetInfo;
use crate::metrics::Metrics;
use crate::probe::Prepared;
use crate::shared::{Remote, SharedConfig, ShipState};
use crate::shipper::Shipper;
use crate::store::{Store, StoreError};
use crate::watcher;
use crate::web::{self, PageState};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The probe lane, run by [`Watch::until`].
type Lane = Pin<Box<dyn Future<Output = Result<Vec<Option<bool>>, StoreError>> + Send>>;

/// What a watcher is started with.
#[derive(Debug)]
pub struct Setup {
    /// The targets, ready to probe.
    pub targets: Vec<Prepared>,
    /// The database, opened for writing (this watcher holds its lock).
    pub store: Store,
    /// Where the database is (the page reads it through its own connections).
    pub db: PathBuf,
    /// Where the page listens (port 0: any).
    pub listen: SocketAddr,
    /// The probe lane's settings (`written` is set here when shipping).
    pub options: watcher::Options,
    /// The shared store to feed, and this watcher's vantage name there.
    pub shared: Option<(SharedConfig, String)>,
}

/// Why a watcher did not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The page's address cannot be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The database failed (at start: the shipper's connection; later: a write).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A running watcher; [`Watch::until`] probes, then stops it.
pub struct Watch {
    /// Where the page is served (the real port when bound to port 0).
    pub addr: SocketAddr,
    server: web::Server,
    stop: watch::Sender<bool>,
    lane: Lane,
    shipper: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("addr", &self.addr).finish()
    }
}

/// Starts the page and, with a shared store, the shipper; readies the probe lane.
pub async fn spawn(setup: Setup) -> Result<Watch, WatchError> {
    let Setup {
        targets,
        store,
        db,
        listen,
        mut options,
        shared,
    } = setup;
    let infos: Vec<TargetInfo> = targets.iter().map(TargetInfo::of).collect();
    let mut metrics = Metrics::new();
    if let Some(o) = &options.otlp {
        metrics.track_otlp(o.clone());
    }
    let mut remote = None;
    let mut shipper = None;
    if let Some((config, vantage)) = shared {
        let state = Arc::new(ShipState::default());
        metrics.track_shipping(state.clone());
        let outbox = store.companion()?;
        let wake = Arc::new(Notify::new());
        options.written = Some(wake.clone());
        remote = Some(Remote::new(
            config.clone(),
            vantage.clone(),
            Some(state.clone()),
        ));
        let s = Shipper {
            config,
            vantage,
            targets: infos.clone(),
            retain: options.retain,
            verbose: options.verbose,
        };
        shipper = Some((s, outbox, state, wake));
    }
    let metrics = Arc::new(metrics);
    let page = Arc::new(PageState::Watcher {
        db,
        targets: infos,
        metrics: metrics.clone(),
        remote,
    });
    let probes: u64 = targets
        .iter()
        .map(|t| u64::from(t.target.probe.concurrency))
        .sum();
    let (limits, short) = crate::conn::budget(cadence_transport::classify::fd_limit(), probes);
    if let Some(say) = short {
        tracing::warn!("cadence watch: {say}");
    }
    let server = web::serve(listen, page, limits)
        .await
        .map_err(|error| WatchError::Listen {
            addr: listen,
            error,
        })?;
    // The shipper stops after the probe lane has (its own signal), so its last round
    // sees the last probe written.
    let shipper = shipper.map(|(s, outbox, state, wake)| {
        let (tx, rx) = watch::channel(false);
        (tx, tokio::spawn(s.run(outbox, state, wake, rx)))
    });
    let (stop, stopped) = watch::channel(false);
    let lane = Box::pin(watcher::run(targets, store, metrics, options, stopped));
    Ok(Watch {
        addr: server.addr,
        server,
        stop,
        lane,
        shipper,
    })
}

/// The longest the shipper's last round may hold a watcher's end: its own flush is
/// bounded at 3 s, and a step in flight when the lane ended at [`QUERY_WITHIN`]; past
/// this the round is cut and what it did not ship waits in the local database.
///
/// [`QUERY_WITHIN`]: crate::shared::QUERY_WITHIN
pub const SHIPPER_END_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How a watcher ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Each target's last SLO verdict of this run (`None`: not probed).
    pub verdicts: Vec<Option<bool>>,
    /// The stop came before the lane ended by itself (`--once` interrupted), or while
    /// the shipper's last round was running.
    pub interrupted: bool,
    /// The shipper's last round was cut (the stop, or [`SHIPPER_END_WITHIN`]).
    pub shipping_cut: bool,
}

impl Watch {
    /// Probes until `stop` completes (then stops the lane, which drops a probe in
    /// flight), or the lane ends by itself (`--once`, or the database failed); then the
    /// shipper's last round (bounded by [`SHIPPER_END_WITHIN`], and cut by `stop`), then
    /// the page. The lane runs in the awaiting task (the binary's main task), not on a
    /// worker beside the page and the shipper: a probe's timing never waits for them.
    pub async fn until(mut self, stop: impl Future<Output = ()>) -> Result<Ended, WatchError> {
        let mut stop = std::pin::pin!(stop);
        let mut interrupted = false;
        let ended = tokio::select! {
            r = &mut self.lane => r,
            () = &mut stop => {
                interrupted = true;
                let _ = self.stop.send(true);
                (&mut self.lane).await
            }
        };
        let mut shipping_cut = false;
        if let Some((tx, mut task)) = self.shipper {
            // The lane has ended (stopped, or on an error): one last bounded round.
            let _ = tx.send(true);
            let bound = tokio::time::sleep(SHIPPER_END_WITHIN);
            tokio::select! {
                _ = &mut task => {}
                () = bound => shipping_cut = true,
                () = &mut stop, if !interrupted => {
                    interrupted = true;
                    shipping_cut = true;
                }
            }
            if shipping_cut {
                task.abort();
                tracing::warn!(
                    "cadence watch: the last shipping round was cut; probes not shipped wait in the local database and go at the next start"
                );
            }
        }
        drop(self.server);
        Ok(Ended {
            verdicts: ended?,
            interrupted,
            shipping_cut,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A `--once` watcher of no targets (its lane ends at once) feeding a store that
    /// accepts and never answers: the shipper's last round is mid-connect when the lane ends.
    async fn once_into_a_silent_store(dir: &std::path::Path, port: u16) -> Watch {
        let shared = SharedConfig::new(&format!("postgres://w@127.0.0.1:{port}/d"), None).unwrap();
        let db = dir.join("w.db");
        spawn(Setup {
            targets: Vec::new(),
            store: Store::open(&db).unwrap(),
            db,
            listen: "127.0.0.1:0".parse().unwrap(),
            options: watcher::Options {
                retain: Duration::from_secs(3600),
                webhook: None,
                verbose: false,
                written: None,
                once: true,
                otlp: None,
            },
            shared: Some((shared, "east".into())),
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn the_shippers_last_round_on_a_silent_store_is_cut_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let w = once_into_a_silent_store(dir.path(), silent.local_addr().unwrap().port()).await;
        // The shipper is connecting (up to CONNECT_WITHIN) when the lane ends.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let ended = w.until(std::future::pending()).await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= SHIPPER_END_WITHIN && took < SHIPPER_END_WITHIN + Duration::from_secs(2),
            "{took:?}"
        );
        assert!(ended.shipping_cut && !ended.interrupted, "{ended:?}");
    }

    #[tokio::test]
    async fn a_stop_during_the_shippers_last_round_ends_the_watcher_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let w = once_into_a_silent_store(dir.path(), silent.local_addr().unwrap().port()).await;
        let started = Instant::now();
        let stop = tokio::time::sleep(Duration::from_millis(300));
        let ended = w.until(stop).await.unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(ended.shipping_cut && ended.interrupted, "{ended:?}");
    }
}
