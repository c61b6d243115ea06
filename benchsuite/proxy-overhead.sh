#!/usr/bin/env bash
# What `cadence proxy` adds per chunk at 1,000 streams, RUNS times in each of two
# placements, beside a bare TCP relay (the floor of any proxy here) and the machine's
# own scheduling stalls. Per run: added p50/p99 (ms) over the direct path and the
# throughput ratio, for the relay and the proxy (benchsuite/src/bin/overhead.rs).
#   shared: the kernel places the threads (sim, client, and the proxy's runtime with
#           a worker per core, as `cadence proxy` runs by default) on the vCPUs;
#   pinned: the proxy runtime cut to one thread, alone on CPU 1; the rest on CPU 0.
#
#   cargo build --release -p cadence-benchsuite --bin overhead --bin hiccups
#   benchsuite/proxy-overhead.sh 5            # RUNS [overhead flags]
#   PLACEMENTS=shared benchsuite/proxy-overhead.sh 5
set -euo pipefail
RUNS=${1:-3}
shift || true
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--streams 1000 --rounds 2 --tokens 64 --itl-ms 100 --repeats 1)
EX=$(dirname "$0")/../target/release
"$EX/hiccups" --seconds 10 | tail -n +2
run() { # PLACEMENT
  local out pid extra=()
  out=$(mktemp)
  [ "$1" = pinned ] && extra=(--proxy-threads 1)
  "$EX/overhead" "${ARGS[@]}" "${extra[@]}" >"$out" 2>&1 &
  pid=$!
  if [ "$1" = pinned ]; then
    sleep 0.5
    for t in /proc/$pid/task/*; do
      if [ "$(cat "$t/comm")" = proxy ]; then c=1; else c=0; fi
      taskset -p -c $c "${t##*/}" >/dev/null
    done
  fi
  wait $pid
  awk -v p="$1" '/^ *(relay|proxy) +-?[0-9]/ && seen {printf "%s %s: added p50 %s p99 %s ms, ratio %s, cpu %s us/chunk | ", p, $1, $2, $4, $6, $7} /^added over direct/ {seen=1} END {print ""}' "$out"
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do
  for p in ${PLACEMENTS:-shared pinned}; do run "$p"; done
done
