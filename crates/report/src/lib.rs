//! Renderers of Cadence's report model: each format is a pure function of a
//! [`cadence_core::Report`], so what a user reads and what a file holds cannot diverge.

pub mod console;
pub mod json;
