//! `cadence compare`'s result and its renderers: two runs side by side per level and
//! metric, with the change, its interval and the verdict, and across tools when either
//! run was imported. One table per block for the console and Markdown, its figures
//! written by [`crate::cell`] as every other command writes them.

use crate::cell::{self, Unit};
use crate::table::Table;
use cadence_core::compare::{MetricChange, Verdict};
use cadence_core::differences::{DiffKind, Difference};
use cadence_core::knee::KneeMove;
use serde::Serialize;

/// The comparison of one level.
#[derive(Debug, Serialize)]
pub struct LevelComparison {
    /// The level's name (`A vs B` when the two differ).
    pub level: String,
    /// One row per metric and statistic.
    pub rows: Vec<MetricChange>,
}

/// The whole comparison, as `--json` writes it.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// Run A's path.
    pub a: String,
    /// Run B's path.
    pub b: String,
    /// How A and B differ in target and workload (empty: the same).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<Difference>,
    /// How changes are judged against noise, in words.
    pub method: &'static str,
    /// Whether noise could be judged (both inputs held per-request records).
    pub samples: bool,
    /// The matched levels.
    pub levels: Vec<LevelComparison>,
    /// Levels found on one side only.
    pub unmatched: Vec<String>,
    /// Where each sweep's knees are and how they moved ([`cadence_core::knee::compare`]);
    /// empty when neither run is a sweep.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knees: Vec<KneeMove>,
    /// `--fail-on` rules that failed, with the level.
    pub failed_rules: Vec<String>,
    /// What the reader should know about the inputs.
    pub notes: Vec<String>,
    /// With an imported run on either side: one row per run, each tool's own figures
    /// under its own definition beside Cadence's, and the definitions named.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolRow>,
}

/// One run of a comparison across tools: its first level's figures under Cadence's
/// definitions and under the tool's own (rebuilt from the same records), in ms.
#[derive(Debug, Serialize)]
pub struct ToolRow {
    /// `A` or `B`.
    pub run: String,
    /// `cadence`, or the tool (and version) whose output was imported.
    pub tool: String,
    /// Cadence's TTFT p50.
    pub ttft_p50: Option<f64>,
    /// Cadence's ITL: gaps between chunks, pooled (blank when the file held no chunk
    /// times).
    pub itl_p50: Option<f64>,
    /// Cadence's ITL p99.
    pub itl_p99: Option<f64>,
    /// The ITL under the tool's own definition, from the same records.
    pub own_itl_p50: Option<f64>,
    /// The ITL p99 under the tool's own definition.
    pub own_itl_p99: Option<f64>,
    /// The tool's ITL definition in words.
    pub own_itl_definition: String,
    /// The ITL p50 and p99 the tool itself saved (imports whose file holds them).
    pub saved_itl_p50: Option<f64>,
    /// The ITL p99 the tool itself saved.
    pub saved_itl_p99: Option<f64>,
    /// Where the output-token counts came from.
    pub tokens: String,
}

/// A change (B / A - 1) as the comparison writes it: `+5.0%`.
pub fn change(c: Option<f64>) -> String {
    cell::cell(c, Unit::Change(1))
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "WORSE",
        Verdict::Unchanged => "within noise",
        Verdict::Unknown => "?",
    }
}

fn interval(r: &MetricChange) -> String {
    r.interval.map_or(cell::ABSENT.into(), |(lo, hi)| {
        format!(
            "[{}, {}]",
            cell::signed_pct(lo * 100.0, 1),
            cell::signed_pct(hi * 100.0, 1)
        )
    })
}

/// A level's table: metric, A, B, change, interval, verdict.
fn level_table(l: &LevelComparison) -> Table {
    let mut t = Table::new(2)
        .left("metric", 18)
        .right("A", 12)
        .right("B", 12)
        .right("change", 9)
        .right("95% interval", 20)
        .left("verdict", 0)
        .gap(2);
    for r in &l.rows {
        t.row([
            r.metric.clone(),
            cell::named(r.a, &r.unit),
            cell::named(r.b, &r.unit),
            change(r.change),
            interval(r),
            verdict(r.verdict).to_string(),
        ]);
    }
    t
}

/// The across-tools table: each run's first level under each definition.
fn tools_table(tools: &[ToolRow]) -> Table {
    let mut t = Table::new(2)
        .left("run", 3)
        .left("tool", 18)
        .right("TTFT p50", 10)
        .right("ITL p50", 10)
        .right("ITL p99", 10)
        .right("own ITL p50", 12)
        .right("own ITL p99", 12)
        .right("saved ITL p50", 12)
        .right("saved ITL p99", 12)
        .left("own ITL definition", 0)
        .gap(2);
    let ms = |v: Option<f64>| cell::cell(v, Unit::Ms);
    for r in tools {
        t.row([
            r.run.clone(),
            r.tool.clone(),
            ms(r.ttft_p50),
            ms(r.itl_p50),
            ms(r.itl_p99),
            ms(r.own_itl_p50),
            ms(r.own_itl_p99),
            ms(r.saved_itl_p50),
            ms(r.saved_itl_p99),
            r.own_itl_definition.clone(),
        ]);
    }
    t
}

fn kind(k: DiffKind) -> &'static str {
    match k {
        DiffKind::Target => "target",
        DiffKind::Workload => "workload",
        DiffKind::Draws => "draws",
    }
}

/// The differences table: kind, what, A, B.
fn differences_table(d: &[Difference]) -> Table {
    let mut t = Table::new(2)
        .left("kind", 9)
        .left("what", 25)
        .left("A", 17)
        .left("B", 0)
        .gap(2);
    for x in d {
        t.row([
            kind(x.kind).into(),
            x.what.clone(),
            x.a.clone(),
            x.b.clone(),
        ]);
    }
    t
}

/// What the differences mean for the verdicts below, in words; `None` when A and B
/// ran the same workload against the same target (other draws of it are a note).
fn differences_words(d: &[Difference]) -> Option<&'static str> {
    if d.iter().any(|x| x.kind == DiffKind::Workload) {
        Some("A and B ran different workloads: a change below is not the server's alone, and --fail-on is refused unless --allow-different-workloads")
    } else if d.iter().any(|x| x.kind == DiffKind::Target) {
        Some("the same workload against different targets: the changes below compare them")
    } else {
        None
    }
}

/// Other draws of the same workload, when that is the only difference.
fn draws_note(d: &[Difference]) -> Option<String> {
    match d {
        [x] if x.kind == DiffKind::Draws => Some(format!(
            "{}: A {}, B {} (other prompts drawn from the same workload)",
            x.what, x.a, x.b
        )),
        _ => None,
    }
}

/// The method in a line, where [`Comparison::method`] is the paragraph.
pub const METHOD_SHORT: &str = "change = B / A - 1; better or worse when its 95 % bootstrap \
interval excludes 0 and it reaches --min-change (--detail: how)";

/// The console form, the method in full.
pub fn render_text(c: &Comparison) -> String {
    render_text_with(c, true)
}

/// The console form; `detail` explains the method in full, else in a line.
pub fn render_text_with(c: &Comparison, detail: bool) -> String {
    let mut s = format!("Comparing A = {}\n      with B = {}\n", c.a, c.b);
    if let Some(words) = differences_words(&c.differences) {
        s.push_str(&format!("\nDifferences: {words}\n"));
        s.push_str(&differences_table(&c.differences).text());
    }
    for l in &c.levels {
        s.push_str(&format!("\n{}\n", l.level));
        s.push_str(&level_table(l).text());
    }
    for u in &c.unmatched {
        s.push_str(&format!("\n{u} (no counterpart)"));
    }
    if !c.knees.is_empty() {
        s.push_str("\n\nKnees (where ITL p99 and TTFT p90 bend against load)\n");
        for k in &c.knees {
            s.push_str(&format!("  {}\n", k.line));
        }
    }
    let method = if detail { c.method } else { METHOD_SHORT };
    s.push_str(&format!("\n\nMethod: {method}\n"));
    if !c.tools.is_empty() {
        s.push_str("\nAcross tools (first level)\n");
        s.push_str(&tools_table(&c.tools).text());
    }
    for n in draws_note(&c.differences).iter().chain(&c.notes) {
        s.push_str(&format!("Note: {n}\n"));
    }
    if !c.failed_rules.is_empty() {
        s.push_str("\nREGRESSION (--fail-on):\n");
        for f in &c.failed_rules {
            s.push_str(&format!("  {f}\n"));
        }
    }
    s
}

/// The Markdown form, for a PR comment.
pub fn render_markdown(c: &Comparison) -> String {
    let mut s = format!("### Cadence compare\n\nA = `{}`, B = `{}`\n", c.a, c.b);
    if let Some(words) = differences_words(&c.differences) {
        s.push_str(&format!("\n**Differences**: {words}\n\n"));
        s.push_str(&differences_table(&c.differences).markdown());
    }
    for l in &c.levels {
        s.push_str(&format!("\n**{}**\n\n", l.level));
        s.push_str(&level_table(l).markdown());
    }
    if !c.knees.is_empty() {
        s.push_str("\n**Knees** (where ITL p99 and TTFT p90 bend against load)\n\n");
        for k in &c.knees {
            s.push_str(&format!("- {}\n", k.line));
        }
    }
    if !c.tools.is_empty() {
        s.push_str("\n**Across tools** (first level)\n\n");
        s.push_str(&tools_table(&c.tools).markdown());
    }
    for n in draws_note(&c.differences).iter().chain(&c.notes) {
        s.push_str(&format!("\n> {n}\n"));
    }
    if !c.failed_rules.is_empty() {
        s.push_str("\n**Regression (--fail-on):**\n\n");
        for f in &c.failed_rules {
            s.push_str(&format!("- {f}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(metric: &str, unit: &str, a: Option<f64>, b: Option<f64>) -> MetricChange {
        MetricChange {
            metric: metric.into(),
            unit: unit.into(),
            a,
            b,
            change: a.zip(b).map(|(a, b)| b / a - 1.0),
            interval: None,
            verdict: Verdict::Unknown,
        }
    }

    fn comparison(differences: Vec<Difference>) -> Comparison {
        Comparison {
            a: "a.jsonl".into(),
            b: "b.jsonl".into(),
            differences,
            method: "m",
            samples: true,
            levels: vec![LevelComparison {
                level: "c=1".into(),
                rows: vec![row("itl.p50", "ms", Some(7.8), Some(8.0))],
            }],
            unmatched: vec![],
            knees: vec![],
            failed_rules: vec![],
            notes: vec![],
            tools: vec![],
        }
    }

    fn diff(kind: DiffKind, what: &str, a: &str, b: &str) -> Difference {
        Difference {
            kind,
            what: what.into(),
            a: a.into(),
            b: b.into(),
        }
    }

    #[test]
    fn differences_come_before_the_verdicts_and_the_same_workload_has_no_block() {
        let c = comparison(vec![
            diff(DiffKind::Target, "model", "m", "other"),
            diff(DiffKind::Workload, "--max-tokens", "24", "48"),
        ]);
        let text = render_text(&c);
        let block = text
            .find("Differences: A and B ran different workloads")
            .unwrap();
        assert!(block < text.find("itl.p50").unwrap(), "{text}");
        assert!(
            text.contains("  workload  --max-tokens              24                 48\n"),
            "{text}"
        );
        assert!(
            text.contains("  target    model                     m                  other\n"),
            "{text}"
        );
        let md = render_markdown(&c);
        assert!(md.contains("| workload | --max-tokens | 24 | 48 |"), "{md}");
        let t = render_text(&comparison(vec![diff(DiffKind::Target, "URL", "x", "y")]));
        assert!(
            t.contains("Differences: the same workload against different targets"),
            "{t}"
        );
        let same = render_text(&comparison(vec![]));
        assert!(!same.contains("Differences"), "{same}");
        let draws = render_text(&comparison(vec![diff(DiffKind::Draws, "seed", "1", "2")]));
        assert!(
            !draws.contains("Differences")
                && draws.contains(
                    "Note: seed: A 1, B 2 (other prompts drawn from the same workload)\n"
                ),
            "{draws}"
        );
    }

    #[test]
    fn figures_read_as_the_report_writes_them_and_absent_ones_a_dash() {
        let mut c = comparison(vec![]);
        c.levels[0].rows = vec![
            row("itl.p50", "ms", Some(7.8), Some(0.8123)),
            row("output_speed.p50", "tok/s", Some(110.21), None),
        ];
        let text = render_text(&c);
        assert!(
            text.contains("  itl.p50                7.800 ms     812.3 µs    -89.6%                    –  ?\n"),
            "{text}"
        );
        assert!(
            text.contains("110.2 tok/s            –         –"),
            "{text}"
        );
        let md = render_markdown(&c);
        assert!(
            md.contains("| itl.p50 | 7.800 ms | 812.3 µs | -89.6% | – | ? |"),
            "{md}"
        );
    }

    #[test]
    fn the_knees_are_a_block_of_their_own_in_text_and_markdown() {
        let mut c = comparison(vec![]);
        assert!(!render_text(&c).contains("Knees"));
        c.knees = vec![KneeMove {
            figure: "ITL p99".into(),
            a: None,
            b: None,
            shift: cadence_core::knee::Shift::Earlier,
            line: "ITL p99 knee moved from c=16 to c=8: earlier, WORSE".into(),
        }];
        let text = render_text(&c);
        assert!(
            text.contains("\n\nKnees (where ITL p99 and TTFT p90 bend against load)\n  ITL p99 knee moved from c=16 to c=8: earlier, WORSE\n"),
            "{text}"
        );
        let md = render_markdown(&c);
        assert!(
            md.contains("- ITL p99 knee moved from c=16 to c=8: earlier, WORSE\n"),
            "{md}"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["knees"][0]["shift"], "earlier");
    }
}
