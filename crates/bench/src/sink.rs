//! Where finished records go: written as JSON Lines the moment each request ends (so a
//! crash or Ctrl-C keeps what was measured), kept for the report, and summarised for
//! the live progress line. Runs on its own thread so file I/O never stalls the client.

use crate::progress::Progress;
use cadence_core::RequestRecord;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// What travels to the writer thread.
#[derive(Debug)]
enum Msg {
    Record(Box<RequestRecord>),
    /// Reply with every record of a level received so far.
    Level(u32, tokio::sync::oneshot::Sender<Vec<RequestRecord>>),
    /// A line for the file only (a level's or the run's metadata, see
    /// `cadence_core::runlog`), written in order with the records.
    Line(String),
}

/// The sending side, cloned into every request task.
#[derive(Debug, Clone)]
pub struct RecordSender(mpsc::Sender<Msg>);

impl RecordSender {
    pub fn send(&self, rec: RequestRecord) {
        // The receiver lives until `RecordSink::finish`, after every task has ended.
        let _ = self.0.send(Msg::Record(Box::new(rec)));
    }

    /// Appends one metadata line (no newline) to the records file, after every record
    /// sent before it.
    pub fn write_line(&self, line: String) {
        let _ = self.0.send(Msg::Line(line));
    }

    /// The records of `level` so far. The channel is FIFO, so once a level's run has
    /// returned (every task ended and sent), all of its records are included.
    pub async fn level_records(&self, level: u32) -> Vec<RequestRecord> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.0.send(Msg::Level(level, tx)).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// The receiving thread.
pub struct RecordSink {
    handle: JoinHandle<(Vec<RequestRecord>, Option<std::io::Error>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot create the records file {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing records failed: {0}")]
    Write(#[from] std::io::Error),
    #[error("the record writer thread panicked")]
    Panicked,
}

impl RecordSink {
    /// Starts the writer. The file is created (truncated) now, so a bad path fails
    /// before any request is sent.
    pub fn start(
        path: Option<&Path>,
        progress: Progress,
    ) -> Result<(RecordSender, RecordSink), SinkError> {
        let mut out = match path {
            Some(p) => Some(BufWriter::new(File::create(p).map_err(|source| {
                SinkError::Create {
                    path: p.to_path_buf(),
                    source,
                }
            })?)),
            None => None,
        };
        let (tx, rx) = mpsc::channel::<Msg>();
        let handle = std::thread::Builder::new()
            .name("cadence-records".into())
            .spawn(move || {
                let mut all = Vec::new();
                let mut write_error = None;
                for msg in rx {
                    let rec = match msg {
                        Msg::Record(rec) => *rec,
                        Msg::Level(level, reply) => {
                            let recs = all
                                .iter()
                                .filter(|r: &&RequestRecord| r.level == level)
                                .cloned()
                                .collect();
                            let _ = reply.send(recs);
                            continue;
                        }
                        Msg::Line(line) => {
                            if let (Some(w), None) = (out.as_mut(), write_error.as_ref()) {
                                let res = w
                                    .write_all(line.as_bytes())
                                    .and_then(|_| w.write_all(b"\n"))
                                    .and_then(|_| w.flush());
                                if let Err(e) = res {
                                    write_error = Some(e);
                                }
                            }
                            continue;
                        }
                    };
                    if let (Some(w), None) = (out.as_mut(), write_error.as_ref()) {
                        let res = serde_json::to_writer(&mut *w, &rec)
                            .map_err(std::io::Error::from)
                            .and_then(|_| w.write_all(b"\n"))
                            .and_then(|_| w.flush());
                        if let Err(e) = res {
                            write_error = Some(e);
                        }
                    }
                    progress.record(&rec);
                    all.push(rec);
                }
                (all, write_error)
            })
            .map_err(SinkError::Write)?;
        Ok((RecordSender(tx), RecordSink { handle }))
    }

    /// Waits for every sender to be dropped, then returns the records in the order
    /// they finished.
    pub fn finish(self) -> Result<Vec<RequestRecord>, SinkError> {
        match self.finish_all()? {
            (_, Some(e)) => Err(SinkError::Write(e)),
            (all, None) => Ok(all),
        }
    }

    /// As [`RecordSink::finish`], but a failed write to the file keeps the records: they
    /// come back with the first write error, so the report can still be made.
    pub fn finish_all(self) -> Result<(Vec<RequestRecord>, Option<std::io::Error>), SinkError> {
        self.handle.join().map_err(|_| SinkError::Panicked)
    }
}
