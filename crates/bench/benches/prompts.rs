//! Synthetic prompt generation speed: 10,000 prompts of exactly 2,000 tokens. Uses
//! the tokenizer.json at `CADENCE_BENCH_TOKENIZER` when set (a real model's), else a
//! small BPE trained on the corpus. Prints a one-shot figure, then criterion's.

use cadence_bench::prompts::{Counter, PromptGen, CORPUS};
use cadence_bench::tokenizer::{train_bpe, Tokenizer};
use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Instant;

fn tokenizer() -> Tokenizer {
    match std::env::var("CADENCE_BENCH_TOKENIZER") {
        Ok(p) => Tokenizer::load(&p).expect("CADENCE_BENCH_TOKENIZER loads"),
        Err(_) => train_bpe(CORPUS, 1000).expect("the fixture trains"),
    }
}

fn make(g: &PromptGen, n: usize, len: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(1);
    (0..n).map(|_| g.prompt(len, &mut rng, false).len()).sum()
}

fn bench(c: &mut Criterion) {
    let tk = tokenizer();
    let t0 = Instant::now();
    let g = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
    let setup = t0.elapsed();
    let t1 = Instant::now();
    let bytes = make(&g, 10_000, 2_000);
    let gen = t1.elapsed();
    // Spot-check exactness on a sample (not timed).
    let mut rng = SmallRng::seed_from_u64(1);
    let exact = (0..100)
        .filter(|_| tk.count(&g.prompt(2_000, &mut rng, false)) == 2_000)
        .count();
    eprintln!(
        "tokenizer {}: setup {:.1} ms (split at spaces: {}), 10,000 x 2,000-token prompts in {:.1} ms ({:.1} MB of text); {exact}/100 sampled prompts exact",
        tk.name(),
        setup.as_secs_f64() * 1e3,
        g.splits_at_spaces(),
        gen.as_secs_f64() * 1e3,
        bytes as f64 / 1e6
    );
    let mut group = c.benchmark_group("prompts");
    group.sample_size(10);
    group.bench_function("10000x2000_tokens", |b| b.iter(|| make(&g, 10_000, 2_000)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
