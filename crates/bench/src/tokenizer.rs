//! The run's tokenizer (Hugging Face `tokenizers`, loaded from a `tokenizer.json`): it
//! counts output tokens after a stream has ended (never in the read loop), attributes
//! them to the chunks that carried them, and cuts synthetic prompts to exact lengths.

use cadence_core::{RequestRecord, TokenCount, TokenSource};
use cadence_wire::StreamText;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a tokenizer could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The path given does not exist.
    #[error("tokenizer '{0}': no such file or folder")]
    NotFound(String),
    /// A folder without a `tokenizer.json`.
    #[error("tokenizer folder '{}' has no tokenizer.json", .0.display())]
    NoJson(PathBuf),
    /// A hub model id where a path was wanted (nothing is downloaded).
    #[error(
        "tokenizer '{0}' looks like a model id on a hub; cadence does not download \
         tokenizers (offline): pass the path of its tokenizer.json or of a folder holding one"
    )]
    HubId(String),
    /// The file could not be read or parsed as a tokenizer.
    #[error("tokenizer '{}' could not be read: {msg}", .path.display())]
    Load {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers library's reason.
        msg: String,
    },
    /// A tokenizer could not be made (from a `tokenizer.json` text, or trained).
    #[error("could not build the tokenizer: {0}")]
    Build(String),
}

/// A loaded tokenizer; cheap to clone (shared).
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    name: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.name)
            .finish()
    }
}

impl Tokenizer {
    /// Loads `spec`: a `tokenizer.json` file, or a model folder holding one. Anything
    /// else that looks like `org/model` is a hub id, refused with a clear error.
    pub fn load(spec: &str) -> Result<Tokenizer, TokenizerError> {
        let path = Path::new(spec);
        let file = if path.is_dir() {
            let f = path.join("tokenizer.json");
            if !f.is_file() {
                return Err(TokenizerError::NoJson(path.to_path_buf()));
            }
            f
        } else if path.is_file() {
            path.to_path_buf()
        } else if looks_like_hub_id(spec) {
            return Err(TokenizerError::HubId(spec.to_owned()));
        } else {
            return Err(TokenizerError::NotFound(spec.to_owned()));
        };
        let load = |msg: String| TokenizerError::Load {
            path: file.clone(),
            msg,
        };
        let bytes =
            cadence_core::input::read_bytes(&file, cadence_core::input::LARGE.named("tokenizer"))
                .map_err(|e| load(e.reason()))?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| load(e.to_string()))?;
        Ok(Tokenizer {
            inner: Arc::new(inner),
            name: file.display().to_string(),
        })
    }

    /// A tokenizer from the text of a `tokenizer.json`.
    pub fn from_json(json: &str, name: &str) -> Result<Tokenizer, TokenizerError> {
        let inner: tokenizers::Tokenizer = json
            .parse()
            .map_err(|e: tokenizers::Error| TokenizerError::Build(e.to_string()))?;
        Ok(Tokenizer {
            inner: Arc::new(inner),
            name: name.to_owned(),
        })
    }

    /// The `tokenizer.json` text (to save a trained fixture).
    pub fn to_json(&self) -> String {
        self.inner
            .to_string(false)
            .expect("a loaded tokenizer serializes")
    }

    /// Where it came from (a path, or a fixture's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Tokens in `text`, without special tokens (no BOS, no chat template).
    pub fn count(&self, text: &str) -> usize {
        self.inner
            .encode_fast(text, false)
            .map_or(0, |e| e.get_ids().len())
    }

    /// Token ids of `text`, without special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default()
    }

    /// Each token's end as a byte offset into `text`, in order.
    pub fn token_ends(&self, text: &str) -> Vec<usize> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_offsets().iter().map(|&(_, end)| end).collect())
            .unwrap_or_default()
    }

    /// Counts a finished request's output with the tokenizer: records the count in
    /// `token_sources.tokenizer`, uses it as the output count when the server gave
    /// neither usage nor token ids, and — when no chunk has a count of its own — gives
    /// chunks their counts: one each when the server's count equals the number of
    /// text-bearing chunks, else each token to the chunk that completed it
    /// ([`attribute`]), scaled to the server's count.
    pub fn annotate(&self, rec: &mut RequestRecord, text: &StreamText) {
        if text.chunk_ends.is_empty() {
            return;
        }
        let content = self.token_ends(&text.content);
        let reasoning = self.token_ends(&text.reasoning);
        let total = (content.len() + reasoning.len()) as u64;
        rec.token_sources.tokenizer = Some(total);
        if rec.output_tokens.is_none() {
            rec.output_tokens = Some(TokenCount {
                count: total,
                source: TokenSource::Tokenizer,
            });
        }
        let untouched = rec.chunks.iter().all(|c| c.tokens().is_none());
        if !untouched || text.chunk_ends.len() != rec.chunks.len() {
            return;
        }
        // The server's own count (usage or token ids), when it has one.
        let server = rec
            .output_tokens
            .filter(|t| t.source != TokenSource::Tokenizer);
        // A chunk that added no text (a tool-call delta) keeps an unknown count.
        let adds_text: Vec<bool> = text
            .chunk_ends
            .iter()
            .scan((0u32, 0u32), |prev, &end| {
                let added = end != *prev;
                *prev = end;
                Some(added)
            })
            .collect();
        let text_chunks = adds_text.iter().filter(|&&a| a).count() as u64;
        if server.is_some_and(|t| t.count == text_chunks) {
            // As many chunks as the server counted tokens: one token each (`cadence
            // sim`, llama-server). Re-tokenizing would move tokens split across chunks.
            for (chunk, _) in rec.chunks.iter_mut().zip(&adds_text).filter(|(_, &a)| a) {
                chunk.1 = Some(1);
            }
            rec.chunk_tokens_source = Some(TokenSource::Chunks);
            return;
        }
        let c = attribute(&content, text.chunk_ends.iter().map(|e| e.0 as usize));
        let r = attribute(&reasoning, text.chunk_ends.iter().map(|e| e.1 as usize));
        let mut counts: Vec<u32> = c.iter().zip(&r).map(|(a, b)| a + b).collect();
        // The server's own count wins: re-tokenizing generated text can give another
        // total (a model need not emit the canonical tokenization), so the shares are
        // scaled to the server's total.
        if let Some(used) = server {
            if used.count != total {
                scale_to(&mut counts, used.count);
            }
        }
        for ((chunk, &added), &n) in rec.chunks.iter_mut().zip(&adds_text).zip(&counts) {
            if added {
                chunk.1 = Some(n);
            }
        }
        rec.chunk_tokens_source = Some(TokenSource::Tokenizer);
    }
}

/// Tokens per chunk: each token (by its end offset) goes to the first chunk whose text
/// reached that offset, i.e. the chunk that completed it. The counts add up to the
/// number of tokens, so per-chunk counts agree with the whole-text count (tokenizing
/// each chunk's text on its own would not: BPE merges across chunk boundaries, and
/// a chunk holding part of a word or of a UTF-8 character tokenizes differently).
pub fn attribute(token_ends: &[usize], chunk_ends: impl Iterator<Item = usize>) -> Vec<u32> {
    let mut out = Vec::new();
    let mut t = 0;
    for end in chunk_ends {
        let mut n = 0u32;
        while t < token_ends.len() && token_ends[t] <= end {
            n += 1;
            t += 1;
        }
        out.push(n);
    }
    // Tokens past the last chunk's end (none in practice) go to the last chunk.
    if let Some(last) = out.last_mut() {
        *last += (token_ends.len() - t) as u32;
    }
    out
}

/// Scales `counts` to add up to `target` by the largest-remainder rule (each share
/// rounded down, the leftover units to the largest fractions, earlier chunks first on
/// ties). All zeros stay zeros.
pub fn scale_to(counts: &mut [u32], target: u64) {
    let sum: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if sum == 0 || sum == target {
        return;
    }
    let mut rem: Vec<(u64, usize)> = Vec::with_capacity(counts.len());
    let mut given = 0u64;
    for (i, c) in counts.iter_mut().enumerate() {
        let exact = u64::from(*c) * target;
        let floor = exact / sum;
        rem.push((exact % sum, i));
        *c = u32::try_from(floor).unwrap_or(u32::MAX);
        given += floor;
    }
    rem.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rem.iter().take((target - given) as usize) {
        counts[i] += 1;
    }
}

fn looks_like_hub_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
        && !spec.ends_with(".json")
}

/// A small byte-level BPE tokenizer trained on `text` at call time: the fixture tests
/// use instead of a downloaded model tokenizer (GPT-2-style pre-tokenization, the
/// same pipeline as Llama 3, Qwen and GPT-family `tokenizer.json` files).
pub fn train_bpe(text: &str, vocab_size: usize) -> Result<Tokenizer, TokenizerError> {
    train_bpe_with(text, vocab_size, true)
}

/// [`train_bpe`], optionally without splitting at spaces first: merges then cross
/// word boundaries (the case synthetic prompts must re-tokenize to stay exact).
pub fn train_bpe_with(
    text: &str,
    vocab_size: usize,
    split_at_spaces: bool,
) -> Result<Tokenizer, TokenizerError> {
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::normalizers::NormalizerWrapper;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::TokenizerBuilder;
    let build = |e: tokenizers::Error| TokenizerError::Build(e.to_string());
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(1)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tk = TokenizerBuilder::<BPE, NormalizerWrapper, ByteLevel, ByteLevel, ByteLevel>::new()
        .with_model(BPE::default())
        .with_pre_tokenizer(Some(
            ByteLevel::default()
                .add_prefix_space(false)
                .use_regex(split_at_spaces),
        ))
        .with_post_processor(Some(ByteLevel::default()))
        .with_decoder(Some(ByteLevel::default()))
        .build()
        .map_err(build)?;
    tk.train(&mut trainer, text.lines().map(|l| format!("{l}\n")))
        .map_err(build)?;
    let json = tk.to_string(false).map_err(build)?;
    Tokenizer::from_json(&json, &format!("fixture BPE ({vocab_size} tokens)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome};

    /// A small BPE trained on the shipped corpus (the text synthetic prompts are cut
    /// from), read here as the text it is.
    fn fixture() -> Tokenizer {
        train_bpe(include_str!("../corpus/public-domain.txt"), 800).unwrap()
    }

    #[test]
    fn attribution_gives_each_token_to_the_chunk_that_completed_it() {
        // Tokens end at 3, 5, 9, 10; chunks end at 4, 4, 9, 12.
        assert_eq!(
            attribute(&[3, 5, 9, 10], [4, 4, 9, 12].into_iter()),
            vec![1, 0, 2, 1]
        );
        assert_eq!(attribute(&[], [1].into_iter()), vec![0]);
    }

    #[test]
    fn scaling_keeps_shares_and_hits_the_server_total() {
        let mut c = vec![1, 1, 4, 1, 1];
        scale_to(&mut c, 6);
        assert_eq!(c.iter().sum::<u32>(), 6);
        assert_eq!(c, vec![1, 1, 3, 1, 0], "8 -> 6: 0.75 each, 3 for the 4");
        let mut up = vec![1, 2];
        scale_to(&mut up, 6);
        assert_eq!(up, vec![2, 4]);
        let mut zero = vec![0, 0];
        scale_to(&mut zero, 5);
        assert_eq!(zero, vec![0, 0]);
    }

    #[test]
    fn hub_ids_get_an_offline_error_and_missing_paths_say_so() {
        let e = Tokenizer::load("meta-llama/Llama-3.1-8B").unwrap_err();
        assert!(matches!(e, TokenizerError::HubId(_)), "{e}");
        assert!(e
            .to_string()
            .contains("pass the path of its tokenizer.json"));
        let e = Tokenizer::load("/no/such/tokenizer.json").unwrap_err();
        assert!(matches!(e, TokenizerError::NotFound(_)), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = Tokenizer::load(dir.path().to_str().unwrap()).unwrap_err();
        assert!(matches!(e, TokenizerError::NoJson(_)), "{e}");
        std::fs::write(dir.path().join("tokenizer.json"), "{not json").unwrap();
        let e = Tokenizer::load(dir.path().to_str().unwrap()).unwrap_err();
        assert!(matches!(e, TokenizerError::Load { .. }), "{e}");
    }

    #[test]
    fn a_model_folder_or_its_tokenizer_json_loads() {
        let tk = fixture();
        let dir = tempfile::tempdir().unwrap();
        let json = tk.inner.to_string(false).unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), &json).unwrap();
        let by_dir = Tokenizer::load(dir.path().to_str().unwrap()).unwrap();
        let by_file = Tokenizer::load(dir.path().join("tokenizer.json").to_str().unwrap()).unwrap();
        let text = "We hold these truths to be self-evident";
        assert_eq!(by_dir.encode(text), tk.encode(text));
        assert_eq!(by_file.count(text), tk.count(text));
        assert!(tk.count(text) > 0);
    }

    /// A stream whose content chunks are `pieces`, one read each, counts unknown.
    fn streamed(pieces: &[&str]) -> (StreamText, RequestRecord) {
        let mut text = StreamText::default();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        for (i, p) in pieces.iter().enumerate() {
            text.content.push_str(p);
            text.chunk_ends.push((text.content.len() as u32, 0));
            rec.chunks.push(Chunk(i as u64, None));
        }
        (text, rec)
    }

    #[test]
    fn annotate_counts_the_text_and_fills_unknown_chunk_counts() {
        let tk = fixture();
        let pieces = [" We hold", " these tru", "ths to be", " self-evident"];
        let (text, mut rec) = streamed(&pieces);
        tk.annotate(&mut rec, &text);
        let whole = tk.count(&text.content) as u64;
        assert_eq!(rec.token_sources.tokenizer, Some(whole));
        assert_eq!(
            rec.output_tokens,
            Some(TokenCount {
                count: whole,
                source: TokenSource::Tokenizer
            })
        );
        let per_chunk: u64 = rec.chunks.iter().map(|c| u64::from(c.1.unwrap())).sum();
        assert_eq!(
            per_chunk, whole,
            "chunk counts add up to the whole-text count"
        );
        // Chunk texts tokenized one by one give another total (BPE merges across
        // chunk boundaries: "tru" + "ths"), which is why counts are attributed.
        let separately: usize = pieces.iter().map(|p| tk.count(p)).sum();
        assert_ne!(
            separately as u64, whole,
            "the fixture shows the boundary effect"
        );
        assert_eq!(rec.chunk_tokens_source, Some(TokenSource::Tokenizer));
    }

    #[test]
    fn annotate_scales_chunk_shares_to_the_server_total() {
        let tk = fixture();
        let pieces = [" We hold", " these truths", " to be self-evident"];
        let (text, mut rec) = streamed(&pieces);
        let whole = tk.count(&text.content) as u64;
        rec.output_tokens = Some(TokenCount {
            count: whole - 2,
            source: TokenSource::Usage,
        });
        tk.annotate(&mut rec, &text);
        let per_chunk: u64 = rec.chunks.iter().map(|c| u64::from(c.1.unwrap())).sum();
        assert_eq!(
            per_chunk,
            whole - 2,
            "chunk counts follow the server's total"
        );
        assert_eq!(rec.token_sources.tokenizer, Some(whole));
        assert_eq!(rec.output_tokens.unwrap().source, TokenSource::Usage);
    }

    /// A server that sends one token per chunk (`cadence sim`,
    /// llama-server) says so by its usage equalling the chunk count; re-tokenizing the
    /// text gave chunks 0 or 2 tokens (a token split across chunks goes to the later
    /// one), so per-token ITL had more samples than tokens.
    #[test]
    fn chunks_equal_to_usage_are_one_token_each() {
        let tk = fixture();
        let pieces = ["We", " ho", "ld", " these", " tru", "ths", " to", " be"];
        let (text, mut rec) = streamed(&pieces);
        rec.output_tokens = Some(TokenCount {
            count: pieces.len() as u64,
            source: TokenSource::Usage,
        });
        tk.annotate(&mut rec, &text);
        let counts: Vec<Option<u32>> = rec.chunks.iter().map(|c| c.1).collect();
        assert_eq!(counts, vec![Some(1); pieces.len()]);
        assert_eq!(rec.output_tokens.unwrap().source, TokenSource::Usage);
        assert_eq!(
            rec.token_sources.tokenizer,
            Some(tk.count(&text.content) as u64),
            "the tokenizer's own count is still recorded"
        );
        // Any other total keeps the attribution rule.
        let (text, mut rec) = streamed(&pieces);
        rec.output_tokens = Some(TokenCount {
            count: pieces.len() as u64 + 3,
            source: TokenSource::Usage,
        });
        tk.annotate(&mut rec, &text);
        let sum: u32 = rec.chunks.iter().map(|c| c.1.unwrap()).sum();
        assert_eq!(sum as usize, pieces.len() + 3);
        assert_eq!(rec.chunk_tokens_source, Some(TokenSource::Tokenizer));
    }

    #[test]
    fn annotate_keeps_server_counts() {
        let tk = fixture();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        rec.chunks = vec![Chunk(1, Some(2))];
        rec.output_tokens = Some(TokenCount {
            count: 2,
            source: TokenSource::Usage,
        });
        let text = StreamText {
            content: " We hold".into(),
            reasoning: String::new(),
            chunk_ends: vec![(8, 0)],
            ..StreamText::default()
        };
        tk.annotate(&mut rec, &text);
        assert_eq!(rec.output_tokens.unwrap().source, TokenSource::Usage);
        assert_eq!(rec.chunks[0].1, Some(2));
        assert!(rec.token_sources.tokenizer.is_some());
    }
}
