//! Synthetic prompts are exactly as long as asked, by the tokenizer's own count.

use cadence_bench::prompts::{Counter, LengthDist, PromptGen, CORPUS};
use cadence_bench::tokenizer::train_bpe;
use rand::rngs::SmallRng;
use rand::SeedableRng;

#[test]
fn a_thousand_prompts_tokenize_to_exactly_the_asked_length() {
    let tk = train_bpe(CORPUS, 1000).unwrap();
    let g = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
    assert!(g.splits_at_spaces(), "byte-level BPE splits at spaces");
    let dist: LengthDist = "uniform:1..1024".parse().unwrap();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut exact = 0;
    for _ in 0..1000 {
        let n = dist.sample(&mut rng) as usize;
        let p = g.prompt(n, &mut rng, false);
        if tk.count(&p) == n {
            exact += 1;
        }
    }
    assert_eq!(
        exact, 1000,
        "every prompt has exactly the asked token count"
    );
}

#[test]
fn a_prefix_and_its_continuation_add_up_exactly() {
    let tk = train_bpe(CORPUS, 1000).unwrap();
    let g = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    for (a, b) in [(1, 1), (100, 37), (512, 900)] {
        let prefix = g.prompt(a, &mut rng, false);
        let body = g.prompt(b, &mut rng, true);
        assert_eq!(tk.count(&prefix), a);
        assert_eq!(tk.count(&format!("{prefix}{body}")), a + b);
    }
}

#[test]
fn the_same_seed_gives_the_same_prompts() {
    let tk = train_bpe(CORPUS, 1000).unwrap();
    let g = PromptGen::builtin(Counter::Tokenizer(tk)).unwrap();
    let make = |seed| {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..20)
            .map(|_| g.prompt(300, &mut rng, false))
            .collect::<Vec<_>>()
    };
    assert_eq!(make(5), make(5));
    assert_ne!(make(5), make(6));
    let distinct: std::collections::BTreeSet<String> = make(5).into_iter().collect();
    assert_eq!(distinct.len(), 20, "prompts differ from one another");
}

#[test]
fn a_tokenizer_that_merges_across_spaces_still_gets_exact_prompts() {
    let tk = cadence_bench::tokenizer::train_bpe_with(CORPUS, 1500, false).unwrap();
    let g = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
    assert!(
        !g.splits_at_spaces(),
        "the check notices merges across spaces"
    );
    let mut rng = SmallRng::seed_from_u64(3);
    for n in [1, 2, 5, 40, 333] {
        let p = g.prompt(n, &mut rng, false);
        assert_eq!(tk.count(&p), n, "{p:?}");
    }
}
