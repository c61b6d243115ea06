//! The `bench` flags that say what the requests ask (tokenizer, synthetic lengths,
//! datasets, sessions, shared prefixes), validated into a [`Workload`] before the run
//! starts, then applied to the request factory.

use crate::cli::{DatasetFormat, WorkloadArgs};
use crate::exit::usage;
use cadence_bench::agent::{self as agent, AgentSpec, DurationDist};
use cadence_bench::dataset::{self, DatasetOptions};
use cadence_bench::prompts::{Counter, LengthDist, PromptGen};
use cadence_bench::session::SessionKind;
use cadence_bench::tokenizer::Tokenizer;
use cadence_bench::trace::TraceEntry;
use cadence_bench::workload::{RequestFactory, TurnSpec, WorkItem};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;

/// max_tokens when neither `--max-tokens` nor the workload gives one.
pub const DEFAULT_MAX_TOKENS: u32 = 64;

/// Most distinct synthetic prompts made before a run (they are then reused in turn).
const MAX_POOL: u64 = 10_000;

/// The validated workload, ready to apply to a factory.
#[derive(Debug, Default)]
pub struct Workload {
    pub tokenizer: Option<Tokenizer>,
    pub items: Vec<WorkItem>,
    pub prefixes: Vec<String>,
    pub think_time: Duration,
    /// One prompt per `--trace` entry, in trace order: its own text, or a prompt of
    /// exactly its `input_tokens` as the counter counts them.
    pub trace_prompts: Vec<String>,
    /// Notes for the user (how lengths are counted), printed unless --quiet.
    pub notes: Vec<String>,
    /// `--agent`: what each session's steps declare and send back.
    pub agent: Option<Arc<AgentSpec>>,
}

impl Workload {
    /// Puts the items, prefixes and think time into the factory.
    pub fn apply(&mut self, factory: &mut RequestFactory) {
        factory.items = std::mem::take(&mut self.items);
        factory.prefixes = std::mem::take(&mut self.prefixes);
        factory.think_time = self.think_time;
        if let Some(agent) = self.agent.take() {
            factory.session = SessionKind::Agent(agent);
        }
    }
}

/// Reads and checks everything the workload flags name. `max_tokens` is
/// `--max-tokens`; `requests` the planned request count (sizes the synthetic pool).
pub fn prepare(
    w: &WorkloadArgs,
    max_tokens: Option<LengthDist>,
    prompt: Option<&str>,
    trace: Option<&[TraceEntry]>,
    requests: Option<u64>,
    seed: u64,
) -> anyhow::Result<Workload> {
    // Trace entries that give only a length get a prompt of exactly that many tokens.
    let trace_lengths = trace.is_some_and(|t| {
        t.iter()
            .any(|e| e.prompt.is_none() && e.input_tokens.is_some())
    });
    let tokenizer = w
        .tokenizer
        .as_deref()
        .map(Tokenizer::load)
        .transpose()
        .map_err(|e| usage(e.to_string()))?;
    let counter = tokenizer.clone().map_or(Counter::Words, Counter::Tokenizer);
    let mut out = Workload {
        tokenizer: tokenizer.clone(),
        think_time: w.think_time,
        ..Workload::default()
    };
    if w.turns.is_some() && w.input_tokens.is_none() && !w.agent.agent {
        return Err(usage(
            "--turns needs --input-tokens (synthetic sessions) or --agent (the step cap)",
        ));
    }
    let needs_gen = w.input_tokens.is_some() || w.prefix_tokens.is_some() || trace_lengths;
    let gen = if needs_gen {
        let g = prompt_gen(w, counter.clone())?;
        out.notes.push(counting_note(tokenizer.as_ref(), &g));
        Some(g)
    } else {
        None
    };
    // One generator draws everything, in this order: prefixes, items, trace prompts.
    let mut draw = Draws {
        rng: SmallRng::seed_from_u64(seed),
        max_tokens,
        pool: requests.unwrap_or(1000).clamp(1, MAX_POOL),
    };
    if w.agent.agent {
        let results = match &gen {
            Some(g) => g.clone(),
            None => prompt_gen(w, counter.clone())?,
        };
        out.agent = Some(Arc::new(agent_spec(w, results, seed)?));
    }
    if let Some(n) = w.prefix_tokens {
        let g = gen
            .as_ref()
            .expect("a generator when prefixes are asked for");
        out.prefixes = (0..w.prefix_groups)
            .map(|_| g.prompt(n as usize, &mut draw.rng, false))
            .collect();
    }
    if let Some(dist) = w.input_tokens {
        let g = gen.as_ref().expect("a generator for synthetic prompts");
        let continuation = !out.prefixes.is_empty();
        // An agent session's later steps are its tool traffic: one user turn.
        let turns = if w.agent.agent {
            1
        } else {
            w.turns.unwrap_or(1)
        };
        out.items = draw.synthetic(g, dist, turns as usize, continuation);
    } else if let Some(path) = &w.dataset {
        out.items = dataset_items(w, path, &counter, seed)?;
        if max_tokens.is_some() {
            // --max-tokens overrides the recorded reply lengths.
            draw.override_max_tokens(&mut out.items);
        }
    } else if trace.is_none()
        && (max_tokens.is_some_and(|d| d.fixed().is_none()) || !out.prefixes.is_empty())
    {
        // One prompt, output lengths (or prefixes) that vary per request.
        out.items = draw.one_prompt(prompt.unwrap_or(cadence_bench::workload::DEFAULT_PROMPT));
    }
    if let Some(entries) = trace {
        let fallback = prompt.unwrap_or(cadence_bench::workload::DEFAULT_PROMPT);
        out.trace_prompts = entries
            .iter()
            .map(|e| match (&e.prompt, e.input_tokens, gen.as_ref()) {
                (Some(p), _, _) => p.clone(),
                (None, Some(n), Some(g)) => g.prompt(n as usize, &mut draw.rng, false),
                _ => fallback.to_owned(),
            })
            .collect();
    }
    Ok(out)
}

/// How prompt lengths are counted, for the user.
fn counting_note(tokenizer: Option<&Tokenizer>, g: &PromptGen) -> String {
    match tokenizer {
        Some(t) => format!(
            "prompt lengths are counted with {} (no BOS, no chat template){}",
            t.name(),
            if g.splits_at_spaces() {
                ""
            } else {
                "; it merges across spaces, so each prompt is re-tokenized to be exact"
            }
        ),
        None => "prompt lengths are counted as whitespace-separated words (the built-in \
                 simulator's tokens); pass --tokenizer for a real model's count"
            .into(),
    }
}

/// The seeded draws of a workload: prompts of drawn lengths and `--max-tokens` per turn.
struct Draws {
    rng: SmallRng,
    max_tokens: Option<LengthDist>,
    /// Distinct items to make (they are reused in turn).
    pool: u64,
}

impl Draws {
    /// A turn's max_tokens from `--max-tokens`, when given.
    fn max(&mut self) -> Option<u32> {
        self.max_tokens.map(|d| d.sample(&mut self.rng))
    }

    /// Synthetic sessions of `turns` prompts of `dist` tokens each; the first turn
    /// continues a shared prefix when there are prefixes.
    fn synthetic(
        &mut self,
        g: &PromptGen,
        dist: LengthDist,
        turns: usize,
        continuation: bool,
    ) -> Vec<WorkItem> {
        (0..self.pool)
            .map(|i| WorkItem {
                id: format!("synthetic-{i}"),
                history: Vec::new(),
                turns: (0..turns)
                    .map(|t| {
                        let n = dist.sample(&mut self.rng) as usize;
                        TurnSpec {
                            user: g.prompt(n, &mut self.rng, continuation && t == 0),
                            max_tokens: self.max(),
                        }
                    })
                    .collect(),
            })
            .collect()
    }

    /// One prompt, each copy with its own drawn max_tokens.
    fn one_prompt(&mut self, p: &str) -> Vec<WorkItem> {
        (0..self.pool)
            .map(|i| WorkItem {
                id: format!("prompt-{i}"),
                history: Vec::new(),
                turns: vec![TurnSpec {
                    user: p.to_owned(),
                    max_tokens: self.max(),
                }],
            })
            .collect()
    }

    /// Replaces every turn's max_tokens with a draw.
    fn override_max_tokens(&mut self, items: &mut [WorkItem]) {
        for it in items {
            for t in &mut it.turns {
                t.max_tokens = self.max();
            }
        }
    }
}

/// The `--dataset` entries, parsed in their format, filtered and shuffled by `seed`.
fn dataset_items(
    w: &WorkloadArgs,
    path: &std::path::Path,
    counter: &Counter,
    seed: u64,
) -> anyhow::Result<Vec<WorkItem>> {
    let text = crate::inputs::read(path, crate::inputs::large(w, "dataset"))?;
    let items = match w.dataset_format {
        DatasetFormat::Sharegpt => dataset::parse_sharegpt(&text, counter),
        DatasetFormat::Jsonl => dataset::parse_jsonl(&text),
        DatasetFormat::Auto => dataset::parse_auto(&text, counter),
    }
    .map_err(|e| usage(format!("dataset {}: {e}", path.display())))?;
    let opts = DatasetOptions {
        multi_turn: w.multi_turn,
        min_prompt_tokens: w.min_prompt_tokens,
        max_prompt_tokens: w.max_prompt_tokens,
        seed: Some(seed),
    };
    dataset::prepare(items, &opts, counter)
        .map_err(|e| usage(format!("dataset {}: {e}", path.display())))
}

/// `--agent`'s sessions: the tools (`--tools`, else the built-in set), how they are
/// forced, the tool time and result lengths, the step cap (`--turns`).
fn agent_spec(w: &WorkloadArgs, results: PromptGen, seed: u64) -> anyhow::Result<AgentSpec> {
    let a = &w.agent;
    let tools = match &a.tools {
        Some(path) => {
            let text = crate::inputs::read(path, cadence_core::input::TOOLS)?;
            agent::parse_tools(&text)
                .map_err(|e| usage(format!("--tools {}: {e}", path.display())))?
        }
        None => agent::builtin_tools(),
    };
    Ok(AgentSpec {
        tools,
        force: a.agent_force.into(),
        tool_time: a
            .tool_time
            .unwrap_or(DurationDist::Fixed(Duration::from_millis(100))),
        result_tokens: a.tool_result_tokens.unwrap_or(LengthDist::Fixed(100)),
        results: Arc::new(results),
        max_steps: w.turns.unwrap_or(agent::DEFAULT_MAX_STEPS),
        // Apart from the workload's own draws.
        seed: seed ^ 0xA6E7_5E55_1017_0000,
    })
}

/// The synthetic prompt generator over `--corpus` (or the shipped corpus).
fn prompt_gen(w: &WorkloadArgs, counter: Counter) -> anyhow::Result<PromptGen> {
    let corpus = match &w.corpus {
        Some(p) => crate::inputs::read(p, crate::inputs::large(w, "corpus"))?,
        None => cadence_bench::prompts::CORPUS.to_owned(),
    };
    PromptGen::new(&corpus, counter).map_err(|e| usage(e.to_string()))
}
