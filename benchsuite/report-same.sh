#!/usr/bin/env bash
# Does a change to report assembly change any report? Rebuilds reports from the same
# records with two `cadence` binaries and compares every byte of every format
# (console, JSON, HTML, CSV, Markdown, and what went to stderr).
#
#   benchsuite/report-same.sh BEFORE_BIN AFTER_BIN
#
# The records: a 3-level sweep against a plain simulator (A), a jittery simulator with
# stalls (B), a second such run (C), and B rewritten to several tokens per chunk on a
# 2 ms grid (W: weighted per-token ITL with equal values of different weights). The
# cases: each file alone, bucketed (a low --exact-samples), files merged, other
# conventions, and a report rebuilt from a saved JSON report. Exits 1 if any differs.
set -euo pipefail
BEFORE=$(realpath "${1:?usage: report-same.sh BEFORE_BIN AFTER_BIN}")
AFTER=$(realpath "${2:?usage: report-same.sh BEFORE_BIN AFTER_BIN}")
WORK=$(mktemp -d)
SIMS=()
trap 'for p in "${SIMS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$WORK"' EXIT
cd "$WORK"

sim() { # NAME SIM-ARGS...: starts a simulator (not in a subshell, so the trap knows
  # its PID) and sets URL to its address
  local name=$1
  shift
  "$AFTER" --threads 1 sim --addr 127.0.0.1:0 "$@" >"$name.sim" 2>&1 &
  SIMS+=($!)
  until [ -s "$name.sim" ]; do sleep 0.1; done
  URL=$(head -1 "$name.sim" | sed 's/listening on //')
}

bench() { # URL RECORDS ARGS...
  local url=$1 out=$2
  shift 2
  "$AFTER" bench "$url" --api chat --model m --quiet --records "$out" "$@" >/dev/null
}

sim plain --ttft fixed:20ms --itl fixed:4ms --max-tokens 24
PLAIN=$URL
sim jitter --ttft fixed:30ms --itl normal:6ms,3ms --stall-probability 0.03 \
  --stall fixed:60ms --max-tokens 64 --seed 7
JITTER=$URL
bench "$PLAIN" A.jsonl -c 1,2,4 -n 8 --max-tokens 24 --json A.bench.json
bench "$JITTER" B.jsonl -c 6 -n 150 --max-tokens 64
bench "$JITTER" C.jsonl -c 4 -n 110 --max-tokens 48
python3 - B.jsonl W.jsonl <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as dst:
    for i, line in enumerate(src):
        r = json.loads(line)
        if r.get("chunks"):
            t = r["chunks"][0][0] // 2_000_000 * 2_000_000
            chunks = []
            for k in range(len(r["chunks"])):
                if k:
                    t += 2_000_000 * (1 + (k * 7 + i) % 9)
                chunks.append([t, 1 + (k + i) % 4])
            r["chunks"] = chunks
            r["end_ns"] = max(r.get("end_ns") or 0, t)
        dst.write(json.dumps(r) + "\n")
PY

n=0
bad=0
run() { # NAME REPORT-ARGS...
  local name=$1
  shift
  for who in before after; do
    local bin=$BEFORE d=out/$name/$who
    [ "$who" = after ] && bin=$AFTER
    mkdir -p "$d"
    "$bin" report "$@" --threads 1 --json "$d/r.json" --html "$d/r.html" --csv "$d/csv/" \
      --markdown "$d/r.md" >"$d/console.txt" 2>"$d/stderr.txt" || echo "exit $?" >"$d/rc"
    sed -i "s#out/$name/$who/#out/$name/X/#g" "$d/stderr.txt"
  done
  n=$((n + 1))
  if diff -r "out/$name/before" "out/$name/after" >/dev/null; then
    echo "same: $name ($(du -sb "out/$name/after" | cut -f1) bytes)"
  else
    echo "DIFFERENT: $name"
    diff -r "out/$name/before" "out/$name/after" | head -5 || true
    bad=$((bad + 1))
  fi
}
run A A.jsonl
run B B.jsonl
run C C.jsonl
run A_bucketed A.jsonl --exact-samples 300
run B_bucketed B.jsonl --exact-samples 5000
run BC_merged B.jsonl C.jsonl
run BC_merged_bucketed B.jsonl C.jsonl --exact-samples 4000
run B_vllm B.jsonl --convention vllm --slo 'itl.p99<=50ms'
run A_from_json A.bench.json
run W_weighted W.jsonl
run W_weighted_bucketed W.jsonl --exact-samples 3000
run WB_merged W.jsonl B.jsonl --convention guidellm
echo "$n cases, $bad different"
[ "$bad" -eq 0 ]
