#!/usr/bin/env python3
"""Per-path latency percentiles of an `overhead` run in steady state only.

Reads the per-chunk dump that `OVERHEAD_DUMP=FILE` makes the proxy `overhead` harness
(benchsuite/src/bin/overhead.rs) write (`repeat path request write_ns latency_ms` per
chunk). It leaves out each phase's first SKIP seconds and the round changes, where a
new round's requests all arrive together; a round change falls every ROUND seconds.
Percentiles are type 7, as in Cadence's own reports.

    OVERHEAD_DUMP=/tmp/dump.txt ./target/release/overhead --streams 1000 \\
        --rounds 2 --tokens 64 --itl-ms 100 --repeats 1
    benchsuite/overhead-steady.py /tmp/dump.txt 6.42 1.0   # ROUND = TTFT + tokens x ITL
"""
import collections
import sys


def q(xs, p):
    """Type-7 quantile of sorted xs."""
    i = (len(xs) - 1) * p
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def main():
    path, round_s, skip_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    phases = collections.defaultdict(list)
    for line in open(path):
        rep, name, _req, w, lat = line.split()
        phases[(rep, name)].append((int(w), float(lat)))
    steady = collections.defaultdict(list)
    every = collections.defaultdict(list)
    for (_rep, name), chunks in phases.items():
        t0 = min(w for w, _ in chunks)
        for w, lat in chunks:
            t = (w - t0) / 1e9
            every[name].append(lat)
            k = round(t / round_s)
            near_change = k >= 1 and k * round_s - 0.5 <= t < k * round_s + skip_s
            if t >= skip_s and not near_change:
                steady[name].append(lat)
    print(f"{'path':>8} {'chunks':>8} {'p50 ms':>8} {'p99 ms':>8} | steady: {'chunks':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name in every:
        a, s = sorted(every[name]), sorted(steady[name])
        print(f"{name:>8} {len(a):>8} {q(a, 0.5):>8.3f} {q(a, 0.99):>8.3f} | "
              f"        {len(s):>8} {q(s, 0.5):>8.3f} {q(s, 0.99):>8.3f}")


if __name__ == "__main__":
    main()
