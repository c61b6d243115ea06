//! What the fuzz targets share: the ways one input is cut into reads (whole, at
//! fuzzer-chosen points, at every point, one byte at a time), so every stream decoder
//! is held to the same answer however a socket would have split the bytes.

/// The cut points of a `len`-byte body, drawn from `seed`: a few reads of uneven size,
/// the way a socket hands them out. Sorted, inside `1..len`.
pub fn cuts(len: usize, seed: u8) -> Vec<usize> {
    if len < 2 {
        return Vec::new();
    }
    let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (len as u64 + 1);
    let n = 1 + usize::from(seed % 8);
    let mut out: Vec<usize> = (0..n)
        .map(|_| {
            // xorshift64: cheap, deterministic per input.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + (x % (len as u64 - 1)) as usize
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// `bytes` cut at `cuts` (sorted, inside the body).
pub fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let starts = std::iter::once(0).chain(cuts.iter().copied());
    let ends = cuts.iter().copied().chain(std::iter::once(bytes.len()));
    starts.zip(ends).map(|(a, b)| &bytes[a..b]).collect()
}

/// Bodies up to this long are also decoded cut in two at every point; longer ones at
/// the fuzzer's points and one byte at a time only (every point costs a whole decode).
pub const EVERY_CUT_UP_TO: usize = 512;

/// Every way a body is cut into reads that the oracles compare with the whole body:
/// at the fuzzer's points, one byte a read, and (short bodies) in two at every point.
pub fn splits(bytes: &[u8], seed: u8) -> Vec<Vec<&[u8]>> {
    let mut out = vec![
        pieces(bytes, &cuts(bytes.len(), seed)),
        bytes.chunks(1).collect(),
    ];
    if bytes.len() <= EVERY_CUT_UP_TO {
        out.extend((1..bytes.len()).map(|k| vec![&bytes[..k], &bytes[k..]]));
    }
    out
}

/// The split oracle: `decode` of the body cut into reads every way [`splits`] gives
/// equals `decode` of the whole body in one read.
pub fn same_however_cut<T: PartialEq + std::fmt::Debug>(
    body: &[u8],
    seed: u8,
    decode: impl Fn(&[&[u8]]) -> T,
) {
    let whole = decode(&[body]);
    for feeds in splits(body, seed) {
        assert_eq!(decode(&feeds), whole, "cut into {} reads", feeds.len());
    }
}

/// A decoder's cap drawn from a selector byte: the real 1 MiB for half the inputs
/// (the high bit clear), 1 to 128 bytes for the other half, so "too large" is reached
/// by short inputs too.
pub fn cap(sel: u8) -> usize {
    if sel & 0x80 == 0 {
        cadence_wire::MAX_EVENT_BYTES
    } else {
        usize::from(sel & 0x7f) + 1
    }
}

/// The two bytes a stream target reads before its body: a selector (dialect, framing,
/// cap...) and the seed of the cut points. `None` for an input shorter than that.
pub fn header(data: &[u8]) -> Option<(u8, u8, &[u8])> {
    match data {
        [sel, seed, body @ ..] => Some((*sel, *seed, body)),
        _ => None,
    }
}

/// A file of this process's own under the temporary directory, for the targets whose
/// door is a file (records, imports): `name` inside a directory made once.
pub fn scratch(name: &str) -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("cadence-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a temporary directory");
        d
    })
    .join(name)
}

/// An importer's door: `data` as the file `cadence report` is given, imported as
/// `tool` and loaded into a report as an imported run is. Anything may be refused
/// (with an error); nothing may panic.
pub fn import(tool: cadence_import::Tool, data: &[u8]) {
    let path = scratch(&format!("import-{tool}.json"));
    std::fs::write(&path, data).expect("the input is written");
    let _ = cadence_run::import::load(&path, Some(tool), &Default::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_lie_inside_the_body_and_pieces_join_back() {
        for len in 0..40 {
            for seed in 0..=255 {
                let body: Vec<u8> = (0..len as u8).collect();
                let c = cuts(len, seed);
                assert!(c.iter().all(|&k| k >= 1 && k < len), "{len} {seed}: {c:?}");
                assert_eq!(pieces(&body, &c).concat(), body);
            }
        }
    }
}
