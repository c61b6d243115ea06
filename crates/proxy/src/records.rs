//! Where the proxy's records go: JSON Lines, one record per finished request, written
//! on a thread of its own so disk I/O never stalls a stream, flushed when traffic
//! pauses and on shutdown, and rotated by size (`FILE` → `FILE.1` → … → `FILE.K`) so
//! a proxy that runs for weeks keeps bounded disk.

use cadence_core::RequestRecord;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Where and how much.
#[derive(Debug, Clone)]
pub struct RecordsConfig {
    pub path: PathBuf,
    /// Rotate when the current file would pass this size.
    pub max_bytes: u64,
    /// Rotated files kept besides the current one.
    pub keep: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("cannot open the records file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing records to {path} failed: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the record writer thread panicked")]
    Panicked,
}

/// What travels to the writer thread: a request record, or a finished meta line
/// (`cadence_level` / `cadence_run`, see `cadence_core::runlog`).
#[derive(Debug)]
enum Line {
    Record(Box<RequestRecord>),
    Meta(String),
}

/// The sending side.
#[derive(Debug)]
pub struct RecordWriter {
    tx: Option<mpsc::Sender<Line>>,
    handle: Option<JoinHandle<Result<u64, RecordsError>>>,
}

impl RecordWriter {
    /// Opens (appends to) the file now, so a bad path fails before the proxy listens.
    pub fn start(config: RecordsConfig) -> Result<RecordWriter, RecordsError> {
        let file = open(&config.path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let (tx, rx) = mpsc::channel::<Line>();
        let handle = std::thread::Builder::new()
            .name("cadence-proxy-records".into())
            .spawn(move || write_loop(config, file, size, rx))
            .map_err(|source| RecordsError::Write {
                path: PathBuf::new(),
                source,
            })?;
        Ok(RecordWriter {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    pub fn send(&self, rec: RequestRecord) {
        if let Some(tx) = &self.tx {
            // The thread lives until `finish`.
            let _ = tx.send(Line::Record(Box::new(rec)));
        }
    }

    /// Appends a meta line (a `cadence_level` or `cadence_run` JSON object).
    pub fn send_meta(&self, line: String) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Line::Meta(line));
        }
    }

    /// Writes what is queued, flushes, and returns how many records were written.
    pub fn finish(mut self) -> Result<u64, RecordsError> {
        self.tx.take();
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(RecordsError::Panicked),
            None => Ok(0),
        }
    }
}

fn open(path: &Path) -> Result<File, RecordsError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| RecordsError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// `FILE.k`.
pub fn rotated(path: &Path, k: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{k}"));
    PathBuf::from(s)
}

fn write_loop(
    config: RecordsConfig,
    file: File,
    mut size: u64,
    rx: mpsc::Receiver<Line>,
) -> Result<u64, RecordsError> {
    let werr = |source| RecordsError::Write {
        path: config.path.clone(),
        source,
    };
    let mut out = BufWriter::new(file);
    let mut written = 0u64;
    let mut dirty = false;
    loop {
        let rec = match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if dirty {
                    out.flush().map_err(werr)?;
                    dirty = false;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let is_record = matches!(rec, Line::Record(_));
        let mut line = match rec {
            Line::Record(r) => serde_json::to_vec(&r).map_err(|e| werr(e.into()))?,
            Line::Meta(m) => m.into_bytes(),
        };
        line.push(b'\n');
        let len = line.len() as u64;
        if size > 0 && size + len > config.max_bytes {
            out.flush().map_err(werr)?;
            drop(out);
            rotate(&config).map_err(werr)?;
            out = BufWriter::new(open(&config.path)?);
            size = 0;
        }
        out.write_all(&line).map_err(werr)?;
        size += len;
        written += u64::from(is_record);
        dirty = true;
    }
    out.flush().map_err(werr)?;
    Ok(written)
}

/// `FILE.(k-1)` → `FILE.k` down to `FILE` → `FILE.1`; the oldest beyond `keep` goes.
fn rotate(config: &RecordsConfig) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::Outcome;

    fn lines(p: &Path) -> Vec<RequestRecord> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn rotates_by_size_and_keeps_every_record_until_the_oldest_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.jsonl");
        let one = serde_json::to_vec(&RequestRecord::new(0, Outcome::Succeeded))
            .unwrap()
            .len() as u64
            + 1;
        // Room for 3 records per file; 2 rotated files kept.
        let w = RecordWriter::start(RecordsConfig {
            path: path.clone(),
            max_bytes: 3 * one + 2,
            keep: 2,
        })
        .unwrap();
        for i in 0..8 {
            w.send(RequestRecord::new(i, Outcome::Succeeded));
        }
        assert_eq!(w.finish().unwrap(), 8);
        let idx = |p: &Path| lines(p).iter().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(idx(&path), vec![6, 7]);
        assert_eq!(idx(&rotated(&path, 1)), vec![3, 4, 5]);
        assert_eq!(idx(&rotated(&path, 2)), vec![0, 1, 2]);
        assert!(!rotated(&path, 3).exists());
    }

    #[test]
    fn a_bad_path_fails_at_start() {
        let e = RecordWriter::start(RecordsConfig {
            path: "/nonexistent-dir/x.jsonl".into(),
            max_bytes: 1 << 20,
            keep: 1,
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x.jsonl"), "{e}");
    }
}
