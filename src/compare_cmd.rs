//! `cadence compare A B`: two runs (JSON reports or records files, made minutes or
//! days apart) side by side per level and metric, with the change, whether it is
//! beyond noise (a bootstrap over requests, from records), and `--fail-on` rules. The
//! result and its renderers live in `cadence_report::compare`.

use crate::cli::CompareArgs;
use crate::exit::{usage, Exit};
use crate::output::{print_stdout, write_or_print};
use anyhow::Context;
use cadence_core::compare::{self, FailOn};
use cadence_core::differences::{differences, mean_input, DiffKind, LevelPair};
use cadence_core::knee;
use cadence_core::report::{knee_levels, LevelReport};
use cadence_report::compare::{
    change, render_markdown, render_text_with, Comparison, LevelComparison,
};
use cadence_report::compare_tools::tool_rows;
use cadence_run::{load, Loaded};

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
    let p = pairs(&a.report.levels, &b.report.levels);
    let mut level_pairs = Vec::new();
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
        level_pairs.push(LevelPair {
            a: i,
            b: j,
            input_tokens: recs
                .as_ref()
                .map_or((None, None), |(x, y)| (mean_input(x), mean_input(y))),
        });
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
                    failed_rules.push(format!("{} at {name}: {}", rule.text, change(row.change)));
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
        differences: differences(&a.report, &b.report, &level_pairs),
        method: compare::METHOD,
        samples,
        levels,
        unmatched,
        knees: knee::compare(
            &knee_levels(&a.report.levels),
            &knee_levels(&b.report.levels),
        ),
        failed_rules,
        notes,
        tools: Vec::new(),
    })
}

/// `--fail-on` across different workloads: the refusal naming every workload difference
/// (a usage error, exit 2), unless `--allow-different-workloads` was given. The rules
/// that failed are then no verdict: they move to a note.
fn refuse_across_workloads(c: &mut Comparison, args: &CompareArgs) -> Option<String> {
    let workload: Vec<String> = c
        .differences
        .iter()
        .filter(|d| d.kind == DiffKind::Workload)
        .map(|d| format!("{}: A {}, B {}", d.what, d.a, d.b))
        .collect();
    if args.fail_on.is_empty() || workload.is_empty() || args.allow_different_workloads {
        return None;
    }
    let failed = std::mem::take(&mut c.failed_rules);
    c.notes.push(format!(
        "--fail-on not judged: A and B ran different workloads{}",
        if failed.is_empty() {
            String::new()
        } else {
            format!(" (it would have failed {})", failed.join(", "))
        }
    ));
    Some(format!(
        "--fail-on judges B against A only on the same workload, and they differ: {}. \
         Run both with the same workload, or give --allow-different-workloads to judge \
         them anyway",
        workload.join("; ")
    ))
}

/// A Cadence file loaded as usual, or another tool's output imported (`--from` applies
/// to inputs that are not Cadence's own files). A stream is spooled first, at most
/// `max_spool` bytes, so detection and loading read the same bytes.
fn load_one(
    path: &std::path::Path,
    from: Option<cadence_import::Tool>,
    max_spool: u64,
) -> anyhow::Result<(Loaded, Option<tempfile::TempDir>)> {
    let path = &cadence_run::spooled(path, max_spool)?;
    let from = from.filter(|_| !cadence_run::is_cadence_file(path));
    match cadence_run::import::load(path, from, &Default::default())? {
        Some(i) => Ok((i.loaded, Some(i.dir))),
        None => Ok((
            load(std::slice::from_ref(&path.to_path_buf()), &[], None, None)?,
            None,
        )),
    }
}

pub fn run(args: CompareArgs) -> anyhow::Result<Exit> {
    // An imported run's records file lives in its directory, kept to the end.
    let (a, _dir_a) = load_one(&args.a, args.from, args.max_spool)?;
    let (b, _dir_b) = load_one(&args.b, args.from, args.max_spool)?;
    let mut c = compare(&a, &b, &args.fail_on, args.seed, args.min_change)?;
    if a.report.imported.is_some() || b.report.imported.is_some() {
        let (rows, notes) = tool_rows(&a.report, &b.report);
        c.tools = rows;
        c.notes.extend(notes);
    }
    c.a = args.a.display().to_string();
    c.b = args.b.display().to_string();
    let incomplete = note_incomplete_fleets(&mut c, [(&args.a, &a), (&args.b, &b)]);
    if c.levels.is_empty() {
        return Err(usage(format!(
            "no level of A matches a level of B by name ({})",
            c.unmatched.join(", ")
        )));
    }
    let refused = refuse_across_workloads(&mut c, &args);
    print_stdout(&render_text_with(&c, args.detail))?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&c).expect("plain data serializes") + "\n";
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.markdown {
        write_or_print(path, &render_markdown(&c))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Shown and written first: the refusal is of the verdict, not of the comparison.
    if let Some(why) = refused {
        return Err(usage(why));
    }
    Ok(if !c.failed_rules.is_empty() {
        Exit::Regression
    } else if incomplete {
        Exit::Incomplete
    } else {
        Exit::Ok
    })
}

/// FAULTS 112: a fleet run with a shard missing, interrupted, or apart from the others
/// is named in the comparison's notes; true when either side is one (the comparison is
/// then no pass: exit 6 unless a regression says 5).
fn note_incomplete_fleets(c: &mut Comparison, sides: [(&std::path::PathBuf, &Loaded); 2]) -> bool {
    let mut incomplete = false;
    for ((path, loaded), side) in sides.into_iter().zip(["A", "B"]) {
        let Some(f) = loaded.report.fleet.as_ref().filter(|f| !f.complete) else {
            continue;
        };
        incomplete = true;
        let missing: Vec<String> = f
            .missing
            .iter()
            .map(|m| format!("shard {} ({})", m.index, m.why))
            .collect();
        c.notes.push(format!(
            "{side} ({}) is an incomplete fleet run{}: its figures are not the whole fleet's (`cadence report {}` says why)",
            path.display(),
            if missing.is_empty() {
                String::new()
            } else {
                format!(", missing {}", missing.join("; "))
            },
            path.display()
        ));
    }
    incomplete
}

#[cfg(test)]
mod tests {
    use cadence_core::differences::{SWITCHES, WORKLOAD_FLAGS};
    use clap::CommandFactory;

    /// The flags compare reads off a bench command line are bench's: each workload
    /// flag exists, and every flag that takes no value is a known switch (else the word
    /// after it would be read as its value). A renamed flag fails here, not silently.
    #[test]
    fn the_workload_flags_compare_reads_are_bench_flags() {
        let cli = crate::cli::Cli::command();
        let bench = cli.find_subcommand("bench").expect("bench");
        let args: Vec<&clap::Arg> = bench.get_arguments().collect();
        let long = |name: &str| args.iter().find(|a| a.get_long() == Some(name));
        for f in WORKLOAD_FLAGS {
            assert!(long(f).is_some(), "--{f} is no bench flag");
        }
        let wrong: Vec<&str> = args
            .iter()
            .filter_map(|a| a.get_long().map(|n| (n, !a.get_action().takes_values())))
            .filter(|(n, switch)| *switch != SWITCHES.contains(n))
            .map(|(n, _)| n)
            .collect();
        assert!(
            wrong.is_empty(),
            "a switch is what takes no value: {wrong:?}"
        );
        // Short flags: -c and -r shape the load, -q is the one switch.
        for a in &args {
            if let Some(c) = a.get_short() {
                assert_eq!(!a.get_action().takes_values(), c == 'q', "-{c}");
            }
        }
    }
}
