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
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
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
    let server = web::serve(listen, page)
        .await
        .map_err(|source| WatchError::Listen {
            addr: listen,
            source,
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

impl Watch {
    /// Probes until `stop` completes (then stops the lane, which drops a probe in
    /// flight), or the lane ends by itself (`--once`, or the database failed); then the
    /// shipper's last bounded round, then the page. Gives each target's last SLO verdict
    /// of this run (`None`: not probed). The lane runs in the awaiting task (the
    /// binary's main task), not on a worker beside the page and the shipper: a probe's
    /// timing never waits for them.
    pub async fn until(
        mut self,
        stop: impl Future<Output = ()>,
    ) -> Result<Vec<Option<bool>>, WatchError> {
        let ended = tokio::select! {
            r = &mut self.lane => r,
            () = stop => {
                let _ = self.stop.send(true);
                (&mut self.lane).await
            }
        };
        if let Some((tx, task)) = self.shipper {
            // The lane has ended (stopped, or on an error): one last bounded round.
            let _ = tx.send(true);
            let _ = task.await;
        }
        drop(self.server);
        Ok(ended?)
    }
}
