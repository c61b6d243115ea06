//! `cadence compare A B`: two runs (JSON reports or records files, made minutes or
//! days apart) side by side per level and metric, with the change, whether it is
//! beyond noise (a bootstrap over requests, from records), and `--fail-on` rules.

use crate::cli::CompareArgs;
use crate::exit::{usage, Exit};
use crate::load::{load, Loaded};
use crate::output::{print_stdout, write_or_print};
use anyhow::Context;
use cadence_core::compare::{self, FailOn, MetricChange, Verdict};
use cadence_core::report::LevelReport;
use serde::Serialize;

/// The comparison of one level.
#[derive(Debug, Serialize)]
pub struct LevelComparison {
    pub level: String,
    pub rows: Vec<MetricChange>,
}

/// The whole comparison, as `--json` writes it.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub method: &'static str,
    /// Whether noise could be judged (both inputs held per-request records).
    pub samples: bool,
    pub levels: Vec<LevelComparison>,
    /// Levels found on one side only.
    pub unmatched: Vec<String>,
    /// `--fail-on` rules that failed, with the level.
    pub failed_rules: Vec<String>,
    pub notes: Vec<String>,
}

/// Pairs the levels of A and B by name; two single-level runs pair whatever their names.
fn pairs<'a>(a: &'a [LevelReport], b: &'a [LevelReport]) -> Vec<(usize, usize)> {
    if a.len() == 1 && b.len() == 1 {
        return vec![(0, 0)];
    }
    a.iter()
        .enumerate()
        .filter_map(|(i, la)| b.iter().position(|lb| lb.name == la.name).map(|j| (i, j)))
        .collect()
}

/// Compares A with B level by level. The bootstrap reads one matched level's records
/// of each side at a time (streamed from the files), never a whole run.
pub fn compare(
    a: &Loaded,
    b: &Loaded,
    rules: &[FailOn],
    seed: u64,
    min_change: f64,
) -> anyhow::Result<Comparison> {
    let samples = a.records.is_some() && b.records.is_some();
    let mut notes = Vec::new();
    if !samples {
        notes.push("significance needs per-request samples: give records files (`bench --records`) for both runs; without them changes are shown but not judged against noise, and --fail-on uses the threshold alone".into());
    }
    let (ra, rb) = (&a.report.run, &b.report.run);
    // Two built-in simulators differ only in their port.
    let same_target = ra.target == rb.target || (ra.builtin_sim && rb.builtin_sim);
    if ra.model != rb.model || !same_target {
        notes.push(format!(
            "the runs differ in target or model: A {} ({}), B {} ({})",
            a.report.run.target, a.report.run.model, b.report.run.target, b.report.run.model
        ));
    }
    let p = pairs(&a.report.levels, &b.report.levels);
    let mut levels = Vec::new();
    let mut failed_rules = Vec::new();
    for &(i, j) in &p {
        let (la, lb) = (&a.report.levels[i], &b.report.levels[j]);
        let max = compare::BOOTSTRAP_MAX_REQUESTS;
        let recs = match (&a.records, &b.records) {
            (Some(ra), Some(rb)) => {
                let ((sa, na), (sb, nb)) = (ra.level_sample(i, max)?, rb.level_sample(j, max)?);
                if na.max(nb) > max as u64 {
                    notes.push(format!(
                        "level {}: the bootstrap drew from a uniform sample of {max} requests of each run's {na} (A) and {nb} (B): intervals a little wider than the full runs would give",
                        la.name
                    ));
                }
                Some((sa, sb))
            }
            _ => None,
        };
        let rows = compare::compare_level(
            &la.summary,
            &lb.summary,
            recs.as_ref().map(|(x, y)| (x.as_slice(), y.as_slice())),
            seed,
            min_change,
        );
        let name = if la.name == lb.name {
            la.name.clone()
        } else {
            format!("{} vs {}", la.name, lb.name)
        };
        for rule in rules {
            if let Some(row) = rows.iter().find(|r| r.metric == rule.key()) {
                if rule.fails(row) {
                    failed_rules.push(format!("{} at {name}: {}", rule.text, pct(row.change)));
                }
            } else if !compare::STATS.contains(&rule.stat) {
                notes.push(format!(
                    "--fail-on {}: compare looks at mean, p50, p90 and p99",
                    rule.text
                ));
            }
        }
        levels.push(LevelComparison { level: name, rows });
    }
    let mut unmatched: Vec<String> = a
        .report
        .levels
        .iter()
        .enumerate()
        .filter(|(i, _)| !p.iter().any(|(x, _)| x == i))
        .map(|(_, l)| format!("A only: {}", l.name))
        .collect();
    unmatched.extend(
        b.report
            .levels
            .iter()
            .enumerate()
            .filter(|(j, _)| !p.iter().any(|(_, y)| y == j))
            .map(|(_, l)| format!("B only: {}", l.name)),
    );
    Ok(Comparison {
        a: String::new(),
        b: String::new(),
        method: compare::METHOD,
        samples,
        levels,
        unmatched,
        failed_rules,
        notes,
    })
}

fn pct(c: Option<f64>) -> String {
    c.map_or("–".into(), |c| format!("{:+.1}%", c * 100.0))
}

fn num(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "–".into(),
        Some(v) if unit == "ms" && v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Some(v) if unit == "ms" => format!("{v:.2} ms"),
        Some(v) => format!("{v:.1} {unit}"),
    }
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
    r.interval.map_or("–".into(), |(lo, hi)| {
        format!("[{:+.1}%, {:+.1}%]", lo * 100.0, hi * 100.0)
    })
}

/// A row's cells: metric, A, B, change, interval, verdict.
fn cells(r: &MetricChange) -> [String; 6] {
    [
        r.metric.clone(),
        num(r.a, &r.unit),
        num(r.b, &r.unit),
        pct(r.change),
        interval(r),
        verdict(r.verdict).to_string(),
    ]
}

/// The console form.
pub fn render_text(c: &Comparison) -> String {
    let mut s = format!("Comparing A = {}\n      with B = {}\n", c.a, c.b);
    for l in &c.levels {
        s.push_str(&format!(
            "\n{}\n  {:<18} {:>12} {:>12} {:>9} {:>20}  {}\n",
            l.level, "metric", "A", "B", "change", "95% interval", "verdict"
        ));
        for r in &l.rows {
            let [m, a, b, ch, iv, v] = cells(r);
            s.push_str(&format!(
                "  {m:<18} {a:>12} {b:>12} {ch:>9} {iv:>20}  {v}\n"
            ));
        }
    }
    for u in &c.unmatched {
        s.push_str(&format!("\n{u} (no counterpart)"));
    }
    s.push_str(&format!("\n\nMethod: {}\n", c.method));
    for n in &c.notes {
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
    for l in &c.levels {
        s.push_str(&format!(
            "\n**{}**\n\n| metric | A | B | change | 95% interval | verdict |\n|---|---:|---:|---:|---:|---|\n",
            l.level
        ));
        for r in &l.rows {
            s.push_str(&format!("| {} |\n", cells(r).join(" | ")));
        }
    }
    for n in &c.notes {
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

pub fn run(args: CompareArgs) -> anyhow::Result<Exit> {
    let a = load(std::slice::from_ref(&args.a), &[], None, None)?;
    let b = load(std::slice::from_ref(&args.b), &[], None, None)?;
    let mut c = compare(&a, &b, &args.fail_on, args.seed, args.min_change)?;
    c.a = args.a.display().to_string();
    c.b = args.b.display().to_string();
    if c.levels.is_empty() {
        return Err(usage(format!(
            "no level of A matches a level of B by name ({})",
            c.unmatched.join(", ")
        )));
    }
    print_stdout(&render_text(&c))?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&c).expect("plain data serializes") + "\n";
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.markdown {
        write_or_print(path, &render_markdown(&c))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if c.failed_rules.is_empty() {
        Exit::Ok
    } else {
        Exit::Regression
    })
}
