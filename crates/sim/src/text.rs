//! The words the simulated model "says". One token is one word with a leading
//! space, so token counts are obvious from the text and need no tokenizer.

/// Plain ASCII filler. Token id `i` is `VOCAB[i]`.
pub const VOCAB: &[&str] = &[
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "then", "runs",
    "across", "a", "green", "field", "under", "bright", "sky", "while", "small", "birds", "sing",
    "in", "tall", "trees", "near", "river", "that", "flows", "gently", "toward", "sea", "where",
    "waves", "meet", "sand", "each", "morning", "light", "returns", "with", "new", "colors",
    "people", "walk", "along", "shore", "talking", "about", "work", "time", "stream", "token",
    "latency", "model", "server", "request", "answer", "simple", "clear", "fast", "steady",
    "cadence", "done",
];

/// Every word holds a multi-byte UTF-8 character (used by `split_utf8`).
pub const UTF8_VOCAB: &[&str] = &[
    "café",
    "naïve",
    "日本",
    "語",
    "😀",
    "über",
    "Ωmega",
    "façade",
    "crème",
    "straße",
    "ñandú",
    "København",
    "Ελλάδα",
    "привет",
    "🚀",
    "€uro",
];

/// Words that look like SSE syntax (used by `data_prefix_text`).
pub const SSE_LOOKALIKE_VOCAB: &[&str] = &[
    "data: ",
    "data: [DONE]",
    "data: {\"x\":1}",
    "event: ping",
    "data:",
    ": comment",
    "id: 7",
];

/// Which word list a stream draws its text from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocabulary {
    /// [`VOCAB`]: plain ASCII words.
    Plain,
    /// [`UTF8_VOCAB`]: every word multi-byte (the `split_utf8` fault).
    Utf8,
    /// [`SSE_LOOKALIKE_VOCAB`]: words that look like SSE lines (the `data_prefix_text`
    /// fault).
    SseLookalike,
}

impl Vocabulary {
    fn words(self) -> &'static [&'static str] {
        match self {
            Vocabulary::Plain => VOCAB,
            Vocabulary::Utf8 => UTF8_VOCAB,
            Vocabulary::SseLookalike => SSE_LOOKALIKE_VOCAB,
        }
    }

    /// The word for a token id (ids come from [`VOCAB`]'s range).
    pub fn word(self, id: u32) -> &'static str {
        let words = self.words();
        // `data_prefix_text` alternates lookalikes with plain words.
        if self == Vocabulary::SseLookalike && id.is_multiple_of(2) {
            return VOCAB[id as usize % VOCAB.len()];
        }
        words[id as usize % words.len()]
    }

    /// Appends the text of these tokens, each with its leading space.
    pub fn push_text(self, ids: &[u32], out: &mut String) {
        for &id in ids {
            out.push(' ');
            out.push_str(self.word(id));
        }
    }
}

/// The prompt-token estimate: whitespace-separated words. Deliberately simple
/// and documented, so a client can reproduce it exactly.
pub fn count_words(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}
