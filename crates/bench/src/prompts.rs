//! Synthetic prompts of exact token lengths, cut from a text corpus. The corpus is
//! split into words once and each word's token count is computed once; a prompt is a
//! seeded walk over whole sentences that stops at exactly N tokens, so ten thousand
//! prompts cost string copies, not ten thousand tokenizer passes.
//!
//! Exactness rests on the tokenizer splitting text at spaces before it merges (GPT-2
//! style byte-level BPE, Metaspace, whitespace pre-tokenizers: every common LLM
//! tokenizer). [`PromptGen::new`] checks that on sample prompts; a tokenizer that fails
//! the check gets every prompt re-tokenized and adjusted instead (slower, still exact).

use crate::tokenizer::Tokenizer;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution as _, Normal};
use std::collections::HashMap;
use std::str::FromStr;

/// The corpus shipped with Cadence: the Declaration of Independence and the
/// Gettysburg Address (United States public domain).
pub const CORPUS: &str = include_str!("../corpus/public-domain.txt");

/// The longest prompt, output or tool result a length may ask: 2^24 tokens
/// (16,777,216), far past any context window, and small enough that making its text
/// cannot exhaust the client's memory (that many words are about 100 MB).
pub const MAX_LENGTH: u32 = 1 << 24;

/// A length: `512`, `fixed:512`, `normal:512,64` (rounded, at least 1) or
/// `uniform:100..1000` (both ends included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LengthDist {
    /// Always this many tokens.
    Fixed(u32),
    /// Normal, rounded and at least 1.
    Normal {
        /// The mean length.
        mean: f64,
        /// Its standard deviation.
        stddev: f64,
    },
    /// Uniform over `lo..=hi`.
    Uniform {
        /// The shortest length.
        lo: u32,
        /// The longest length.
        hi: u32,
    },
}

impl LengthDist {
    /// One length drawn with `rng`.
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            LengthDist::Fixed(n) => n,
            LengthDist::Normal { mean, stddev } => {
                let x = Normal::new(mean, stddev).map_or(mean, |d| d.sample(rng));
                x.round().clamp(1.0, f64::from(MAX_LENGTH)) as u32
            }
            LengthDist::Uniform { lo, hi } => rng.random_range(lo..=hi),
        }
    }

    /// The fixed value, when the length does not vary.
    pub fn fixed(&self) -> Option<u32> {
        match *self {
            LengthDist::Fixed(n) => Some(n),
            _ => None,
        }
    }
}

impl FromStr for LengthDist {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = |why: &str| {
            format!("'{s}' is not a length ({why}); try 512, fixed:512, normal:512,64 or uniform:100..1000")
        };
        let over = |n: &dyn std::fmt::Display| {
            bad(&format!(
                "{n} is past the ceiling of {MAX_LENGTH} tokens a length may ask"
            ))
        };
        let pos = |v: &str| -> Result<u32, String> {
            let v = v.trim();
            match v.parse::<u64>() {
                Ok(n) if n > u64::from(MAX_LENGTH) => Err(over(&n)),
                Ok(n) if n >= 1 => Ok(n as u32),
                // Digits past u64: past the ceiling too.
                Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Err(over(&v)),
                _ => Err(bad("lengths are whole numbers of at least 1")),
            }
        };
        let (kind, rest) = s.split_once(':').unwrap_or(("fixed", s));
        match kind {
            "fixed" => Ok(LengthDist::Fixed(pos(rest)?)),
            "normal" => {
                let (m, sd) = rest
                    .split_once(',')
                    .ok_or_else(|| bad("normal:MEAN,STDDEV"))?;
                let mean: f64 = m.trim().parse().map_err(|_| bad("the mean is a number"))?;
                let stddev: f64 = sd
                    .trim()
                    .parse()
                    .map_err(|_| bad("the stddev is a number"))?;
                if !(mean >= 1.0 && mean.is_finite() && stddev >= 0.0 && stddev.is_finite()) {
                    return Err(bad("mean at least 1, stddev at least 0"));
                }
                if mean > f64::from(MAX_LENGTH) {
                    return Err(over(&mean));
                }
                Ok(LengthDist::Normal { mean, stddev })
            }
            "uniform" => {
                let (lo, hi) = rest.split_once("..").ok_or_else(|| bad("uniform:LO..HI"))?;
                let (lo, hi) = (pos(lo)?, pos(hi)?);
                if lo > hi {
                    return Err(bad("LO must not exceed HI"));
                }
                Ok(LengthDist::Uniform { lo, hi })
            }
            _ => Err(bad("unknown kind")),
        }
    }
}

/// Why a corpus cannot make prompts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorpusError {
    /// The corpus holds no words at all.
    #[error("the corpus has no words")]
    Empty,
    #[error(
        "the corpus has no word that is a single token, so not every length can be met \
         exactly; use a corpus of ordinary prose"
    )]
    /// No word of the corpus is one token, so lengths cannot be met exactly.
    NoSingleToken,
}

/// How prompt lengths are counted.
#[derive(Debug, Clone)]
pub enum Counter {
    /// The given tokenizer, without special tokens (no BOS, no chat template).
    Tokenizer(Tokenizer),
    /// Whitespace-separated words: what Cadence's built-in simulator counts as tokens.
    Words,
}

impl Counter {
    /// The tokens (or words) in `text`.
    pub fn count(&self, text: &str) -> usize {
        match self {
            Counter::Tokenizer(t) => t.count(text),
            Counter::Words => text.split_whitespace().count(),
        }
    }
}

/// Makes prompts of exact token lengths from a corpus.
#[derive(Debug, Clone)]
pub struct PromptGen {
    /// The corpus with whitespace runs collapsed to single spaces.
    text: String,
    /// Each word as a byte range of `text` *including* its leading space.
    units: Vec<(u32, u32)>,
    /// Tokens of each unit at the very start of a prompt (without its space).
    first_tokens: Vec<u16>,
    /// Units that start a sentence.
    sentence_starts: Vec<u32>,
    /// Running token sums: `cum[i]` is the tokens of units `0..i` (after a space).
    cum: Vec<u64>,
    counter: Counter,
    /// Whether the check found the tokenizer splitting at spaces (see the module docs).
    local: bool,
}

impl PromptGen {
    /// Splits `corpus` into words and counts each distinct word once.
    pub fn new(corpus: &str, counter: Counter) -> Result<PromptGen, CorpusError> {
        let mut text = String::with_capacity(corpus.len());
        let mut units = Vec::new();
        for w in corpus.split_whitespace() {
            let start = text.len();
            text.push(' ');
            text.push_str(w);
            units.push((start as u32, text.len() as u32));
        }
        if units.is_empty() {
            return Err(CorpusError::Empty);
        }
        let mut cache: HashMap<&str, (u16, u16)> = HashMap::new();
        let mut tokens = Vec::with_capacity(units.len());
        let mut first_tokens = Vec::with_capacity(units.len());
        for &(s, e) in &units {
            let u = &text[s as usize..e as usize];
            let (t, f) = *cache.entry(u).or_insert_with(|| {
                let c = |x: &str| counter.count(x).min(u16::MAX as usize) as u16;
                (c(u), c(&u[1..]))
            });
            tokens.push(t);
            first_tokens.push(f);
        }
        if !tokens.contains(&1) || !first_tokens.contains(&1) {
            return Err(CorpusError::NoSingleToken);
        }
        let mut sentence_starts = vec![0u32];
        for i in 1..units.len() {
            let prev = &text[units[i - 1].0 as usize..units[i - 1].1 as usize];
            if prev.ends_with(['.', '!', '?', ':', ';']) {
                sentence_starts.push(i as u32);
            }
        }
        let mut cum = Vec::with_capacity(tokens.len() + 1);
        cum.push(0u64);
        for &t in &tokens {
            cum.push(cum.last().copied().unwrap_or(0) + u64::from(t));
        }
        let mut g = PromptGen {
            text,
            units,
            first_tokens,
            sentence_starts,
            cum,
            counter,
            local: true,
        };
        if let Counter::Tokenizer(_) = g.counter {
            g.local = g.check_locality();
        }
        Ok(g)
    }

    /// The shipped corpus ([`CORPUS`]).
    pub fn builtin(counter: Counter) -> Result<PromptGen, CorpusError> {
        PromptGen::new(CORPUS, counter)
    }

    /// Whether prompts are exact by construction (true) or re-tokenized one by one.
    pub fn splits_at_spaces(&self) -> bool {
        self.local
    }

    /// How lengths are counted.
    pub fn counter(&self) -> &Counter {
        &self.counter
    }

    /// Sample prompts, fully tokenized, against their word sums.
    fn check_locality(&self) -> bool {
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        (0..16).all(|i| {
            let n = 1 + (i * 37) % 300;
            let p = self.assemble(n, &mut rng, false);
            self.counter.count(&p) == n
        })
    }

    /// A prompt of exactly `n` tokens (as [`Counter`] counts them); `continuation`
    /// when it will follow other text after a space (a shared prefix).
    pub fn prompt(&self, n: usize, rng: &mut impl Rng, continuation: bool) -> String {
        let p = self.assemble(n, rng, continuation);
        if self.local {
            return p;
        }
        self.adjust(p, n, rng, continuation)
    }

    /// Whole sentences from random places, word by word, until exactly `n` tokens:
    /// a word that would overshoot is replaced by the next word that fits. Runs of
    /// words are found by binary search on running token sums and copied at once.
    fn assemble(&self, n: usize, rng: &mut impl Rng, continuation: bool) -> String {
        let mut out = String::with_capacity(n * 6);
        let mut left = n as u64;
        let mut i = self.random_sentence(rng);
        if !continuation {
            // The first word has no space before it, and may tokenize differently.
            while usize::from(self.first_tokens[i]) == 0 || u64::from(self.first_tokens[i]) > left {
                i = (i + 1) % self.units.len();
            }
            let (s, e) = self.units[i];
            out.push_str(&self.text[s as usize + 1..e as usize]);
            left -= u64::from(self.first_tokens[i]);
            i += 1;
        }
        let mut stop = self.jump_at(i);
        while left > 0 {
            if i >= stop {
                // After a sentence or two, jump elsewhere so prompts differ early.
                i = self.random_sentence(rng);
                stop = self.jump_at(i);
            }
            // The longest run i..j whose tokens fit.
            let base = self.cum[i];
            let j = i + self.cum[i + 1..=stop].partition_point(|&c| c - base <= left);
            if j > i {
                out.push_str(&self.text[self.units[i].0 as usize..self.units[j - 1].1 as usize]);
                left -= self.cum[j] - base;
            }
            // Unit j (if any) overshoots: skip it and look further.
            i = j + 1;
        }
        out
    }

    /// Where a run starting at unit `i` ends: the first sentence start at least 25
    /// words on, or the end of the corpus.
    fn jump_at(&self, i: usize) -> usize {
        let k = self
            .sentence_starts
            .partition_point(|&s| (s as usize) < i + 25);
        self.sentence_starts
            .get(k)
            .map_or(self.units.len(), |&s| s as usize)
    }

    fn random_sentence(&self, rng: &mut impl Rng) -> usize {
        self.sentence_starts[rng.random_range(0..self.sentence_starts.len())] as usize
    }

    /// The slow path for tokenizers that merge across spaces: re-tokenize, then drop
    /// words from the end or append fresh words (about as many tokens as missing)
    /// until the count is exact.
    fn adjust(&self, mut p: String, n: usize, rng: &mut impl Rng, continuation: bool) -> String {
        for _ in 0..400 {
            let c = self.counter.count(&p);
            if c == n {
                return p;
            }
            if c < n {
                let more = self.assemble(n - c, rng, continuation || !p.is_empty());
                p.push_str(&more);
            } else {
                // Drop about as many words as there are extra tokens (at least one).
                for _ in 0..((c - n) / 2).max(1) {
                    match p.rfind(' ') {
                        Some(k) if k > 0 => p.truncate(k),
                        _ => p.clear(),
                    }
                }
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_parse_in_every_form_and_bad_ones_say_why() {
        assert_eq!("512".parse(), Ok(LengthDist::Fixed(512)));
        assert_eq!("fixed:7".parse(), Ok(LengthDist::Fixed(7)));
        assert_eq!(
            "normal:512,64".parse(),
            Ok(LengthDist::Normal {
                mean: 512.0,
                stddev: 64.0
            })
        );
        assert_eq!(
            "uniform:100..1000".parse(),
            Ok(LengthDist::Uniform { lo: 100, hi: 1000 })
        );
        for bad in [
            "0",
            "x",
            "uniform:9..3",
            "normal:5",
            "poisson:3",
            "normal:0,1",
        ] {
            let e = bad.parse::<LengthDist>().unwrap_err();
            assert!(e.contains("try 512"), "{bad}: {e}");
        }
    }

    #[test]
    fn lengths_past_the_ceiling_are_refused_naming_it_and_draws_stay_under_it() {
        let at = format!("{MAX_LENGTH}");
        assert_eq!(at.parse::<LengthDist>(), Ok(LengthDist::Fixed(MAX_LENGTH)));
        let fine = format!("uniform:1..{MAX_LENGTH}");
        assert!(fine.parse::<LengthDist>().is_ok());
        for s in [
            "16777217",
            "1000000000",
            "fixed:4294967295",
            "fixed:99999999999999999999",
            "uniform:1..16777217",
            "normal:1e9,1",
        ] {
            let e = s.parse::<LengthDist>().unwrap_err();
            assert!(e.contains("ceiling of 16777216 tokens"), "{s}: {e}");
        }
        // A wide spread is drawn within the ceiling.
        let wide: LengthDist = "normal:100,1e12".parse().unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let most = (0..200).map(|_| wide.sample(&mut rng)).max().unwrap();
        assert_eq!(most, MAX_LENGTH);
    }

    #[test]
    fn samples_stay_in_range_and_follow_the_seed() {
        let u = LengthDist::Uniform { lo: 100, hi: 110 };
        let mut a = SmallRng::seed_from_u64(1);
        let mut b = SmallRng::seed_from_u64(1);
        let xs: Vec<u32> = (0..200).map(|_| u.sample(&mut a)).collect();
        assert!(xs.iter().all(|x| (100..=110).contains(x)));
        assert!(xs.contains(&100) && xs.contains(&110), "both ends included");
        let ys: Vec<u32> = (0..200).map(|_| u.sample(&mut b)).collect();
        assert_eq!(xs, ys);
        let n = LengthDist::Normal {
            mean: 3.0,
            stddev: 50.0,
        };
        assert!((0..500).all(|_| n.sample(&mut a) >= 1), "clamped at 1");
        let mean = (0..4000)
            .map(|_| {
                f64::from(
                    LengthDist::Normal {
                        mean: 512.0,
                        stddev: 64.0,
                    }
                    .sample(&mut a),
                )
            })
            .sum::<f64>()
            / 4000.0;
        assert!((mean - 512.0).abs() < 8.0, "{mean}");
    }

    #[test]
    fn word_counted_prompts_have_exactly_n_words_and_follow_the_seed() {
        let g = PromptGen::builtin(Counter::Words).unwrap();
        let mut rng = SmallRng::seed_from_u64(9);
        for n in [1, 2, 17, 500, 3000] {
            let p = g.prompt(n, &mut rng, false);
            assert_eq!(p.split_whitespace().count(), n);
            assert!(!p.starts_with(' '));
        }
        let a = g.prompt(64, &mut SmallRng::seed_from_u64(3), false);
        let b = g.prompt(64, &mut SmallRng::seed_from_u64(3), false);
        let c = g.prompt(64, &mut SmallRng::seed_from_u64(4), false);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn prompts_come_from_the_given_corpus_only() {
        let corpus = "Alpha beta gamma. Delta epsilon zeta eta!\n\nTheta iota kappa?";
        let g = PromptGen::new(corpus, Counter::Words).unwrap();
        let words: std::collections::BTreeSet<&str> = corpus.split_whitespace().collect();
        let mut rng = SmallRng::seed_from_u64(2);
        let p = g.prompt(100, &mut rng, false);
        assert_eq!(p.split_whitespace().count(), 100);
        assert!(p.split_whitespace().all(|w| words.contains(w)), "{p}");
        assert!(
            !p.contains("  ") && !p.contains('\n'),
            "whitespace collapsed"
        );
    }

    #[test]
    fn a_corpus_without_single_token_words_is_refused() {
        assert_eq!(
            PromptGen::new("   ", Counter::Words).unwrap_err(),
            CorpusError::Empty
        );
    }
}
