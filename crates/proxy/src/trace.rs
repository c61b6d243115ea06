//! The proxy's place in a trace (`--otlp`): a measured request continues its caller's
//! `traceparent` (or starts a trace of its own), goes upstream naming the proxy's span
//! as the parent of the server's, and its record keeps the ids its span is exported by.

use cadence_core::trace::Propagation;
use cadence_core::RequestRecord;
use http::{HeaderMap, HeaderValue};

/// Puts the proxy's span between the caller's and the server's: `rec` gets ids that
/// continue the incoming `traceparent` (one header of W3C's form; else a trace of the
/// proxy's own, sampled by the run's share), and `headers`, which go upstream, carry
/// them as the new `traceparent`. `tracestate` is forwarded as the caller sent it.
pub(crate) fn continue_trace(p: &Propagation, headers: &mut HeaderMap, rec: &mut RequestRecord) {
    let mut all = headers.get_all("traceparent").iter();
    // Two traceparent headers are no trace context (W3C: a receiver may discard both).
    let incoming = match (all.next(), all.next()) {
        (Some(v), None) => v.to_str().ok(),
        _ => None,
    };
    let ids = p.continued(rec.index, incoming);
    if let Ok(v) = HeaderValue::from_str(&ids.traceparent()) {
        headers.insert("traceparent", v);
    }
    rec.trace = Some(ids);
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::trace::{hex, parse_traceparent};
    use cadence_core::Outcome;

    const W3C: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_proxys_span_is_the_callers_child_and_the_servers_parent() {
        let p = Propagation::new(9, 1.0);
        let mut h = HeaderMap::new();
        h.insert("traceparent", HeaderValue::from_static(W3C));
        h.insert("tracestate", HeaderValue::from_static("vendor=x"));
        let mut rec = RequestRecord::new(4, Outcome::Succeeded);
        continue_trace(&p, &mut h, &mut rec);
        let ids = rec.trace.unwrap();
        assert_eq!(hex(&ids.trace_id), &W3C[3..35]);
        assert_eq!(ids.parent.map(|s| hex(&s)).as_deref(), Some(&W3C[36..52]));
        assert!(ids.sampled);
        let sent = h["traceparent"].to_str().unwrap();
        assert_eq!(sent, format!("00-{}-{}-01", &W3C[3..35], hex(&ids.span_id)));
        assert_ne!(&sent[36..52], &W3C[36..52], "the proxy's own span id");
        assert_eq!(h["tracestate"], "vendor=x");
    }

    #[test]
    fn no_or_a_bad_or_a_doubled_traceparent_starts_a_trace_sampled_by_the_share() {
        for incoming in [vec![], vec!["junk"], vec![W3C, W3C]] {
            let mut h = HeaderMap::new();
            for v in &incoming {
                h.append("traceparent", HeaderValue::from_str(v).unwrap());
            }
            let mut rec = RequestRecord::new(7, Outcome::Succeeded);
            continue_trace(&Propagation::new(3, 0.0), &mut h, &mut rec);
            let ids = rec.trace.unwrap();
            assert_eq!(ids.parent, None, "{incoming:?}");
            assert!(!ids.sampled, "a share of 0 samples none");
            assert_eq!(h.get_all("traceparent").iter().count(), 1);
            let (t, s, sampled) = parse_traceparent(h["traceparent"].to_str().unwrap()).unwrap();
            assert_eq!((t, s, sampled), (ids.trace_id, ids.span_id, false));
        }
        // An unsampled caller's trace stays unsampled, whatever the share.
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            HeaderValue::from_str(&W3C.replace("-01", "-00")).unwrap(),
        );
        let mut rec = RequestRecord::new(1, Outcome::Succeeded);
        continue_trace(&Propagation::new(3, 1.0), &mut h, &mut rec);
        assert!(!rec.trace.unwrap().sampled);
        assert!(h["traceparent"].to_str().unwrap().ends_with("-00"));
    }
}
