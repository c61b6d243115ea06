#!/usr/bin/env bash
# Open-loop pacing on this machine: scheduled -> sent lag of `cadence bench --rate R`
# with 4-token streams against `cadence sim` in its own process (one runtime thread
# each), RUNS times. Per run: late sends, lag p50/p99/max (from the JSON report),
# stall bursts (a late send after an on-time one) and the hypervisor steal time
# /proc/stat counted during the run. Prefix with `chrt -f 10` to run both processes
# ahead of other work. Needs python3 for reading the JSON.
#
#   cargo build --release
#   scripts/pacing.sh 1000 3              # RATE RUNS [CLIENT_THREADS]
set -euo pipefail
RATE=${1:?rate in requests/s}
RUNS=${2:-3}
CT=${3:-1}
BIN=${CADENCE:-$(dirname "$0")/../target/release/cadence}
D=$(mktemp -d)
"$BIN" --threads 1 sim --addr 127.0.0.1:0 >"$D/sim.out" 2>&1 &
SIM=$!
trap 'kill $SIM 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 50); do grep -q http "$D/sim.out" && break; sleep 0.1; done
URL=$(grep -o 'http://[0-9.:]*' "$D/sim.out" | head -1)
steal() { awk '/^cpu /{print $9}' /proc/stat; }
for _ in $(seq "$RUNS"); do
  s0=$(steal)
  code=0
  "$BIN" --threads "$CT" bench "$URL" --model m --rate "$RATE" -d 5s --max-tokens 4 \
    --records "$D/rec.jsonl" --json "$D/r.json" -q >/dev/null 2>&1 || code=$?
  s1=$(steal)
  python3 - "$D/rec.jsonl" "$D/r.json" "$s0" "$s1" "$code" "$RATE" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if not l.startswith('{"cadence_')]
lags = sorted((r["scheduled_ns"], (r["sent_ns"] - r["scheduled_ns"]) / 1e6)
              for r in recs if r.get("scheduled_ns") is not None and r.get("sent_ns") is not None)
bursts = sum(1 for i, (_, l) in enumerate(lags) if l > 1 and (i == 0 or lags[i - 1][1] <= 1))
p = json.load(open(sys.argv[2]))["levels"][0]["pacing"]
hz = 100  # USER_HZ: /proc/stat counts in 10 ms ticks
print(f"rate {sys.argv[6]}/s exit {sys.argv[5]}: late {p['late']} of {p['sent']}, "
      f"lag p50 {p['lag_p50_ms']:.3f} p99 {p['lag_p99_ms']:.3f} max {p['lag_max_ms']:.2f} ms, "
      f"stall bursts {bursts}, steal {(int(sys.argv[4]) - int(sys.argv[3])) * 1000 // hz} ms")
PY
done
