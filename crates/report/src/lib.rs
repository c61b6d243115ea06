//! Renderers of Cadence's report model: each format is a pure function of a
//! [`cadence_core::Report`], so what a user reads and what a file holds cannot diverge.

#![warn(missing_docs)]

pub mod cell;
pub mod compare;
pub mod compare_tools;
pub mod console;
pub mod csv;
mod distributions;
pub mod escape;
mod figure;
pub mod html;
mod html_server;
mod html_sessions;
mod imported;
pub mod json;
pub mod markdown;
mod paint;
mod steady;
pub mod svg;
mod sweep;
pub mod table;
mod time_split;

use cadence_core::{Distribution, LevelReport, Report, SloResult};

/// The ITL and TPOT a level's summary tables lead with: the report's `--convention`
/// when set (and computed for the level), else Cadence's own.
pub fn headline(r: &Report, l: &LevelReport) -> (Option<Distribution>, Option<Distribution>) {
    match r
        .convention
        .as_deref()
        .and_then(|c| l.conventions.iter().find(|v| v.convention == c))
    {
        Some(v) => (v.itl, v.tpot),
        None => (l.summary.itl, l.summary.tpot),
    }
}

/// An SLO's observed value as every format writes it.
pub(crate) fn slo_observed(s: &SloResult) -> String {
    match s.observed {
        Some(_) => cell::named(s.observed, &s.unit),
        None => format!("{} (no samples)", cell::ABSENT),
    }
}
