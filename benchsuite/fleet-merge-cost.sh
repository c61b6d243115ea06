#!/bin/bash
# Usage: benchsuite/fleet-merge-cost.sh [CADENCE] [GEN_RECORDS] [RECORDS_PER_SHARD]
# (build both first: cargo build --release --bin cadence; cargo build --release -p cadence-benchsuite --bin gen_records)
# The fleet merge's cost: 4 shard files of N records each (16 chunks), merged by
# `cadence report DIR` (per-shard aggregators, then merged) vs the same records as
# plain files (`cadence report F1 F2 F3 F4`: one aggregator, no shard lines).
set -e; export D
B=${1:-target/release/cadence}; G=${2:-target/release/gen_records}; N=${3:-250000}; D=${TMPDIR:-/tmp}/cadence-fleet-merge; export D; rm -rf $D; mkdir -p $D/shards $D/plain
RUN='{"cadence_run":{"run":{"target":"http://t/v1/chat/completions","api":"chat","model":"m","mode":"closed_loop","started_at_unix_ms":1795436351268,"duration_s":60.0,"command":["cadence","bench"],"builtin_sim":false,"interrupted":false},"checks":{"stall_threshold_ms":500.0,"slos":[],"max_late":0.001,"time_bucket_ms":1000.0,"convention":null}}}'
for i in 0 1 2 3; do
  $G $D/plain/raw-$i.jsonl $N 16 >/dev/null
  { echo "{\"cadence_anchor\":{\"unix_ms\":$((1795436351268 + i))}}"
    echo "{\"cadence_shard\":{\"index\":$i,\"count\":4,\"start_at_unix_ms\":1795436353000}}"
    cat $D/plain/raw-$i.jsonl
    echo "{\"cadence_shard\":{\"index\":$i,\"count\":4,\"start_at_unix_ms\":1795436353000,\"level\":{\"level\":0,\"planned_start_unix_ms\":1795436353000,\"start_skew_ms\":0.0,\"loop_lag_p99_ms\":0.5,\"loop_lag_max_ms\":1.0,\"cpu_share\":0.2}}}"
    echo "$RUN"; } > $D/shards/shard-$i.jsonl
done
du -sh $D/shards $D/plain
measure() {  # label, args...: best of 2 (wall, cpu), peak RSS, exit code
  python3 - "$B" "$@" <<'PY'
import os, resource, subprocess, sys, time
B, label, args = sys.argv[1], sys.argv[2], sys.argv[3:]
walls = []
for _ in range(2):
    b = resource.getrusage(resource.RUSAGE_CHILDREN); t = time.time()
    p = subprocess.run([B, "report", *args, "--json", os.environ["D"] + "/out.json"], stdout=subprocess.DEVNULL)
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    walls.append((time.time() - t, a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime))
w, c = min(walls)
print(f"{label}: wall {w:.2f} s, user+sys {c:.2f} s, peak RSS {a.ru_maxrss/1024:.0f} MB, exit {p.returncode}")
PY
}
measure "fleet merge: cadence report shards/" $D/shards
measure "plain: cadence report raw-0..3 (one aggregator)" $D/plain/raw-*.jsonl
