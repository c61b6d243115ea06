//! `compare`'s rows across tools: with an imported run on either side, each run's first
//! level under Cadence's definitions and under the tool's own, and notes naming where
//! their definitions differ.

use crate::compare::ToolRow;
use cadence_core::{Convention, Report};

/// The tool a run came from (`cadence` for Cadence's own) and the convention
/// that holds its definitions.
fn tool_of(l: &Report) -> (String, Option<Convention>) {
    match &l.imported {
        // A tool whose definitions Cadence does not re-express has none here.
        Some(i) => (cadence_core::differences::tool(l), i.tool.parse().ok()),
        None => ("cadence".into(), Some(Convention::Cadence)),
    }
}

/// A convention's ITL in words, or that the tool's is not known.
fn itl_words(c: Option<Convention>) -> &'static str {
    c.map_or("the tool's own: not re-expressed by Cadence", |c| {
        c.itl_formula()
    })
}

/// The ITL statistic (`p50`, `p99`) an imported tool saved, in ms.
fn saved_itl(l: &Report, stat: &str) -> Option<f64> {
    let i = l.imported.as_ref()?;
    let (name, scale) = match (i.tool.as_str(), stat) {
        ("vllm", "p50") => ("median_itl_ms".to_string(), 1.0),
        ("vllm", p) => (format!("{p}_itl_ms"), 1.0),
        ("aiperf", p) => (format!("inter_token_latency {p}"), 1.0),
        ("guidellm", p) => (format!("inter_token_latency_ms {p}"), 1.0),
        ("llmperf", p) => (format!("inter_token_latency_s {p}"), 1e3),
        _ => return None,
    };
    let f = i.figures.iter().find(|f| f.name == name)?;
    f.printed.map(|v| v * scale)
}

/// One row per run, and notes naming where their definitions differ.
pub fn tool_rows(a: &Report, b: &Report) -> (Vec<ToolRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut defs = Vec::new();
    for (run, l) in [("A", a), ("B", b)] {
        let (tool, conv) = tool_of(l);
        let Some(level) = l.levels.first() else {
            continue;
        };
        let s = &level.summary;
        let own = level
            .conventions
            .iter()
            .find(|v| conv.is_some_and(|c| v.convention == c.name()))
            .and_then(|v| v.itl);
        defs.push((run, tool.clone(), conv));
        let saved = |stat: &str| saved_itl(l, stat);
        rows.push(ToolRow {
            run: run.into(),
            tool,
            ttft_p50: s.ttft.map(|d| d.p50),
            itl_p50: s.itl.map(|d| d.p50),
            itl_p99: s.itl.map(|d| d.p99),
            own_itl_p50: own.map(|d| d.p50),
            own_itl_p99: own.map(|d| d.p99),
            own_itl_definition: itl_words(conv).to_string(),
            saved_itl_p50: saved("p50"),
            saved_itl_p99: saved("p99"),
            tokens: s
                .output_tokens
                .source
                .map_or("unknown".into(), |t| t.name().to_string()),
        });
    }
    let mut notes = Vec::new();
    if let [(ra, ta, ca), (rb, tb, cb)] = defs.as_slice() {
        if itl_words(*ca) != itl_words(*cb) {
            notes.push(format!(
                "{ra} ({ta}) defines ITL as {}; {rb} ({tb}) as {}: the level rows above compare both under Cadence's definitions, rebuilt from each run's requests",
                itl_words(*ca),
                itl_words(*cb)
            ));
        }
    }
    if let [x, y] = rows.as_slice() {
        if x.tokens != y.tokens {
            notes.push(format!(
                "output tokens: A's from {}, B's from {}: TPOT and throughput divide by different counts",
                x.tokens, y.tokens
            ));
        }
    }
    for (run, l) in [("A", a), ("B", b)] {
        if let Some(i) = &l.imported {
            for n in &i.not_rebuilt {
                notes.push(format!("{run} ({}): not rebuilt, blank: {n}", i.tool));
            }
        }
    }
    (rows, notes)
}
