//! The one records reader: a stream of the record, level, run and anchor lines of one
//! or several records files (zstd read back transparently), one line in memory at a
//! time. A line torn by a crash (the next line glued onto a partial one) costs the torn
//! part only: it is skipped, counted and named, and the glued line is read.

use cadence_core::runlog::{parse_line, RecordsLine};
use cadence_core::RequestRecord;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// zstd's frame magic number, little-endian on disk.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// How many damaged places are named one by one (the rest are counted).
const NAMED_DAMAGE: usize = 5;

/// Why records could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A file could not be opened or read (missing, unreadable, or its zstd stream is
    /// broken).
    #[error("cannot read {path}: {error}")]
    Open {
        /// The file that failed.
        path: PathBuf,
        /// The I/O error the read gave.
        error: std::io::Error,
    },
    /// A whole line (not a torn one) is neither a request record nor a metadata line: not
    /// UTF-8, or JSON that is not one of Cadence's lines.
    #[error(
        "{path} line {line} is neither a request record nor a Cadence metadata line: {reason}"
    )]
    Line {
        /// The file holding the line.
        path: PathBuf,
        /// The line's number in that file (1-based).
        line: u64,
        /// What is wrong with it, in words.
        reason: String,
    },
}

/// Damage found while reading: torn lines skipped, cut-off ends, broken compression.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Damage {
    /// Lines (or parts of lines) skipped because a crash cut them off.
    pub torn: u64,
    /// The first few, in plain words (file and line).
    pub named: Vec<String>,
}

impl Damage {
    fn note(&mut self, what: String) {
        self.torn += 1;
        if self.named.len() < NAMED_DAMAGE {
            self.named.push(what);
        }
    }

    /// One warning for a report, when anything was skipped.
    pub fn warning(&self) -> Option<String> {
        (self.torn > 0).then(|| {
            let more = self.torn.saturating_sub(self.named.len() as u64);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!(
                "{} damaged line(s) left out (cut off by a crash mid-write): {}{more}",
                self.torn,
                self.named.join("; ")
            )
        })
    }
}

/// One file's lines.
struct Lines {
    path: PathBuf,
    inner: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
    /// The length of the last line read, when it was over [`MAX_LINE_BYTES`].
    oversized: Option<usize>,
}

/// The longest records line read: 64 MiB, ten times a record of bench's default
/// ceiling of 262,144 chunks; a longer line is skipped and named (FAULTS 123), so a
/// file written without a ceiling cannot make `report` hold a line of any size.
pub const MAX_LINE_BYTES: usize = 64 << 20;

impl Lines {
    fn open(path: &Path) -> Result<Lines, ReadError> {
        let open_err = |error| ReadError::Open {
            path: path.to_path_buf(),
            error,
        };
        let mut file = BufReader::with_capacity(256 * 1024, File::open(path).map_err(open_err)?);
        let compressed = file.fill_buf().map_err(open_err)?.starts_with(&ZSTD_MAGIC);
        let inner: Box<dyn BufRead + Send> = if compressed {
            let dec = zstd::stream::read::Decoder::with_buffer(file).map_err(open_err)?;
            Box::new(BufReader::with_capacity(256 * 1024, dec))
        } else {
            Box::new(file)
        };
        Ok(Lines {
            path: path.to_path_buf(),
            inner,
            line: 0,
            buf: Vec::with_capacity(4096),
            oversized: None,
        })
    }

    /// The next line into `buf` (newline stripped): `Some(true)` when it ended with a
    /// newline, `Some(false)` for a last line without one, `None` at the end. A line
    /// longer than [`MAX_LINE_BYTES`] is read through without being kept: `buf` holds
    /// nothing and `oversized` says how long it was (FAULTS 123).
    fn next(&mut self) -> std::io::Result<Option<bool>> {
        self.buf.clear();
        self.oversized = None;
        let mut n = 0usize;
        loop {
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if self.oversized.is_none() && self.buf.len() + take > MAX_LINE_BYTES {
                self.buf.clear();
                self.buf.shrink_to(4096);
                self.oversized = Some(0);
            }
            if self.oversized.is_none() {
                self.buf.extend_from_slice(&chunk[..take]);
            }
            n += take;
            self.inner.consume(take);
            if done {
                break;
            }
        }
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if let Some(len) = self.oversized.as_mut() {
            *len = n;
            return Ok(Some(true));
        }
        let complete = self.buf.last() == Some(&b'\n');
        if complete {
            self.buf.pop();
        }
        Ok(Some(complete))
    }
}

/// Reads the lines of several files in order, as if they were one.
pub struct RecordsReader {
    files: Vec<PathBuf>,
    next_file: usize,
    current: Option<Lines>,
    /// Skip request records (without parsing them): the first pass over the files.
    meta_only: bool,
    /// The earliest anchor of the files (see [`RecordsReader::on_one_timeline`]).
    base_unix_ms: Option<u64>,
    offset_ns: u64,
    damage: Damage,
}

impl RecordsReader {
    /// Every line of `files`, in order. Files open as they are reached.
    pub fn open(files: &[PathBuf]) -> RecordsReader {
        RecordsReader {
            files: files.to_vec(),
            next_file: 0,
            current: None,
            meta_only: false,
            base_unix_ms: None,
            offset_ns: 0,
            damage: Damage::default(),
        }
    }

    /// Only the level, run and anchor lines: request records are skipped unparsed, so
    /// a first pass costs little more than reading the bytes.
    pub fn meta_only(mut self) -> RecordsReader {
        self.meta_only = true;
        self
    }

    /// Puts runs on one timeline: the records after an anchor line are moved by the
    /// anchor's distance from `base_unix_ms` (the earliest anchor, from a first pass),
    /// so two proxy runs appended to one file do not both start at 0.
    pub fn on_one_timeline(mut self, base_unix_ms: Option<u64>) -> RecordsReader {
        self.base_unix_ms = base_unix_ms;
        self
    }

    /// What was skipped so far.
    pub fn damage(&self) -> &Damage {
        &self.damage
    }

    /// Only the request records; other lines go to `meta`.
    pub fn records(
        self,
        mut meta: impl FnMut(RecordsLine),
    ) -> impl Iterator<Item = Result<RequestRecord, ReadError>> {
        self.filter_map(move |l| match l {
            Ok(RecordsLine::Record(r)) => Some(Ok(*r)),
            Ok(other) => {
                meta(other);
                None
            }
            Err(e) => Some(Err(e)),
        })
    }

    /// One line of the current file, parsed (`None`: nothing to hand out).
    fn parse(&mut self, complete: bool) -> Option<Result<RecordsLine, ReadError>> {
        let cur = self.current.as_ref().expect("a file is open");
        let text = cur.buf.trim_ascii();
        if text.is_empty() {
            return None;
        }
        if self.meta_only
            && !text.starts_with(b"{\"cadence_")
            && memchr::memmem::find(text, b"{\"cadence_").is_none()
        {
            return None;
        }
        let parsed = std::str::from_utf8(text)
            .map_err(|_| None)
            .and_then(|s| parse_line(s).map_err(Some));
        let where_ = || format!("{} line {}", cur.path.display(), cur.line);
        let line = match parsed {
            Ok(l) => l,
            Err(_) if !complete && text.starts_with(b"{") => {
                let w = where_();
                self.damage.note(format!("{w} (the last, cut off)"));
                return None;
            }
            Err(e) if text.starts_with(b"{") && e.as_ref().is_none_or(|e| !e.is_data()) => {
                let w = where_();
                let recovered = recover(text);
                self.damage.note(match &recovered {
                    Some(_) => format!("{w} (a cut-off line with the next one glued on)"),
                    None => w,
                });
                recovered?
            }
            Err(e) => {
                return Some(Err(ReadError::Line {
                    path: cur.path.clone(),
                    line: cur.line,
                    reason: e.map_or("not UTF-8 text".into(), |e| e.to_string()),
                }));
            }
        };
        self.place(line)
    }

    /// Applies anchors to the records that follow them; drops records in meta-only mode.
    fn place(&mut self, line: RecordsLine) -> Option<Result<RecordsLine, ReadError>> {
        match line {
            RecordsLine::Record(_) if self.meta_only => None,
            RecordsLine::Record(mut r) => {
                if self.offset_ns > 0 {
                    shift_clock(&mut r, self.offset_ns);
                }
                Some(Ok(RecordsLine::Record(r)))
            }
            RecordsLine::Anchor(a) => {
                if let Some(base) = self.base_unix_ms {
                    self.offset_ns = a.unix_ms.saturating_sub(base).saturating_mul(1_000_000);
                }
                Some(Ok(RecordsLine::Anchor(a)))
            }
            other => Some(Ok(other)),
        }
    }
}

impl Iterator for RecordsReader {
    type Item = Result<RecordsLine, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.current.is_none() {
                let path = self.files.get(self.next_file)?;
                self.next_file += 1;
                match Lines::open(path) {
                    Ok(l) => self.current = Some(l),
                    Err(e) => return Some(Err(e)),
                }
            }
            let cur = self.current.as_mut().expect("opened above");
            match cur.next() {
                Ok(Some(_)) if cur.oversized.is_some() => {
                    let w = format!(
                        "{} line {}: {} bytes, over the {} MiB a records line may hold (skipped)",
                        cur.path.display(),
                        cur.line,
                        cur.oversized.unwrap_or(0),
                        MAX_LINE_BYTES >> 20
                    );
                    self.damage.note(w);
                }
                Ok(Some(complete)) => {
                    if let Some(item) = self.parse(complete) {
                        return Some(item);
                    }
                }
                Ok(None) => self.current = None,
                Err(e) => {
                    // A compressed file cut off by a crash: what decoded so far counts.
                    let w = format!(
                        "{} after line {} (the rest does not decode: {e})",
                        cur.path.display(),
                        cur.line
                    );
                    self.damage.note(w);
                    self.current = None;
                }
            }
        }
    }
}

/// The complete line glued onto the end of a torn one: the first place a record or a
/// meta line starts from which the rest parses.
fn recover(text: &[u8]) -> Option<RecordsLine> {
    let starts = memchr::memmem::find_iter(text, b"{\"index\":")
        .chain(memchr::memmem::find_iter(text, b"{\"cadence_"))
        .filter(|&i| i > 0);
    let mut starts: Vec<usize> = starts.collect();
    starts.sort_unstable();
    starts.into_iter().find_map(|i| {
        std::str::from_utf8(&text[i..])
            .ok()
            .and_then(|s| parse_line(s).ok())
    })
}

/// Moves every clock reading of a record later by `by` ns.
fn shift_clock(r: &mut RequestRecord, by: u64) {
    for t in [
        &mut r.scheduled_ns,
        &mut r.sent_ns,
        &mut r.headers_ns,
        &mut r.first_content_ns,
        &mut r.end_ns,
    ]
    .into_iter()
    .flatten()
    {
        *t = t.saturating_add(by);
    }
    for c in &mut r.chunks {
        c.0 = c.0.saturating_add(by);
    }
}

/// The first line of a file (decompressed), at most `limit` bytes of it: enough to
/// tell a saved JSON report from a records file without reading either whole.
pub fn first_line(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut lines = Lines::open(path)?;
    let mut buf = Vec::new();
    (&mut lines.inner)
        .take(limit)
        .read_until(b'\n', &mut buf)
        .map_err(|error| ReadError::Open {
            path: path.to_path_buf(),
            error,
        })?;
    Ok(buf)
}
