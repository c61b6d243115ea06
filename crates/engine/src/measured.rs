//! A run's records as the model's inputs: each level's workload (lengths in send order,
//! the clients' turnaround) and the throughput it measured, so `plan --calibrate` fits
//! the engine to what a run saw. Pure: records in, workload out.

use crate::Workload;
use cadence_core::RequestRecord;

/// The requests a level's workload is made of, in its order: the succeeded ones,
/// warm-up first, then by send time and index. [`workload_of`]'s lengths and
/// [`sends_of`]'s times both follow it, so a replayed request is sent with its own
/// lengths.
pub fn kept(recs: &[RequestRecord]) -> Vec<&RequestRecord> {
    let mut kept: Vec<&RequestRecord> = recs
        .iter()
        .filter(|r| r.outcome == cadence_core::Outcome::Succeeded)
        .collect();
    kept.sort_by_key(|r| (!r.warmup, r.sent_ns, r.index));
    kept
}

/// A level's workload from its records: the requests [`kept`], in its order, with
/// each one's prompt (usage, else --input-tokens) and output length, and the clients'
/// median turnaround (a worker's next send − its last end, within a level of the run;
/// `fallback_turnaround_ns` when no worker sent twice). A note says when some prompt
/// lengths were taken as `fallback_input`.
pub fn workload_of(
    recs: &[RequestRecord],
    fallback_input: u32,
    fallback_turnaround_ns: u64,
    notes: &mut Vec<String>,
) -> Workload {
    let recs = kept(recs);
    let mut unknown = false;
    let lengths: Vec<(u32, u32)> = recs
        .iter()
        .map(|r| {
            let input = r.input_tokens.map(|t| t.clamp(1, u32::MAX as u64) as u32);
            unknown |= input.is_none();
            let out = r.output_token_count().count.clamp(1, u32::MAX as u64) as u32;
            (input.unwrap_or(fallback_input), out)
        })
        .collect();
    if unknown && !notes.iter().any(|n| n.contains("prompt length")) {
        notes.push(format!(
            "some records carry no prompt length: those taken as {fallback_input} tokens (--input-tokens)"
        ));
    }
    let mut by_time = recs.clone();
    by_time.sort_by_key(|r| r.sent_ns);
    let mut last_end: std::collections::HashMap<_, (u64, Option<u64>)> = Default::default();
    let mut gaps = Vec::new();
    for r in &by_time {
        // Within one level of the run: pooled levels are apart by other levels.
        let client = (r.level, r.worker);
        // A session's next turn comes after its think time, not a turnaround.
        if let (Some(sent), Some(&(end, session))) = (r.sent_ns, last_end.get(&client)) {
            if session.is_none() || session != r.session {
                gaps.push(sent.saturating_sub(end));
            }
        }
        if let Some(end) = r.end_ns {
            last_end.insert(client, (end, r.session));
        }
    }
    gaps.sort_unstable();
    let turnaround_ns = gaps
        .get(gaps.len() / 2)
        .copied()
        .unwrap_or(fallback_turnaround_ns);
    let w = Workload {
        requests: recs.iter().filter(|r| !r.warmup).count() as u64,
        warmup: recs.iter().filter(|r| r.warmup).count() as u64,
        input_tokens: fallback_input,
        max_tokens: 1,
        turnaround_ns,
        lengths,
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    };
    sessions_of(&recs, w)
}

/// A session's turn as [`sessions_of`] reads it.
struct Turn {
    n: u32,
    prompt: u64,
    reply: u64,
    sent: Option<u64>,
    end: Option<u64>,
}

/// `w` as multi-turn sessions when the records are turns of sessions (`bench --turns`,
/// `--multi-turn`): sessions counted (warm-up ones apart), each turn's own input
/// (its prompt less the session's history: the turn before's prompt and reply), and
/// the think time (the median from a turn's end to its session's next turn being
/// sent, less the clients' turnaround); `w` as it is otherwise.
fn sessions_of(recs: &[&RequestRecord], mut w: Workload) -> Workload {
    use std::collections::{BTreeSet, HashMap};
    if recs.iter().any(|r| r.session.is_none() || r.turn.is_none()) || recs.is_empty() {
        return w;
    }
    let turns = recs.iter().filter_map(|r| r.turn).max().unwrap_or(0) + 1;
    let key = |r: &&RequestRecord| (r.level, r.session);
    let count = |warm: bool| -> u64 {
        let s: BTreeSet<_> = recs.iter().filter(|r| r.warmup == warm).map(key).collect();
        s.len() as u64
    };
    // Each session's turns.
    let mut by: HashMap<_, Vec<Turn>> = HashMap::new();
    for r in recs {
        by.entry(key(r)).or_default().push(Turn {
            n: r.turn.unwrap_or(0),
            prompt: r.input_tokens.unwrap_or(0),
            reply: r.output_token_count().count,
            sent: r.sent_ns,
            end: r.end_ns,
        });
    }
    let mut thinks = Vec::new();
    let mut own = HashMap::new();
    for (k, turns) in &mut by {
        turns.sort_unstable_by_key(|t| t.n);
        for (i, t) in turns.iter().enumerate() {
            let before = i.checked_sub(1).map(|j| &turns[j]);
            let history = before.map_or(0, |b| b.prompt.saturating_add(b.reply));
            own.insert((*k, t.n), t.prompt.saturating_sub(history).max(1));
            if let (Some(end), Some(sent)) = (before.and_then(|b| b.end), t.sent) {
                thinks.push(sent.saturating_sub(end));
            }
        }
    }
    thinks.sort_unstable();
    let think = thinks.get(thinks.len() / 2).copied().unwrap_or(0);
    // `lengths` is in the order of `recs`: each turn's own input in place of its prompt.
    for (l, r) in w.lengths.iter_mut().zip(recs) {
        if let Some(&o) = own.get(&(key(r), r.turn.unwrap_or(0))) {
            l.0 = u32::try_from(o).unwrap_or(u32::MAX);
        }
    }
    w.requests = count(false);
    w.warmup = count(true);
    w.sessions = Some(crate::drive::Sessions {
        turns,
        think_ns: think.saturating_sub(w.turnaround_ns),
        agent_step_input: None,
    });
    w
}

/// When each request [`kept`] was sent, in its order: ns from the first, the
/// open-loop schedule's time where the record has one (a late send is the client's
/// delay, not the load's).
pub fn sends_of(recs: &[RequestRecord]) -> Vec<u64> {
    let at: Vec<u64> = kept(recs)
        .iter()
        .map(|r| r.scheduled_ns.or(r.sent_ns).unwrap_or(0))
        .collect();
    let first = at.iter().copied().min().unwrap_or(0);
    at.into_iter().map(|t| t - first).collect()
}

/// Requests per second of sends `at` (ns from the first): their count over their span
/// (1 ns at least).
pub fn mean_rate(at: &[u64]) -> f64 {
    let span = at.iter().copied().max().unwrap_or(0).max(1);
    at.len() as f64 * 1e9 / span as f64
}

/// Output tokens of succeeded requests over first send to last end.
pub fn tokens_per_s(records: &[RequestRecord]) -> f64 {
    let ok = records
        .iter()
        .filter(|r| r.outcome == cadence_core::Outcome::Succeeded);
    let tokens: u64 = ok.clone().map(|r| r.output_token_count().count).sum();
    let start = records.iter().filter_map(|r| r.sent_ns).min().unwrap_or(0);
    let end = ok.filter_map(|r| r.end_ns).max().unwrap_or(start);
    if end > start {
        tokens as f64 * 1e9 / (end - start) as f64
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome};

    const MS: u64 = 1_000_000;

    /// Request `index` of `worker`, sent at `sent` ms and ended at `end` ms, 10 chunks.
    fn rec(index: u64, worker: u32, sent: u64, end: u64) -> RequestRecord {
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        r.worker = worker;
        r.sent_ns = Some(sent * MS);
        r.end_ns = Some(end * MS);
        r.chunks = (0..10).map(|_| Chunk(end * MS, Some(1))).collect();
        r.input_tokens = Some(100 + index);
        r
    }

    #[test]
    fn a_levels_workload_is_its_lengths_in_send_order_and_the_median_turnaround() {
        // Worker 0 sends again 2 ms after its end, worker 1 after 4 ms and 6 ms.
        let recs = vec![
            rec(2, 1, 14, 20),
            rec(0, 0, 0, 10),
            rec(1, 1, 0, 10),
            rec(3, 0, 12, 30),
            rec(4, 1, 26, 40),
        ];
        let mut notes = Vec::new();
        let w = workload_of(&recs, 7, 99, &mut notes);
        assert_eq!(w.requests, 5);
        assert_eq!(w.turnaround_ns, 4 * MS, "the median of 2, 4 and 6 ms");
        let inputs: Vec<u32> = w.lengths.iter().map(|l| l.0).collect();
        assert_eq!(
            inputs,
            [100, 101, 103, 102, 104],
            "by send time, then index"
        );
        assert!(w.lengths.iter().all(|l| l.1 == 10));
        assert!(notes.is_empty());
        // No worker sent twice: the fallback; a record without a prompt length: noted.
        let mut lone = rec(0, 0, 0, 10);
        lone.input_tokens = None;
        let w = workload_of(&[lone], 7, 99, &mut notes);
        assert_eq!((w.turnaround_ns, w.lengths[0].0), (99, 7));
        assert_eq!(notes.len(), 1, "{notes:?}");
        // 50 tokens from the first send (0 ms) to the last end (40 ms).
        assert_eq!(tokens_per_s(&recs), 1_250.0);
    }

    #[test]
    fn sends_are_the_kept_requests_schedule_from_the_first_in_the_workloads_order() {
        let mut recs = vec![rec(0, 0, 10, 20), rec(1, 0, 40, 50), rec(2, 0, 25, 60)];
        // Scheduled at 30 ms, sent late at 40: the schedule is the load.
        recs[1].scheduled_ns = Some(30 * MS);
        let mut failed = rec(3, 0, 12, 13);
        failed.outcome = Outcome::Http5xx;
        recs.push(failed);
        let sends = sends_of(&recs);
        assert_eq!(sends, vec![0, 15 * MS, 20 * MS]);
        let w = workload_of(&recs, 7, 0, &mut Vec::new());
        let inputs: Vec<u32> = w.lengths.iter().map(|l| l.0).collect();
        assert_eq!(
            inputs,
            vec![100, 102, 101],
            "the same requests, in the same order"
        );
        assert!((mean_rate(&sends) - 150.0).abs() < 1e-9, "3 over 20 ms");
    }

    #[test]
    fn each_send_time_stays_with_its_own_requests_lengths_whatever_the_records_order() {
        // Read out of order: a warm-up sent last, a failure sent first, two sends at
        // the same time, one sent late after its schedule.
        let mut recs: Vec<RequestRecord> = [1, 4, 3, 2, 5, 0]
            .into_iter()
            .map(|i| {
                let sent = [10, 30, 5, 10, 50, 20][i as usize];
                let mut r = rec(i, 0, sent, sent + 5);
                r.output_tokens = Some(cadence_core::TokenCount {
                    count: 20 + i,
                    source: cadence_core::TokenSource::Usage,
                });
                r.warmup = i == 4;
                r
            })
            .collect();
        recs[0].scheduled_ns = Some(25 * MS);
        recs[3].outcome = Outcome::Http5xx;
        let order: Vec<u64> = kept(&recs).iter().map(|r| r.index).collect();
        assert_eq!(
            order,
            [4, 0, 3, 5, 1],
            "warm-up first, then sent, then index"
        );
        let w = workload_of(&recs, 7, 0, &mut Vec::new());
        let paired: Vec<(u64, (u32, u32))> = sends_of(&recs).into_iter().zip(w.lengths).collect();
        assert_eq!(
            paired,
            [
                (40 * MS, (104, 24)),
                (0, (100, 20)),
                (0, (103, 23)),
                (10 * MS, (105, 25)),
                (15 * MS, (101, 21)),
            ]
        );
    }

    #[test]
    fn multi_turn_records_give_sessions_their_own_inputs_and_the_think_time() {
        // Two sessions of three turns (bench --turns 3), open loop: each turn's prompt
        // is the history (earlier prompts and replies of 10 tokens) and its own 20
        // tokens; the next turn is sent 500 ms after a reply's end (think time).
        let turn = |index: u64, session: u64, t: u32, sent: u64, end: u64| {
            let mut r = rec(index, session as u32, sent, end);
            r.session = Some(session);
            r.turn = Some(t);
            r.input_tokens = Some(u64::from(t) * 30 + 20);
            r
        };
        let recs = vec![
            turn(0, 0, 0, 0, 100),
            turn(1, 1, 0, 50, 150),
            turn(2, 0, 1, 600, 700),
            turn(3, 1, 1, 650, 750),
            turn(4, 0, 2, 1200, 1300),
            turn(5, 1, 2, 1250, 1350),
        ];
        let w = workload_of(&recs, 7, 0, &mut Vec::new());
        let s = w.sessions.expect("sessions");
        assert_eq!(
            (s.turns, s.think_ns, s.agent_step_input),
            (3, 500 * MS, None)
        );
        assert_eq!((w.requests, w.warmup), (2, 0), "sessions are counted");
        assert_eq!(w.turnaround_ns, 0, "no client sent a second session");
        assert!(w.lengths.iter().all(|&l| l == (20, 10)), "{:?}", w.lengths);
    }
}
