//! What each request asks: the prompt (cycled from a list) and the body built around it.
//! The workloads issue grows this into datasets and exact token lengths.

use crate::body::BodySpec;
use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::Full;

/// The built-in prompt when the user gives none.
pub const DEFAULT_PROMPT: &str =
    "Write a short story about a lighthouse keeper who discovers that the light has been signalling to ships that do not exist.";

/// Makes the HTTP request for request number `index`.
#[derive(Debug, Clone)]
pub struct RequestFactory {
    pub endpoint: Uri,
    pub headers: HeaderMap,
    pub body: BodySpec,
    /// Prompts, used in turn.
    pub prompts: Vec<String>,
    /// Per-prompt output length overriding `body.max_tokens` (a trace's lengths);
    /// empty, or as long as `prompts`.
    pub max_tokens: Vec<Option<u32>>,
}

impl RequestFactory {
    /// The request and the id of the prompt it used.
    pub fn build(&self, index: u64) -> (Request<Full<Bytes>>, usize) {
        let pid = (index % self.prompts.len().max(1) as u64) as usize;
        let prompt = self.prompts.get(pid).map_or(DEFAULT_PROMPT, String::as_str);
        let max_tokens = self
            .max_tokens
            .get(pid)
            .copied()
            .flatten()
            .or(self.body.max_tokens);
        let mut req = Request::post(self.endpoint.clone())
            .body(Full::new(self.body.body_with(prompt, max_tokens)))
            .expect("method, URI and body are valid");
        *req.headers_mut() = self.headers.clone();
        (req, pid)
    }
}

/// A prompt of about `tokens` tokens for a trace entry that gives only a length: one
/// common English word per token (exact lengths need the server's tokenizer).
pub fn synthetic_prompt(tokens: u32) -> String {
    const WORDS: [&str; 8] = ["the", "time", "of", "day", "and", "a", "long", "way"];
    let mut s = String::with_capacity(tokens as usize * 5);
    for i in 0..tokens as usize {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[i % WORDS.len()]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::BodySpec;
    use cadence_wire::Api;

    fn factory(max_tokens: Vec<Option<u32>>) -> RequestFactory {
        RequestFactory {
            endpoint: "http://127.0.0.1:1/v1/completions".parse().unwrap(),
            headers: HeaderMap::new(),
            body: BodySpec {
                api: Api::Completions,
                model: "m".into(),
                max_tokens: Some(16),
                extra: None,
            },
            prompts: vec!["a".into(), "b".into()],
            max_tokens,
        }
    }

    fn body(req: Request<Full<Bytes>>) -> serde_json::Value {
        use http_body_util::BodyExt;
        let bytes = futures_util::FutureExt::now_or_never(req.into_body().collect())
            .expect("a full body is ready")
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn prompts_cycle_and_per_prompt_lengths_override() {
        let f = factory(vec![Some(3), None]);
        let (r0, p0) = f.build(0);
        let (r1, p1) = f.build(1);
        let (_, p2) = f.build(2);
        assert_eq!((p0, p1, p2), (0, 1, 0));
        let (b0, b1) = (body(r0), body(r1));
        assert_eq!(
            (b0["prompt"].as_str(), b0["max_tokens"].as_u64()),
            (Some("a"), Some(3))
        );
        assert_eq!(
            (b1["prompt"].as_str(), b1["max_tokens"].as_u64()),
            (Some("b"), Some(16))
        );
    }

    #[test]
    fn synthetic_prompt_has_one_word_per_token() {
        assert_eq!(synthetic_prompt(0), "");
        assert_eq!(synthetic_prompt(10).split(' ').count(), 10);
    }
}
