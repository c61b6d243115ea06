//! `cadence plan`: the engine model run in virtual time, no HTTP, reported exactly like
//! a real run (`cadence bench`) so what-if questions (fp8 or bf16, disaggregated or
//! not, speculation or not, how many GPUs) get answers before anything is bought.

use std::time::Duration;

use cadence_core::report::RunInfo;
use cadence_core::runlog::{LevelMeta, DEFAULT_MAX_LATE};
use cadence_core::{Checks, RecordSink};
use cadence_engine::twin::{self, Model};
use cadence_engine::{Arrivals, EngineSpec, Sessions, Workload};

use crate::cli::{ArrivalsArg, PlanArgs, WorkloadArgs};
use crate::exit::{usage, Exit};
use cadence_bench::prompts::{Counter, LengthDist};
use cadence_records::{RecordsConfig, RecordsWriter};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// A calibration prints a fitted engine, not a report: report outputs and checks would
/// be silently dropped, so they are refused by name.
fn refuse_report_outputs(args: &PlanArgs) -> anyhow::Result<()> {
    let o = &args.outputs;
    let given = [
        ("--json", args.json.is_some()),
        ("--html", o.html.is_some()),
        ("--csv", o.csv.is_some()),
        ("--markdown", o.markdown.is_some()),
        ("--convention", o.convention.is_some()),
        ("--slo", !args.slos.is_empty()),
        ("--dataset", args.dataset.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(usage(format!(
            "{flag} does not apply to --calibrate, which prints the fitted engine and its errors (--save-engine FILE writes the engine)"
        ))),
        None => Ok(()),
    }
}

/// `--calibrate RUN`: fit the engine to a measured sweep, then predict at -c/--rate
/// when given, else at the run's own loads.
fn calibrate(args: &PlanArgs, spec: EngineSpec, run: &std::path::Path) -> anyhow::Result<Exit> {
    refuse_report_outputs(args)?;
    let loads = if args.concurrency.is_some() || args.rate.is_some() {
        levels(args)
            .into_iter()
            .map(|l| (l.name, l.arrivals))
            .collect()
    } else {
        Vec::new()
    };
    crate::calibrate::run(args, spec, run, loads)
}

pub fn run(args: PlanArgs) -> anyhow::Result<Exit> {
    if args.list_presets {
        crate::output::print_stdout(&cadence_engine::presets::table())?;
        return Ok(Exit::Ok);
    }
    let model = model_of(&args)?;
    if let (Some(run), Model::Engine(spec)) = (&args.calibrate, &model) {
        return calibrate(&args, (**spec).clone(), run);
    }
    if !args.engine.inject.is_empty() {
        return Err(usage(
            "--inject drives the simulator (cadence sim, or cadence bench without a URL); cadence plan does not take it",
        ));
    }
    if args.requests == 0 {
        return Err(usage("--requests must be at least 1"));
    }
    let outputs = crate::output::named(args.json.as_deref(), None, &args.outputs);
    crate::output::preflight(args.dataset.as_slice(), &outputs)?;
    let max_tokens = args
        .max_tokens
        .unwrap_or_else(|| "128".parse().expect("a valid length"));
    if max_tokens.fixed() == Some(0) {
        return Err(usage("--max-tokens must be at least 1"));
    }
    let mut workload = Workload {
        requests: args.requests,
        warmup: args.warmup,
        input_tokens: args.input_tokens.fixed().unwrap_or(0).max(1),
        max_tokens: max_tokens.fixed().unwrap_or(0).max(1),
        lengths: lengths(&args, max_tokens)?,
        prefix_tokens: args.prefix_tokens.unwrap_or(0),
        prefix_groups: args.prefix_groups,
        sessions: sessions(&args),
        send_at_ns: Vec::new(),
        turnaround_ns: args.client_turnaround.as_nanos() as u64,
    };
    let checks = plan_checks(&args);
    // Each level's records go to the level aggregators (and, for the per-request CSV,
    // a records file) as the driver hands them over; none are kept past their level.
    let mut aggs = checks.aggregators();
    let (records_path, _spill) = crate::output::records_path(None, &args.outputs)?;
    let mut writer = records_path
        .clone()
        .map(|p| RecordsWriter::open(RecordsConfig::new(p)))
        .transpose()?;
    let started = std::time::Instant::now();
    let levels = match &args.trace {
        Some(path) => trace_level(&args, path, &mut workload)?,
        None => levels(&args),
    };
    let planned = plan_levels(&model, &levels, &workload, &mut aggs, writer.as_mut());
    if let Some(w) = writer {
        w.finish()?;
    }
    let mut info = RunInfo::new(
        format!("{} (virtual time)", model.name()),
        "engine-model",
        model.name(),
        match args.trace {
            Some(_) => "trace_replay",
            None => crate::run_meta::mode(args.rate.is_some(), args.arrivals),
        },
        crate::run_meta::now_unix_ms(),
    );
    info.duration_s = planned.end_ns as f64 / 1e9;
    info.command = crate::run_meta::redacted_command(std::env::args());
    let (mut report, verdict) = cadence_core::assemble(info, &planned.metas, &aggs, &checks);
    let exit = Exit::from(verdict);
    report.warnings.insert(
        0,
        format!(
            "planned, not measured: {} in virtual time ({:.0} ms of computation)",
            model.name(),
            started.elapsed().as_secs_f64() * 1e3
        ),
    );
    report
        .warnings
        .splice(1..1, trust(&model, &levels, &workload));
    let source = records_path.map(|p| cadence_run::RecordsSource::written(p, &planned.metas));
    crate::output::deliver(
        &report,
        source.as_ref(),
        args.json.as_deref(),
        &args.outputs,
        exit,
        Vec::new(),
    )
}

/// What answers: the twin (`--twin`), else the engine model.
fn model_of(args: &PlanArgs) -> anyhow::Result<Model> {
    Ok(match &args.twin {
        Some(path) => Model::Twin {
            twin: crate::engine_opts::twin(path)?,
            seed: args.seed,
        },
        None => Model::Engine(Box::new(crate::engine_opts::resolve(&args.engine, args.seed)?.ok_or_else(|| {
            usage("cadence plan needs an engine: --preset NAME (see --list-presets), --engine FILE.toml or --twin FILE")
        })?)),
    })
}

/// A twin's answer says how far to trust it (its fit's error, its draws' spread).
fn trust(model: &Model, levels: &[LevelSpec], workload: &Workload) -> Option<String> {
    let Model::Twin { twin, seed } = model else {
        return None;
    };
    let loads: Vec<_> = levels
        .iter()
        .map(|l| (l.name.clone(), l.arrivals))
        .collect();
    let spread = twin::confidence::draw_spread(twin, &loads, workload, *seed);
    Some(twin::confidence::line(twin, spread))
}

/// The bench's own report path: the same summaries, conventions, charts, SLO
/// verdicts and exit code, from the planned records.
fn plan_checks(args: &PlanArgs) -> Checks {
    Checks {
        stall_threshold: args.stall_threshold,
        slos: args.slos.clone(),
        // Virtual time sends every request on schedule; the bench's default late-send
        // limit is kept so a planned open loop is judged by the same rule.
        max_late: DEFAULT_MAX_LATE,
        time_bucket: Duration::from_secs(1),
        convention: args.outputs.convention,
        exact_samples: args.outputs.exact_samples(),
        // The model refuses only what cannot fit; --slo 'errors.rate<=…' gates it.
        max_error_rate: 1.0,
        what_if: args.outputs.what_if.clone(),
        plateau: args.outputs.plateau(),
    }
}

/// A level of the plan: how requests arrive, and how the report names it.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelSpec {
    pub arrivals: Arrivals,
    pub name: String,
    pub concurrency: Option<u32>,
    pub rate: Option<f64>,
}

/// The levels to plan, in order: one per `--rate` (arrivals seeded by `--seed`, as
/// the bench's), else one per `--concurrency` (default 8).
/// `--turns` sessions; with `--agent`, agent sessions whose later steps send the tool
/// results (`--tool-result-tokens` × `--tool-calls`) after `--tool-time`.
fn sessions(args: &PlanArgs) -> Option<Sessions> {
    if args.agent {
        return Some(Sessions {
            turns: args
                .turns
                .unwrap_or(cadence_bench::agent::DEFAULT_MAX_STEPS),
            think_ns: args.tool_time.as_nanos() as u64,
            agent_step_input: Some(args.tool_result_tokens.saturating_mul(args.tool_calls)),
        });
    }
    args.turns.map(|turns| Sessions {
        turns,
        think_ns: args.think_time.as_nanos() as u64,
        agent_step_input: None,
    })
}

pub fn levels(args: &PlanArgs) -> Vec<LevelSpec> {
    match &args.rate {
        Some(rates) => rates
            .0
            .iter()
            .map(|&rate| LevelSpec {
                arrivals: match args.arrivals {
                    ArrivalsArg::Constant => Arrivals::Constant { rate },
                    ArrivalsArg::Poisson => Arrivals::Poisson {
                        rate,
                        seed: args.seed,
                    },
                },
                name: format!("rate={rate}/s"),
                concurrency: None,
                rate: Some(rate),
            })
            .collect(),
        None => args
            .concurrency
            .clone()
            .map_or_else(|| vec![8], |c| c.0)
            .into_iter()
            .map(|c| LevelSpec {
                arrivals: Arrivals::Closed { concurrency: c },
                name: format!("concurrency={c}"),
                concurrency: Some(c),
                rate: None,
            })
            .collect(),
    }
}

/// `--trace`'s one level: the workload sends every entry at its time (sped up by
/// `--trace-speed`) with its lengths, the level named by its mean rate.
fn trace_level(
    args: &PlanArgs,
    path: &std::path::Path,
    workload: &mut Workload,
) -> anyhow::Result<Vec<LevelSpec>> {
    if !(args.trace_speed.is_finite() && args.trace_speed > 0.0) {
        return Err(usage("--trace-speed must be a positive number"));
    }
    let text = crate::inputs::read(path, cadence_core::input::LARGE)?;
    let mut entries = cadence_bench::trace::parse_trace(&text)
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    cadence_bench::trace::scale(&mut entries, args.trace_speed);
    let counter = match args.tokenizer.as_deref() {
        Some(t) => Counter::Tokenizer(
            cadence_bench::tokenizer::Tokenizer::load(t).map_err(|e| usage(e.to_string()))?,
        ),
        None => Counter::Words,
    };
    let count = |p: &str| counter.count(p);
    let (lengths, sends) = cadence_bench::trace::virtual_load(
        &entries,
        &count,
        workload.input_tokens,
        workload.max_tokens,
    );
    let rate = cadence_engine::measured::mean_rate(&sends);
    (workload.requests, workload.warmup) = (lengths.len() as u64, 0);
    (workload.lengths, workload.send_at_ns) = (lengths, sends);
    Ok(vec![LevelSpec {
        arrivals: Arrivals::Constant { rate },
        name: format!("trace ({} arrivals, {rate:.3}/s)", entries.len()),
        concurrency: None,
        rate: None,
    }])
}

/// Per request (prompt tokens, max tokens): from `--dataset`, drawn from the length
/// distributions by `--seed`, or empty when both lengths are fixed.
fn lengths(args: &PlanArgs, max_tokens: LengthDist) -> anyhow::Result<Vec<(u32, u32)>> {
    let total = args.requests + args.warmup;
    Ok(
        match (&args.dataset, args.input_tokens.fixed(), max_tokens.fixed()) {
            (Some(path), _, _) => dataset_lengths(args, path, max_tokens, total)?,
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
        },
    )
}

/// Every level's metadata, one level after another in virtual time (the records went
/// to the sinks).
pub struct Planned {
    pub metas: Vec<LevelMeta>,
    /// Virtual time the last level ended at.
    pub end_ns: u64,
}

/// Runs the levels in turn, each on a fresh engine, as one sequential run, handing
/// each level's records to the level aggregators and the records file (when there is
/// one); none are kept past their level.
pub fn plan_levels(
    model: &Model,
    levels: &[LevelSpec],
    workload: &Workload,
    aggs: &mut dyn RecordSink,
    mut file: Option<&mut cadence_records::RecordsWriter>,
) -> Planned {
    let mut planned = Planned {
        metas: Vec::new(),
        end_ns: 0,
    };
    let mut index = 0u64;
    for (i, l) in levels.iter().enumerate() {
        let (level, reach) =
            model.plan_level(l.arrivals, workload, i as u32, planned.end_ns, index);
        planned.end_ns = level.end_ns;
        index += level.records.len() as u64;
        let mut warnings = level.warnings();
        let name = match model.extrapolation(reach) {
            Some(w) => {
                warnings.insert(0, w);
                format!("{} (extrapolated)", l.name)
            }
            None => l.name.clone(),
        };
        planned.metas.push(LevelMeta {
            concurrency: l.concurrency,
            rate: l.rate,
            intended: Some(level.records.len() as u64),
            warnings,
            ..LevelMeta::new(i as u32, name)
        });
        for r in &level.records {
            aggs.accept(r);
            if let Some(w) = file.as_deref_mut() {
                w.accept(r);
            }
        }
    }
    planned
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
    let w = WorkloadArgs {
        tokenizer: args.tokenizer.clone(),
        input_tokens: None,
        corpus: None,
        dataset: Some(path.to_path_buf()),
        max_input: cadence_core::input::LARGE.max,
        dataset_format: args.dataset_format,
        min_prompt_tokens: args.min_prompt_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        multi_turn: false,
        turns: None,
        think_time: Duration::ZERO,
        prefix_tokens: None,
        prefix_groups: 1,
        agent: Default::default(),
    };
    let workload =
        crate::workload::prepare(&w, args.max_tokens, None, None, Some(total), args.seed)?;
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
