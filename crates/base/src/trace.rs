//! W3C trace context (`traceparent`): the ids a request is traced by, kept in its
//! record so the record, the client's span and the server's span are one request;
//! written and read here once for bench, the proxy and the simulator.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One request's place in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceIds {
    /// The W3C trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The request's own span id (never all zero).
    pub span_id: [u8; 8],
    /// The span it is a child of: a session's, or the caller's an incoming
    /// `traceparent` named.
    pub parent: Option<[u8; 8]>,
    /// Whether its span is recorded (exported): the `traceparent` flag sent on.
    pub sampled: bool,
}

impl TraceIds {
    /// The `traceparent` header naming this span as the parent of what the request
    /// causes: `00-{trace}-{span}-{01|00}`.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{}",
            hex(&self.trace_id),
            hex(&self.span_id),
            if self.sampled { "01" } else { "00" }
        )
    }
}

/// A `traceparent` header read: version 00's layout (a later version's first four
/// fields are read the same, as the specification asks); `None` when it is not one
/// or names an all-zero id.
pub fn parse_traceparent(value: &str) -> Option<(/*trace*/ [u8; 16], /*parent*/ [u8; 8], bool)> {
    let v = value.trim();
    let mut parts = v.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let trace: [u8; 16] = unhex(trace)?;
    let parent: [u8; 8] = unhex(parent)?;
    let [flags]: [u8; 1] = unhex(flags)?;
    unhex::<1>(version)?;
    if trace == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace, parent, flags & 1 == 1))
}

/// Whether a trace id falls within `ratio` (0 to 1) of all trace ids, by its last
/// eight bytes as OpenTelemetry's trace-id ratio sampler reads them: the same id is
/// sampled or not wherever it is decided.
pub fn sampled_by_ratio(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    (x as f64) < ratio.max(0.0) * (1u64 << 63) as f64
}

/// How the run traces its requests.
#[derive(Debug, Clone)]
pub struct Propagation {
    salt: u64,
    ratio: f64,
}

/// A non-zero 64-bit word from `seed` (SplitMix64's mix: distinct seeds, distinct words).
fn word(seed: u64) -> u64 {
    match crate::rng::SplitMix64::new(seed).next_u64() {
        0 => 1,
        w => w,
    }
}

impl Propagation {
    /// Ids salted by `salt` (drawn per run, so two runs' ids differ), a request's span
    /// recorded when its trace id falls within `ratio` (`--otlp-sample`, 0 to 1).
    pub fn new(salt: u64, ratio: f64) -> Propagation {
        Propagation {
            salt: word(salt),
            ratio,
        }
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

    /// The ids of request `index` arriving with `incoming` (a `traceparent`, the
    /// proxy's case): a child of the caller's span in the caller's trace, sampled as the
    /// caller said; a trace of its own when there is none (or it is not one).
    pub fn continued(&self, index: u64, incoming: Option<&str>) -> TraceIds {
        let own = self.ids(index, None);
        match incoming.and_then(parse_traceparent) {
            Some((trace_id, parent, sampled)) => TraceIds {
                trace_id,
                parent: Some(parent),
                sampled,
                ..own
            },
            None => own,
        }
    }
}

fn trace_id(seed: u64) -> [u8; 16] {
    let mut id = [0; 16];
    id[..8].copy_from_slice(&word(seed).to_be_bytes());
    id[8..].copy_from_slice(&word(seed ^ 0x7ACE).to_be_bytes());
    id
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from `2N` hex digits (either case); `None` otherwise.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, o) in out.iter_mut().enumerate() {
        let d = |c: u8| (c as char).to_digit(16);
        *o = (d(b[2 * i])? * 16 + d(b[2 * i + 1])?) as u8;
    }
    Some(out)
}

/// As records write it: the ids in hex.
#[derive(Serialize, Deserialize)]
struct Hex {
    trace_id: String,
    span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_span_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sampled: bool,
}

impl Serialize for TraceIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Hex {
            trace_id: hex(&self.trace_id),
            span_id: hex(&self.span_id),
            parent_span_id: self.parent.map(|p| hex(&p)),
            sampled: self.sampled,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TraceIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let h = Hex::deserialize(d)?;
        let bad = |what: &str| D::Error::custom(format!("{what} is not hex of its length"));
        Ok(TraceIds {
            trace_id: unhex(&h.trace_id).ok_or_else(|| bad("trace_id"))?,
            span_id: unhex(&h.span_id).ok_or_else(|| bad("span_id"))?,
            parent: match h.parent_span_id {
                Some(p) => Some(unhex(&p).ok_or_else(|| bad("parent_span_id"))?),
                None => None,
            },
            sampled: h.sampled,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_ones_are_not_read() {
        let ids = TraceIds {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
            parent: None,
            sampled: true,
        };
        let tp = ids.traceparent();
        assert_eq!(tp, format!("00-{}-{}-01", "ab".repeat(16), "01".repeat(8)));
        assert_eq!(parse_traceparent(&tp), Some(([0xab; 16], [0x01; 8], true)));
        let w3c = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let (t, p, s) = parse_traceparent(w3c).unwrap();
        assert_eq!(
            (hex(&t).as_str(), hex(&p).as_str(), s),
            (&w3c[3..35], &w3c[36..52], false)
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        // A later version's extra fields are allowed.
        assert!(parse_traceparent(&format!("01{}-what", &w3c[2..])).is_some());
    }

    #[test]
    fn ids_are_written_in_hex_and_read_back() {
        let ids = TraceIds {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: Some([3; 8]),
            sampled: true,
        };
        let j = serde_json::to_string(&ids).unwrap();
        assert_eq!(
            j,
            format!(
                r#"{{"trace_id":"{}","span_id":"{}","parent_span_id":"{}","sampled":true}}"#,
                "01".repeat(16),
                "02".repeat(8),
                "03".repeat(8)
            )
        );
        assert_eq!(serde_json::from_str::<TraceIds>(&j).unwrap(), ids);
        let bad = r#"{"trace_id":"01","span_id":"0202020202020202"}"#;
        assert!(serde_json::from_str::<TraceIds>(bad)
            .unwrap_err()
            .to_string()
            .contains("trace_id"));
    }

    #[test]
    fn a_continued_trace_is_a_child_of_the_callers_span() {
        let p = Propagation::new(5, 1.0);
        let w3c = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let ids = p.continued(3, Some(w3c));
        let (t, parent, _) = parse_traceparent(w3c).unwrap();
        assert_eq!(
            (ids.trace_id, ids.parent, ids.sampled),
            (t, Some(parent), false)
        );
        assert_eq!(ids.span_id, p.ids(3, None).span_id);
        assert_eq!(p.continued(3, Some("junk")), p.ids(3, None));
        assert_eq!(p.continued(3, None), p.ids(3, None));
    }

    #[test]
    fn ratio_sampling_is_a_function_of_the_trace_id() {
        let id = |low: u64| {
            let mut t = [0; 16];
            t[8..].copy_from_slice(&low.to_be_bytes());
            t
        };
        assert!(sampled_by_ratio(&id(u64::MAX), 1.0));
        assert!(!sampled_by_ratio(&id(0), 0.0));
        assert!(sampled_by_ratio(&id(0), 0.5));
        assert!(!sampled_by_ratio(&id(u64::MAX), 0.5));
        let kept = (0..1000u64)
            .filter(|i| sampled_by_ratio(&id(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)), 0.25))
            .count();
        assert!((200..300).contains(&kept), "{kept}");
    }
}
