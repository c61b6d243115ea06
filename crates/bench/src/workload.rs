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
    pub prompts: Vec<String>,
}

impl RequestFactory {
    /// The request and the id of the prompt it used.
    pub fn build(&self, index: u64) -> (Request<Full<Bytes>>, usize) {
        let pid = (index % self.prompts.len().max(1) as u64) as usize;
        let prompt = self.prompts.get(pid).map_or(DEFAULT_PROMPT, String::as_str);
        let mut req = Request::post(self.endpoint.clone())
            .body(Full::new(self.body.body(prompt)))
            .expect("method, URI and body are valid");
        *req.headers_mut() = self.headers.clone();
        (req, pid)
    }
}
