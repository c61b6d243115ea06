//! Where each request's time went, from the timing the server reports per request
//! (vLLM's `metrics`, llama.cpp's `timings`, Ollama's durations, SGLang's queue time)
//! joined with the client's own times: the client's TTFT is the server's queue and
//! prefill plus what neither reports (front end and network, the residual), and the
//! client's decode is the server's decode plus the delivery. Exact sums in ns, so a
//! level's parts add up to its whole to the nanosecond.

use crate::per_request::{client_wait_before, ms};
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

/// The slowest requests a level keeps with their split (by client TTFT plus decode).
pub const SLOWEST_KEPT: usize = 5;

/// One request's time split, ns. The residuals are signed: a server whose clock or
/// definition runs longer than the client's shows it as a negative residual.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSplit {
    /// The request's position in the run.
    pub index: u64,
    /// The client's TTFT: first content-bearing chunk − sent.
    pub ttft_ns: u64,
    /// The server's queue, when it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ns: Option<u64>,
    /// The server's prefill (to its first token).
    pub prefill_ns: u64,
    /// The residual of the TTFT: `ttft − queue − prefill` (front end and network; the
    /// queue too when the server does not report one).
    pub front_ns: i64,
    /// The client's decode: last content-bearing chunk − first (absent with one chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_ns: Option<u64>,
    /// The server's decode, first token to last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_decode_ns: Option<u64>,
    /// The residual of the decode: client decode − server decode (the delivery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_ns: Option<i64>,
}

impl RequestSplit {
    /// The request's split, when it succeeded, has a TTFT and its server reported a
    /// prefill; `None` otherwise.
    pub fn of(r: &RequestRecord) -> Option<RequestSplit> {
        if r.warmup || r.outcome != Outcome::Succeeded || client_wait_before(r, 0) {
            return None;
        }
        let t = r.counters.server_timing?;
        let prefill_ns = t.prompt_ns?;
        let first = r.first_chunk_ns()?;
        let ttft_ns = first.checked_sub(r.sent_ns?)?;
        let front_ns = signed(ttft_ns) - signed(t.queue_ns.unwrap_or(0)) - signed(prefill_ns);
        let decode_ns = r
            .last_chunk_ns()
            .filter(|_| r.chunks.len() > 1)
            .and_then(|l| l.checked_sub(first));
        let delivery_ns = match (decode_ns, t.decode_ns) {
            (Some(c), Some(s)) => Some(signed(c) - signed(s)),
            _ => None,
        };
        Some(RequestSplit {
            index: r.index,
            ttft_ns,
            queue_ns: t.queue_ns,
            prefill_ns,
            front_ns: clamp(front_ns),
            decode_ns,
            server_decode_ns: t.decode_ns,
            delivery_ns: delivery_ns.map(clamp),
        })
    }

    /// What the request took on the client, for ranking the slowest.
    fn weight(&self) -> u64 {
        self.ttft_ns.saturating_add(self.decode_ns.unwrap_or(0))
    }
}

fn signed(v: u64) -> i128 {
    i128::from(v)
}

fn clamp(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Exact sums of one set of requests' parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sums {
    n: u64,
    whole: i128,
    server: [i128; 2],
    rest: i128,
}

impl Sums {
    fn add(&mut self, whole: u64, server: [u64; 2], rest: i64) {
        self.n += 1;
        self.whole += signed(whole);
        self.server[0] += signed(server[0]);
        self.server[1] += signed(server[1]);
        self.rest += i128::from(rest);
    }

    fn merge(&mut self, o: &Sums) {
        self.n += o.n;
        self.whole += o.whole;
        self.server[0] += o.server[0];
        self.server[1] += o.server[1];
        self.rest += o.rest;
    }

    /// The mean of a sum in ms (`None` over no request).
    fn mean(&self, sum: i128) -> Option<f64> {
        (self.n > 0).then(|| sum as f64 / self.n as f64 / 1e6)
    }
}

/// A level's split, accumulated one record at a time (bounded: sums and the
/// [`SLOWEST_KEPT`] slowest).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimeSplitAcc {
    /// Succeeded, measured requests (with a TTFT), timed by the server or not.
    requests: u64,
    /// Of them, those whose server reported a queue time.
    queue_reported: u64,
    ttft: Sums,
    decode: Sums,
    slowest: Vec<RequestSplit>,
}

impl TimeSplitAcc {
    /// Takes one record.
    pub fn push(&mut self, r: &RequestRecord) {
        if r.warmup || r.outcome != Outcome::Succeeded || r.first_chunk_ns().is_none() {
            return;
        }
        self.requests += 1;
        if let Some(s) = RequestSplit::of(r) {
            self.add(s);
        }
    }

    fn add(&mut self, s: RequestSplit) {
        self.queue_reported += u64::from(s.queue_ns.is_some());
        self.ttft.add(
            s.ttft_ns,
            [s.queue_ns.unwrap_or(0), s.prefill_ns],
            s.front_ns,
        );
        if let (Some(c), Some(sd), Some(d)) = (s.decode_ns, s.server_decode_ns, s.delivery_ns) {
            self.decode.add(c, [sd, 0], d);
        }
        self.keep_slowest(s);
    }

    fn keep_slowest(&mut self, s: RequestSplit) {
        self.slowest.push(s);
        // Slowest first; the earlier request first among equals, so merges agree.
        self.slowest
            .sort_by(|a, b| b.weight().cmp(&a.weight()).then(a.index.cmp(&b.index)));
        self.slowest.truncate(SLOWEST_KEPT);
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &TimeSplitAcc) {
        self.requests += o.requests;
        self.queue_reported += o.queue_reported;
        self.ttft.merge(&o.ttft);
        self.decode.merge(&o.decode);
        for s in &o.slowest {
            self.keep_slowest(*s);
        }
    }

    /// The level's split; `None` when no request succeeded with a first chunk.
    pub fn finish(&self) -> Option<TimeSplit> {
        (self.requests > 0).then(|| TimeSplit {
            requests: self.requests,
            timed: self.ttft.n,
            queue_reported: self.queue_reported,
            ttft_ms: self.ttft.mean(self.ttft.whole),
            queue_ms: self.ttft.mean(self.ttft.server[0]),
            prefill_ms: self.ttft.mean(self.ttft.server[1]),
            front_ms: self.ttft.mean(self.ttft.rest),
            decoded: self.decode.n,
            decode_ms: self.decode.mean(self.decode.whole),
            server_decode_ms: self.decode.mean(self.decode.server[0]),
            delivery_ms: self.decode.mean(self.decode.rest),
            slowest: self.slowest.iter().map(SlowRequest::from).collect(),
        })
    }
}

/// A level's "where the time went": means over the requests the server timed, each
/// whole equal to its parts (the residual named), and the slowest requests split alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeSplit {
    /// Succeeded requests with a first chunk.
    pub requests: u64,
    /// Of them, those whose server reported its own timing (a prefill at least); 0:
    /// the server said nothing.
    pub timed: u64,
    /// Of the timed, those whose server reported its queue; when fewer than `timed`,
    /// `front_ms` holds their queue.
    pub queue_reported: u64,
    /// Mean client TTFT over the timed requests, ms.
    pub ttft_ms: Option<f64>,
    /// Mean server queue, ms (0 for a request that did not report one).
    pub queue_ms: Option<f64>,
    /// Mean server prefill, ms.
    pub prefill_ms: Option<f64>,
    /// Mean residual, ms: `ttft − queue − prefill` (front end and network).
    pub front_ms: Option<f64>,
    /// Timed requests with a decode on both sides (two chunks or more, the server's
    /// decode reported).
    pub decoded: u64,
    /// Mean client decode (last chunk − first), ms.
    pub decode_ms: Option<f64>,
    /// Mean server decode, ms.
    pub server_decode_ms: Option<f64>,
    /// Mean residual, ms: client decode − server decode (delivery).
    pub delivery_ms: Option<f64>,
    /// The slowest timed requests (client TTFT plus decode), slowest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<SlowRequest>,
}

/// One of a level's slowest requests, split, ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowRequest {
    /// The request's position in the run.
    pub index: u64,
    /// Client TTFT.
    pub ttft_ms: f64,
    /// Server queue, when reported.
    pub queue_ms: Option<f64>,
    /// Server prefill.
    pub prefill_ms: f64,
    /// Residual: front end and network.
    pub front_ms: f64,
    /// Client decode.
    pub decode_ms: Option<f64>,
    /// Server decode.
    pub server_decode_ms: Option<f64>,
    /// Residual: delivery.
    pub delivery_ms: Option<f64>,
}

fn signed_ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

impl From<&RequestSplit> for SlowRequest {
    fn from(s: &RequestSplit) -> SlowRequest {
        SlowRequest {
            index: s.index,
            ttft_ms: ms(s.ttft_ns),
            queue_ms: s.queue_ns.map(ms),
            prefill_ms: ms(s.prefill_ns),
            front_ms: signed_ms(s.front_ns),
            decode_ms: s.decode_ns.map(ms),
            server_decode_ms: s.server_decode_ns.map(ms),
            delivery_ms: s.delivery_ns.map(signed_ms),
        }
    }
}

/// What a client can do to get the server's timing from `api`'s servers, for the
/// line that says a server reported none.
pub fn how_to_get(api: &str) -> &'static str {
    match api {
        "chat" | "completions" | "responses" => {
            "vLLM reports it when started with --enable-per-request-metrics (on the usage \
             chunk: Cadence asks for usage); llama-server always does"
        }
        "generate" => "SGLang reports its queue time in meta_info; TGI's stream has none",
        "llamacpp" | "ollama" => "this server reports it on its last event",
        _ => "this dialect carries no server timing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, ServerTiming};

    fn rec(index: u64, sent: u64, chunks: &[u64], t: Option<ServerTiming>) -> RequestRecord {
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        r.sent_ns = Some(sent);
        r.chunks = chunks.iter().map(|&c| Chunk(c, Some(1))).collect();
        r.end_ns = chunks.last().copied();
        r.counters.server_timing = t;
        r
    }

    fn vllm(queue: u64, prefill: u64, decode: u64) -> Option<ServerTiming> {
        Some(ServerTiming {
            queue_ns: Some(queue),
            prompt_ns: Some(prefill),
            decode_ns: Some(decode),
            decode_tokens: Some(3),
            ..ServerTiming::default()
        })
    }

    #[test]
    fn a_requests_ttft_is_its_queue_prefill_and_residual_to_the_nanosecond() {
        // Sent at 1 ms; first chunk at 61.000123 ms: TTFT 60.000123 ms = queue 12.3 +
        // prefill 45.2 + residual 2.500123 ms. Decode 20 ms on the client, 18.4 on the
        // server: delivery 1.6 ms.
        let r = rec(
            7,
            1_000_000,
            &[61_000_123, 71_000_123, 81_000_123],
            vllm(12_300_000, 45_200_000, 18_400_000),
        );
        let s = RequestSplit::of(&r).unwrap();
        assert_eq!(s.ttft_ns, 60_000_123);
        assert_eq!(s.front_ns, 2_500_123);
        assert_eq!(
            s.ttft_ns as i64,
            s.queue_ns.unwrap() as i64 + s.prefill_ns as i64 + s.front_ns
        );
        assert_eq!(
            (s.decode_ns, s.delivery_ns),
            (Some(20_000_000), Some(1_600_000))
        );
        // A server that says more than the client saw leaves a negative residual.
        let r = rec(8, 0, &[10_000_000], vllm(0, 11_000_000, 0));
        let s = RequestSplit::of(&r).unwrap();
        assert_eq!(
            (s.front_ns, s.decode_ns, s.delivery_ns),
            (-1_000_000, None, None)
        );
        // No timing, a failure, a warm-up: no split.
        assert_eq!(RequestSplit::of(&rec(9, 0, &[5], None)), None);
        let mut failed = rec(10, 0, &[5], vllm(1, 1, 1));
        failed.outcome = Outcome::StreamError;
        assert_eq!(RequestSplit::of(&failed), None);
    }

    #[test]
    fn a_levels_means_add_up_and_the_slowest_are_kept_in_order() {
        let mut acc = TimeSplitAcc::default();
        acc.push(&rec(
            0,
            0,
            &[10_000_000, 12_000_000],
            vllm(1_000_000, 8_000_000, 1_500_000),
        ));
        acc.push(&rec(
            1,
            0,
            &[30_000_000, 40_000_000],
            vllm(20_000_000, 9_000_000, 9_000_000),
        ));
        // Llama.cpp: no queue; its residual holds the queue.
        let llama = ServerTiming {
            prompt_ns: Some(4_000_000),
            ..ServerTiming::default()
        };
        acc.push(&rec(2, 0, &[5_000_000], Some(llama)));
        acc.push(&rec(3, 0, &[7_000_000], None));
        let t = acc.finish().unwrap();
        assert_eq!(
            (t.requests, t.timed, t.queue_reported, t.decoded),
            (4, 3, 2, 2)
        );
        assert_eq!(t.ttft_ms, Some(15.0));
        assert_eq!(t.queue_ms, Some(7.0));
        assert_eq!(t.prefill_ms, Some(7.0));
        assert_eq!(t.front_ms, Some(1.0));
        assert_eq!(
            (t.decode_ms, t.server_decode_ms, t.delivery_ms),
            (Some(6.0), Some(5.25), Some(0.75))
        );
        let order: Vec<u64> = t.slowest.iter().map(|s| s.index).collect();
        assert_eq!(order, [1, 0, 2]);
        // Two halves merged are the whole.
        let (mut a, mut b) = (TimeSplitAcc::default(), TimeSplitAcc::default());
        a.push(&rec(
            0,
            0,
            &[10_000_000, 12_000_000],
            vllm(1_000_000, 8_000_000, 1_500_000),
        ));
        b.push(&rec(
            1,
            0,
            &[30_000_000, 40_000_000],
            vllm(20_000_000, 9_000_000, 9_000_000),
        ));
        b.push(&rec(2, 0, &[5_000_000], Some(llama)));
        b.push(&rec(3, 0, &[7_000_000], None));
        a.merge(&b);
        assert_eq!(a.finish(), Some(t));
        // Nothing reported: the level says so (timed 0), with no figure made up.
        let mut silent = TimeSplitAcc::default();
        silent.push(&rec(0, 0, &[5], None));
        let t = silent.finish().unwrap();
        assert_eq!((t.requests, t.timed, t.ttft_ms), (1, 0, None));
        assert_eq!(TimeSplitAcc::default().finish(), None);
    }
}
