//! `cadence plan`: the engine model run in virtual time, no HTTP, reported exactly like
//! a real run (`cadence bench`) so what-if questions (fp8 or bf16, disaggregated or
//! not, speculation or not, how many GPUs) get answers before anything is bought.
//! Also home of the engine flags `cadence sim` shares.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};

use cadence_core::report::RunInfo;
use cadence_core::runlog::LevelMeta;
use cadence_core::Slo;
use cadence_engine::{
    plan_level, preset, Arrivals, EngineSpec, KvPolicy, Prefill, Speculation, Workload, PRESETS,
};

use crate::bench_cmd::{build_report, Checks};
use crate::cli::{
    parse_counts, parse_duration, parse_rates, parse_slo, ArrivalsArg, Counts, Rates,
};
use crate::exit::{usage, Exit};
use crate::report_cmd::OutputArgs;
use cadence_bench::prompts::{Counter, LengthDist};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Which engine to model, and changes to it (shared by `plan` and `sim`).
#[derive(Debug, Clone, Default, Args)]
pub struct EngineOpts {
    /// A built-in engine, `model@hardware` (see `cadence plan --list-presets`).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,

    /// A custom engine from a TOML file (the preset fields; see the README).
    #[arg(long, value_name = "FILE.toml", conflicts_with = "preset")]
    pub engine: Option<PathBuf>,

    /// Disaggregate: prompts run on this many prefill workers, off the decode loop.
    #[arg(long, value_name = "N")]
    pub prefill_workers: Option<u32>,

    /// Disaggregated: fixed KV-transfer delay per request (plus KV bytes / 50 GB/s).
    #[arg(long, value_parser = parse_duration, requires = "prefill_workers")]
    pub kv_transfer: Option<Duration>,

    /// Co-located chunked prefill: tokens per step (vLLM max_num_batched_tokens).
    #[arg(long, value_name = "N", conflicts_with = "prefill_workers")]
    pub chunk_tokens: Option<u32>,

    /// Speculative decoding: draft length and acceptance rate, e.g. `4:0.8`.
    #[arg(long, value_name = "K:ALPHA", value_parser = parse_speculation)]
    pub speculate: Option<Speculation>,

    /// Batch slots (vLLM max_num_seqs).
    #[arg(long, value_name = "N")]
    pub max_batch: Option<u32>,

    /// KV-cache capacity in tokens (default: from GPU memory after the weights).
    #[arg(long, value_name = "TOKENS")]
    pub kv_tokens: Option<u64>,

    /// When the KV cache is full: pre-empt and recompute, or reserve prompt +
    /// max_tokens at admission and queue.
    #[arg(long, value_enum)]
    pub kv_policy: Option<KvPolicyArg>,

    /// Per-step time noise, a share (0 = exact roofline steps).
    #[arg(long, value_name = "SHARE")]
    pub jitter: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvPolicyArg {
    Preempt,
    Reserve,
}

fn parse_speculation(s: &str) -> Result<Speculation, String> {
    let (k, a) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not K:ALPHA (e.g. 4:0.8)"))?;
    let k: u32 = k
        .trim()
        .parse()
        .map_err(|_| format!("draft length '{k}' is not a whole number"))?;
    let alpha: f64 = a
        .trim()
        .parse()
        .map_err(|_| format!("acceptance rate '{a}' is not a number"))?;
    if k == 0 || !(0.0..=1.0).contains(&alpha) {
        return Err("speculation needs K ≥ 1 and 0 ≤ ALPHA ≤ 1".into());
    }
    Ok(Speculation {
        k,
        alpha,
        draft_us: 0.0,
    })
}

impl EngineOpts {
    /// The engine these flags describe, or `None` when neither `--preset` nor
    /// `--engine` was given (and no other engine flag either).
    pub fn resolve(&self, seed: u64) -> anyhow::Result<Option<EngineSpec>> {
        let mut spec = match (&self.preset, &self.engine) {
            (Some(name), _) => preset(name).ok_or_else(|| {
                usage(format!(
                    "no preset '{name}'; the presets are: {}",
                    PRESETS.join(", ")
                ))
            })?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    usage(format!(
                        "cannot read the engine file {}: {e}",
                        path.display()
                    ))
                })?;
                EngineSpec::from_toml(&text)
                    .map_err(|e| usage(format!("{}: {e}", path.display())))?
            }
            (None, None) => {
                if self.prefill_workers.is_some()
                    || self.chunk_tokens.is_some()
                    || self.speculate.is_some()
                    || self.max_batch.is_some()
                    || self.kv_tokens.is_some()
                    || self.kv_policy.is_some()
                    || self.jitter.is_some()
                {
                    return Err(usage(
                        "engine flags change an engine: give --preset NAME or --engine FILE.toml",
                    ));
                }
                return Ok(None);
            }
        };
        let s = &mut spec.serving;
        s.seed = seed;
        if let Some(workers) = self.prefill_workers {
            s.prefill = Prefill::Disaggregated {
                workers,
                transfer_ms: self.kv_transfer.map_or(5.0, |d| d.as_secs_f64() * 1e3),
                link_gbs: match s.prefill {
                    Prefill::Disaggregated { link_gbs, .. } => link_gbs,
                    Prefill::Chunked { .. } => 50.0,
                },
            };
        }
        if let Some(chunk_tokens) = self.chunk_tokens {
            s.prefill = Prefill::Chunked { chunk_tokens };
        }
        if let Some(sp) = self.speculate {
            s.speculation = Some(sp);
        }
        if let Some(n) = self.max_batch {
            s.max_batch = n;
        }
        if let Some(n) = self.kv_tokens {
            s.kv_capacity_tokens = Some(n);
        }
        if let Some(p) = self.kv_policy {
            s.kv_policy = match p {
                KvPolicyArg::Preempt => KvPolicy::Preempt,
                KvPolicyArg::Reserve => KvPolicy::Reserve,
            };
        }
        if let Some(j) = self.jitter {
            s.jitter = j;
        }
        spec.validate()
            .map_err(|e| usage(format!("engine {}: {e}", spec.name)))?;
        Ok(Some(spec))
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub engine: EngineOpts,

    /// Print the presets with their key parameters and exit.
    #[arg(long)]
    pub list_presets: bool,

    /// Closed-loop levels: `1,8,64` or `1..256:x2`. Default 8.
    #[arg(short = 'c', long, value_parser = parse_counts, conflicts_with = "rate")]
    pub concurrency: Option<Counts>,

    /// Open-loop levels in requests/s: `1,5,10`.
    #[arg(short = 'r', long, value_parser = parse_rates)]
    pub rate: Option<Rates>,

    /// Open-loop inter-arrival times: evenly spaced, or Poisson (seeded by --seed).
    #[arg(long, value_enum, default_value = "poisson", requires = "rate")]
    pub arrivals: ArrivalsArg,

    /// Measured requests per level.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub requests: u64,

    /// Requests per level sent first and left out of every statistic.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,

    /// Prompt tokens per request: N, fixed:N, normal:MEAN,SD or uniform:LO..HI (as
    /// `cadence bench --input-tokens`; drawn by --seed, the same draws every level).
    #[arg(long, value_name = "DIST", default_value = "512", value_parser = crate::workload_cmd::parse_length)]
    pub input_tokens: LengthDist,

    /// Output tokens per request, same forms (default 128; with --dataset, overrides
    /// the recorded reply lengths).
    #[arg(long, value_name = "DIST", value_parser = crate::workload_cmd::parse_length)]
    pub max_tokens: Option<LengthDist>,

    /// Prompt and output lengths from a dataset, as `cadence bench --dataset` reads it
    /// (ShareGPT: the recorded reply's length; JSON Lines: `max_tokens`, else
    /// --max-tokens), shuffled by --seed. Each entry's first turn only (history and
    /// system prompt counted in); the engine needs only token counts.
    #[arg(long, value_name = "FILE", conflicts_with = "input_tokens")]
    pub dataset: Option<PathBuf>,

    #[arg(long, value_enum, default_value = "auto", requires = "dataset")]
    pub dataset_format: crate::workload_cmd::DatasetFormat,

    /// Keep dataset entries whose first prompt has at least this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub min_prompt_tokens: Option<usize>,

    /// Keep dataset entries whose first prompt has at most this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub max_prompt_tokens: Option<usize>,

    /// Count dataset prompts with this tokenizer (a tokenizer.json or a folder holding
    /// one); without it, whitespace-separated words.
    #[arg(long, value_name = "PATH", requires = "dataset")]
    pub tokenizer: Option<String>,

    /// Closed loop: mean time from a response's end to the client's next request
    /// reaching the engine (uniform in ½–1½ × this, seeded). Real clients never
    /// come back in the same nanosecond.
    #[arg(long, default_value = "500us", value_parser = parse_duration)]
    pub client_turnaround: Duration,

    /// Seeds the engine's jitter and acceptance draws and Poisson arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// An ITL gap longer than this counts as a stall.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub stall_threshold: Duration,

    /// A service-level objective checked per level (as in `cadence bench`).
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo)]
    pub slos: Vec<Slo>,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// HTML, CSV, Markdown and `--convention`, as for `cadence bench`.
    #[command(flatten)]
    pub outputs: OutputArgs,
}

/// Virtual time sends every request on schedule; the bench's default late-send limit
/// (0.1 %) is kept so a planned open loop is judged by the same rule.
const DEFAULT_MAX_LATE: f64 = 0.001;

/// One line per preset: its name and the figures that decide its speed.
pub fn preset_table() -> String {
    let mut s = format!(
        "{:<28} {:>5} {:>8} {:>9} {:>10} {:>9} {:>12} {:>11}\n",
        "preset", "gpus", "weights", "KV/token", "bandwidth", "TFLOP/s", "KV capacity", "ITL@1"
    );
    for name in PRESETS {
        let p = preset(name).expect("listed presets exist");
        s.push_str(&format!(
            "{:<28} {:>5} {:>6.1}GB {:>7.0}KB {:>7.1}TB/s {:>9.0} {:>5}k tokens {:>8.1} ms\n",
            name,
            p.hardware.gpus,
            p.weight_bytes() / 1e9,
            p.kv_bytes_per_token() / 1e3,
            p.hardware.gpus as f64 * p.hardware.bandwidth_gbs / 1e3,
            p.hardware.gpus as f64 * p.hardware.peak_tflops,
            p.kv_capacity() / 1000,
            p.decode_step_s(1, 1024) * 1e3,
        ));
    }
    s.push_str("ITL@1: decode step of one sequence at 1024 tokens of context, no jitter.\n");
    s
}

pub fn run(args: PlanArgs) -> anyhow::Result<Exit> {
    if args.list_presets {
        print!("{}", preset_table());
        return Ok(Exit::Ok);
    }
    let spec = args.engine.resolve(args.seed)?.ok_or_else(|| {
        usage("cadence plan needs an engine: --preset NAME (see --list-presets) or --engine FILE.toml")
    })?;
    if args.requests == 0 {
        return Err(usage("--requests must be at least 1"));
    }
    let outputs = crate::outputs::named(args.json.as_deref(), None, &args.outputs);
    crate::outputs::preflight(args.dataset.as_slice(), &outputs)?;
    let max_tokens = args
        .max_tokens
        .unwrap_or_else(|| "128".parse().expect("a valid length"));
    if max_tokens.fixed() == Some(0) {
        return Err(usage("--max-tokens must be at least 1"));
    }
    let levels: Vec<(Arrivals, String, Option<u32>, Option<f64>)> = match &args.rate {
        Some(rates) => rates
            .0
            .iter()
            .map(|&rate| {
                let a = match args.arrivals {
                    ArrivalsArg::Constant => Arrivals::Constant { rate },
                    ArrivalsArg::Poisson => Arrivals::Poisson {
                        rate,
                        seed: args.seed,
                    },
                };
                (a, format!("rate={rate}/s"), None, Some(rate))
            })
            .collect(),
        None => args
            .concurrency
            .clone()
            .map_or_else(|| vec![8], |c| c.0)
            .into_iter()
            .map(|c| {
                (
                    Arrivals::Closed { concurrency: c },
                    format!("concurrency={c}"),
                    Some(c),
                    None,
                )
            })
            .collect(),
    };
    let total = args.requests + args.warmup;
    let lengths = match (&args.dataset, args.input_tokens.fixed(), max_tokens.fixed()) {
        (Some(path), _, _) => dataset_lengths(&args, path, max_tokens, total)?,
        (None, Some(_), Some(_)) => Vec::new(),
        (None, _, _) => {
            let mut rng = SmallRng::seed_from_u64(args.seed);
            (0..total)
                .map(|_| {
                    let p = args.input_tokens.sample(&mut rng).max(1);
                    let m = max_tokens.sample(&mut rng).max(1);
                    (p, m)
                })
                .collect()
        }
    };
    let workload = Workload {
        requests: args.requests,
        warmup: args.warmup,
        input_tokens: args.input_tokens.fixed().unwrap_or(0).max(1),
        max_tokens: max_tokens.fixed().unwrap_or(0).max(1),
        lengths,
        turnaround_ns: args.client_turnaround.as_nanos() as u64,
    };
    let started = std::time::Instant::now();
    let mut start_ns = 0u64;
    let mut index = 0u64;
    let mut records = Vec::new();
    let mut metas = Vec::new();
    for (i, (arrivals, name, concurrency, rate)) in levels.into_iter().enumerate() {
        let level = plan_level(&spec, arrivals, &workload, i as u32, start_ns, index);
        start_ns = level.end_ns;
        index += level.records.len() as u64;
        metas.push(LevelMeta {
            level: i as u32,
            name,
            concurrency,
            rate,
            intended: Some(level.records.len() as u64),
            stopped_early: None,
            warnings: engine_warnings(&level),
            invalid: false,
            interrupted: false,
        });
        records.extend(level.records);
    }
    let info = RunInfo {
        target: format!("engine model {} (virtual time)", spec.name),
        api: "engine-model".into(),
        model: spec.name.clone(),
        mode: match (&args.rate, args.arrivals) {
            (None, _) => "closed_loop".into(),
            (Some(_), ArrivalsArg::Constant) => "open_loop_constant".into(),
            (Some(_), ArrivalsArg::Poisson) => "open_loop_poisson".into(),
        },
        started_at_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        duration_s: start_ns as f64 / 1e9,
        command: crate::bench_cmd::redacted_command(std::env::args()),
        builtin_sim: false,
        interrupted: false,
        machine: None,
    };
    // The bench's own report path: the same summaries, conventions, charts, SLO
    // verdicts and exit code, from the planned records.
    let checks = Checks {
        stall_threshold: args.stall_threshold,
        slos: args.slos.clone(),
        max_late: DEFAULT_MAX_LATE,
        time_bucket: Duration::from_secs(1),
        convention: args.outputs.convention,
        // The model refuses only what cannot fit; --slo 'errors.rate<=…' gates it.
        max_error_rate: 1.0,
    };
    let (mut report, exit) = build_report(info, &metas, &records, &checks);
    report.warnings.insert(
        0,
        format!(
            "planned, not measured: {} on the engine model in virtual time ({:.0} ms of computation)",
            spec.name,
            started.elapsed().as_secs_f64() * 1e3
        ),
    );
    let console = cadence_report::console::render(&report, std::io::stdout().is_terminal());
    let mut failures: Vec<String> = crate::outputs::console(&console, &args.outputs)
        .err()
        .into_iter()
        .collect();
    failures.extend(crate::report_cmd::write_outputs(
        &report,
        Some(&records),
        args.json.as_deref(),
        &args.outputs,
    ));
    crate::outputs::conclude(exit, failures)
}

/// Per request (prompt tokens, max tokens) from `--dataset`, read by the bench's own
/// workload code: entries in their seeded order, each entry's first turn with its
/// history, counted by `--tokenizer` or as words. `--max-tokens` given overrides the
/// recorded lengths; entries without one get the default.
fn dataset_lengths(
    args: &PlanArgs,
    path: &std::path::Path,
    max_tokens: LengthDist,
    total: u64,
) -> anyhow::Result<Vec<(u32, u32)>> {
    let w = crate::workload_cmd::WorkloadArgs {
        tokenizer: args.tokenizer.clone(),
        input_tokens: None,
        corpus: None,
        dataset: Some(path.to_path_buf()),
        dataset_format: args.dataset_format,
        min_prompt_tokens: args.min_prompt_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        multi_turn: false,
        turns: None,
        think_time: Duration::ZERO,
        prefix_tokens: None,
        prefix_groups: 1,
    };
    let workload =
        crate::workload_cmd::prepare(&w, args.max_tokens, None, None, Some(total), args.seed)?;
    let counter = workload
        .tokenizer
        .clone()
        .map_or(Counter::Words, Counter::Tokenizer);
    let default_max = max_tokens.fixed().unwrap_or(128);
    let lengths: Vec<(u32, u32)> = workload
        .items
        .iter()
        .map(|it| {
            let first = it.turns.first();
            let prompt: usize = it
                .history
                .iter()
                .map(|m| counter.count(&m.content))
                .chain(first.map(|t| counter.count(&t.user)))
                .sum();
            let out = first.and_then(|t| t.max_tokens).unwrap_or(default_max);
            (u32::try_from(prompt).unwrap_or(u32::MAX).max(1), out.max(1))
        })
        .collect();
    if lengths.is_empty() {
        return Err(usage(format!(
            "dataset {}: no entries left to plan with",
            path.display()
        )));
    }
    Ok(lengths)
}

/// What only the engine knows about a level: pre-emptions, and requests that waited
/// for their first step (behind a long step, or for a slot or KV room).
fn engine_warnings(level: &cadence_engine::PlanLevel) -> Vec<String> {
    let mut out = Vec::new();
    if level.preemptions > 0 {
        out.push(format!(
            "the KV cache ran out: {} pre-emptions (sequences recomputed, their streams paused)",
            level.preemptions
        ));
    }
    let mut queue = level.queue_ns.clone();
    queue.sort_unstable();
    let step50 = {
        let mut d: Vec<u64> = level.steps.iter().map(|s| s.end - s.start).collect();
        d.sort_unstable();
        d.get(d.len() / 2).copied().unwrap_or(0)
    };
    if let (Some(&q50), Some(&qmax)) = (queue.get(queue.len() / 2), queue.last()) {
        if q50 > 2 * step50 {
            out.push(format!(
                "requests waited for their first engine step: median {:.1} ms, max {:.1} ms (behind a long step, or for a batch slot or KV-cache room)",
                q50 as f64 / 1e6,
                qmax as f64 / 1e6
            ));
        }
    }
    out
}
