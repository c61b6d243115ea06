//! The probe history in SQLite: one row per probe (its aggregates and SLO verdict) and
//! one per request. A versioned schema (`PRAGMA user_version`), WAL so the page and
//! `watch report` read while the watcher writes, each probe written in one transaction
//! (a crash loses at most the probe in flight), retention by age, and one writer per
//! file (a lock on the file itself, whatever link names it).

use crate::columns::{definitions, names, placeholders, Cells, Kind, Value};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// The schema this build writes and reads.
pub const SCHEMA_VERSION: i64 = 2;

/// The current schema, for a new database: the columns of `columns`, each probe's key
/// before them and its outbox flag (`shipped`: 1 once the probe is in the shared store;
/// a partial index finds the rest) after them. Times are Unix milliseconds; latencies
/// milliseconds; `NULL` where a probe had no sample (no request succeeded).
fn schema() -> String {
    format!(
        "CREATE TABLE probes (
    id INTEGER PRIMARY KEY,
{probes}    shipped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX probes_by_target_time ON probes(target, started_ms);
CREATE INDEX probes_by_time ON probes(started_ms);
CREATE INDEX probes_unshipped ON probes(id) WHERE shipped = 0;
CREATE TABLE requests (
    probe_id INTEGER NOT NULL REFERENCES probes(id) ON DELETE CASCADE,
{requests}    PRIMARY KEY (probe_id, idx)
) WITHOUT ROWID;
",
        probes = definitions(ProbeRow::COLUMNS, Kind::sqlite),
        requests = definitions(RequestRow::COLUMNS, Kind::sqlite),
    )
}

/// Version 2's step from version 1, frozen as it was (a later column is another
/// step): each probe's clock self-check (which clock stamped its chunks, the client's
/// read delay and event-loop lag, socket reads that carried more than one chunk), and
/// the shared store's outbox.
const SCHEMA_V1_TO_V2: &str = "
ALTER TABLE probes ADD COLUMN clock TEXT;
ALTER TABLE probes ADD COLUMN read_delay_p99_ms REAL;
ALTER TABLE probes ADD COLUMN loop_lag_p99_ms REAL;
ALTER TABLE probes ADD COLUMN merged_reads INTEGER;
ALTER TABLE probes ADD COLUMN shipped INTEGER NOT NULL DEFAULT 0;
CREATE INDEX probes_unshipped ON probes(id) WHERE shipped = 0;
";

pub use crate::rows::{AsPoint, Point, ProbeRow, RequestRow};

/// Why the database cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is in use by another `cadence watch` (it holds the file's lock, through this path or another link to the same file): one watcher writes a database; give this one its own --db")]
    /// Another watcher holds the database file's lock.
    Locked {
        /// The database, as this watcher named it.
        path: String,
    },
    #[error("{path} is locked by another process that is writing it (SQLite: {detail})")]
    /// Another process is writing the database.
    Busy {
        /// The database.
        path: String,
        /// SQLite's words.
        detail: String,
    },
    #[error("{path} is not a readable cadence watch database (corrupt, or not SQLite): {detail}")]
    /// The file is not a readable watch database.
    Corrupt {
        /// The file.
        path: String,
        /// SQLite's words.
        detail: String,
    },
    /// The database's schema is newer than this build's.
    #[error("{path} has schema version {found}, newer than this cadence's {supported}: upgrade cadence, or use another --db")]
    Newer {
        /// The database.
        path: String,
        /// Its schema version.
        found: i64,
        /// This build's.
        supported: i64,
    },
    /// Another application's SQLite file (its own application id or tables): refused
    /// before anything is written to it.
    #[error("{path} is not a cadence watch database ({why}): it was left unchanged; give cadence watch a new file or its own with --db")]
    Foreign {
        /// The database.
        path: String,
        /// What shows it is another application's (its application id, its tables).
        why: String,
    },
    #[error("{path}: the disk is full: {detail}")]
    /// The disk is full.
    Full {
        /// The database.
        path: String,
        /// SQLite's words.
        detail: String,
    },
    #[error("{path}: {detail}")]
    /// Any other failure.
    Other {
        /// The database.
        path: String,
        /// What failed, in words.
        detail: String,
    },
}

impl StoreError {
    fn from_sqlite(path: &Path, e: rusqlite::Error) -> StoreError {
        let path = path.display().to_string();
        let detail = e.to_string();
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt { path, detail }
            }
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
                StoreError::Busy { path, detail }
            }
            Some(ErrorCode::DiskFull) => StoreError::Full { path, detail },
            _ => StoreError::Other { path, detail },
        }
    }

    /// Whether the operator chose a database that cannot be used as given (exit 2),
    /// rather than one that failed (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            StoreError::Locked { .. } | StoreError::Busy { .. } | StoreError::Newer { .. }
        )
    }
}

/// An open database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The writer's lock, held while the store is open (`None`: read-only). After
    /// `conn`, so it is released once the connection is closed.
    _lock: Option<WriterLock>,
    /// A read-only copy's private copy, when it was read through one (removed after
    /// `conn` is closed).
    _aside: Option<Aside>,
}

/// A store the async side hands to tokio's blocking pool for each use (SQLite blocks;
/// a slow disk must not stall the page or the probes' timing). Clones share the one
/// connection.
#[derive(Debug, Clone)]
pub struct Blocking {
    store: std::sync::Arc<std::sync::Mutex<Store>>,
    path: String,
}

impl Blocking {
    /// Hands `store` to the blocking pool for each [`Blocking::run`].
    pub fn new(store: Store) -> Blocking {
        let path = store.path.display().to_string();
        Blocking {
            store: std::sync::Arc::new(std::sync::Mutex::new(store)),
            path,
        }
    }

    /// Runs `f` on the store off the async workers. A panic in `f` is raised here; a
    /// task the runtime cancelled (it is shutting down) is an error.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.store.clone();
        let task = tokio::task::spawn_blocking(move || {
            // A use that panicked left the connection whole (SQLite rolls back an
            // unfinished transaction), so a poisoned lock is still used.
            let mut s = store
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut s)
        });
        match task.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(StoreError::Other {
                path: self.path.clone(),
                detail: format!("the store's task did not finish: {e}"),
            }),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.path.display())
    }
}

/// Descriptors of databases this process has closed, kept open to its end: closing any
/// descriptor of a file drops every POSIX lock the process holds on it, SQLite's among
/// them (its other connections to that file: the page's, the shipper's).
static RELEASED: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// The one writer's lock: an exclusive `flock` on the database file itself, so it is
/// keyed by the file (its device and inode), not by the path that names it: a symlink or
/// a hard link to a database in use is the same file. It is independent of SQLite's own
/// (POSIX) locks, and the kernel drops it when the process dies.
struct WriterLock(Option<std::fs::File>);

impl WriterLock {
    /// The lock of the database at `path` (created empty when missing, a new database).
    fn take(path: &Path) -> Result<WriterLock, StoreError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| StoreError::Other {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
        if file.try_lock().is_err() {
            return Err(StoreError::Locked {
                path: path.display().to_string(),
            });
        }
        Ok(WriterLock(Some(file)))
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            let _ = file.unlock();
            RELEASED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(file);
        }
    }
}

impl Store {
    /// Opens (creating, or migrating) the database as its one writer.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let lock = WriterLock::take(path)?;
        let err = |e| StoreError::from_sqlite(path, e);
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(2))
            .map_err(err)?;
        let version = read_version(&conn, path)?;
        // WAL: readers (the page, `watch report`) never block the writer. NORMAL sync:
        // a committed probe survives a killed process (power loss may cost the last).
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(err)?;
        // A new database gets the current schema, an older one its migration steps;
        // each in one transaction: a crash leaves the old version or the new.
        // A database made before the application id gets it with its next step.
        let steps = match version {
            0 => schema(),
            1 => SCHEMA_V1_TO_V2.to_string(),
            _ => String::new(),
        };
        let id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(err)?;
        if !steps.is_empty() || id != APPLICATION_ID {
            conn.execute_batch(&format!(
                "BEGIN; {steps} PRAGMA user_version = {SCHEMA_VERSION}; PRAGMA application_id = {APPLICATION_ID}; COMMIT;"
            ))
            .map_err(err)?;
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            _lock: Some(lock),
            _aside: None,
        })
    }

    /// Opens an existing database to read (the page's handlers, `watch report`).
    pub fn open_read(path: &Path) -> Result<Store, StoreError> {
        if !path.exists() {
            return Err(StoreError::Other {
                path: path.display().to_string(),
                detail: "no such file".into(),
            });
        }
        let (conn, aside) = match read_only(path) {
            Ok(conn) => (conn, None),
            Err(e) if cannot_share(&e) => read_aside(path)?,
            Err(e) => return Err(StoreError::from_sqlite(path, e)),
        };
        let version = read_version(&conn, path)?;
        if version == 0 {
            return Err(StoreError::Corrupt {
                path: path.display().to_string(),
                detail: "it holds no cadence watch schema".into(),
            });
        }
        if version < SCHEMA_VERSION {
            return Err(StoreError::Other {
                path: path.display().to_string(),
                detail: format!(
                    "schema version {version}, older than this cadence's {SCHEMA_VERSION}: a `cadence watch` on it upgrades it"
                ),
            });
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            _lock: None,
            _aside: aside,
        })
    }

    /// A second read-write connection to a database this process already holds open
    /// as its writer (the shared store's shipper marks what it shipped through it,
    /// never blocking the probe lane's connection for longer than one small update).
    pub fn companion(&self) -> Result<Store, StoreError> {
        let err = |e| StoreError::from_sqlite(&self.path, e);
        let conn = Connection::open(&self.path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        Ok(Store {
            conn,
            path: self.path.clone(),
            _lock: None,
            _aside: None,
        })
    }

    /// Where the database is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::from_sqlite(&self.path, e)
    }

    /// Writes a probe and its requests in one transaction; returns the probe's id.
    pub fn insert_probe(&mut self, p: &ProbeRow, reqs: &[RequestRow]) -> Result<i64, StoreError> {
        let path = self.path.clone();
        let err = |e| StoreError::from_sqlite(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(&insert_probe(), rusqlite::params_from_iter(p.values()))
            .map_err(err)?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx.prepare_cached(&insert_request()).map_err(err)?;
            for r in reqs {
                let values = std::iter::once(Value::Int(id)).chain(r.values());
                st.execute(rusqlite::params_from_iter(values))
                    .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// Deletes probes (and their requests) that started before `cutoff_ms`; returns how
    /// many probes went.
    pub fn retain(&mut self, cutoff_ms: i64) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let err = |e| StoreError::from_sqlite(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "DELETE FROM requests WHERE probe_id IN (SELECT id FROM probes WHERE started_ms < ?1)",
            [cutoff_ms],
        )
        .map_err(err)?;
        let n = tx
            .execute("DELETE FROM probes WHERE started_ms < ?1", [cutoff_ms])
            .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(n as u64)
    }

    /// The latest probe of `target`.
    pub fn last_probe(&self, target: &str) -> Result<Option<ProbeRow>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "{} WHERE target = ?1 ORDER BY started_ms DESC, id DESC LIMIT 1",
                    select()
                ),
                [target],
                probe_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Every probe that started at or after `since_ms`, of one target or all, in time
    /// order.
    pub fn probes(&self, target: Option<&str>, since_ms: i64) -> Result<Vec<ProbeRow>, StoreError> {
        let rows = match target {
            Some(t) => {
                let mut st = self
                    .conn
                    .prepare_cached(&format!(
                        "{} WHERE target = ?1 AND started_ms >= ?2 ORDER BY started_ms, id",
                        select()
                    ))
                    .map_err(|e| self.err(e))?;
                let it = st
                    .query_map(params![t, since_ms], probe_row)
                    .map_err(|e| self.err(e))?;
                it.collect::<Result<Vec<_>, _>>()
            }
            None => {
                let mut st = self
                    .conn
                    .prepare_cached(&format!(
                        "{} WHERE started_ms >= ?1 ORDER BY target, started_ms, id",
                        select()
                    ))
                    .map_err(|e| self.err(e))?;
                let it = st
                    .query_map([since_ms], probe_row)
                    .map_err(|e| self.err(e))?;
                it.collect::<Result<Vec<_>, _>>()
            }
        };
        rows.map_err(|e| self.err(e))
    }

    /// The figures of every probe of `target` that started at or after `since_ms`, in
    /// time order: a few numbers a probe, where [`Store::probes`] reads its texts too.
    pub fn points(&self, target: &str, since_ms: i64) -> Result<Vec<Point>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id, started_ms, sent, succeeded, ttft_p50_ms, itl_p50_ms, itl_p99_ms, \
                 output_tok_s, slo_ok FROM probes WHERE target = ?1 AND started_ms >= ?2 \
                 ORDER BY started_ms, id",
            )
            .map_err(|e| self.err(e))?;
        let it = st
            .query_map(params![target, since_ms], |r| {
                Ok(Point {
                    id: r.get(0)?,
                    started_ms: r.get(1)?,
                    sent: r.get::<_, i64>(2)? as u64,
                    succeeded: r.get::<_, i64>(3)? as u64,
                    ttft_p50_ms: r.get(4)?,
                    itl_p50_ms: r.get(5)?,
                    itl_p99_ms: r.get(6)?,
                    output_tok_s: r.get(7)?,
                    slo_ok: r.get(8)?,
                })
            })
            .map_err(|e| self.err(e))?;
        it.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The requests of one probe, in order.
    /// One probe by its id; `None` when there is none (or retention deleted it).
    pub fn probe(&self, id: i64) -> Result<Option<ProbeRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!("{} WHERE id = ?1", select()))
            .map_err(|e| self.err(e))?;
        let mut rows = st.query_map([id], probe_row).map_err(|e| self.err(e))?;
        rows.next().transpose().map_err(|e| self.err(e))
    }

    /// The requests of one probe, in order.
    pub fn requests(&self, probe_id: i64) -> Result<Vec<RequestRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {} FROM requests WHERE probe_id = ?1 ORDER BY idx",
                names(RequestRow::COLUMNS)
            ))
            .map_err(|e| self.err(e))?;
        let it = st
            .query_map([probe_id], |r| RequestRow::read(&mut Row { row: r, at: 0 }))
            .map_err(|e| self.err(e))?;
        it.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The oldest probes not yet in the shared store (at most `limit`), with their
    /// requests, oldest first.
    pub fn unshipped(&self, limit: u32) -> Result<Vec<(ProbeRow, Vec<RequestRow>)>, StoreError> {
        let rows = {
            let mut st = self
                .conn
                .prepare_cached(&format!(
                    "{} WHERE shipped = 0 ORDER BY id LIMIT ?1",
                    select()
                ))
                .map_err(|e| self.err(e))?;
            let it = st.query_map([limit], probe_row).map_err(|e| self.err(e))?;
            it.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))?
        };
        rows.into_iter()
            .map(|p| {
                let reqs = self.requests(p.id)?;
                Ok((p, reqs))
            })
            .collect()
    }

    /// Marks probes as in the shared store.
    pub fn mark_shipped(&mut self, ids: &[i64]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |e| StoreError::from_sqlite(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut st = tx
                .prepare_cached("UPDATE probes SET shipped = 1 WHERE id = ?1")
                .map_err(err)?;
            for id in ids {
                st.execute([id]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// How many probes wait for the shared store.
    pub fn pending(&self) -> Result<u64, StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM probes WHERE shipped = 0", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    /// Every target that has a probe.
    pub fn targets(&self) -> Result<Vec<String>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT target FROM probes ORDER BY target")
            .map_err(|e| self.err(e))?;
        let it = st.query_map([], |r| r.get(0)).map_err(|e| self.err(e))?;
        it.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// `PRAGMA integrity_check`'s answer (`ok` when sound).
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

/// Every probe column, its key first.
fn select() -> String {
    format!("SELECT id, {} FROM probes", names(ProbeRow::COLUMNS))
}

fn insert_probe() -> String {
    let n = ProbeRow::COLUMNS.len();
    format!(
        "INSERT INTO probes ({}) VALUES ({})",
        names(ProbeRow::COLUMNS),
        placeholders('?', 1, n)
    )
}

fn insert_request() -> String {
    let n = RequestRow::COLUMNS.len();
    format!(
        "INSERT INTO requests (probe_id, {}) VALUES ({})",
        names(RequestRow::COLUMNS),
        placeholders('?', 1, n + 1)
    )
}

fn probe_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ProbeRow> {
    ProbeRow::read(r.get(0)?, &mut Row { row: r, at: 1 })
}

/// A result row read column after column.
struct Row<'a, 'b> {
    row: &'a rusqlite::Row<'b>,
    at: usize,
}

impl Row<'_, '_> {
    fn next<T: rusqlite::types::FromSql>(&mut self) -> rusqlite::Result<T> {
        self.at += 1;
        self.row.get(self.at - 1)
    }
}

impl Cells for Row<'_, '_> {
    type Error = rusqlite::Error;
    fn text(&mut self) -> rusqlite::Result<String> {
        self.next()
    }
    fn opt_text(&mut self) -> rusqlite::Result<Option<String>> {
        self.next()
    }
    fn int(&mut self) -> rusqlite::Result<i64> {
        self.next()
    }
    fn opt_int(&mut self) -> rusqlite::Result<Option<i64>> {
        self.next()
    }
    fn real(&mut self) -> rusqlite::Result<Option<f64>> {
        self.next()
    }
    fn flag(&mut self) -> rusqlite::Result<bool> {
        self.next()
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Value::Text(s) => s.to_sql(),
            Value::OptText(s) => s.to_sql(),
            Value::Int(n) => n.to_sql(),
            Value::OptInt(n) => n.to_sql(),
            Value::Real(x) => x.to_sql(),
            Value::Flag(b) => b.to_sql(),
        }
    }
}

/// The schema version of an open database: 0 for a new (empty) file; an error for a
/// file that is not SQLite or is newer than this build.
/// Names for a message: `a, b`, or `none`.
fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The `PRAGMA application_id` a cadence watch database carries (`CDNC`); databases
/// made before it carry 0 and are known by their tables.
pub const APPLICATION_ID: i64 = 0x4344_4E43;

/// The tables of a cadence watch database (every version so far).
const TABLES: [&str; 2] = ["probes", "requests"];

/// The schema version of a cadence watch database, read without writing: a file of
/// another application (its own application id, tables cadence did not make) is
/// refused before anything changes it.
/// A read-only connection to `path`, the file's header and WAL index read (a failure to
/// share its WAL shows here, not at the first query).
fn read_only(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    conn.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))?;
    Ok(conn)
}

/// Whether a read-only open failed for want of the WAL's shared-memory index (`-shm`):
/// a copy in a read-only directory, or one whose `-shm` cannot be made.
fn cannot_share(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
    )
}

/// A private directory holding a read-only database's copy, removed when dropped.
#[derive(Debug)]
struct Aside(PathBuf);

impl Drop for Aside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads a database whose WAL cannot be shared where it lies. With no WAL (or an empty
/// one) the file alone is the database: opened `immutable`, no index needed. With a WAL
/// holding commits not yet in the file, the two are copied to a private directory of
/// `$TMPDIR` and read there, so no committed probe is missed.
fn read_aside(path: &Path) -> Result<(Connection, Option<Aside>), StoreError> {
    let err = |e| StoreError::from_sqlite(path, e);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    if std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0 {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        return Ok((Connection::open_with_flags(uri, flags).map_err(err)?, None));
    }
    let copy_err = |e: std::io::Error| {
        StoreError::Other {
        path: path.display().to_string(),
        detail: format!(
            "its WAL cannot be shared where it is (a read-only copy), and copying it to {} failed: {e}",
            std::env::temp_dir().display()
        ),
    }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("cadence-watch-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(copy_err)?;
    let aside = Aside(dir);
    let copy = aside.0.join("watch.db");
    std::fs::copy(path, &copy).map_err(copy_err)?;
    std::fs::copy(&wal, aside.0.join("watch.db-wal")).map_err(copy_err)?;
    let conn = read_only(&copy).map_err(err)?;
    Ok((conn, Some(aside)))
}

/// `path` as an SQLite URI's path: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    path.to_string_lossy()
        .replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23")
}

fn read_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let err = |e| StoreError::from_sqlite(path, e);
    // Reading the schema reads the file's header: a file that is not SQLite fails here.
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name")
        .map_err(err)?;
    let tables = st
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
        .map_err(err)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    let id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(err)?;
    let foreign = |why: String| StoreError::Foreign {
        path: path.display().to_string(),
        why,
    };
    if id != APPLICATION_ID && id != 0 {
        return Err(foreign(format!(
            "its application_id is {id}, cadence's is {APPLICATION_ID}"
        )));
    }
    let ours: &[&str] = if version == 0 { &[] } else { &TABLES };
    if id == 0 && tables != ours {
        return Err(foreign(format!(
            "user_version {version} and tables {}, where cadence's are {}",
            list(&tables),
            if ours.is_empty() {
                "none yet (a new file)".to_string()
            } else {
                ours.join(", ")
            }
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::Newer {
            path: path.display().to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(version)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rows::tests::probe;

    /// Version 1's schema as that version wrote it: the databases it left behind.
    const SCHEMA_V1: &str = "
CREATE TABLE probes (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER NOT NULL,
    sent INTEGER NOT NULL,
    succeeded INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    aborted INTEGER NOT NULL,
    failed_by_class TEXT NOT NULL,
    ttft_p50_ms REAL,
    ttft_p99_ms REAL,
    itl_p50_ms REAL,
    itl_p99_ms REAL,
    output_tok_s REAL,
    slo_ok INTEGER NOT NULL,
    slo_detail TEXT NOT NULL
);
CREATE INDEX probes_by_target_time ON probes(target, started_ms);
CREATE INDEX probes_by_time ON probes(started_ms);
CREATE TABLE requests (
    probe_id INTEGER NOT NULL REFERENCES probes(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    ttft_ms REAL,
    e2e_ms REAL,
    chunks INTEGER NOT NULL,
    output_tokens INTEGER,
    itl_p50_ms REAL,
    itl_max_ms REAL,
    PRIMARY KEY (probe_id, idx)
) WITHOUT ROWID;
";

    /// Every table's columns (name, type, not null, default, key) and every index's
    /// name and table, in order: the schema as SQLite holds it.
    fn layout(c: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        for table in ["probes", "requests"] {
            let mut st = c.prepare(&format!("PRAGMA table_info({table})")).unwrap();
            let rows = st
                .query_map([], |r| {
                    Ok(format!(
                        "{table}.{} {} notnull={} default={:?} pk={}",
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, i64>(5)?
                    ))
                })
                .unwrap();
            out.extend(rows.map(Result::unwrap));
        }
        let mut st = c
            .prepare("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY name")
            .unwrap();
        let rows = st
            .query_map([], |r| {
                Ok(format!(
                    "index {} on {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?
                ))
            })
            .unwrap();
        out.extend(rows.map(Result::unwrap));
        out
    }

    #[test]
    fn a_new_database_is_laid_out_as_a_version_1_database_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.db");
        let c = Connection::open(&old).unwrap();
        c.execute_batch(&format!("{SCHEMA_V1} PRAGMA user_version = 1;"))
            .unwrap();
        drop(c);
        drop(Store::open(&old).unwrap());
        let new = dir.path().join("new.db");
        drop(Store::open(&new).unwrap());
        let old = layout(&Connection::open(&old).unwrap());
        let new = layout(&Connection::open(&new).unwrap());
        assert_eq!(new, old);
        assert_eq!(new.len(), (1 + 19 + 1) + (1 + 8) + 3, "{new:#?}");
        assert!(new.contains(&"probes.slo_ok INTEGER notnull=1 default=None pk=0".to_string()));
        assert!(
            new.contains(&"probes.shipped INTEGER notnull=1 default=Some(\"0\") pk=0".to_string())
        );
    }

    fn req(idx: u64) -> RequestRow {
        RequestRow {
            idx,
            outcome: "succeeded".into(),
            ttft_ms: Some(20.0),
            e2e_ms: Some(100.0),
            chunks: 16,
            output_tokens: Some(16),
            itl_p50_ms: Some(5.0),
            itl_max_ms: Some(9.0),
        }
    }

    #[test]
    fn a_new_database_has_the_schema_version_and_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let s = Store::open(&path).unwrap();
        let v: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let mode: String = s
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(s);
        // Reopening keeps it (no second migration).
        let s = Store::open(&path).unwrap();
        assert_eq!(s.integrity_check().unwrap(), "ok");
    }

    #[test]
    fn a_probe_and_its_requests_are_written_together_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let mut s = Store::open(&path).unwrap();
        let p = probe("a", 1_000, false);
        let id = s.insert_probe(&p, &[req(0), req(1)]).unwrap();
        let back = s.last_probe("a").unwrap().unwrap();
        assert_eq!(back, ProbeRow { id, ..p.clone() });
        assert_eq!(s.requests(id).unwrap(), vec![req(0), req(1)]);
        // A probe whose request rows fail (a duplicate key) leaves nothing behind.
        let err = s.insert_probe(&probe("b", 2_000, true), &[req(0), req(0)]);
        assert!(err.is_err());
        assert_eq!(s.last_probe("b").unwrap(), None);
        assert_eq!(s.targets().unwrap(), vec!["a".to_string()]);
        // A reader sees what the writer committed.
        let r = Store::open_read(&path).unwrap();
        assert_eq!(r.probes(None, 0).unwrap().len(), 1);
    }

    #[test]
    fn retention_deletes_old_probes_and_their_requests() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("w.db")).unwrap();
        let old = s.insert_probe(&probe("a", 1_000, true), &[req(0)]).unwrap();
        let new = s.insert_probe(&probe("a", 5_000, true), &[req(0)]).unwrap();
        assert_eq!(s.retain(3_000).unwrap(), 1);
        let left: Vec<i64> = s.probes(None, 0).unwrap().iter().map(|p| p.id).collect();
        assert_eq!(left, vec![new]);
        assert!(s.requests(old).unwrap().is_empty());
        assert_eq!(s.requests(new).unwrap().len(), 1);
    }

    #[test]
    fn a_full_database_is_a_full_error_and_keeps_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("w.db")).unwrap();
        let kept = s.insert_probe(&probe("a", 1_000, true), &[req(0)]).unwrap();
        // SQLite's own ceiling on the file's pages stands in for a full disk: it fails
        // with the same SQLITE_FULL.
        let pages: i64 = s
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        s.conn.pragma_update(None, "max_page_count", pages).unwrap();
        let many: Vec<RequestRow> = (0..2_000).map(req).collect();
        let e = s.insert_probe(&probe("a", 2_000, true), &many).unwrap_err();
        assert!(matches!(e, StoreError::Full { .. }), "{e}");
        assert!(e.to_string().contains("full"), "{e}");
        let left = s.probes(None, 0).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, kept);
        assert_eq!(s.integrity_check().unwrap(), "ok");
    }

    #[test]
    fn a_version_1_database_is_upgraded_in_place_and_keeps_its_probes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!("{SCHEMA_V1} PRAGMA user_version = 1;"))
            .unwrap();
        c.execute(
            "INSERT INTO probes (target, started_ms, ended_ms, sent, succeeded, failed, aborted,
                failed_by_class, slo_ok, slo_detail) VALUES ('a', 7, 9, 1, 1, 0, 0, '{}', 1, '[]')",
            [],
        )
        .unwrap();
        drop(c);
        // A reader does not upgrade; it says what will.
        let e = Store::open_read(&path).unwrap_err();
        assert!(e.to_string().contains("upgrades it"), "{e}");
        let s = Store::open(&path).unwrap();
        let old = s.last_probe("a").unwrap().unwrap();
        assert_eq!(
            (old.started_ms, old.clock, old.loop_lag_p99_ms),
            (7, None, None)
        );
        // It predates the shared store: it waits to be shipped like any other.
        assert_eq!(s.pending().unwrap(), 1);
        assert_eq!(s.integrity_check().unwrap(), "ok");
        drop(s);
        assert!(Store::open_read(&path).is_ok());
    }

    #[test]
    fn the_outbox_hands_out_unshipped_probes_oldest_first_until_marked() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("w.db")).unwrap();
        let a = s
            .insert_probe(&probe("a", 1_000, true), &[req(0), req(1)])
            .unwrap();
        let b = s
            .insert_probe(&probe("b", 2_000, false), &[req(0)])
            .unwrap();
        let c = s.insert_probe(&probe("a", 3_000, true), &[]).unwrap();
        let mut shipper = s.companion().unwrap();
        let batch = shipper.unshipped(2).unwrap();
        let ids: Vec<i64> = batch.iter().map(|(p, _)| p.id).collect();
        assert_eq!(ids, vec![a, b]);
        assert_eq!(batch[0].1, vec![req(0), req(1)]);
        assert_eq!(batch[0].0.clock.as_deref(), Some("kernel"));
        shipper.mark_shipped(&ids).unwrap();
        assert_eq!(s.pending().unwrap(), 1);
        let rest: Vec<i64> = s.unshipped(10).unwrap().iter().map(|(p, _)| p.id).collect();
        assert_eq!(rest, vec![c]);
    }

    #[test]
    fn a_newer_schema_is_refused_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        drop(Store::open(&path).unwrap());
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(c);
        let e = Store::open(&path).unwrap_err();
        assert!(
            matches!(e, StoreError::Newer { found, .. } if found == SCHEMA_VERSION + 1),
            "{e}"
        );
        assert!(e.to_string().contains("newer"), "{e}");
        assert!(e.is_usage());
        assert!(Store::open_read(&path).is_err());
    }

    #[test]
    fn a_corrupt_file_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        let e = Store::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("corrupt"), "{e}");
        assert!(!e.is_usage());
    }

    #[test]
    fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let first = Store::open(&path).unwrap();
        let e = Store::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Locked { .. }), "{e}");
        assert!(e.is_usage());
        // Readers are welcome meanwhile.
        assert!(Store::open_read(&path).is_ok());
        drop(first);
        assert!(Store::open(&path).is_ok());
    }

    /// `sql` run on a new file: another application's database.
    fn foreign(dir: &Path, sql: &str) -> (PathBuf, Vec<u8>) {
        let path = dir.join("other.db");
        Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    }

    #[test]
    fn another_applications_database_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        for sql in [
            // Its own tables, no version.
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me');",
            // Its own version and tables.
            "CREATE TABLE notes (id INTEGER PRIMARY KEY); PRAGMA user_version = 2;",
            // Cadence's tables and another's beside them.
            &format!("{SCHEMA_V1} CREATE TABLE notes (id INTEGER); PRAGMA user_version = 1;"),
            // Its own application id.
            "PRAGMA application_id = 1234; CREATE TABLE probes (id INTEGER);",
        ] {
            let sub = tempfile::tempdir_in(dir.path()).unwrap();
            let (path, before) = foreign(sub.path(), sql);
            let e = Store::open(&path).map(|_| ()).unwrap_err();
            assert!(matches!(e, StoreError::Foreign { .. }), "{sql}: {e}");
            let said = e.to_string();
            assert!(said.contains(&path.display().to_string()), "{said}");
            assert!(said.contains("not a cadence watch database"), "{said}");
            assert!(!e.is_usage());
            assert_eq!(std::fs::read(&path).unwrap(), before, "{sql}");
            assert!(!sub.path().join("other.db-wal").exists());
            let e = Store::open_read(&path).map(|_| ()).unwrap_err();
            assert!(matches!(e, StoreError::Foreign { .. }), "{sql}: {e}");
        }
    }

    #[test]
    fn an_empty_file_and_cadences_own_databases_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        drop(Store::open(&empty).unwrap());
        // A new database says whose it is.
        let c = Connection::open(&empty).unwrap();
        let id: i64 = c
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .unwrap();
        assert_eq!(id, APPLICATION_ID);
        drop(c);
        drop(Store::open(&empty).unwrap());
        // A version 1 database (no application id then) is upgraded.
        let (old, _) = foreign(dir.path(), &format!("{SCHEMA_V1} PRAGMA user_version = 1;"));
        drop(Store::open(&old).unwrap());
        assert!(Store::open_read(&old).is_ok());
    }

    #[test]
    fn a_symlink_or_a_hard_link_to_a_database_in_use_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let first = Store::open(&path).unwrap();
        let sym = dir.path().join("sym.db");
        std::os::unix::fs::symlink(&path, &sym).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        let hard = dir.path().join("elsewhere").join("hard.db");
        std::fs::hard_link(&path, &hard).unwrap();
        let dotted = dir.path().join(".").join("w.db");
        for other in [&sym, &hard, &dotted] {
            let e = Store::open(other).map(|_| ()).unwrap_err();
            assert!(
                matches!(e, StoreError::Locked { .. }),
                "{}: {e}",
                other.display()
            );
            assert!(e.to_string().contains("another link"), "{e}");
            assert!(e.is_usage());
        }
        // Once the first is closed, the file is free by any of its names.
        drop(first);
        drop(Store::open(&hard).unwrap());
        drop(Store::open(&sym).unwrap());
    }

    /// `files` of `from` copied into a new directory `to`, made read-only (files 444,
    /// the directory 555), its `-shm` one that cannot be made: root ignores the modes, so
    /// a dangling link stands where the index would go.
    fn read_only_copy(from: &Path, to: &Path, files: &[&str]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(to).unwrap();
        for f in files {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
            std::fs::set_permissions(to.join(f), std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        std::os::unix::fs::symlink("/nonexistent/cadence/shm", to.join("w.db-shm")).unwrap();
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o555)).unwrap();
        to.join("w.db")
    }

    #[test]
    fn f138_a_read_only_copy_with_its_wal_and_no_shm_is_read_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        std::fs::create_dir(&live).unwrap();
        let mut w = Store::open(&live.join("w.db")).unwrap();
        for i in 0..5 {
            w.insert_probe(&crate::rows::tests::probe("api", 1_000 + i, true), &[])
                .unwrap();
        }
        // Copied while the writer runs: the probes are in the WAL, not yet in the file.
        assert!(std::fs::metadata(live.join("w.db-wal")).unwrap().len() > 0);
        let ro = read_only_copy(&live, &dir.path().join("ro"), &["w.db", "w.db-wal"]);
        let r = Store::open_read(&ro).unwrap();
        assert_eq!(r.probes(None, 0).unwrap().len(), 5);
        drop(r);
        // Closed cleanly: the file alone holds everything, and a copy of it reads too.
        drop(w);
        let ro2 = read_only_copy(&live, &dir.path().join("ro2"), &["w.db"]);
        let r = Store::open_read(&ro2).unwrap();
        assert_eq!(r.probes(None, 0).unwrap().len(), 5);
        drop(r);
        for d in ["ro", "ro2"] {
            let d = dir.path().join(d);
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}
