//! `cadence watch serve`, the hub, in the shape of [`crate::spawn`]: [`spawn_hub`]
//! checks the shared store answers, serves its page and starts the retention of every
//! vantage's probes; [`Hub::until`] stops them. No probing: the watchers feed the store.

use crate::probe::now_ms;
use crate::shared::{Remote, SharedConfig, SharedError};
use crate::watcher;
use crate::web::{self, PageState};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// What a hub is started with.
#[derive(Debug)]
pub struct HubSetup {
    /// The shared store the watchers feed.
    pub shared: SharedConfig,
    /// Where the page listens (port 0: any).
    pub listen: SocketAddr,
    /// How long every vantage's probes are kept (`None`: for ever).
    pub retain: Option<Duration>,
}

/// Why a hub did not start.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The shared store does not answer (or is newer than this build).
    #[error(transparent)]
    Store(#[from] SharedError),
    /// The page's address cannot be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// A running hub; [`Hub::until`] stops it.
pub struct Hub {
    /// Where the page is served (the real port when bound to port 0).
    pub addr: SocketAddr,
    server: web::Server,
    retention: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("addr", &self.addr).finish()
    }
}

/// Connects to the shared store once (it fails early and in words when the store does
/// not answer), serves its page and, with `retain`, starts the retention.
pub async fn spawn_hub(setup: HubSetup) -> Result<Hub, HubError> {
    let HubSetup {
        shared,
        listen,
        retain,
    } = setup;
    shared.connect().await?;
    let page = Arc::new(PageState::Hub(Remote::new(
        shared.clone(),
        String::new(),
        None,
    )));
    let (limits, short) = crate::conn::budget(cadence_transport::classify::fd_limit(), 0);
    if let Some(say) = short {
        tracing::warn!("cadence watch serve: {say}");
    }
    let server = web::serve(listen, page, limits)
        .await
        .map_err(|error| HubError::Listen {
            addr: listen,
            error,
        })?;
    let retention = retain.map(|retain| tokio::spawn(retention(shared, retain)));
    Ok(Hub {
        addr: server.addr,
        server,
        retention,
    })
}

/// Deletes every vantage's probes older than `retain`, now and on the watchers'
/// schedule (hourly, or at a quarter of a short retention), for ever.
async fn retention(shared: SharedConfig, retain: Duration) {
    loop {
        let cutoff = now_ms() - retain.as_millis() as i64;
        let r = match shared.connect().await {
            Ok(store) => store.retain_all(cutoff).await,
            Err(e) => Err(e),
        };
        match r {
            Ok(n) if n > 0 => tracing::info!("cadence watch serve: retention deleted {n} probes"),
            Ok(_) => {}
            Err(e) => tracing::warn!("cadence watch serve: retention failed: {e}"),
        }
        tokio::time::sleep(watcher::retention_every(retain)).await;
    }
}

impl Hub {
    /// Serves until `stop` completes, then stops the retention and the page.
    pub async fn until(self, stop: impl Future<Output = ()>) {
        stop.await;
        if let Some(t) = self.retention {
            t.abort();
        }
        drop(self.server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hub_whose_store_does_not_answer_does_not_start_and_says_which() {
        // A socket directory with no server in it.
        let dir = tempfile::tempdir().unwrap();
        let address = format!("host={} user=cadence dbname=x", dir.path().display());
        let setup = HubSetup {
            shared: SharedConfig::new(&address, None).unwrap(),
            listen: "127.0.0.1:0".parse().unwrap(),
            retain: None,
        };
        let e = spawn_hub(setup).await.unwrap_err();
        assert!(matches!(e, HubError::Store(_)), "{e}");
        assert!(e.to_string().contains("postgres://cadence@"), "{e}");
    }
}
