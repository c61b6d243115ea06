//! Measurement harnesses behind BENCHMARKS.md: programs and scripts that measure
//! Cadence and this machine, kept apart from the product crates. Each binary in
//! `src/bin` and each script beside this crate says what it measures and how to run it;
//! BENCHMARKS.md ("The harnesses") lists them all.
