//! The shared store: several watchers (vantage points: regions, offices, clouds) feed
//! one PostgreSQL database, so one page can compare how the same endpoint feels from
//! each. Every probe is first committed to the watcher's own SQLite file; a shipper
//! copies it here afterwards (an outbox), so an unreachable server costs nothing but
//! delay, and a probe shipped twice (a crash between the two commits) is stored once.

use crate::board::TargetInfo;
use crate::columns::{definitions, names, placeholders, Cells, Kind, Value};
use crate::store::{ProbeRow, RequestRow};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The shared store's schema version (table `watch_schema`).
pub const SHARED_SCHEMA_VERSION: i32 = 1;

/// The shared store's tables, for a new database: the columns of `columns`, each
/// probe's key and vantage before them. Times are Unix milliseconds, latencies
/// milliseconds, as in the SQLite file; a probe is keyed by its vantage, target and
/// start, so a re-shipped probe is recognised.
fn schema() -> String {
    format!(
        "CREATE TABLE watch_targets (
    vantage TEXT NOT NULL,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    slos TEXT NOT NULL,
    interval_s DOUBLE PRECISION NOT NULL,
    seen_ms BIGINT NOT NULL,
    PRIMARY KEY (vantage, name)
);
CREATE TABLE watch_probes (
    id BIGSERIAL PRIMARY KEY,
    vantage TEXT NOT NULL,
{probes}    UNIQUE (vantage, target, started_ms)
);
CREATE INDEX watch_probes_by_target_time ON watch_probes (target, started_ms);
CREATE INDEX watch_probes_by_time ON watch_probes (started_ms);
CREATE TABLE watch_requests (
    probe_id BIGINT NOT NULL REFERENCES watch_probes (id) ON DELETE CASCADE,
{requests}    PRIMARY KEY (probe_id, idx)
);
",
        probes = definitions(ProbeRow::COLUMNS, Kind::postgres),
        requests = definitions(RequestRow::COLUMNS, Kind::postgres),
    )
}

/// Serializes watchers creating the schema at once (any constant; "cadence").
const MIGRATION_LOCK: i64 = 0x0063_6164_656e_6365;

/// The longest a connection to the shared store may take, its handshake and schema
/// check included (the address's `connect_timeout` bounds only the TCP connect).
pub const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// The longest one operation on an open connection may wait for its answer (a read, a
/// batch of probes in its transaction, an announcement, a retention): a store that
/// stops answering mid-connection is then an error, the connection dropped.
pub const QUERY_WITHIN: Duration = Duration::from_secs(30);

/// `op` on the store at `at`, bounded by [`QUERY_WITHIN`]; `what` names it in the error.
async fn within<T>(
    at: &str,
    what: &str,
    op: impl std::future::Future<Output = Result<T, SharedError>>,
) -> Result<T, SharedError> {
    tokio::time::timeout(QUERY_WITHIN, op)
        .await
        .unwrap_or_else(|_| {
            Err(SharedError::Server {
                at: at.to_string(),
                detail: format!("no answer within {} s ({what})", QUERY_WITHIN.as_secs()),
            })
        })
}

/// Why the shared store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// The address does not parse.
    #[error("the shared store's address is not a PostgreSQL connection string (`postgres://user@host/db` or `host=... dbname=...`): {0}")]
    Address(String),
    /// The password variable is not set.
    #[error("the variable {0} named by the shared store's password_env is not set")]
    Password(String),
    #[error("the shared store's CA file {path}: {detail}")]
    /// The CA file cannot be read or holds no certificate.
    Ca {
        /// The CA file.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    #[error("the shared store {at}: {detail}")]
    /// The store refused or failed a request, or does not answer.
    Server {
        /// The store, without its password.
        at: String,
        /// The server's or the connection's words.
        detail: String,
    },
    /// The store's schema is newer than this build's.
    #[error("the shared store {at} has schema version {found}, newer than this cadence's {supported}: upgrade this watcher")]
    Newer {
        /// The store, without its password.
        at: String,
        /// Its schema version.
        found: i32,
        /// This build's.
        supported: i32,
    },
}

/// Where the shared store is and how to log in.
#[derive(Clone)]
pub struct SharedConfig {
    config: tokio_postgres::Config,
    display: String,
    /// TLS when the server offers it (`sslmode=prefer`, libpq's default) or must
    /// (`sslmode=require`): the webpki roots, and the `ca_file`'s certificates.
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for SharedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedConfig({})", self.display)
    }
}

impl SharedConfig {
    /// `address`: a `postgres://` URL or a libpq `key=value` string. The password comes
    /// from the variable `password_env` names (or the address itself; it is never shown).
    pub fn new(address: &str, password_env: Option<&str>) -> Result<SharedConfig, SharedError> {
        SharedConfig::with_ca(address, password_env, None)
    }

    /// As [`SharedConfig::new`], also trusting the PEM certificates in `ca_file` (a
    /// private CA's, for a self-hosted store) beside the webpki roots.
    pub fn with_ca(
        address: &str,
        password_env: Option<&str>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<SharedConfig, SharedError> {
        let mut config: tokio_postgres::Config = address
            .parse()
            .map_err(|e: tokio_postgres::Error| SharedError::Address(e.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(SharedError::Address(
                "it names no host (add host=... or postgres://HOST/...)".into(),
            ));
        }
        if let Some(var) = password_env {
            let pw = std::env::var(var).map_err(|_| SharedError::Password(var.to_string()))?;
            config.password(pw);
        }
        // libpq's default (prefer) sends the password in clear to a server that refuses
        // TLS: required, unless the address says otherwise or the store is on this host.
        if !address.contains("sslmode") && !local(&config) {
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.application_name("cadence-watch");
        let display = display(&config);
        let tls = Arc::new(tls_config(ca_file)?);
        Ok(SharedConfig {
            config,
            display,
            tls,
        })
    }

    /// The address without its password, for messages.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Connects and brings the schema to this build's version, within
    /// [`CONNECT_WITHIN`]: a store that accepts and never answers is an error, not a
    /// wait without end.
    pub async fn connect(&self) -> Result<SharedStore, SharedError> {
        tokio::time::timeout(CONNECT_WITHIN, self.connect_now())
            .await
            .unwrap_or_else(|_| {
                Err(SharedError::Server {
                    at: self.display.clone(),
                    detail: format!(
                        "no answer within {} s (connecting and checking the schema)",
                        CONNECT_WITHIN.as_secs()
                    ),
                })
            })
    }

    async fn connect_now(&self) -> Result<SharedStore, SharedError> {
        let err = |e: tokio_postgres::Error| SharedError::Server {
            at: self.display.clone(),
            detail: detail(&e),
        };
        let tls = MakeRustlsConnect::new((*self.tls).clone());
        let (client, connection) = self.config.connect(tls).await.map_err(err)?;
        tokio::spawn(async move {
            // Ends when the client is dropped or the server goes; the client's next
            // call then fails and the caller reconnects.
            let _ = connection.await;
        });
        let mut store = SharedStore {
            client,
            at: self.display.clone(),
        };
        store.migrate().await?;
        Ok(store)
    }
}

/// The TLS client: ring, the webpki roots, and the certificates of `ca_file`.
fn tls_config(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, SharedError> {
    cadence_transport::tls::client_config(ca_file).map_err(|e| SharedError::Ca {
        path: e.path,
        detail: e.detail,
    })
}

/// `postgres://user@host:port/db` without the password.
fn display(c: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(h) => h.clone(),
                Host::Unix(p) => p.display().to_string(),
            };
            match c.get_ports().get(i).or(c.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    format!(
        "postgres://{}{}/{}",
        c.get_user().map_or(String::new(), |u| format!("{u}@")),
        hosts.join(","),
        c.get_dbname().unwrap_or("")
    )
}

/// Whether every host of the address is this machine: a Unix socket, `localhost` or a
/// loopback address (no network to read a password on).
fn local(c: &tokio_postgres::Config) -> bool {
    c.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(h) => {
            h == "localhost"
                || h.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// The most of a server's words a message quotes.
const MAX_DETAIL: usize = 300;

/// A server's (or anything at its address's) words as a message may show them: control
/// characters escaped (no terminal sequence passes), at most [`MAX_DETAIL`] characters,
/// and how long it was when cut.
fn clean(words: &str) -> String {
    match words.char_indices().nth(MAX_DETAIL) {
        Some((cut, _)) => format!(
            "{}… ({} bytes in all)",
            crate::untrusted::printable(&words[..cut]),
            words.len()
        ),
        None => crate::untrusted::printable(words),
    }
}

/// A server error with its message (tokio-postgres's `Display` says only "db error"),
/// cleaned for a message.
fn detail(e: &tokio_postgres::Error) -> String {
    clean(&raw_detail(e))
}

fn raw_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s.push_str(&format!(": {inner}"));
                source = inner.source();
            }
            s
        }
    }
}

/// What the shipper tells the page and `/metrics`.
#[derive(Debug, Default)]
pub struct ShipState {
    /// Probes in the local file not yet in the shared store.
    pub pending: AtomicU64,
    /// The last attempt reached the shared store.
    pub up: AtomicBool,
    /// Probes this watcher added to the shared store since it started.
    pub shipped: AtomicU64,
    /// Why the last attempt failed, when it did (no password in it).
    last_error: Mutex<Option<String>>,
}

impl ShipState {
    /// Why the last attempt failed, when it did.
    pub fn last_error(&self) -> Option<String> {
        self.error_slot().clone()
    }

    /// Records the last attempt's failure (`None`: it reached the store).
    pub fn set_error(&self, e: Option<String>) {
        *self.error_slot() = e;
    }

    /// The error's slot; a writer that panicked left a whole `Option`, so a poisoned
    /// lock is still read.
    fn error_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A probe as the shared store holds it: with the vantage that ran it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VantageProbe {
    /// The vantage that ran the probe.
    pub vantage: String,
    /// The probe as the vantage stored it.
    #[serde(flatten)]
    pub probe: ProbeRow,
}

/// A vantage point as the shared store knows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Vantage {
    /// The vantage's name.
    pub name: String,
    /// The targets it announced, and when it last started.
    pub targets: Vec<TargetInfo>,
    /// When it last announced itself (Unix ms).
    pub seen_ms: i64,
    /// Its latest probe's start (Unix ms), if any.
    pub last_probe_ms: Option<i64>,
}

/// A connection to the shared store.
pub struct SharedStore {
    client: Client,
    at: String,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedStore({})", self.at)
    }
}

impl SharedStore {
    fn err(&self, e: tokio_postgres::Error) -> SharedError {
        SharedError::Server {
            at: self.at.clone(),
            detail: detail(&e),
        }
    }

    /// Whether the connection is gone (the server restarted, the network dropped).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Creates the tables on first use (one watcher at a time: an advisory lock), or
    /// checks the version of the ones there.
    async fn migrate(&mut self) -> Result<(), SharedError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| SharedError::Server {
                at: self.at.clone(),
                detail: detail(&e),
            })?;
        let at = self.at.clone();
        let err = |e: tokio_postgres::Error| SharedError::Server {
            at: at.clone(),
            detail: detail(&e),
        };
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(err)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS watch_schema (version INTEGER NOT NULL)")
            .await
            .map_err(err)?;
        let found: Option<i32> = tx
            .query_opt("SELECT max(version) FROM watch_schema", &[])
            .await
            .map_err(err)?
            .and_then(|r| r.get(0));
        match found {
            None => {
                tx.batch_execute(&schema()).await.map_err(err)?;
                tx.execute(
                    "INSERT INTO watch_schema (version) VALUES ($1)",
                    &[&SHARED_SCHEMA_VERSION],
                )
                .await
                .map_err(err)?;
            }
            Some(v) if v > SHARED_SCHEMA_VERSION => {
                return Err(SharedError::Newer {
                    at: self.at.clone(),
                    found: v,
                    supported: SHARED_SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        tx.commit().await.map_err(err)
    }

    /// Records which targets `vantage` watches (shown on the page beside its probes).
    pub async fn announce(
        &self,
        vantage: &str,
        targets: &[TargetInfo],
        now_ms: i64,
    ) -> Result<(), SharedError> {
        within(&self.at, "announcing the vantage", async {
            self.announce_now(vantage, targets, now_ms).await
        })
        .await
    }

    async fn announce_now(
        &self,
        vantage: &str,
        targets: &[TargetInfo],
        now_ms: i64,
    ) -> Result<(), SharedError> {
        for t in targets {
            self.client
                .execute(
                    "INSERT INTO watch_targets (vantage, name, url, slos, interval_s, seen_ms)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (vantage, name) DO UPDATE SET url = $3, slos = $4,
                        interval_s = $5, seen_ms = $6",
                    &[
                        &vantage,
                        &t.name,
                        &t.url,
                        &serde_json::to_string(&t.slos).unwrap_or_default(),
                        &t.interval_s,
                        &now_ms,
                    ],
                )
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Writes probes of `vantage` with their requests in one transaction; a probe
    /// already there (same vantage, target and start) is left as it is. Returns how
    /// many were new.
    pub async fn push(
        &mut self,
        vantage: &str,
        batch: &[(ProbeRow, Vec<RequestRow>)],
    ) -> Result<u64, SharedError> {
        let at = self.at.clone();
        within(&at, "shipping probes", self.push_now(vantage, batch)).await
    }

    async fn push_now(
        &mut self,
        vantage: &str,
        batch: &[(ProbeRow, Vec<RequestRow>)],
    ) -> Result<u64, SharedError> {
        let at = self.at.clone();
        let err = |e: tokio_postgres::Error| SharedError::Server {
            at: at.clone(),
            detail: detail(&e),
        };
        let tx = self.client.transaction().await.map_err(err)?;
        let insert_probe = tx
            .prepare(&format!(
                "INSERT INTO watch_probes (vantage, {}) VALUES ({})
                 ON CONFLICT (vantage, target, started_ms) DO NOTHING
                 RETURNING id",
                names(ProbeRow::COLUMNS),
                placeholders('$', 1, ProbeRow::COLUMNS.len() + 1)
            ))
            .await
            .map_err(err)?;
        let insert_request = tx
            .prepare(&format!(
                "INSERT INTO watch_requests (probe_id, {}) VALUES ({})",
                names(RequestRow::COLUMNS),
                placeholders('$', 1, RequestRow::COLUMNS.len() + 1)
            ))
            .await
            .map_err(err)?;
        let mut new = 0;
        for (p, reqs) in batch {
            let values = std::iter::once(Value::Text(vantage.to_string())).chain(p.values());
            let params = bound(values, insert_probe.params());
            let row = tx
                .query_opt(&insert_probe, &refs(&params))
                .await
                .map_err(err)?;
            let Some(row) = row else { continue };
            new += 1;
            let id: i64 = row.try_get(0).map_err(err)?;
            for r in reqs {
                let values = std::iter::once(Value::Int(id)).chain(r.values());
                let params = bound(values, insert_request.params());
                tx.execute(&insert_request, &refs(&params))
                    .await
                    .map_err(err)?;
            }
        }
        tx.commit().await.map_err(err)?;
        Ok(new)
    }

    /// Deletes `vantage`'s probes (and their requests) that started before `cutoff_ms`:
    /// each watcher applies its own `--retain` to its own rows.
    pub async fn retain(&self, vantage: &str, cutoff_ms: i64) -> Result<u64, SharedError> {
        let delete = async {
            self.client
                .execute(
                    "DELETE FROM watch_probes WHERE vantage = $1 AND started_ms < $2",
                    &[&vantage, &cutoff_ms],
                )
                .await
                .map_err(|e| self.err(e))
        };
        within(&self.at, "deleting old probes", delete).await
    }

    /// Deletes every vantage's probes that started before `cutoff_ms`, and forgets
    /// vantages that have neither announced themselves nor kept a probe since (a
    /// retired region): `watch serve --retain`. Returns the probes deleted.
    pub async fn retain_all(&self, cutoff_ms: i64) -> Result<u64, SharedError> {
        within(
            &self.at,
            "deleting old probes",
            self.retain_all_now(cutoff_ms),
        )
        .await
    }

    async fn retain_all_now(&self, cutoff_ms: i64) -> Result<u64, SharedError> {
        let n = self
            .client
            .execute(
                "DELETE FROM watch_probes WHERE started_ms < $1",
                &[&cutoff_ms],
            )
            .await
            .map_err(|e| self.err(e))?;
        self.client
            .execute(
                "DELETE FROM watch_targets t WHERE t.seen_ms < $1 AND NOT EXISTS
                    (SELECT 1 FROM watch_probes p WHERE p.vantage = t.vantage)",
                &[&cutoff_ms],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(n)
    }

    /// Every probe of every vantage that started at or after `since_ms`, of one target
    /// or all, in time order.
    pub async fn probes(
        &self,
        target: Option<&str>,
        since_ms: i64,
    ) -> Result<Vec<VantageProbe>, SharedError> {
        within(
            &self.at,
            "reading probes",
            self.probes_now(target, since_ms),
        )
        .await
    }

    async fn probes_now(
        &self,
        target: Option<&str>,
        since_ms: i64,
    ) -> Result<Vec<VantageProbe>, SharedError> {
        let select = format!(
            "SELECT id, vantage, {} FROM watch_probes",
            names(ProbeRow::COLUMNS)
        );
        let rows = match target {
            Some(t) => {
                self.client
                    .query(
                        &format!(
                        "{select} WHERE target = $1 AND started_ms >= $2 ORDER BY started_ms, id"
                    ),
                        &[&t, &since_ms],
                    )
                    .await
            }
            None => {
                self.client
                    .query(
                        &format!("{select} WHERE started_ms >= $1 ORDER BY started_ms, id"),
                        &[&since_ms],
                    )
                    .await
            }
        }
        .map_err(|e| self.err(e))?;
        let now = crate::probe::now_ms();
        let mut skipped = Skipped::default();
        let mut kept = Vec::with_capacity(rows.len());
        for r in &rows {
            match read_probe(r, now) {
                Ok(p) => kept.push(p),
                Err(why) => *skipped.entry(why).or_default() += 1,
            }
        }
        say_skipped(&self.at, "probe", &skipped);
        Ok(kept)
    }

    /// Request rows of one stored probe (by its shared-store id).
    pub async fn requests(&self, probe_id: i64) -> Result<Vec<RequestRow>, SharedError> {
        within(&self.at, "reading requests", self.requests_now(probe_id)).await
    }

    async fn requests_now(&self, probe_id: i64) -> Result<Vec<RequestRow>, SharedError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {} FROM watch_requests WHERE probe_id = $1 ORDER BY idx",
                    names(RequestRow::COLUMNS)
                ),
                &[&probe_id],
            )
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| RequestRow::read(&mut Row { row: r, at: 0 }))
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))
    }

    /// Every vantage that announced itself, with its targets and its latest probe.
    pub async fn vantages(&self) -> Result<Vec<Vantage>, SharedError> {
        within(&self.at, "reading vantages", self.vantages_now()).await
    }

    async fn vantages_now(&self) -> Result<Vec<Vantage>, SharedError> {
        let rows = self
            .client
            .query(
                "SELECT t.vantage, t.name, t.url, t.slos, t.interval_s, t.seen_ms,
                    (SELECT max(started_ms) FROM watch_probes p
                     WHERE p.vantage = t.vantage AND p.started_ms <= $1)
                 FROM watch_targets t ORDER BY t.vantage, t.name",
                &[&(crate::probe::now_ms() + crate::untrusted::FUTURE_SKEW_MS)],
            )
            .await
            .map_err(|e| self.err(e))?;
        let now = crate::probe::now_ms();
        let mut skipped = Skipped::default();
        let mut out: Vec<Vantage> = Vec::new();
        for r in &rows {
            let (name, target, seen, last) = match read_target(r, now) {
                Ok(read) => read,
                Err(why) => {
                    *skipped.entry(why).or_default() += 1;
                    continue;
                }
            };
            match out.last_mut() {
                Some(v) if v.name == name => {
                    v.seen_ms = v.seen_ms.max(seen);
                    v.targets.push(target);
                }
                _ => out.push(Vantage {
                    name,
                    targets: vec![target],
                    seen_ms: seen,
                    last_probe_ms: last,
                }),
            }
        }
        say_skipped(&self.at, "target", &skipped);
        Ok(out)
    }
}

/// Rows skipped by why, for one warning.
type Skipped = std::collections::BTreeMap<String, u64>;

/// One probe row (`id, vantage, columns…`), checked: a NULL or a value of the wrong type
/// where a probe has none, a name that is no label, a negative count, a start in the
/// future are each a named reason to skip it; its text is made printable.
fn read_probe(r: &tokio_postgres::Row, now_ms: i64) -> Result<VantageProbe, String> {
    let unreadable = |e: tokio_postgres::Error| format!("unreadable ({})", clean(&e.to_string()));
    let id: i64 = r.try_get(0).map_err(unreadable)?;
    let vantage: String = r.try_get(1).map_err(unreadable)?;
    let probe = ProbeRow::read(id, &mut Row { row: r, at: 2 }).map_err(unreadable)?;
    crate::untrusted::check(&vantage, &probe, now_ms)?;
    Ok(VantageProbe {
        vantage,
        probe: crate::untrusted::printable_probe(probe),
    })
}

/// One announced target row (`vantage, name, url, slos, interval_s, seen_ms, last
/// probe`), checked as [`read_probe`] checks a probe.
fn read_target(
    r: &tokio_postgres::Row,
    now_ms: i64,
) -> Result<(String, TargetInfo, i64, Option<i64>), String> {
    let unreadable = |e: tokio_postgres::Error| format!("unreadable ({})", clean(&e.to_string()));
    let vantage: String = r.try_get(0).map_err(unreadable)?;
    let name: String = r.try_get(1).map_err(unreadable)?;
    if !crate::config::valid_name(&vantage) || !crate::config::valid_name(&name) {
        return Err("a vantage or target name that is not a label".into());
    }
    let url: String = r.try_get(2).map_err(unreadable)?;
    let slos: Option<&str> = r.try_get(3).map_err(unreadable)?;
    let interval_s: f64 = r.try_get(4).map_err(unreadable)?;
    let seen: i64 = r.try_get(5).map_err(unreadable)?;
    let last: Option<i64> = r.try_get(6).map_err(unreadable)?;
    if !interval_s.is_finite() || interval_s < 0.0 {
        return Err("a negative or non-finite interval".into());
    }
    let target = TargetInfo {
        name,
        url: crate::untrusted::printable(&url),
        slos: slos
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        interval_s,
    };
    // An announcement from the future is shown as now, not as "seen" for ever after.
    Ok((vantage, target, seen.min(now_ms), last))
}

/// The reasons rows were skipped for, already said (store, kind of row, reason): each
/// is said once per process, not again at every page load that reads the same rows.
static SAID: std::sync::Mutex<std::collections::BTreeSet<(String, String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Says the rows skipped, by reason (a warning; nothing when none was, or when every
/// reason was said before).
fn say_skipped(at: &str, what: &str, skipped: &Skipped) {
    if let Some(say) = skipped_news(at, what, skipped) {
        tracing::warn!("{say}");
    }
}

/// The warning for rows skipped for a reason not said before in this process.
fn skipped_news(at: &str, what: &str, skipped: &Skipped) -> Option<String> {
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let new: Vec<(&String, &u64)> = skipped
        .iter()
        .filter(|(why, _)| said.insert((at.to_string(), what.to_string(), (*why).clone())))
        .collect();
    if new.is_empty() {
        return None;
    }
    let reasons: Vec<String> = new
        .iter()
        .map(|(why, n)| format!("{n} with {why}"))
        .collect();
    Some(format!(
        "cadence watch: the shared store {at}: {} {what} row(s) skipped: {} (said once; later reads skip rows for the same reason without a word)",
        new.iter().map(|(_, n)| **n).sum::<u64>(),
        reasons.join("; ")
    ))
}

/// `values` as the parameters of a statement whose parameter types are `types`: an
/// integer bound to an `INTEGER` (a request's index) as the 32 bits it holds.
fn bound(values: impl Iterator<Item = Value>, types: &[Type]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    values
        .zip(types)
        .map(|(v, t)| -> Box<dyn ToSql + Sync + Send> {
            match v {
                Value::Int(n) if *t == Type::INT4 => Box::new(n as i32),
                Value::Int(n) => Box::new(n),
                Value::OptInt(n) => Box::new(n),
                Value::Text(s) => Box::new(s),
                Value::OptText(s) => Box::new(s),
                Value::Real(x) => Box::new(x),
                Value::Flag(b) => Box::new(b),
            }
        })
        .collect()
}

/// The parameters as a statement takes them.
fn refs(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// A result row read column after column.
struct Row<'a> {
    row: &'a tokio_postgres::Row,
    at: usize,
}

impl Row<'_> {
    fn next<'r, T: tokio_postgres::types::FromSql<'r>>(
        &'r mut self,
    ) -> Result<T, tokio_postgres::Error> {
        self.at += 1;
        self.row.try_get(self.at - 1)
    }

    /// Whether the next column is a 32-bit integer (a request's index), not 64 bits.
    fn small(&self) -> bool {
        self.row
            .columns()
            .get(self.at)
            .is_some_and(|c| *c.type_() == Type::INT4)
    }
}

impl Cells for Row<'_> {
    type Error = tokio_postgres::Error;
    fn text(&mut self) -> Result<String, Self::Error> {
        self.next()
    }
    fn opt_text(&mut self) -> Result<Option<String>, Self::Error> {
        self.next()
    }
    fn int(&mut self) -> Result<i64, Self::Error> {
        if self.small() {
            self.next::<i32>().map(i64::from)
        } else {
            self.next()
        }
    }
    fn opt_int(&mut self) -> Result<Option<i64>, Self::Error> {
        if self.small() {
            Ok(self.next::<Option<i32>>()?.map(i64::from))
        } else {
            self.next()
        }
    }
    fn real(&mut self) -> Result<Option<f64>, Self::Error> {
        self.next()
    }
    fn flag(&mut self) -> Result<bool, Self::Error> {
        self.next()
    }
}

/// The longest a page waits for the shared store: past it, the page is served with the
/// store's part saying it did not answer.
pub const PAGE_WITHIN: Duration = Duration::from_secs(3);

/// The shared store as the page reads it: one connection, opened on first use and
/// again after it drops (a server restart shows as an error on one page, not forever).
pub struct Remote {
    /// Where the store is and how to log in.
    pub config: SharedConfig,
    /// This watcher's vantage (empty for `watch serve`, which has none).
    pub vantage: String,
    /// The shipper's state, when this watcher ships.
    pub ship: Option<std::sync::Arc<ShipState>>,
    conn: tokio::sync::Mutex<Option<SharedStore>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.config.display())
    }
}

impl Remote {
    /// Reads `config` for `vantage` (empty for the hub); `ship`: the shipper's state, when this watcher ships.
    pub fn new(
        config: SharedConfig,
        vantage: String,
        ship: Option<std::sync::Arc<ShipState>>,
    ) -> Remote {
        Remote {
            config,
            vantage,
            ship,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Every vantage's probes (of one target or all) since `since_ms`.
    pub async fn probes(
        &self,
        target: Option<&str>,
        since_ms: i64,
    ) -> Result<Vec<VantageProbe>, SharedError> {
        let (mut conn, deadline) = self.turn().await?;
        let r = tokio::time::timeout_at(deadline, async {
            self.connected(&mut conn)
                .await?
                .probes(target, since_ms)
                .await
        })
        .await
        .unwrap_or_else(|_| Err(self.late()));
        forget_on_error(&mut conn, r)
    }

    /// The vantages that announced themselves.
    pub async fn vantages(&self) -> Result<Vec<Vantage>, SharedError> {
        let (mut conn, deadline) = self.turn().await?;
        let r = tokio::time::timeout_at(deadline, async {
            self.connected(&mut conn).await?.vantages().await
        })
        .await
        .unwrap_or_else(|_| Err(self.late()));
        forget_on_error(&mut conn, r)
    }

    /// The connection's turn for one page read, and when the read must be done: within
    /// [`PAGE_WITHIN`] of asking, waiting for another page's read included. A page is
    /// then served with the store's part in error rather than held.
    async fn turn(
        &self,
    ) -> Result<
        (
            tokio::sync::MutexGuard<'_, Option<SharedStore>>,
            tokio::time::Instant,
        ),
        SharedError,
    > {
        let deadline = tokio::time::Instant::now() + PAGE_WITHIN;
        match tokio::time::timeout_at(deadline, self.conn.lock()).await {
            Ok(conn) => Ok((conn, deadline)),
            Err(_) => Err(self.late()),
        }
    }

    /// A page read that ran out of time.
    fn late(&self) -> SharedError {
        SharedError::Server {
            at: self.config.display().to_string(),
            detail: format!(
                "no answer within {} s (a page does not wait longer)",
                PAGE_WITHIN.as_secs()
            ),
        }
    }

    /// The connection, opened first when there is none or it dropped.
    async fn connected<'a>(
        &self,
        conn: &'a mut Option<SharedStore>,
    ) -> Result<&'a SharedStore, SharedError> {
        let c = match conn.take() {
            Some(c) if !c.is_closed() => c,
            _ => self.config.connect().await?,
        };
        Ok(conn.insert(c))
    }
}

/// A failed (or late) read drops the connection: the next one opens a fresh one.
fn forget_on_error<T>(
    conn: &mut Option<SharedStore>,
    r: Result<T, SharedError>,
) -> Result<T, SharedError> {
    if r.is_err() {
        *conn = None;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    // FAULTS 151.
    #[test]
    fn a_skipped_rows_warning_is_said_once_per_reason() {
        let at = "db.test:5432/said-once";
        let skipped = |pairs: &[(&str, u64)]| -> Skipped {
            pairs.iter().map(|(w, n)| (w.to_string(), *n)).collect()
        };
        let first = skipped_news(at, "probe", &skipped(&[("a NULL", 2)])).unwrap();
        assert!(
            first.contains("2 probe row(s) skipped: 2 with a NULL"),
            "{first}"
        );
        // The next page load reads the same rows: nothing more is said.
        assert_eq!(skipped_news(at, "probe", &skipped(&[("a NULL", 2)])), None);
        assert_eq!(skipped_news(at, "probe", &skipped(&[("a NULL", 3)])), None);
        // A new reason is said, alone; another kind of row is its own.
        let next = skipped_news(
            at,
            "probe",
            &skipped(&[("a NULL", 3), ("a negative count", 1)]),
        );
        assert!(
            next.as_deref()
                .is_some_and(|n| n.contains("1 probe row(s) skipped: 1 with a negative count")),
            "{next:?}"
        );
        assert!(skipped_news(at, "target", &skipped(&[("a NULL", 1)])).is_some());
        assert_eq!(skipped_news(at, "probe", &Skipped::default()), None);
    }

    #[tokio::test]
    async fn a_store_that_accepts_and_never_answers_is_an_error_within_the_bound() {
        // Accepts (the kernel does) and never answers a byte.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let c = SharedConfig::new(
            &format!("postgres://w@127.0.0.1:{port}/d?sslmode=disable"),
            None,
        )
        .unwrap();
        let started = std::time::Instant::now();
        let e = c.connect().await.map(|_| ()).unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= CONNECT_WITHIN && took < CONNECT_WITHIN * 2,
            "{took:?}"
        );
        let said = e.to_string();
        assert!(said.contains("no answer within 10 s"), "{said}");
        assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
        drop(silent);
    }

    /// A server on 127.0.0.1 port 0 that reads PostgreSQL's startup message, writes
    /// `answer`, and then never another byte (the connection held open).
    fn fake_server(answer: Vec<u8>) -> u16 {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
            s.read_exact(&mut startup).unwrap();
            s.write_all(&answer).unwrap();
            let mut sink = [0u8; 4096];
            while s.read(&mut sink).is_ok_and(|n| n > 0) {}
        });
        port
    }

    /// A server that answers the startup (no password asked, ready for queries) and
    /// then stalls: a store that stops answering mid-connection.
    fn answers_the_startup_then_stalls() -> u16 {
        // AuthenticationOk, then ReadyForQuery (idle).
        fake_server(vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'])
    }

    #[tokio::test]
    async fn a_query_the_store_never_answers_is_an_error_within_the_bound() {
        let port = answers_the_startup_then_stalls();
        let c = SharedConfig::new(&format!("postgres://w@127.0.0.1:{port}/d"), None).unwrap();
        let (client, connection) = c.config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let store = SharedStore {
            client,
            at: c.display.clone(),
        };
        tokio::time::pause();
        let started = tokio::time::Instant::now();
        let e = store.probes(None, 0).await.unwrap_err();
        let took = started.elapsed();
        // The timer wheel's millisecond may round it up.
        assert!(
            took >= QUERY_WITHIN && took <= QUERY_WITHIN + Duration::from_millis(5),
            "{took:?}"
        );
        let said = e.to_string();
        assert!(
            said.contains("no answer within 30 s (reading probes)"),
            "{said}"
        );
        assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
        let e = store.retain("east", 0).await.unwrap_err();
        assert!(e.to_string().contains("no answer within 30 s"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_read_waits_for_a_silent_store_no_longer_than_its_bound() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let c = SharedConfig::new(&format!("postgres://w@127.0.0.1:{port}/d"), None).unwrap();
        let remote = std::sync::Arc::new(Remote::new(c, String::new(), None));
        let started = tokio::time::Instant::now();
        // Two page loads at once: the second waits for the first's turn, not past its bound.
        let (a, b) = tokio::join!(remote.probes(None, 0), remote.vantages());
        let took = started.elapsed();
        assert!(
            took >= PAGE_WITHIN && took <= PAGE_WITHIN + Duration::from_millis(5),
            "{took:?}"
        );
        for e in [a.map(|_| ()).unwrap_err(), b.map(|_| ()).unwrap_err()] {
            assert!(e.to_string().contains("no answer within 3 s"), "{e}");
        }
        drop(silent);
    }

    #[test]
    fn f139_tls_is_required_off_this_host_unless_the_address_says_otherwise() {
        use tokio_postgres::config::SslMode;
        let mode = |a: &str| SharedConfig::new(a, None).unwrap().config.get_ssl_mode();
        assert_eq!(mode("postgres://w@db.example/d"), SslMode::Require);
        assert_eq!(
            mode("host=10.0.0.5,localhost user=w dbname=d"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://w@db.example/d?sslmode=prefer"),
            SslMode::Prefer
        );
        assert_eq!(
            mode("host=db.example sslmode=disable dbname=d"),
            SslMode::Disable
        );
        for here in [
            "postgres://w@localhost/d",
            "postgres://w@127.0.0.1:5433/d",
            "postgres://w@[::1]/d",
            "host=/run/postgresql dbname=d",
        ] {
            assert_eq!(mode(here), SslMode::Prefer, "{here}");
        }
    }

    #[tokio::test]
    async fn f139_a_servers_words_are_quoted_escaped_and_bounded() {
        // An ErrorResponse whose message holds a terminal sequence and runs long.
        let message = format!("no\x1b]0;pwned\x07\x1b[2J{}", "x".repeat(5000));
        let mut fields = Vec::new();
        for (code, value) in [(b'S', "FATAL"), (b'C', "28000"), (b'M', message.as_str())] {
            fields.push(code);
            fields.extend_from_slice(value.as_bytes());
            fields.push(0);
        }
        fields.push(0);
        let mut msg = vec![b'E'];
        msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
        msg.extend_from_slice(&fields);
        let port = fake_server(msg);
        let c = SharedConfig::new(
            &format!("postgres://w@127.0.0.1:{port}/d?sslmode=disable"),
            None,
        )
        .unwrap();
        let said = c.connect().await.unwrap_err().to_string();
        assert!(!said.chars().any(|c| c.is_control()), "{said:?}");
        assert!(said.contains("no\\u{1b}]0;pwned"), "{said}");
        assert!(said.len() < 600, "{}", said.len());
        assert!(said.contains("bytes in all"), "{said}");
    }

    #[test]
    fn an_address_is_shown_without_its_password() {
        let c = SharedConfig::new("postgres://watch:s3cret@db.internal:5433/probes", None).unwrap();
        assert_eq!(c.display(), "postgres://watch@db.internal:5433/probes");
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = SharedConfig::new("host=/run/pg user=w password=s3cret dbname=d", None).unwrap();
        assert_eq!(c.display(), "postgres://w@/run/pg/d");
    }

    #[test]
    fn a_bad_address_or_an_unset_password_variable_is_an_error_in_words() {
        let e = SharedConfig::new("postgres://h/d?sslmode=bogus", None).unwrap_err();
        assert!(
            e.to_string().contains("not a PostgreSQL connection string"),
            "{e}"
        );
        let e = SharedConfig::new("dbname=d", None).unwrap_err();
        assert!(e.to_string().contains("names no host"), "{e}");
        let e =
            SharedConfig::new("postgres://h/d", Some("CADENCE_TEST_SURELY_UNSET_PW")).unwrap_err();
        assert!(
            e.to_string().contains("CADENCE_TEST_SURELY_UNSET_PW"),
            "{e}"
        );
    }
}
