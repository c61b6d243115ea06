//! The one records writer, shared by `bench` and the proxy: JSON Lines written as the
//! run goes, rotated by size (`FILE` → `FILE.1` → … → `FILE.K`), compressed when the
//! path ends in `.zst`, and a write error (a full disk) reported at once through
//! [`WriterStatus`]: writing stops, the run goes on.

use cadence_core::{RecordSink, RequestRecord};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where and how much.
#[derive(Debug, Clone)]
pub struct RecordsConfig {
    /// The records file written (`.zst`: zstd-compressed); rotated files sit beside it as
    /// `FILE.1` … `FILE.K`.
    pub path: PathBuf,
    /// Rotate when the current file would pass this size (`u64::MAX`: never). With
    /// compression, what the encoder holds unflushed (at most a flush period's worth)
    /// counts at its uncompressed size, so a file rotates early rather than late.
    pub max_bytes: u64,
    /// Rotated files kept besides the current one.
    pub keep: u32,
    /// Append to an existing file (the proxy across restarts) instead of truncating it.
    pub append: bool,
}

impl RecordsConfig {
    /// One file, truncated at start, never rotated.
    pub fn new(path: impl Into<PathBuf>) -> RecordsConfig {
        RecordsConfig {
            path: path.into(),
            max_bytes: u64::MAX,
            keep: 0,
            append: false,
        }
    }

    /// Whether the file is written zstd-compressed (its name ends in `.zst`).
    pub fn compressed(&self) -> bool {
        self.path.extension().is_some_and(|e| e == "zst")
    }
}

/// Why the records file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The file could not be created or opened (or the zstd encoder set up on it).
    #[error("cannot open the records file {path}: {error}")]
    Open {
        /// The records file.
        path: PathBuf,
        /// The I/O error opening gave.
        error: std::io::Error,
    },
    /// A write, flush, rotation or the final close failed (a full disk, say); the first
    /// such error.
    #[error("writing records to {path} failed: {error}")]
    Write {
        /// The records file.
        path: PathBuf,
        /// The first I/O error writing gave.
        error: std::io::Error,
    },
    /// The thread owning the writer panicked or could not be started, so the outcome is
    /// unknown.
    #[error("the record writer thread panicked")]
    Panicked,
}

/// Whether the writer has failed, readable from any thread while the run goes on.
#[derive(Debug, Clone, Default)]
pub struct WriterStatus(Arc<StatusInner>);

#[derive(Debug, Default)]
struct StatusInner {
    error: Mutex<Option<String>>,
    failed: tokio::sync::Notify,
}

impl WriterStatus {
    /// The first write error, in plain words (path included), once there was one.
    pub fn error(&self) -> Option<String> {
        self.0.error.lock().ok().and_then(|e| e.clone())
    }

    /// Resolves with the error once the writer fails (at once if it already has).
    pub async fn failed(&self) -> String {
        loop {
            let notified = self.0.failed.notified();
            if let Some(e) = self.error() {
                return e;
            }
            notified.await;
        }
    }

    fn set(&self, message: String) {
        if let Ok(mut e) = self.0.error.lock() {
            e.get_or_insert(message);
        }
        self.0.failed.notify_waiters();
    }
}

/// A file that counts the bytes that reached it.
struct Counted {
    file: File,
    bytes: u64,
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

enum Out {
    Plain(BufWriter<Counted>),
    /// The encoder, and the uncompressed bytes it took since its last flush.
    Zstd(zstd::stream::write::Encoder<'static, Counted>, u64),
}

impl Out {
    fn open(config: &RecordsConfig, append: bool) -> Result<Out, RecordsError> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&config.path)
            .map_err(|error| RecordsError::Open {
                path: config.path.clone(),
                error,
            })?;
        let bytes = file.metadata().map_or(0, |m| m.len());
        let counted = Counted { file, bytes };
        Ok(if config.compressed() {
            // Level 3 (zstd's default): several hundred MB/s, ~10x smaller JSON.
            let enc = zstd::stream::write::Encoder::new(counted, 3).map_err(|error| {
                RecordsError::Open {
                    path: config.path.clone(),
                    error,
                }
            })?;
            Out::Zstd(enc, 0)
        } else {
            Out::Plain(BufWriter::with_capacity(64 * 1024, counted))
        })
    }

    fn size(&self) -> u64 {
        match self {
            Out::Plain(w) => w.get_ref().bytes + w.buffer().len() as u64,
            Out::Zstd(e, pending) => e.get_ref().bytes + *pending,
        }
    }

    fn write_all(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Plain(w) => w.write_all(line),
            Out::Zstd(e, pending) => {
                *pending += line.len() as u64;
                e.write_all(line)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            Out::Zstd(e, pending) => {
                *pending = 0;
                e.flush()
            }
        }
    }

    /// Flushes and, compressed, ends the zstd frame (so the file reads back whole).
    fn finish(self) -> std::io::Result<()> {
        match self {
            Out::Plain(mut w) => w.flush(),
            Out::Zstd(e, _) => e.finish().and_then(|mut c| c.flush()),
        }
    }
}

/// Writes records and meta lines to the records file. Not a thread of its own: it runs
/// wherever its owner does (the bench's record thread, the proxy's).
pub struct RecordsWriter {
    config: RecordsConfig,
    /// `None` once writing failed.
    out: Option<Out>,
    status: WriterStatus,
    first_error: Option<std::io::Error>,
    written: u64,
    scratch: Vec<u8>,
    /// Lines every file starts with, rotated ones too (the run's anchor).
    header: Vec<u8>,
}

impl RecordsWriter {
    /// Opens the file now, so a bad path fails before any request is sent.
    pub fn open(config: RecordsConfig) -> Result<RecordsWriter, RecordsError> {
        let out = Out::open(&config, config.append)?;
        Ok(RecordsWriter {
            config,
            out: Some(out),
            status: WriterStatus::default(),
            first_error: None,
            written: 0,
            scratch: Vec::with_capacity(4096),
            header: Vec::new(),
        })
    }

    /// A handle the caller keeps to learn of a write error while the run goes on.
    pub fn status(&self) -> WriterStatus {
        self.status.clone()
    }

    /// Appends one request record.
    pub fn write_record(&mut self, rec: &RequestRecord) {
        if self.out.is_none() {
            return;
        }
        let mut line = std::mem::take(&mut self.scratch);
        line.clear();
        serde_json::to_writer(&mut line, rec).expect("plain data serializes");
        line.push(b'\n');
        if self.write_bytes(&line) {
            self.written += 1;
        }
        self.scratch = line;
    }

    /// Appends one meta line (no newline: a `cadence_level`, `cadence_run` or
    /// `cadence_anchor` object, see `cadence_core::runlog`).
    pub fn write_line(&mut self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.write_bytes(&bytes);
    }

    /// Appends a meta line that every later file of a rotation starts with too (the
    /// run's wall-clock anchor), so each file reads back on its own.
    pub fn write_header(&mut self, line: &str) {
        self.write_line(line);
        self.header.extend_from_slice(line.as_bytes());
        self.header.push(b'\n');
    }

    /// Pushes buffered lines to the file (a failure is reported like any other).
    pub fn flush(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.flush() {
                self.fail(e);
            }
        }
    }

    /// Flushes, closes, and returns how many records were written, or the first error.
    pub fn finish(mut self) -> Result<u64, RecordsError> {
        if let Some(out) = self.out.take() {
            if let Err(e) = out.finish() {
                self.fail(e);
            }
        }
        match self.first_error {
            Some(error) => Err(RecordsError::Write {
                path: self.config.path,
                error,
            }),
            None => Ok(self.written),
        }
    }

    fn write_bytes(&mut self, line: &[u8]) -> bool {
        let Some(out) = self.out.as_mut() else {
            return false;
        };
        let len = line.len() as u64;
        let size = out.size();
        if size > 0 && size.saturating_add(len) > self.config.max_bytes {
            if let Err(e) = self.rotate() {
                self.fail(e);
                return false;
            }
        }
        let Some(out) = self.out.as_mut() else {
            return false;
        };
        match out.write_all(line) {
            Ok(()) => true,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Closes the current file, shifts the rotated ones, and opens a fresh one.
    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(out) = self.out.take() {
            out.finish()?;
        }
        shift_rotated(&self.config)?;
        let mut out = Out::open(&self.config, false).map_err(|e| match e {
            RecordsError::Open { error, .. } | RecordsError::Write { error, .. } => error,
            RecordsError::Panicked => std::io::Error::other("panicked"),
        })?;
        out.write_all(&self.header)?;
        self.out = Some(out);
        Ok(())
    }

    /// Stops writing and reports the error at once; the first one is kept for `finish`.
    fn fail(&mut self, e: std::io::Error) {
        self.out = None;
        self.status.set(format!(
            "writing records to {} failed: {e}; records from here on are not saved, the run goes on",
            self.config.path.display()
        ));
        self.first_error.get_or_insert(e);
    }
}

impl RecordSink for RecordsWriter {
    fn accept(&mut self, record: &RequestRecord) {
        self.write_record(record);
    }
}

/// `FILE.k`.
pub fn rotated(path: &Path, k: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{k}"));
    PathBuf::from(s)
}

/// `FILE.(k-1)` → `FILE.k` down to `FILE` → `FILE.1`; the oldest beyond `keep` goes.
fn shift_rotated(config: &RecordsConfig) -> std::io::Result<()> {
    if config.keep == 0 {
        return std::fs::remove_file(&config.path);
    }
    let _ = std::fs::remove_file(rotated(&config.path, config.keep));
    for k in (1..config.keep).rev() {
        let from = rotated(&config.path, k);
        if from.exists() {
            std::fs::rename(&from, rotated(&config.path, k + 1))?;
        }
    }
    std::fs::rename(&config.path, rotated(&config.path, 1))
}
