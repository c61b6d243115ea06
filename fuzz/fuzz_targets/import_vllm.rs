//! The vllm importer: any file given to `cadence report --from vllm`, imported and
//! loaded into a report, ends in a report or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cadence_fuzz::import(cadence_import::Tool::Vllm, data));
