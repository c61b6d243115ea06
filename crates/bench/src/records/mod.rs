//! Records files: the one writer (bench and proxy) and the one streaming reader
//! (`report`, `compare`), so the format's rules (JSON Lines, rotation, `.zst`, torn
//! lines, wall-clock anchors) live in one place.

pub mod reader;
pub mod writer;

pub use reader::{Damage, ReadError, RecordsReader};
pub use writer::{rotated, RecordsConfig, RecordsError, RecordsWriter, WriterStatus};
