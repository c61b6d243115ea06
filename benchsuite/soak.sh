#!/usr/bin/env bash
# Memory over a long run: RSS sampled every INTERVAL s (default 10) to a CSV, for
#   1. `cadence bench -c 256` for DURATION against `cadence sim` with a flat ITL (SIM_ITL,
#      default 10ms: at most 25.5 k chunks/s at 256 streams; 8ms: 31.8 k), records
#      written (.zst) as it goes;
#      BENCH_TARGET=builtin uses the built-in simulator instead, whose engine model
#      (tiny@cpu) saturates near 1.5 k chunks/s at 256 streams (TTFT ~30 s of queue);
#   2. `cadence proxy` in front of the same simulator for DURATION, under the same
#      bench traffic, records written (.zst) as it goes;
#   3. (PARTS=sim) the simulator itself in engine mode (`--preset SIM_PRESET`, default
#      tiny@cpu) under `cadence bench -c 4` of fresh 64-token prompts, 16 tokens each:
#      what serving requests leaves behind in the server.
# Each CSV is elapsed_s,rss_kb; the summary line per run gives the RSS from minute 5
# to the end (min, max, and max/min - 1) and the chunks per second the bench saw.
#
#   cargo build --release
#   benchsuite/soak.sh 3600 soak-out            # DURATION_S OUTDIR
#   PARTS=proxy benchsuite/soak.sh 180 /tmp/soak
#   PARTS=sim SETTLE_S=120 INTERVAL=15 benchsuite/soak.sh 600 /tmp/soak-sim
#
# Env: CADENCE (binary, default target/release/cadence), INTERVAL (s), PARTS ("bench
# proxy"), SETTLE_S (start of the stability window, default 300), BENCH_FLAGS (extra),
# SIM_ITL (the simulator's flat inter-token gap, default 10ms).
set -euo pipefail
DUR=${1:-3600}
OUT=${2:-soak-out}
BIN=${CADENCE:-$(dirname "$0")/../target/release/cadence}
INTERVAL=${INTERVAL:-10}
SETTLE=${SETTLE_S:-300}
mkdir -p "$OUT"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

sample() { # PID CSV: RSS every INTERVAL s while PID lives
  local pid=$1 csv=$2 start now rss
  start=$(date +%s)
  echo "elapsed_s,rss_kb" >"$csv"
  while rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) && [ -n "$rss" ]; do
    now=$(date +%s)
    echo "$((now - start)),$rss" >>"$csv"
    sleep "$INTERVAL"
  done
}

summary() { # NAME CSV BENCH_JSON
  awk -F, -v s="$SETTLE" -v name="$1" 'NR > 1 && $1 >= s {
      if (min == "" || $2 < min) min = $2; if ($2 > max) max = $2; n++ }
    END { if (n) printf "%s: %d samples from %d s: RSS %.1f..%.1f MB, spread %+.1f %%\n",
            name, n, s, min/1024, max/1024, (max/min - 1) * 100;
          else printf "%s: no samples after %d s (shorter run)\n", name, s }' "$2"
  python3 - "$3" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
for l in r["levels"]:
    gaps = (l.get("itl") or {}).get("count", 0)
    w = l["throughput"]["window_s"] or 0
    print(f'  {l["name"]}: {l["requests"]["succeeded"]} requests, {gaps} ITL gaps in {w:.0f} s = {gaps / max(w, 1e-9):,.0f} chunks/s')
PY
}

bench() { # OUTPUT-PREFIX [extra flags]: bench at concurrency 256 for DUR (replaces the
  # calling subshell, so `bench … &` gives the bench's own PID)
  local prefix=$1
  shift
  exec "$BIN" bench -c 256 -d "${DUR}s" --max-tokens 256 --quiet --grace 5s \
    --records "$prefix.jsonl.zst" --json "$prefix.json" ${BENCH_FLAGS:-} "$@" >"$prefix.txt"
}

sim() { # a flat-timed simulator on a free port; sets SIM_URL
  "$BIN" sim --addr 127.0.0.1:0 --ttft fixed:20ms --itl "fixed:${SIM_ITL:-10ms}" >"$OUT/sim.out" &
  PIDS+=("$!")
  until [ -s "$OUT/sim.out" ]; do sleep 0.1; done
  SIM_URL=$(head -1 "$OUT/sim.out" | sed 's/listening on //')
}
sim

for part in ${PARTS:-bench proxy}; do
  case $part in
  bench)
    target=("$SIM_URL")
    [ "${BENCH_TARGET:-sim}" = builtin ] && target=()
    bench "$OUT/bench" "${target[@]}" &
    pid=$!
    PIDS+=("$pid")
    sample "$pid" "$OUT/bench-rss.csv"
    wait "$pid" || true
    summary "bench (${BENCH_TARGET:-sim})" "$OUT/bench-rss.csv" "$OUT/bench.json"
    ;;
  proxy)
    "$BIN" proxy --listen 127.0.0.1:0 --upstream "${SIM_URL%/v1}" \
      --records "$OUT/proxy.jsonl.zst" >"$OUT/proxy.out" 2>"$OUT/proxy.err" &
    proxy=$!
    PIDS+=("$proxy")
    until [ -s "$OUT/proxy.out" ]; do sleep 0.1; done
    url=$(head -1 "$OUT/proxy.out" | sed 's/listening on //')
    sample "$proxy" "$OUT/proxy-rss.csv" &
    sampler=$!
    (bench "$OUT/proxy-bench" "$url/v1") || true
    kill -INT "$proxy"
    wait "$proxy" || true
    wait "$sampler" || true
    summary "proxy (${SIM_ITL:-10ms} ITL upstream)" "$OUT/proxy-rss.csv" "$OUT/proxy-bench.json"
    ;;
  sim)
    "$BIN" sim --addr 127.0.0.1:0 --preset "${SIM_PRESET:-tiny@cpu}" >"$OUT/engine-sim.out" 2>/dev/null &
    esim=$!
    PIDS+=("$esim")
    until [ -s "$OUT/engine-sim.out" ]; do sleep 0.1; done
    url=$(head -1 "$OUT/engine-sim.out" | sed 's/listening on //')
    sample "$esim" "$OUT/sim-rss.csv" &
    sampler=$!
    "$BIN" bench "$url/chat/completions" -c 4 -d "${DUR}s" --input-tokens 64 --max-tokens 16 \
      --quiet --json "$OUT/sim-bench.json" ${BENCH_FLAGS:-} >"$OUT/sim-bench.txt" || true
    kill -INT "$esim"
    wait "$esim" || true
    wait "$sampler" || true
    summary "sim (${SIM_PRESET:-tiny@cpu})" "$OUT/sim-rss.csv" "$OUT/sim-bench.json"
    ;;
  esac
done
