//! W3C trace context on every request (`--otlp`): a `traceparent` (and a `tracestate`
//! naming the request) a server that traces (vLLM, SGLang, a proxy) continues, the ids
//! kept in the record so its exported span is the one the server's span points to.
//! The ids come from [`Propagation`] (`cadence_core::trace`), derived from the run's
//! salt and the request's index, so no request task shares state to make one.

pub use cadence_core::trace::Propagation;
use cadence_core::RequestRecord;
use http::HeaderValue;

/// Puts `rec`'s trace context on `req` (`traceparent`, `tracestate: cadence=N`, N the
/// request's index) and in `rec`.
pub fn stamp<B>(p: &Propagation, req: &mut http::Request<B>, rec: &mut RequestRecord) {
    let ids = p.ids(rec.index, rec.session);
    let h = req.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&ids.traceparent()) {
        h.insert("traceparent", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("cadence={}", rec.index)) {
        h.insert("tracestate", v);
    }
    rec.trace = Some(ids);
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
        stamp(&Propagation::new(1, 1.0), &mut req, &mut rec);
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
