//! The JSON report: the serde form of [`Report`], pretty-printed, plus the checked-in
//! JSON Schema that describes it (tests validate rendered reports against it).

use cadence_core::Report;

/// The JSON Schema (draft 2020-12) of the report, as checked in at
/// `schema/report.schema.json`.
pub const SCHEMA: &str = include_str!("../../../schema/report.schema.json");

/// The report as pretty-printed JSON, ending in a newline.
pub fn render(report: &Report) -> String {
    // Serializing plain structs with string-keyed maps cannot fail; non-finite floats
    // (never produced by core) would become `null` rather than an error.
    let mut s = serde_json::to_string_pretty(report).expect("a Report always serializes");
    s.push('\n');
    s
}

/// Reads a report back (for re-rendering, comparing or merging saved runs).
pub fn parse(json: &str) -> Result<Report, serde_json::Error> {
    serde_json::from_str(json)
}
