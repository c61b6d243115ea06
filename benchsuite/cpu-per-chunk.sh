#!/usr/bin/env bash
# Client CPU per chunk at STREAMS concurrent streams against `cadence sim` (flat TTFT
# and ITL, one runtime thread), for the plain reference client
# (benchsuite/src/bin/refclient.rs: tokio, one task per stream, raw TcpStream, a
# timestamp per read and an event count, nothing else) and for `cadence bench` as
# shipped (closed loop, no flags but the load: aggregators and progress view on, no
# records file unless BENCH_FLAGS adds one). Runs alternate ref, cadence, ref, … for
# REPEATS rounds of SECONDS each. Per run: user + system CPU seconds of the client
# process (getrusage of the child, via /usr/bin/time), content chunks received, socket
# reads, µs of CPU per chunk (in all, then user and system apart), voluntary context
# switches per chunk (the process's sleeps); at the end each client's medians over the
# rounds (compare the totals, not the user/system split).
#
#   cargo build --release -p cadence --bin cadence
#   cargo build --release -p cadence-benchsuite --bin refclient
#   benchsuite/cpu-per-chunk.sh 3 30 1000          # REPEATS SECONDS STREAMS
#
# Env: CADENCE and REFCLIENT (binaries; default target/release/…), SIM_TTFT (20ms),
# SIM_ITL (10ms), TOKENS (64 per request), BENCH_FLAGS (extra `cadence bench` flags),
# BEFORE_FLAGS (the `before` client's, when they differ: `CADENCE_BEFORE=$CADENCE
# BEFORE_FLAGS="--threads 1"` compares one binary on one worker and on the default),
# REF_FLAGS (extra `refclient` flags, e.g. `--touch-lines 25`),
# CLIENTS ("ref cadence": which clients, in order; `before` is `cadence bench` run from
# the binary CADENCE_BEFORE, e.g. a copy built from an earlier commit; `ref-current`
# and `ref-mio` are the reference on tokio's one-thread runtime and on a bare mio event
# loop, `refclient --runtime current|mio`; `ref1` … `ref9` the reference with the
# flags REF1_FLAGS … REF9_FLAGS instead of REF_FLAGS, to compare variants in one series).
set -euo pipefail
REPEATS=${1:-3}
SECS=${2:-30}
STREAMS=${3:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CADENCE:-$ROOT/target/release/cadence}
REF=${REFCLIENT:-$ROOT/target/release/refclient}
TOKENS=${TOKENS:-64}
WORK=$(mktemp -d)
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$WORK"' EXIT
# Both sides hold STREAMS sockets.
ulimit -n "$(ulimit -Hn)"

# shellcheck source=benchsuite/lib/chunk-bench.sh
. "$ROOT/benchsuite/lib/chunk-bench.sh"
start_sim "${SIM_TTFT:-20ms}" "${SIM_ITL:-10ms}"
echo "# $(date -u +%FT%TZ) sim $URL (ttft ${SIM_TTFT:-20ms}, itl ${SIM_ITL:-10ms}, $TOKENS tokens)," \
  "$STREAMS streams, ${SECS}s per run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %4s %9s %11s %11s %10s %11s %9s %9s %10s\n' client run cpu_s chunks reads reads/chunk us/chunk user_us sys_us vcsw/chunk

report() { # CLIENT RUN CHUNKS READS
  read -r user sys vcsw <"$WORK/time"
  awk -v c="$1" -v r="$2" -v u="$user" -v s="$sys" -v n="$3" -v rd="$4" -v w="$vcsw" 'BEGIN {
    printf "%-11s %4d %9.2f %11d %11d %10.3f %11.2f %9.2f %9.2f %10.3f\n", c, r, u + s, n, rd, rd / n, (u + s) * 1e6 / n, u * 1e6 / n, s * 1e6 / n, w / n }' |
    tee -a "$WORK/rows"
}

for run in $(seq "$REPEATS"); do
  for client in ${CLIENTS:-ref cadence}; do
    case $client in
    ref | ref-current | ref-mio | ref[0-9])
      runtime=multi
      flags=${REF_FLAGS:-}
      case $client in
      ref-*) runtime=${client#ref-} ;;
      ref[0-9]) var=REF${client#ref}_FLAGS && flags=${!var:-} ;;
      esac
      # shellcheck disable=SC2086
      /usr/bin/time -f '%U %S %w' -o "$WORK/time" "$REF" --url "$URL" --streams "$STREAMS" \
        --seconds "$SECS" --max-tokens "$TOKENS" --runtime "$runtime" $flags >"$WORK/ref.out"
      line=$(cat "$WORK/ref.out")
      chunks=$(sed 's/.*chunks=\([0-9]*\).*/\1/' <<<"$line")
      reads=$(sed 's/.*reads=\([0-9]*\).*/\1/' <<<"$line")
      ;;
    cadence | before)
      exe=$BIN
      flags=${BENCH_FLAGS:-}
      if [ "$client" = before ]; then
        exe=${CADENCE_BEFORE:?CADENCE_BEFORE names the earlier binary}
        flags=${BEFORE_FLAGS:-$flags}
      fi
      # shellcheck disable=SC2086
      /usr/bin/time -f '%U %S %w' -o "$WORK/time" "$exe" bench "$URL" --api chat --model m \
        -c "$STREAMS" -d "${SECS}s" --max-tokens "$TOKENS" --json "$WORK/c.json" \
        $flags >"$WORK/cadence.out" 2>&1 || { cat "$WORK/cadence.out"; exit 1; }
      read -r chunks reads < <(report_chunks_reads "$WORK/c.json")
      ;;
    esac
    report "$client" "$run" "$chunks" "$reads"
  done
done

# Per client, the median over the rounds. Compare the totals: the kernel splits CPU
# time into user and system by tick samples, so a change can move time from one
# column to the other without changing the sum.
median() { # CLIENT COLUMN
  awk -v c="$1" -v k="$2" '$1 == c { print $k }' "$WORK/rows" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "# medians of $REPEATS round(s): client us/chunk user_us sys_us vcsw/chunk"
for client in ${CLIENTS:-ref cadence}; do
  echo "# median $client $(median "$client" 7) $(median "$client" 8) $(median "$client" 9) $(median "$client" 10)"
done
