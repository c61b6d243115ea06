//! Each tool's own headline figures, rebuilt by Cadence from the per-request values of
//! the tool's saved output (tests/fixtures/import/), match what the tool saved: the
//! real tools' files (AIPerf, GuideLLM) and the hand-written ones (vLLM, LLMPerf).

use cadence_import::{import, Tool};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/import")
        .join(name)
}

/// Every figure has a rebuild within `tol` (relative, or absolute below 1e-9) of the
/// printed value, except those named in `unrebuilt`; returns how many were checked.
fn check(name: &str, tool: Tool, tol: f64, unrebuilt: &[&str]) -> usize {
    let imp = import(&fixture(name), None).unwrap();
    assert_eq!(imp.tool, tool, "{name} detected as {}", imp.tool);
    assert!(!imp.figures.is_empty(), "{name}: no figures read");
    let mut bad = Vec::new();
    for f in &imp.figures {
        match (f.printed, f.rebuilt) {
            (Some(p), Some(r)) => {
                let ok = (r - p).abs() <= tol * p.abs().max(1e-9) || (r - p).abs() < 1e-9;
                if !ok {
                    bad.push(format!("{}: printed {p}, rebuilt {r}", f.name));
                }
            }
            (Some(_), None) if unrebuilt.contains(&f.name.as_str()) => {}
            _ => bad.push(format!("{}: {:?} / {:?}", f.name, f.printed, f.rebuilt)),
        }
    }
    assert!(bad.is_empty(), "{name}:\n{}", bad.join("\n"));
    imp.figures.len()
}

#[test]
fn aiperf_figures_rebuild_from_its_records() {
    let n = check("aiperf/profile_export.jsonl", Tool::Aiperf, 1e-6, &[]);
    assert!(n >= 25, "{n} figures");
}

#[test]
fn guidellm_figures_rebuild_from_its_requests() {
    let n = check("guidellm-benchmarks.json", Tool::Guidellm, 1e-6, &[]);
    assert!(n >= 20, "{n} figures");
}
