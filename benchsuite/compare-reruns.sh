#!/usr/bin/env bash
# Whether `cadence compare` calls reruns of one configuration worse: RUNS runs of
# `cadence bench -c STREAMS -n REQUESTS` against one `cadence sim` (fixed 10 ms ITL,
# 64 tokens) with records, compared pairwise (every ordered pair, A before B), then one
# run against a server slowed to 12 ms ITL (`-H 'x-cadence-itl-ms: 12'`, a real +20 %).
# Prints per pair the TTFT and ITL rows called WORSE, and at the end how many pairs had
# any, and the planted regression's verdicts at ITL p50 and p90.
#
#   cargo build --release -p cadence --bin cadence
#   benchsuite/compare-reruns.sh 5 8 40            # RUNS STREAMS REQUESTS
#
# Env: CADENCE (the binary; default target/release/cadence).
set -euo pipefail
RUNS=${1:-5}
STREAMS=${2:-8}
REQUESTS=${3:-40}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CADENCE:-$ROOT/target/release/cadence}
WORK=$(mktemp -d)
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$WORK"' EXIT
# shellcheck source=benchsuite/lib/chunk-bench.sh
. "$ROOT/benchsuite/lib/chunk-bench.sh"
TOKENS=64 start_sim 20ms 10ms
bench() { # OUT [FLAGS]
  local out=$1; shift
  "$BIN" bench "$URL" --model m -c "$STREAMS" -n "$REQUESTS" --records "$out" -q "$@" >/dev/null
}
for i in $(seq "$RUNS"); do bench "$WORK/run$i.jsonl"; done
bench "$WORK/slow.jsonl" -H 'x-cadence-itl-ms: 12'
worse() { # A B -> the TTFT and ITL rows called worse
  "$BIN" compare "$1" "$2" --json "$WORK/c.json" >/dev/null || true
  python3 - "$WORK/c.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
rows = [r for l in c["levels"] for r in l["rows"]
        if r["metric"].split(".")[0] in ("ttft", "itl") and r["verdict"] == "worse"]
print(" ".join(f'{r["metric"]}({r["change"] * 100:+.1f}%)' for r in rows) or "none")
PY
}
pairs=0; flagged=0
for i in $(seq "$RUNS"); do
  for j in $(seq "$RUNS"); do
    [ "$i" = "$j" ] && continue
    w=$(worse "$WORK/run$i.jsonl" "$WORK/run$j.jsonl")
    pairs=$((pairs + 1)); [ "$w" = none ] || flagged=$((flagged + 1))
    echo "rerun $i -> $j: worse: $w"
  done
done
echo "reruns: $flagged of $pairs ordered pairs had a TTFT or ITL row called worse"
"$BIN" compare "$WORK/run1.jsonl" "$WORK/slow.jsonl" --json "$WORK/c.json" >/dev/null || true
python3 - "$WORK/c.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
rows = {r["metric"]: r for l in c["levels"] for r in l["rows"]}
print("planted +20 % ITL:", ", ".join(
    f'{m} {rows[m]["change"] * 100:+.1f}% {rows[m]["verdict"]}' for m in ("itl.p50", "itl.p90", "itl.p99")))
PY
