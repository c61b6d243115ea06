//! What a report rebuilt from another benchmark tool's saved output says about that
//! output: which tool wrote it, what the file does not hold (so which figures cannot be
//! rebuilt and are left blank), and the tool's own headline figures beside Cadence's
//! rebuild of them under the tool's definition. Plain data; `cadence-import` fills it.

use serde::{Deserialize, Serialize};

/// The formula of the imported section, for the report's definitions.
pub const FORMULA: &str = "an imported run: another tool's saved output read into request \
records; `printed` is the figure the tool saved, `rebuilt` the same figure recomputed by \
Cadence from the file's per-request values under that tool's definition (its percentile \
rule included); a figure the file cannot give is named in `not_rebuilt` and left blank";

/// Another tool's run, as read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedRun {
    /// The tool's name (`vllm`, `aiperf`, `guidellm`, `llmperf`).
    pub tool: String,
    /// The tool's version when the file says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The file(s) read.
    pub files: Vec<String>,
    /// What the file does not hold, in plain words ("no chunk times: only a mean ITL
    /// per request").
    pub lacks: Vec<String>,
    /// The report's figures that therefore cannot be rebuilt (blank in every format).
    pub not_rebuilt: Vec<String>,
    /// The tool's headline figures: what it saved, beside the rebuild.
    pub figures: Vec<ImportedFigure>,
}

/// One of the tool's own figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedFigure {
    /// The tool's name for it (its JSON key, e.g. `p99_itl_ms`).
    pub name: String,
    /// Its unit (`ms`, `tok/s`, `req/s`, `tokens`).
    pub unit: String,
    /// The value the tool saved (absent: the file holds per-request values only).
    pub printed: Option<f64>,
    /// Cadence's rebuild under the tool's definition (absent: the file cannot give it).
    pub rebuilt: Option<f64>,
    /// The tool's definition, in words.
    pub definition: String,
}

impl ImportedFigure {
    /// `rebuilt / printed - 1`, when both are known and the printed value is not 0.
    pub fn difference(&self) -> Option<f64> {
        match (self.printed, self.rebuilt) {
            (Some(p), Some(r)) if p != 0.0 => Some(r / p - 1.0),
            (Some(p), Some(r)) if p == r => Some(0.0),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_difference_needs_both_values() {
        let mut f = ImportedFigure {
            name: "mean_ttft_ms".into(),
            unit: "ms".into(),
            printed: Some(20.0),
            rebuilt: Some(21.0),
            definition: String::new(),
        };
        assert!((f.difference().unwrap() - 0.05).abs() < 1e-12);
        f.rebuilt = None;
        assert_eq!(f.difference(), None);
        f.printed = Some(0.0);
        f.rebuilt = Some(0.0);
        assert_eq!(f.difference(), Some(0.0));
        f.rebuilt = Some(1.0);
        assert_eq!(f.difference(), None);
    }
}
