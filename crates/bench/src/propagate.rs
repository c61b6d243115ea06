//! W3C trace context on every request (`--otlp`): a `traceparent` (and a `tracestate`
//! naming the request) a server that traces (vLLM, SGLang, a proxy) continues, the ids
//! kept in the record so its exported span is the one the server's span points to.
//! Ids are derived from the run's salt and the request's index (a session's steps share
//! one trace under the session's span), so no request task shares any state to make one.

use cadence_core::rng::SplitMix64;
use cadence_core::trace::{sampled_by_ratio, TraceIds};
use cadence_core::RequestRecord;
use http::HeaderValue;

/// How the run traces its requests.
#[derive(Debug, Clone)]
pub struct Propagation {
    salt: u64,
    ratio: f64,
}

/// A non-zero 64-bit word from `seed` (SplitMix64's mix: distinct seeds, distinct words).
fn word(seed: u64) -> u64 {
    match SplitMix64::new(seed).next_u64() {
        0 => 1,
        w => w,
    }
}

impl Propagation {
    /// Ids salted by `salt` (drawn per run, so two runs' ids differ), a request's span
    /// recorded when its trace id falls within `ratio` (`--otlp-sample`, 0 to 1).
    pub fn new(salt: u64, ratio: f64) -> Propagation {
        Propagation { salt, ratio }
    }

    /// [`Propagation::new`] with a salt from the clock and the process id.
    pub fn salted_now(ratio: f64) -> Propagation {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Propagation::new(word(t ^ u64::from(std::process::id()) << 40), ratio)
    }

    /// The trace id and span id of session `session`'s own span.
    pub fn session_ids(&self, session: u64) -> ([u8; 16], [u8; 8]) {
        let base = self.salt ^ session.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        (
            trace_id(base ^ 0x5E55),
            word(base ^ 0x5E55_5E55).to_be_bytes(),
        )
    }

    /// The ids of request `index` (of `session`, when it is a session's step).
    pub fn ids(&self, index: u64, session: Option<u64>) -> TraceIds {
        let own = self.salt ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let (trace_id, parent) = match session {
            Some(s) => {
                let (t, p) = self.session_ids(s);
                (t, Some(p))
            }
            None => (trace_id(own), None),
        };
        TraceIds {
            trace_id,
            span_id: word(own ^ 0x5BA4).to_be_bytes(),
            parent,
            sampled: sampled_by_ratio(&trace_id, self.ratio),
        }
    }

    /// Puts `rec`'s trace context on `req` (`traceparent`, `tracestate: cadence=N`, N
    /// the request's index) and in `rec`.
    pub fn stamp<B>(&self, req: &mut http::Request<B>, rec: &mut RequestRecord) {
        let ids = self.ids(rec.index, rec.session);
        let h = req.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&ids.traceparent()) {
            h.insert("traceparent", v);
        }
        if let Ok(v) = HeaderValue::from_str(&format!("cadence={}", rec.index)) {
            h.insert("tracestate", v);
        }
        rec.trace = Some(ids);
    }
}

fn trace_id(seed: u64) -> [u8; 16] {
    let mut id = [0; 16];
    id[..8].copy_from_slice(&word(seed).to_be_bytes());
    id[8..].copy_from_slice(&word(seed ^ 0x7ACE).to_be_bytes());
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::trace::parse_traceparent;
    use cadence_core::Outcome;

    #[test]
    fn each_request_gets_its_own_trace_and_a_sessions_steps_share_one() {
        let p = Propagation::new(42, 1.0);
        let (a, b) = (p.ids(1, None), p.ids(2, None));
        assert_ne!(a.trace_id, b.trace_id);
        assert_ne!(a.span_id, b.span_id);
        assert_eq!((a.parent, a.sampled), (None, true));
        let (s1, s2) = (p.ids(3, Some(9)), p.ids(4, Some(9)));
        assert_eq!(s1.trace_id, s2.trace_id);
        assert_ne!(s1.span_id, s2.span_id);
        let (t, span) = p.session_ids(9);
        assert_eq!((s1.trace_id, s1.parent), (t, Some(span)));
        assert_ne!(p.ids(3, Some(10)).trace_id, t);
        // Another run's salt, other ids.
        assert_ne!(Propagation::new(43, 1.0).ids(1, None).trace_id, a.trace_id);
    }

    #[test]
    fn the_headers_carry_the_records_ids_and_sampling_sets_the_flag() {
        let mut req = http::Request::new(());
        let mut rec = RequestRecord::new(7, Outcome::Succeeded);
        Propagation::new(1, 1.0).stamp(&mut req, &mut rec);
        let ids = rec.trace.unwrap();
        let tp = req.headers()["traceparent"].to_str().unwrap();
        assert_eq!(
            parse_traceparent(tp),
            Some((ids.trace_id, ids.span_id, true))
        );
        assert_eq!(req.headers()["tracestate"], "cadence=7");
        let none = Propagation::new(1, 0.0);
        let sampled = (0..100).filter(|&i| none.ids(i, None).sampled).count();
        assert_eq!(sampled, 0);
        let half = Propagation::new(1, 0.5);
        let sampled = (0..1000).filter(|&i| half.ids(i, None).sampled).count();
        assert!((400..600).contains(&sampled), "{sampled}");
    }
}
