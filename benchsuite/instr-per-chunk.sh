#!/usr/bin/env bash
# User-space instructions per chunk, by part, for `cadence bench` and the reference
# client, counted by valgrind's callgrind against `cadence sim` (flat TTFT 20 ms and ITL
# 50 ms, 64 tokens, one runtime thread). Instruction counts repeat from run to run on a
# loaded machine, where CPU time per chunk (benchsuite/cpu-per-chunk.sh) needs many
# alternated rounds to say anything: this is the quick check of a change to the chunk
# path, that one the verdict. The kernel's share is not in these counts.
#
#   cargo build --release -p cadence --bin cadence
#   cargo build --release -p cadence-benchsuite --bin refclient
#   benchsuite/instr-per-chunk.sh [STREAMS] [SECONDS]        # default 50 streams, 10 s
#
# Env: CADENCE and REFCLIENT (binaries; default target/release/…), TOKENS (64 per
# request: what the simulator sends and the clients ask for), CLIENTS ("ref
# cadence"; `before` runs CADENCE_BEFORE, e.g. a build of an earlier commit), KEEP (a
# directory to keep the callgrind outputs in). Needs valgrind and callgrind_annotate.
#
# Parts (inclusive counts, so a part includes what it calls): `request` is the request
# tasks (`exec::execute`: send, read, decode, stamp, track; the reference's stream
# tasks, `slot`, for the reference), of which `read` is the
# lean client's body reads with their socket calls and `tracker` the wire tracker;
# `aggregate` is the level aggregators on the record thread; `assemble` the report at
# the end. `whole` is every thread of the process, start-up included.
set -euo pipefail
STREAMS=${1:-50}
SECS=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CADENCE:-$ROOT/target/release/cadence}
REF=${REFCLIENT:-$ROOT/target/release/refclient}
TOKENS=${TOKENS:-64}
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
WORK=$(mktemp -d)
OUT=${KEEP:-$WORK}
mkdir -p "$OUT"
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$WORK"' EXIT
ulimit -n "$(ulimit -Hn)"

# shellcheck source=benchsuite/lib/chunk-bench.sh
. "$ROOT/benchsuite/lib/chunk-bench.sh"
start_sim 20ms 50ms
echo "# $(date -u +%FT%TZ) sim $URL (ttft 20ms, itl 50ms, $TOKENS tokens), $STREAMS streams, ${SECS}s"

# The inclusive count of the function whose name matches PATTERN (0 if none). A function
# with code inlined from other files is listed once per file; its whole count is the
# largest. Annotated from / so that every path is absolute, each function listed alike.
part() { # CALLGRIND_OUT PATTERN [PATTERN2]
  (cd / && callgrind_annotate --inclusive=yes --auto=no "$1" 2>/dev/null) |
    awk -v p="$2" -v q="${3:-$2}" '$1 ~ /^[0-9,]+$/ && (index($0, p) || index($0, q)) {
      gsub(",", "", $1); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }'
}
total() { # CALLGRIND_OUT
  (cd / && callgrind_annotate --auto=no "$1" 2>/dev/null) |
    awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}

printf '%-8s %9s %8s %8s %8s %8s %9s %9s\n' client chunks whole request read tracker aggregate assemble
for client in ${CLIENTS:-ref cadence}; do
  cg="$OUT/callgrind.$client"
  case $client in
  ref)
    valgrind --tool=callgrind --callgrind-out-file="$cg" "$REF" --url "$URL" \
      --streams "$STREAMS" --seconds "$SECS" --max-tokens "$TOKENS" >"$WORK/ref.out" 2>/dev/null
    chunks=$(sed 's/.*chunks=\([0-9]*\).*/\1/' "$WORK/ref.out")
    ;;
  cadence | before)
    exe=$BIN
    [ "$client" = before ] && exe=${CADENCE_BEFORE:?CADENCE_BEFORE names the earlier binary}
    valgrind --tool=callgrind --callgrind-out-file="$cg" "$exe" bench "$URL" --api chat \
      --model m -c "$STREAMS" -d "${SECS}s" --max-tokens "$TOKENS" --quiet --json "$WORK/c.json" \
      >/dev/null 2>&1
    read -r chunks _ < <(report_chunks_reads "$WORK/c.json")
    ;;
  *) echo "unknown client $client" >&2; exit 1 ;;
  esac
  awk -v c="$client" -v n="$chunks" -v w="$(total "$cg")" \
    -v rq="$(part "$cg" ':cadence_bench::exec::execute::{{closure}}' ':refclient::slot::{{closure}}')" \
    -v rd="$(part "$cg" 'h1::Body as cadence_bench::exec::Reads>::poll_next')" \
    -v tr="$(part "$cg" ':cadence_wire::tracker::StreamTracker::feed')" \
    -v ag="$(part "$cg" 'LevelAggregators as cadence_core::sink::RecordSink>::accept')" \
    -v as="$(part "$cg" ':cadence_core::assemble::assemble')" 'BEGIN {
      printf "%-8s %9d %8.0f %8.0f %8.0f %8.0f %8.0f %9.0f\n", c, n, w / n, rq / n, rd / n, tr / n, ag / n, as / n }'
done
