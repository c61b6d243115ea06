# Shared by benchsuite/cpu-per-chunk.sh and benchsuite/instr-per-chunk.sh (sourced, not run):
# the simulator both measure against, and the chunk count of a `cadence bench` report.

# Starts `cadence sim` on one runtime thread with flat TTFT and ITL: BIN (the binary),
# WORK (a scratch directory), TOKENS per response, TTFT and ITL (e.g. 20ms, 50ms), and
# any further `sim` flags. Sets SIM (its PID, for the caller's trap to stop) and URL.
start_sim() { # TTFT ITL [SIM_FLAGS...]
  local ttft=$1 itl=$2
  shift 2
  "$BIN" --threads 1 sim --addr 127.0.0.1:0 --ttft "fixed:$ttft" --itl "fixed:$itl" \
    --max-tokens "$TOKENS" "$@" >"$WORK/sim.out" 2>&1 &
  SIM=$!
  # The whole line: a check for any byte could read a URL written only in part.
  until grep -qs '^listening on http://.*/v1$' "$WORK/sim.out"; do
    kill -0 "$SIM" 2>/dev/null || { cat "$WORK/sim.out" >&2; return 1; }
    sleep 0.1
  done
  URL=$(grep -m1 '^listening on ' "$WORK/sim.out" | sed 's/listening on //')
}

# Prints a `cadence bench --json` report's content chunks (each request's first chunk,
# its TTFT, plus its gaps, its ITL samples, over every level) and socket reads.
report_chunks_reads() { # REPORT_JSON
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = sum((l.get("ttft") or {}).get("count", 0) + (l.get("itl") or {}).get("count", 0) for l in r["levels"])
reads = sum(l["counters"]["reads"] for l in r["levels"])
print(n, reads)
PY
}
