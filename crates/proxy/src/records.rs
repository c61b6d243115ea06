//! Where the proxy's records go: the shared records writer (`cadence_records`:
//! JSON Lines, rotation by size, `.zst`) and, with `--otlp`, the OTLP exports' sink
//! (spans, metrics), on one record thread of its own so disk I/O and span making never
//! stall a stream.
//! The file is appended to, and each proxy run starts with a wall-clock anchor so runs
//! appended across restarts read back on one timeline.

use cadence_core::runlog::{anchor_line, Anchor};
use cadence_core::{RecordSink, RequestRecord};
use cadence_otlp::signals::Sinks as OtlpSinks;
use cadence_records::RecordsWriter;
pub use cadence_records::{rotated, RecordsConfig, RecordsError, WriterStatus};
use cadence_records::{RecordSender, RecordThread, SinkError, Sinks};

/// What the record thread hands each finished record to: the records file, the
/// OTLP exports, or both.
pub struct ProxySinks {
    file: Option<RecordsWriter>,
    spans: Option<OtlpSinks>,
}

impl RecordSink for ProxySinks {
    fn accept(&mut self, r: &RequestRecord) {
        if let Some(f) = self.file.as_mut() {
            f.accept(r);
        }
        if let Some(s) = self.spans.as_mut() {
            s.accept(r);
        }
    }
}

impl Sinks for ProxySinks {
    fn idle(&mut self) {
        if let Some(f) = self.file.as_mut() {
            f.flush();
        }
    }
}

/// The sending side.
pub struct RecordWriter {
    tx: Option<RecordSender<ProxySinks>>,
    thread: Option<RecordThread<ProxySinks>>,
    status: Option<WriterStatus>,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWriter").finish_non_exhaustive()
    }
}

impl RecordWriter {
    /// Opens (appends to) the file now, so a bad path fails before the proxy listens,
    /// and writes the run's anchor: the wall-clock time of its clock's 0.
    pub fn start(config: RecordsConfig, anchor: Anchor) -> Result<RecordWriter, RecordsError> {
        Self::with_spans(Some(config), anchor, None)
    }

    /// The record thread for the records file (`config`) and the OTLP exports' sink
    /// (`spans`), either of them or both.
    pub fn with_spans(
        config: Option<RecordsConfig>,
        anchor: Anchor,
        spans: Option<OtlpSinks>,
    ) -> Result<RecordWriter, RecordsError> {
        let file = match config {
            Some(mut config) => {
                config.append = true;
                let mut writer = RecordsWriter::open(config)?;
                writer.write_header(&anchor_line(anchor));
                Some(writer)
            }
            None => None,
        };
        let status = file.as_ref().map(RecordsWriter::status);
        let (tx, thread) =
            RecordThread::start(ProxySinks { file, spans }).map_err(|e| match e {
                SinkError::Records(e) => e,
                SinkError::Spawn(_) | SinkError::Panicked => RecordsError::Panicked,
            })?;
        Ok(RecordWriter {
            tx: Some(tx),
            thread: Some(thread),
            status,
        })
    }

    /// Hands a finished request's record to the record thread without waiting.
    pub fn send(&self, rec: RequestRecord) {
        if let Some(tx) = &self.tx {
            tx.send(rec);
        }
    }

    /// Appends a meta line (a `cadence_level` or `cadence_run` JSON object) to the
    /// records file, when there is one.
    pub fn send_meta(&self, line: String) {
        if let Some(tx) = &self.tx {
            tx.with(move |s| {
                if let Some(w) = s.file.as_mut() {
                    w.write_line(&line);
                }
            });
        }
    }

    /// Learns of a write error (a full disk) the moment it happens; `None` without a
    /// records file.
    pub fn status(&self) -> Option<WriterStatus> {
        self.status.clone()
    }

    /// Writes what is queued, flushes, and returns how many records were written (0
    /// without a records file); the span sink's last spans (open sessions) are offered.
    pub fn finish(mut self) -> Result<u64, RecordsError> {
        self.tx.take();
        match self.thread.take().map(RecordThread::finish) {
            Some(Ok(ProxySinks { file, spans })) => {
                drop(spans);
                file.map_or(Ok(0), RecordsWriter::finish)
            }
            Some(Err(_)) => Err(RecordsError::Panicked),
            None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::Outcome;
    use std::path::Path;

    fn lines(p: &Path) -> Vec<RequestRecord> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with("{\"cadence_"))
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
        let anchor = Anchor { unix_ms: 1 };
        let anchor_len = anchor_line(anchor).len() as u64 + 1;
        // Room for 3 records per file besides the anchor each starts with; 2 rotated
        // files kept.
        let w = RecordWriter::start(
            RecordsConfig {
                max_bytes: anchor_len + 3 * one + 2,
                keep: 2,
                ..RecordsConfig::new(&path)
            },
            anchor,
        )
        .unwrap();
        for i in 0..8 {
            w.send(RequestRecord::new(i, Outcome::Succeeded));
        }
        assert_eq!(w.finish().unwrap(), 8);
        let idx = |p: &Path| lines(p).iter().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(idx(&path), vec![6, 7]);
        assert_eq!(idx(&rotated(&path, 1)), vec![3, 4, 5]);
        assert_eq!(idx(&rotated(&path, 2)), vec![0, 1, 2]);
        for k in [1, 2] {
            let text = std::fs::read_to_string(rotated(&path, k)).unwrap();
            assert!(
                text.starts_with(&anchor_line(anchor)),
                "every file is anchored"
            );
        }
        assert!(!rotated(&path, 3).exists());
    }

    #[test]
    fn a_bad_path_fails_at_start() {
        let e = RecordWriter::start(
            RecordsConfig {
                max_bytes: 1 << 20,
                keep: 1,
                ..RecordsConfig::new("/nonexistent-dir/x.jsonl")
            },
            Anchor { unix_ms: 0 },
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x.jsonl"), "{e}");
    }
}
