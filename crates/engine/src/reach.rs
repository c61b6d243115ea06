//! How far a twin's requests went past what it was fitted on: apart from the twin, so
//! the drivers' [`crate::drive::Backend`] can ask any backend for it.

/// How far a level went past what the fit saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    /// Requests served.
    pub requests: u64,
    /// Requests that met more running requests, a deeper context or a longer uncached
    /// prompt than the fit saw: their figures are extrapolated.
    pub beyond: u64,
    /// The most requests running at once.
    pub max_running: u32,
    /// The deepest context met.
    pub max_context: u64,
    /// The longest uncached prompt met.
    pub max_prompt: u64,
}
