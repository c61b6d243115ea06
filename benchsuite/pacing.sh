#!/usr/bin/env bash
# Open-loop pacing on this machine, each run beside the machine's own floor measured in
# the same minute. Per run, in this order:
#   1. the bare floor: benchsuite's `floor` (a thread sleeping to a deadline every ms)
#      for FLOOR_SECS;
#   2. `cadence bench --rate RATE` (4-token streams) against `cadence sim --send-log`,
#      each in its own process; or, with SHARDS=N, N shards of one fleet run
#      (`--shard i/N --start-at` shared, the rate divided) at once on this machine.
# Printed per run: the bare floor (late share, p99); from the simulator's log, the
# server-side deviation of receive times from the schedule's grid (k-th arrival against
# start + k/rate, the start the earliest-fitting one, so a deviation is lateness) p99
# and max, and whether p99 is under max(1 ms, 2 x bare p99); per client, its exit code
# and its own pacing (late sends, lag p99, the floor it measured, its verdict).
#
#   cargo build --release -p cadence --bin cadence -p cadence-benchsuite --bin floor
#   benchsuite/pacing.sh 1000 10            # RATE RUNS
#   SHARDS=3 benchsuite/pacing.sh 90 10     # three shards at 30 req/s each
#
# Env: CADENCE (the binary; default target/release/cadence), CADENCE_BEFORE (a second
# binary, e.g. one built from an earlier commit: each run then runs it first, then
# CADENCE, alternated), FLOOR (target/release/floor),
# DURATION (5s), FLOOR_SECS (3), BENCH_FLAGS (extra `cadence bench` flags, both
# clients), BEFORE_FLAGS (extra flags for CADENCE_BEFORE's runs only: the same binary
# with and without a flag, e.g. `--otlp URL`), THREADS (the client's runtime threads;
# default cadence's own choice).
set -euo pipefail
RATE=${1:?rate in requests/s (all shards together)}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CADENCE:-$ROOT/target/release/cadence}
FLOOR=${FLOOR:-$ROOT/target/release/floor}
DURATION=${DURATION:-5s}
SHARDS=${SHARDS:-}
WORK=$(mktemp -d)
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$WORK"' EXIT
# shellcheck source=benchsuite/lib/chunk-bench.sh
. "$ROOT/benchsuite/lib/chunk-bench.sh"
threads=()
[ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")

echo "# $(date -u +%FT%TZ) rate $RATE/s${SHARDS:+ over $SHARDS shards}, $DURATION per run," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
# With CADENCE_BEFORE, each run is a pair: that binary, then CADENCE, alternated.
clients=(cadence)
[ -n "${CADENCE_BEFORE:-}" ] && clients=(before cadence)
for run in $(seq "$RUNS"); do
for client in "${clients[@]}"; do
  exe=$BIN
  extra=${BENCH_FLAGS:-}
  [ "$client" = before ] && exe=$CADENCE_BEFORE && extra="$extra ${BEFORE_FLAGS:-}"
  "$FLOOR" "${FLOOR_SECS:-3}" >"$WORK/floor.json"
  rm -f "$WORK/send.log"
  TOKENS=4 start_sim 5ms 5ms --send-log "$WORK/send.log"
  rm -f "$WORK"/r*.json "$WORK"/code*
  if [ -n "$SHARDS" ]; then
    at=$(date -u -d '+2 seconds' +%FT%T.%3NZ)
    for i in $(seq 0 $((SHARDS - 1))); do
      (code=0; "$exe" "${threads[@]}" bench "$URL" --model m --rate "$RATE" -d "$DURATION" \
        --max-tokens 4 --shard "$i/$SHARDS" --start-at "$at" --json "$WORK/r$i.json" -q \
        $extra >/dev/null 2>&1 || code=$?; echo "$code" >"$WORK/code$i") &
    done
    wait $(jobs -p | grep -v "^$SIM$") 2>/dev/null || true
  else
    code=0
    "$exe" "${threads[@]}" bench "$URL" --model m --rate "$RATE" -d "$DURATION" --max-tokens 4 \
      --json "$WORK/r0.json" -q $extra >/dev/null 2>&1 || code=$?
    echo "$code" >"$WORK/code0"
  fi
  kill "$SIM"; wait "$SIM" 2>/dev/null || true; SIM=
  python3 - "$WORK" "$RATE" "$run" "$client" <<'PY'
import glob, json, os, sys
work, rate, run, client = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
floor = json.load(open(os.path.join(work, "floor.json")))
recv = sorted(json.loads(l)["received_ns"] for l in open(os.path.join(work, "send.log")))
step = 1e9 / rate
off = [t - k * step for k, t in enumerate(recv)]
t0 = min(off)
dev = sorted((o - t0) / 1e6 for o in off)
def q(v, p):  # type 7
    if not v: return float("nan")
    h = (len(v) - 1) * p; i = int(h)
    return v[i] + (v[min(i + 1, len(v) - 1)] - v[i]) * (h - i)
bound = max(1.0, 2 * floor["lag_p99_ms"])
p99 = q(dev, 0.99)
line = (f"{client} run {run}: floor {floor['late']}/{floor['deadlines']} late p99 {floor['lag_p99_ms']:.3f} ms; "
        f"server grid dev p99 {p99:.3f} max {dev[-1]:.2f} ms over {len(recv)} "
        f"({'under' if p99 < bound else 'OVER'} {bound:.2f})")
for f in sorted(glob.glob(os.path.join(work, "r*.json"))):
    i = os.path.basename(f)[1:-5]
    code = open(os.path.join(work, f"code{i}")).read().strip()
    p = json.load(open(f))["levels"][0]["pacing"]
    fl = p.get("floor") or {}
    line += (f" | client {i} exit {code}: late {p['late']}/{p['sent']} lag p99 {p['lag_p99_ms']:.3f} ms, "
             f"its floor {fl.get('late', '-')}/{fl.get('deadlines', '-')}, "
             f"{'INVALID' if p['invalid'] else 'valid'}")
print(line)
PY
done
done
