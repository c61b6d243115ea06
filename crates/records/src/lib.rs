//! Records files: the one writer (bench and proxy) and the one streaming reader
//! (`report`, `compare`), so the format's rules (JSON Lines, rotation, `.zst`, torn
//! lines, wall-clock anchors) live in one place; and the record thread both the bench
//! and the proxy hand records to. A crate of its own so the proxy shares them without
//! depending on the bench (its tokenizer, its progress bars).

#![warn(missing_docs)]

pub mod reader;
pub mod thread;
pub mod writer;

pub use reader::{Damage, ReadError, RecordsReader};
pub use thread::{RecordSender, RecordThread, SinkError, Sinks, FLUSH_EVERY};
pub use writer::{rotated, RecordsConfig, RecordsError, RecordsWriter, WriterStatus};

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::runlog::{anchor_line, level_line, Anchor, LevelMeta, RecordsLine};
    use cadence_core::{Chunk, Outcome, RequestRecord};
    use std::path::PathBuf;

    fn rec(index: u64) -> RequestRecord {
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        r.sent_ns = Some(index * 1_000);
        r.chunks = vec![Chunk(index * 1_000 + 10, Some(1))];
        r.end_ns = Some(index * 1_000 + 20);
        r
    }

    fn json(r: &RequestRecord) -> String {
        serde_json::to_string(r).unwrap()
    }

    fn meta(level: u32) -> LevelMeta {
        LevelMeta::new(level, format!("level {level}"))
    }

    fn indices(files: &[PathBuf]) -> (Vec<u64>, Damage) {
        let mut reader = RecordsReader::open(files);
        let idx = reader
            .by_ref()
            .filter_map(|l| match l.unwrap() {
                RecordsLine::Record(r) => Some(r.index),
                _ => None,
            })
            .collect();
        (idx, reader.damage().clone())
    }

    #[test]
    fn a_torn_line_costs_only_its_torn_part() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("crashed.jsonl");
        let torn = &json(&rec(1))[..17];
        // A crash cut record 1; the next run's anchor, and later a record, were glued on.
        let text = format!(
            "{}\n{torn}{}\n{}\n{torn}{}\n{}\n{torn}",
            json(&rec(0)),
            anchor_line(Anchor { unix_ms: 5 }),
            json(&rec(2)),
            json(&rec(3)),
            level_line(&meta(0)),
        );
        std::fs::write(&p, text).unwrap();
        let mut reader = RecordsReader::open(std::slice::from_ref(&p));
        let lines: Vec<RecordsLine> = reader.by_ref().map(Result::unwrap).collect();
        let idx: Vec<u64> = lines
            .iter()
            .filter_map(|l| match l {
                RecordsLine::Record(r) => Some(r.index),
                _ => None,
            })
            .collect();
        assert_eq!(idx, vec![0, 2, 3]);
        assert!(lines.contains(&RecordsLine::Anchor(Anchor { unix_ms: 5 })));
        assert!(lines.contains(&RecordsLine::Level(meta(0))));
        let d = reader.damage();
        assert_eq!(d.torn, 3, "two glued lines and a cut-off end: {d:?}");
        let w = d.warning().unwrap();
        assert!(
            w.contains("crashed.jsonl line 2") && w.contains("line 4"),
            "{w}"
        );
        // The first pass finds the meta line glued onto a torn record too.
        let metas: Vec<RecordsLine> = RecordsReader::open(std::slice::from_ref(&p))
            .meta_only()
            .map(Result::unwrap)
            .collect();
        assert_eq!(metas.len(), 2, "{metas:?}");
    }

    #[test]
    fn a_line_that_is_not_a_record_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.jsonl");
        std::fs::write(&p, format!("{}\nnot json\n{{\"x\":1}}\n", json(&rec(0)))).unwrap();
        let errs: Vec<String> = RecordsReader::open(std::slice::from_ref(&p))
            .filter_map(|l| l.err().map(|e| e.to_string()))
            .collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("bad.jsonl line 2"), "{errs:?}");
        assert!(errs[1].contains("bad.jsonl line 3"), "{errs:?}");
    }

    fn write_all(config: RecordsConfig, n: u64) -> u64 {
        let mut w = RecordsWriter::open(config).unwrap();
        w.write_header(&anchor_line(Anchor { unix_ms: 7 }));
        for i in 0..n {
            w.write_record(&rec(i));
            if i % 50 == 49 {
                // What the record thread's idle flushes do: compressed, a block ends.
                w.flush();
            }
        }
        w.write_line(&level_line(&meta(0)));
        w.finish().unwrap()
    }

    #[test]
    fn zst_files_round_trip_and_read_back_transparently() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.jsonl.zst");
        assert_eq!(write_all(RecordsConfig::new(&p), 500), 500);
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw[..4], [0x28, 0xB5, 0x2F, 0xFD], "written compressed");
        let lines: Vec<RecordsLine> = RecordsReader::open(std::slice::from_ref(&p))
            .map(Result::unwrap)
            .collect();
        assert_eq!(lines.len(), 502);
        assert_eq!(lines[0], RecordsLine::Anchor(Anchor { unix_ms: 7 }));
        assert_eq!(lines[1], RecordsLine::Record(Box::new(rec(0))));
        assert_eq!(lines[500], RecordsLine::Record(Box::new(rec(499))));
        assert_eq!(lines[501], RecordsLine::Level(meta(0)));
        // A compressed file cut off by a crash keeps what decodes.
        let cut = dir.path().join("cut.jsonl.zst");
        std::fs::write(&cut, &raw[..raw.len() / 2]).unwrap();
        let (idx, damage) = indices(&[cut]);
        assert!(!idx.is_empty() && idx.len() < 500, "{}", idx.len());
        assert_eq!(idx, (0..idx.len() as u64).collect::<Vec<_>>());
        assert_eq!(damage.torn, 1, "{damage:?}");
    }

    #[test]
    fn rotated_files_read_back_in_order_each_with_its_anchor() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["plain.jsonl", "packed.jsonl.zst"] {
            let p = dir.path().join(name);
            let config = RecordsConfig {
                max_bytes: 2_000,
                keep: 100,
                ..RecordsConfig::new(&p)
            };
            write_all(config, 300);
            let mut files: Vec<PathBuf> = (1..100)
                .map(|k| rotated(&p, k))
                .filter(|f| f.exists())
                .collect();
            assert!(files.len() >= 2, "{name} rotated: {}", files.len());
            files.reverse();
            files.push(p.clone());
            let (idx, damage) = indices(&files);
            assert_eq!(idx, (0..300).collect::<Vec<_>>(), "{name}");
            assert_eq!(damage.torn, 0);
            for f in &files {
                let first = RecordsReader::open(std::slice::from_ref(f)).next();
                assert!(
                    matches!(first, Some(Ok(RecordsLine::Anchor(_)))),
                    "{} starts with the anchor",
                    f.display()
                );
            }
        }
    }

    #[test]
    fn anchors_put_appended_runs_on_one_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("proxy.jsonl");
        for unix_ms in [1_000, 4_000] {
            let mut w = RecordsWriter::open(RecordsConfig {
                append: true,
                ..RecordsConfig::new(&p)
            })
            .unwrap();
            w.write_header(&anchor_line(Anchor { unix_ms }));
            w.write_record(&rec(1));
            w.finish().unwrap();
        }
        let sent: Vec<Option<u64>> = RecordsReader::open(std::slice::from_ref(&p))
            .on_one_timeline(Some(1_000))
            .records(|_| {})
            .map(|r| r.unwrap().sent_ns)
            .collect();
        assert_eq!(sent, vec![Some(1_000), Some(3_000_001_000)]);
    }
}
