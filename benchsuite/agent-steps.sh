#!/usr/bin/env bash
# The client's cost per request when requests are short agent steps: `cadence bench`
# against `cadence sim` (flat TTFT and ITL, every step answered with a tool call),
# alternating `plain` (one-shot requests of TOKENS-token replies, closed loop) and
# `agent` (`--agent --turns STEPS --tool-time 0ms`: each step carries the growing
# history, the server's tool calls parsed and sent back with results of RESULT tokens)
# for REPEATS rounds of SECONDS each, at STREAMS concurrent sessions. Per run: the
# client's user + system CPU seconds (getrusage via /usr/bin/time), requests sent, and
# requests per CPU-second (per core); at the end each mode's median. The simulator runs
# in its own process on one runtime thread; only the client's CPU is counted.
#
#   cargo build --release -p cadence --bin cadence
#   benchsuite/agent-steps.sh 3 20 32          # REPEATS SECONDS STREAMS
#
# Env: CADENCE (default target/release/cadence), SIM_TTFT (5ms), SIM_ITL (1ms),
# TOKENS (32), STEPS (8), RESULT (100).
set -euo pipefail
REPEATS=${1:-3}
SECS=${2:-20}
STREAMS=${3:-32}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CADENCE:-$ROOT/target/release/cadence}
TOKENS=${TOKENS:-32}
STEPS=${STEPS:-8}
RESULT=${RESULT:-100}
WORK=$(mktemp -d)
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$WORK"' EXIT

# shellcheck source=benchsuite/lib/chunk-bench.sh
. "$ROOT/benchsuite/lib/chunk-bench.sh"
start_sim "${SIM_TTFT:-5ms}" "${SIM_ITL:-1ms}" --tool-call-prob 1
echo "# $(date -u +%FT%TZ) sim $URL (ttft ${SIM_TTFT:-5ms}, itl ${SIM_ITL:-1ms}, $TOKENS tokens)," \
  "$STREAMS streams, ${SECS}s per run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %4s %9s %9s %12s\n' mode run cpu_s requests req/cpu_s

for run in $(seq "$REPEATS"); do
  for mode in plain agent; do
    flags=()
    if [ "$mode" = agent ]; then
      flags=(--agent --turns "$STEPS" --tool-time 0ms --tool-result-tokens "$RESULT")
    fi
    /usr/bin/time -f '%U %S' -o "$WORK/time" "$BIN" bench "$URL" --api chat --model m \
      -c "$STREAMS" -d "${SECS}s" --max-tokens "$TOKENS" --json "$WORK/r.json" "${flags[@]}" \
      >"$WORK/out" 2>&1 || { cat "$WORK/out"; exit 1; }
    sent=$(python3 -c 'import json,sys; print(sum(l["requests"]["sent"] for l in json.load(open(sys.argv[1]))["levels"]))' "$WORK/r.json")
    read -r user sys <"$WORK/time"
    awk -v m="$mode" -v r="$run" -v u="$user" -v s="$sys" -v n="$sent" \
      'BEGIN { printf "%-6s %4d %9.2f %9d %12.0f\n", m, r, u + s, n, n / (u + s) }' | tee -a "$WORK/rows"
  done
done
for mode in plain agent; do
  awk -v m="$mode" '$1 == m { print $5 }' "$WORK/rows" | sort -g |
    awk -v m="$mode" '{ v[NR] = $1 } END { printf "# median %s %.0f requests per CPU-second\n", m, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
done
