//! A run's chunks told apart by the engine step that sent them. An engine serves its
//! streams in shared steps, every stream's token leaving at the step's end, so chunks
//! of different streams arriving within a small tolerance of each other are one step:
//! how many streams a step served and whether it finished a prompt is read here.

/// Chunks within this share of the run's median gap of a step's first chunk were sent
/// at that step's end.
pub(super) const TOLERANCE: f64 = 0.5;

/// A request's chunks as the grouping reads them.
pub(super) struct Stream {
    /// Each chunk's arrival (ns), ascending.
    pub times: Vec<u64>,
    /// Each chunk's context at its step's start: prompt + tokens streamed before it.
    pub context: Vec<u64>,
    /// Uncached prompt tokens (prefilled in the step of its first chunk).
    pub uncached: u64,
}

/// A run's steps, in time order.
#[derive(Debug, Default)]
pub(super) struct Steps {
    /// Each step's time: the mean of its chunks' arrivals (ns), ascending.
    pub time: Vec<u64>,
    /// The step of each stream's each chunk, aligned with the streams.
    pub of: Vec<Vec<usize>>,
    /// Per step: the streams it served (a chunk each).
    pub members: Vec<u32>,
    /// Per step: the prompts it finished (first chunks).
    pub joined: Vec<u32>,
    /// Per step: the uncached prompt tokens of the prompts it finished.
    pub prompt: Vec<u64>,
    /// Per step: the mean context of the streams it served that were decoding.
    pub context: Vec<u64>,
}

/// Groups `streams`' chunks into steps: in arrival order, a chunk opens a step when it
/// comes more than the tolerance after the current step's first chunk, or when its own
/// stream already has a chunk in that step.
pub(super) fn group(streams: &[Stream]) -> Steps {
    let mut events: Vec<(u64, usize, usize)> = streams
        .iter()
        .enumerate()
        .flat_map(|(s, x)| x.times.iter().enumerate().map(move |(c, &t)| (t, s, c)))
        .collect();
    events.sort_unstable();
    let mut gaps: Vec<u64> = streams
        .iter()
        .flat_map(|x| x.times.windows(2).map(|w| w[1].saturating_sub(w[0])))
        .collect();
    gaps.sort_unstable();
    let tol = gaps.get(gaps.len() / 2).map_or(0, |&g| {
        // A whole number of ns; the median gap is far below 2^53.
        (g as f64 * TOLERANCE) as u64
    });
    let mut st = Steps {
        of: streams.iter().map(|x| vec![0; x.times.len()]).collect(),
        ..Steps::default()
    };
    // The step each stream last had a chunk in, plus one (0: none yet).
    let mut last_in = vec![0usize; streams.len()];
    let (mut first_t, mut sum_t, mut n) = (0u64, 0u128, 0u64);
    let mut ctx = (0u64, 0u64);
    for (t, s, c) in events {
        let k = st.time.len();
        if n == 0 || t - first_t > tol || last_in[s] == k + 1 {
            if n > 0 {
                close(&mut st, sum_t, n, ctx);
            }
            st.members.push(0);
            st.joined.push(0);
            st.prompt.push(0);
            (first_t, sum_t, n, ctx) = (t, 0, 0, (0, 0));
        }
        let k = st.time.len();
        st.of[s][c] = k;
        last_in[s] = k + 1;
        st.members[k] += 1;
        if c == 0 {
            st.joined[k] += 1;
            st.prompt[k] += streams[s].uncached;
        } else {
            ctx = (ctx.0 + streams[s].context[c], ctx.1 + 1);
        }
        sum_t += u128::from(t);
        n += 1;
    }
    if n > 0 {
        close(&mut st, sum_t, n, ctx);
    }
    st
}

/// Closes the step being grouped: its time and its decoding streams' mean context.
fn close(st: &mut Steps, sum_t: u128, n: u64, ctx: (u64, u64)) {
    st.time
        .push(u64::try_from(sum_t / u128::from(n)).unwrap_or(u64::MAX));
    st.context.push(ctx.0.checked_div(ctx.1).unwrap_or(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(times: &[u64], uncached: u64) -> Stream {
        Stream {
            times: times.to_vec(),
            context: (0..times.len() as u64).map(|k| 100 + k).collect(),
            uncached,
        }
    }

    #[test]
    fn chunks_of_several_streams_close_together_are_one_step() {
        // Steps end at 10, 20, 30, 40 ms; the second stream joins at 20 (its first
        // token), each arrival up to 0.5 ms late; a lone stream's chunk at 52 ms.
        let ms = 1_000_000;
        let a = stream(&[10 * ms, 20 * ms + ms / 2, 30 * ms, 40 * ms], 128);
        let b = stream(&[20 * ms, 30 * ms + ms / 4, 40 * ms + ms / 2, 52 * ms], 64);
        let st = group(&[a, b]);
        assert_eq!(st.members, vec![1, 2, 2, 2, 1]);
        assert_eq!(st.joined, vec![1, 1, 0, 0, 0]);
        assert_eq!(st.prompt, vec![128, 64, 0, 0, 0]);
        assert_eq!(st.of, vec![vec![0, 1, 2, 3], vec![1, 2, 3, 4]]);
        assert_eq!(st.time[1], 20 * ms + ms / 4, "the mean of its arrivals");
        assert_eq!(st.context, vec![0, 101, 101, 102, 103]);
    }

    #[test]
    fn a_stream_never_has_two_chunks_in_one_step() {
        // Two chunks 0.1 ms apart (a burst) are two steps, however close.
        let st = group(&[stream(&[1_000_000, 1_100_000, 11_000_000], 10)]);
        assert_eq!(st.members, vec![1, 1, 1]);
    }
}
