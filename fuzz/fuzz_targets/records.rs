//! The records reader, plain and zstd (the input compressed first when its selector
//! says so): never a panic, and every record it hands out, written by the records
//! writer (plain or `.zst`) and read again, comes back equal, with no damage.
#![no_main]

use cadence_base::RequestRecord;
use cadence_fuzz::scratch;
use cadence_records::{RecordsConfig, RecordsReader, RecordsWriter};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

/// The records of `path` up to the first error, and whether anything was damaged.
fn read(path: &PathBuf) -> (Vec<RequestRecord>, bool) {
    let reader = RecordsReader::open(std::slice::from_ref(path));
    let mut out = Vec::new();
    let mut failed = false;
    for r in reader.records(|_| {}) {
        match r {
            Ok(rec) => out.push(rec),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    (out, failed)
}

fuzz_target!(|data: &[u8]| {
    let [sel, body @ ..] = data else {
        return;
    };
    let input = scratch("records-input");
    let bytes = if sel & 1 == 1 {
        zstd::encode_all(body, 1).expect("zstd compresses in memory")
    } else {
        body.to_vec()
    };
    std::fs::write(&input, bytes).expect("the input is written");
    let (records, _) = read(&input);
    let out = scratch(if sel & 2 == 2 {
        "again.jsonl.zst"
    } else {
        "again.jsonl"
    });
    let mut w = RecordsWriter::open(RecordsConfig::new(&out)).expect("the records file opens");
    for r in &records {
        w.write_record(r);
    }
    w.finish().expect("the records are written");
    let (again, failed) = read(&out);
    assert!(!failed, "the reader refused a line the writer wrote");
    let mut reader = RecordsReader::open(std::slice::from_ref(&out));
    for _ in reader.by_ref() {}
    assert_eq!(reader.damage().torn, 0, "{:?}", reader.damage().named);
    assert_eq!(again, records);
});
