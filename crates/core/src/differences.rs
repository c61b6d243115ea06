//! What differs between two runs besides the server's speed: their target (URL, model,
//! API, the tool that measured) and their workload (lengths, sampling, cache, load),
//! so `compare` states every difference before its verdict and refuses a `--fail-on`
//! verdict across different workloads. Read from the reports (the command line each
//! carries, each level's token counts and load) and per level's mean prompt length.

use crate::Report;
use serde::Serialize;
use std::collections::BTreeMap;

/// Measured means (tokens per request) further apart than this share of the larger
/// are different workloads: a rerun's draws differ by a few percent.
pub const LENGTH_TOLERANCE: f64 = 0.10;

/// Cached prompt shares further apart than this many percentage points are different
/// workloads: one side's TTFT measured cache hits.
pub const CACHE_TOLERANCE_PCT: f64 = 10.0;

/// `bench` flags that shape the workload or the load (long names). Output, timeouts,
/// gates, headers and the request count are not: they change what is kept or when the
/// run ends, not what one request asks for.
pub const WORKLOAD_FLAGS: &[&str] = &[
    "concurrency",
    "rate",
    "arrivals",
    "max-concurrency",
    "ramp-up",
    "trace",
    "trace-speed",
    "agent-trace",
    "agent-trace-format",
    "agent-trace-speed",
    "agent-trace-max-gap",
    "agent-trace-block-size",
    "find-max",
    "max-tokens",
    "prompt",
    "extra-body",
    "tokenizer",
    "input-tokens",
    "corpus",
    "dataset",
    "dataset-format",
    "min-prompt-tokens",
    "max-prompt-tokens",
    "multi-turn",
    "turns",
    "think-time",
    "prefix-tokens",
    "prefix-groups",
    "agent",
    "tools",
    "tool-time",
    "tool-result-tokens",
    "agent-force",
];

/// `bench` flags that take no value.
pub const SWITCHES: &[&str] = &[
    "agent",
    "multi-turn",
    "quiet",
    "tui",
    "no-tui",
    "strict",
    "http2",
    "detail",
];

/// What a difference is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// What was measured: the URL, model, API, or the tool that measured it.
    Target,
    /// What was asked of it: lengths, sampling, cache, the load. A `--fail-on` verdict
    /// across these is refused unless allowed.
    Workload,
    /// Other draws of the same workload (another seed): said, not refused.
    Draws,
}

/// One way A and B differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What it is about.
    pub kind: DiffKind,
    /// What differs, in words (`model`, `--max-tokens`, `output tokens per request at
    /// concurrency=4`).
    pub what: String,
    /// A's value in words.
    pub a: String,
    /// B's value in words.
    pub b: String,
}

impl Difference {
    fn new(
        kind: DiffKind,
        what: impl Into<String>,
        a: impl Into<String>,
        b: impl Into<String>,
    ) -> Self {
        Difference {
            kind,
            what: what.into(),
            a: a.into(),
            b: b.into(),
        }
    }
}

/// One matched pair of levels: A's index, B's index, and the mean prompt tokens per
/// succeeded request of each when the records say (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelPair {
    /// A's level index.
    pub a: usize,
    /// B's level index.
    pub b: usize,
    /// Mean prompt tokens per request of A's and B's level, where known.
    pub input_tokens: (Option<f64>, Option<f64>),
}

/// Mean prompt tokens of the succeeded requests that say theirs (a [`LevelPair`]'s
/// `input_tokens`); `None` when none does.
pub fn mean_input<'a>(records: impl IntoIterator<Item = &'a crate::RequestRecord>) -> Option<f64> {
    let said: Vec<u64> = records
        .into_iter()
        .filter(|r| r.outcome == crate::Outcome::Succeeded)
        .filter_map(|r| r.input_tokens)
        .collect();
    (!said.is_empty()).then(|| said.iter().sum::<u64>() as f64 / said.len() as f64)
}

/// Every difference between A and B in target and workload, target first.
pub fn differences(a: &Report, b: &Report, pairs: &[LevelPair]) -> Vec<Difference> {
    let mut out = target(a, b);
    let (ra, rb) = (&a.run, &b.run);
    // An import's mode names the import (`imported:aiperf`), not its load.
    let imported = a.imported.is_some() || b.imported.is_some();
    if ra.mode != rb.mode && known(&ra.mode) && known(&rb.mode) && !imported {
        out.push(Difference::new(
            DiffKind::Workload,
            "load",
            &ra.mode,
            &rb.mode,
        ));
    }
    out.extend(flags(a, b));
    for p in pairs {
        out.extend(level(a, b, p));
    }
    // Drawn or given with --seed alike: other prompts from the same distributions.
    if let (Some(sa), Some(sb)) = (ra.seed, rb.seed) {
        if sa != sb {
            let (x, y) = (sa.to_string(), sb.to_string());
            out.push(Difference::new(DiffKind::Draws, "seed", x, y));
        }
    }
    out
}

fn known(s: &str) -> bool {
    !s.is_empty() && s != "unknown"
}

/// The tool that measured a run and its version (`cadence 0.1.0`, `aiperf 0.3.0`).
pub fn tool(r: &Report) -> String {
    match &r.imported {
        Some(i) => match &i.version {
            Some(v) => format!("{} {v}", i.tool),
            None => i.tool.clone(),
        },
        None => format!("cadence {}", r.cadence_version),
    }
}

/// Whether two targets are one endpoint: the same URL, two built-in simulators (they
/// differ only in their port), or a server's base URL (as AIPerf saves it) and an
/// endpoint under it.
fn same_url(a: &Report, b: &Report) -> bool {
    let (x, y) = (
        a.run.target.trim_end_matches('/'),
        b.run.target.trim_end_matches('/'),
    );
    let under = |long: &str, base: &str| {
        long.strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    x == y || (a.run.builtin_sim && b.run.builtin_sim) || under(x, y) || under(y, x)
}

fn target(a: &Report, b: &Report) -> Vec<Difference> {
    let (ra, rb) = (&a.run, &b.run);
    let mut out = Vec::new();
    // What a file did not hold ("unknown"; a target that is no URL, as an import
    // without one says "imported from TOOL" or names its backend) is not known to
    // differ, nor is the API of an import whose file did not name one ("TOOL import").
    let url = |v: &str| v.contains("://");
    let unnamed = |r: &Report, api: &str| r.imported.is_some() && api.ends_with(" import");
    for (what, x, y, same) in [
        (
            "URL",
            &ra.target,
            &rb.target,
            same_url(a, b) || !url(&ra.target) || !url(&rb.target),
        ),
        ("model", &ra.model, &rb.model, ra.model == rb.model),
        (
            "API",
            &ra.api,
            &rb.api,
            ra.api == rb.api || unnamed(a, &ra.api) || unnamed(b, &rb.api),
        ),
    ] {
        if !same && known(x) && known(y) {
            out.push(Difference::new(DiffKind::Target, what, x, y));
        }
    }
    let (ta, tb) = (tool(a), tool(b));
    if ta != tb {
        out.push(Difference::new(DiffKind::Target, "tool", ta, tb));
    }
    out
}

/// The workload flags of a `bench` command line, long names, each with its values in
/// order (`on` for a switch); `None` when the command is not a bench run's.
pub fn workload_flags(command: &[String]) -> Option<BTreeMap<String, Vec<String>>> {
    let at = command.iter().position(|a| a == "bench")?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut args = command[at + 1..].iter();
    while let Some(arg) = args.next() {
        let (name, inline) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let (flag, rest) = short.split_at(1);
            let name = match flag {
                "c" => "concurrency",
                "r" => "rate",
                "q" => "quiet",
                _ => flag,
            };
            (
                name.to_string(),
                (!rest.is_empty()).then(|| rest.to_string()),
            )
        } else {
            continue; // the URL
        };
        let value = match inline {
            Some(v) => v,
            None if SWITCHES.contains(&name.as_str()) => "on".into(),
            None => args.next().cloned().unwrap_or_default(),
        };
        if WORKLOAD_FLAGS.contains(&name.as_str()) {
            out.entry(name).or_default().push(value);
        }
    }
    Some(out)
}

/// The workload flags given differently to A and B (both bench runs).
fn flags(a: &Report, b: &Report) -> Vec<Difference> {
    let (Some(fa), Some(fb)) = (
        workload_flags(&a.run.command),
        workload_flags(&b.run.command),
    ) else {
        return Vec::new();
    };
    let names: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    let words = |v: Option<&Vec<String>>| v.map_or("not given".into(), |v| v.join(" "));
    names
        .into_iter()
        .filter(|n| fa.get(*n) != fb.get(*n))
        .map(|n| {
            Difference::new(
                DiffKind::Workload,
                format!("--{n}"),
                words(fa.get(n)),
                words(fb.get(n)),
            )
        })
        .collect()
}

/// A's and B's means further apart than [`LENGTH_TOLERANCE`] of the larger.
fn apart(x: f64, y: f64) -> bool {
    (x - y).abs() > LENGTH_TOLERANCE * x.abs().max(y.abs())
}

fn level(a: &Report, b: &Report, p: &LevelPair) -> Vec<Difference> {
    let (la, lb) = (&a.levels[p.a], &b.levels[p.b]);
    let at = if la.name == lb.name {
        la.name.clone()
    } else {
        format!("{} vs {}", la.name, lb.name)
    };
    let mut out = Vec::new();
    let mut push = |what: &str, x: String, y: String| {
        out.push(Difference::new(
            DiffKind::Workload,
            format!("{what} at {at}"),
            x,
            y,
        ));
    };
    if la.concurrency != lb.concurrency || la.rate != lb.rate {
        push("load", load(la), load(lb));
    }
    let per = |l: &crate::LevelReport| {
        let n = l.summary.requests.succeeded;
        (n > 0).then(|| l.summary.output_tokens.total as f64 / n as f64)
    };
    if let (Some(x), Some(y)) = (per(la), per(lb)) {
        if apart(x, y) {
            push(
                "output tokens per request",
                format!("{x:.0}"),
                format!("{y:.0}"),
            );
        }
    }
    if let (Some(x), Some(y)) = p.input_tokens {
        if apart(x, y) {
            push(
                "prompt tokens per request",
                format!("{x:.0}"),
                format!("{y:.0}"),
            );
        }
    }
    let cached = |l: &crate::LevelReport| l.summary.prompt_cache.and_then(|c| c.share_pct());
    let (ca, cb) = (cached(la), cached(lb));
    let gap = match (ca, cb) {
        (Some(x), Some(y)) => (x - y).abs(),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => 0.0,
    };
    if gap >= CACHE_TOLERANCE_PCT {
        let pct = |v: Option<f64>| v.map_or("not reported".into(), |v| format!("{v:.0} %"));
        push("prompt tokens served from cache", pct(ca), pct(cb));
    }
    out
}

fn load(l: &crate::LevelReport) -> String {
    match (l.concurrency, l.rate) {
        (Some(c), _) => format!("concurrency {c}"),
        (None, Some(r)) => format!("rate {r}/s"),
        (None, None) => "not said".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        level_report, summarize_level, Chunk, LevelOptions, Outcome, RequestRecord, RunInfo,
    };

    /// A run of one level at concurrency 4: `n` requests of `tokens` output tokens
    /// (`cached` of 100 prompt tokens from cache), made by `command`.
    fn run(command: &str, tokens: u64, cached: Option<u64>) -> Report {
        let recs: Vec<RequestRecord> = (0..4)
            .map(|i| {
                let mut r = RequestRecord::new(i, Outcome::Succeeded);
                r.sent_ns = Some(0);
                r.chunks = vec![Chunk(1_000_000, None), Chunk(2_000_000, None)];
                r.end_ns = Some(2_000_000);
                r.output_tokens = Some(crate::TokenCount {
                    count: tokens,
                    source: crate::TokenSource::Usage,
                });
                r.input_tokens = Some(100);
                r.cached_input_tokens = cached;
                r
            })
            .collect();
        let mut l = level_report(
            "concurrency=4",
            summarize_level(&recs, &LevelOptions::default()),
        );
        l.concurrency = Some(4);
        let mut info = RunInfo::new(
            "http://h:8000/v1/chat/completions",
            "openai-chat",
            "m",
            "closed_loop",
            0,
        );
        info.command = command.split_whitespace().map(String::from).collect();
        Report::new(info, vec![l], vec![])
    }

    fn one() -> [LevelPair; 1] {
        [LevelPair {
            a: 0,
            b: 0,
            input_tokens: (Some(100.0), Some(100.0)),
        }]
    }

    fn whats(d: &[Difference]) -> Vec<(DiffKind, &str, &str, &str)> {
        d.iter()
            .map(|d| (d.kind, d.what.as_str(), d.a.as_str(), d.b.as_str()))
            .collect()
    }

    #[test]
    fn the_same_workload_and_target_have_no_difference() {
        let cmd = "cadence bench http://h:8000 -c 4 --max-tokens 24 --records a.jsonl --quiet";
        let other = "cadence bench http://h:8000 --quiet -c 4 --max-tokens 24 --records b.jsonl -H x-cadence-itl-ms:12 -n 48";
        assert_eq!(
            differences(&run(cmd, 24, None), &run(other, 23, None), &one()),
            vec![]
        );
    }

    #[test]
    fn every_workload_and_target_difference_is_named_with_both_values() {
        let a = run(
            "cadence bench http://h:8000 -c 4 --input-tokens 512 --max-tokens 24",
            24,
            Some(0),
        );
        let mut b = run(
            "cadence bench http://h:8000 -c4 --input-tokens=2048 --max-tokens 24 --extra-body {\"ignore_eos\":true} --agent",
            48,
            Some(95),
        );
        b.run.model = "other".into();
        b.run.api = "openai-completions".into();
        b.run.target = "http://g:9000/v1/completions".into();
        let pairs = [LevelPair {
            a: 0,
            b: 0,
            input_tokens: (Some(512.0), Some(2048.0)),
        }];
        let d = differences(&a, &b, &pairs);
        use DiffKind::*;
        assert_eq!(
            whats(&d),
            vec![
                (
                    Target,
                    "URL",
                    "http://h:8000/v1/chat/completions",
                    "http://g:9000/v1/completions"
                ),
                (Target, "model", "m", "other"),
                (Target, "API", "openai-chat", "openai-completions"),
                (Workload, "--agent", "not given", "on"),
                (
                    Workload,
                    "--extra-body",
                    "not given",
                    "{\"ignore_eos\":true}"
                ),
                (Workload, "--input-tokens", "512", "2048"),
                (
                    Workload,
                    "output tokens per request at concurrency=4",
                    "24",
                    "48"
                ),
                (
                    Workload,
                    "prompt tokens per request at concurrency=4",
                    "512",
                    "2048"
                ),
                (
                    Workload,
                    "prompt tokens served from cache at concurrency=4",
                    "0 %",
                    "95 %"
                ),
            ]
        );
    }

    #[test]
    fn lengths_within_a_tenth_are_the_same_and_beyond_it_are_not() {
        let cmd = "cadence bench -c 4";
        assert!(differences(&run(cmd, 100, None), &run(cmd, 90, None), &one()).is_empty());
        let d = differences(&run(cmd, 100, None), &run(cmd, 89, None), &one());
        assert_eq!(d[0].what, "output tokens per request at concurrency=4");
    }

    #[test]
    fn a_cached_share_on_one_side_only_differs_when_it_is_material() {
        let cmd = "cadence bench -c 4";
        let d = differences(&run(cmd, 24, Some(50)), &run(cmd, 24, None), &one());
        assert_eq!(
            whats(&d),
            vec![(
                DiffKind::Workload,
                "prompt tokens served from cache at concurrency=4",
                "50 %",
                "not reported"
            )]
        );
        assert!(differences(&run(cmd, 24, Some(9)), &run(cmd, 24, None), &one()).is_empty());
    }

    #[test]
    fn another_seed_is_said_but_is_not_another_workload() {
        let cmd = "cadence bench -c 4";
        let (mut a, mut b) = (run(cmd, 24, None), run(cmd, 24, None));
        (a.run.seed, b.run.seed) = (Some(1), Some(2));
        let d = differences(&a, &b, &one());
        assert_eq!(whats(&d), vec![(DiffKind::Draws, "seed", "1", "2")]);
        // Given with --seed, another seed is other draws too, not another workload.
        let (mut a, mut b) = (
            run("cadence bench --seed 1", 24, None),
            run("cadence bench --seed 2", 24, None),
        );
        (a.run.seed, b.run.seed) = (Some(1), Some(2));
        let d = differences(&a, &b, &one());
        assert_eq!((d.len(), d[0].kind), (1, DiffKind::Draws));
    }

    #[test]
    fn an_imported_run_differs_in_tool_and_has_no_flags_to_compare() {
        let a = run("cadence bench http://h:8000 -c 4 --max-tokens 24", 24, None);
        let mut b = run("", 24, None);
        // As AIPerf saves it: the server's base URL; the API and mode name the import.
        b.run.target = "http://h:8000".into();
        b.run.api = "aiperf import".into();
        b.run.mode = "imported:aiperf".into();
        b.imported = Some(crate::ImportedRun {
            tool: "aiperf".into(),
            version: Some("0.3.0".into()),
            files: vec![],
            lacks: vec![],
            not_rebuilt: vec![],
            figures: vec![],
        });
        let d = differences(&a, &b, &one());
        assert_eq!(
            whats(&d),
            vec![(
                DiffKind::Target,
                "tool",
                &*format!("cadence {}", a.cadence_version),
                "aiperf 0.3.0"
            )]
        );
        // An import whose file named its API is compared on it.
        b.run.api = "completions".into();
        let d = differences(&a, &b, &one());
        assert_eq!(
            whats(&d)[0],
            (DiffKind::Target, "API", &*a.run.api, "completions")
        );
        b.run.api = a.run.api.clone();
        assert_eq!(differences(&a, &b, &one()).len(), 1, "the tool only");
    }

    #[test]
    fn what_an_import_did_not_say_is_not_a_difference_and_another_host_is() {
        let a = run("cadence bench -c 4", 24, None);
        let mut b = run("", 24, None);
        b.run.target = "imported from llmperf".into();
        b.run.model = "unknown".into();
        b.imported = a.imported.clone();
        assert!(differences(&a, &b, &one()).is_empty());
        b.run.target = "http://h:80001".into();
        let d = differences(&a, &b, &one());
        assert_eq!(
            d[0].what, "URL",
            "a port that starts like A's is another port"
        );
        b.run.target = "http://h:8000/v1/completions/x".into();
        assert_eq!(differences(&a, &b, &one())[0].what, "URL");
    }

    #[test]
    fn short_flags_inline_values_and_switches_are_read() {
        let cmd: Vec<String> =
            "cadence bench URL -c8 -r 2 --rate=3 --agent --tool-time 5ms -q --json x.json"
                .split_whitespace()
                .map(String::from)
                .collect();
        let f = workload_flags(&cmd).unwrap();
        assert_eq!(f["concurrency"], ["8"]);
        assert_eq!(f["rate"], ["2", "3"]);
        assert_eq!(f["agent"], ["on"]);
        assert_eq!(f["tool-time"], ["5ms"]);
        assert!(!f.contains_key("json") && !f.contains_key("quiet"));
        assert_eq!(workload_flags(&["cadence".into(), "proxy".into()]), None);
    }
}
