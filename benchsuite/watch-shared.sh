#!/usr/bin/env bash
# What the shared store costs a watcher, and how fast a backlog drains: one target
# (the built-in simulator) probed back to back (interval 50 ms, 4 requests at
# concurrency 4, 16 output tokens) for SECONDS, three ways:
#   local    no --shared: probes kept in SQLite only
#   shared   --shared to a PostgreSQL server: probes kept, then shipped as they come
#   backlog  the store away (an empty socket directory) for SECONDS, then the watcher
#            restarted with it: how long until every probe kept meanwhile is shipped
# The local and shared runs sample the watcher's RSS every 15 s (the first minute
# against the end: a shipper that held on to probes would grow; RSS_LOG=FILE keeps
# every sample). PHASES picks the runs (default
# "local shared backlog"). A throwaway PostgreSQL server comes from scripts/postgres.sh
# (Debian's package).
#
#   benchsuite/watch-shared.sh target/debug/cadence 60
#   PHASES=shared benchsuite/watch-shared.sh target/debug/cadence 600   # a soak
#   SIM=process INTERVAL=1s PHASES=shared benchsuite/watch-shared.sh target/debug/cadence 3600
#
# SIM=process probes a `cadence sim` in a process of its own (its memory apart from the
# watcher's) instead of the built-in one; INTERVAL is the probe interval (default 50ms).
set -euo pipefail
bin=${1:?usage: watch-shared.sh CADENCE_BIN SECONDS}
secs=${2:-60}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pg=$(mktemp -d "${TMPDIR:-/tmp}/cadence-pg.XXXXXX")
watch_pid= sim_pid=
cleanup() {
    [[ -n $watch_pid ]] && kill "$watch_pid" 2>/dev/null || true
    [[ -n $sim_pid ]] && kill "$sim_pid" 2>/dev/null || true
    "$here/scripts/postgres.sh" stop "$pg"
    rm -rf "$work"
}
trap cleanup EXIT
admin=$("$here/scripts/postgres.sh" start "$pg")
psql "$admin" -qc "CREATE DATABASE bench" >/dev/null
store="$admin dbname=bench"

target='url = "builtin"'
if [[ ${SIM:-builtin} == process ]]; then
    "$bin" sim --addr 127.0.0.1:0 --model tiny@cpu >"$work/sim.log" 2>&1 &
    sim_pid=$!
    for _ in $(seq 100); do
        sim_addr=$(grep -o '127.0.0.1:[0-9]*' "$work/sim.log" | head -n 1 || true)
        [[ -n $sim_addr ]] && break
        sleep 0.1
    done
    target="url = \"http://$sim_addr/v1/chat/completions\"
model = \"tiny@cpu\""
fi
interval=${INTERVAL:-50ms}

cat >"$work/watch.toml" <<TOML
vantage = "bench"
[[target]]
name = "sim"
$target
slo = ["ttft.p50<=2s"]
[target.probe]
interval = "$interval"
jitter = "5ms"
requests = 4
concurrency = 4
prompt_tokens = 64
max_tokens = 16
deadline = "5s"
TOML

# start DB [SHARED]: the watcher in the background; sets watch_pid and addr.
start() {
    local db=$1 shared=${2:-}
    local log="$work/$(basename "$db").log"
    if [[ -n $shared ]]; then
        "$bin" watch "$work/watch.toml" --db "$db" --quiet --shared "$shared" 2>"$log" &
    else
        "$bin" watch "$work/watch.toml" --db "$db" --quiet 2>"$log" &
    fi
    watch_pid=$!
    for _ in $(seq 100); do
        addr=$(sed -n 's|.*page at http://\([^/]*\)/.*|\1|p' "$log")
        [[ -n $addr ]] && return
        sleep 0.1
    done
    echo "the watcher printed no address:" >&2
    cat "$log" >&2
    exit 1
}
stop() {
    kill -INT "$watch_pid"
    wait "$watch_pid" || true
    watch_pid=
}
probes_in() { "$bin" watch report --db "$1" --since 1d | head -1 | sed 's/.*UTC, \([0-9]*\) probes.*/\1/'; }
gauge() { curl -s "http://$addr/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
shared_rows() { psql "$store" -tAc "SELECT count(*) FROM watch_probes WHERE vantage = 'bench'" 2>/dev/null || echo 0; }

phases=${PHASES:-local shared backlog}
has() { [[ " $phases " == *" $1 "* ]]; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$watch_pid/status"; }

printf '%-8s %8s %10s %14s\n' run seconds probes "probes/s"
# run_for NAME: sleeps SECONDS while sampling the watcher's RSS every 15 s (into
# $RSS_LOG when set: name,elapsed_s,rss_kib); sets rss_first (at 1 min), rss_last, rss_max.
run_for() {
    local waited=0 step r
    rss_first= rss_max=0
    while ((waited < secs)); do
        step=$((secs - waited < 15 ? secs - waited : 15))
        sleep "$step"
        waited=$((waited + step))
        r=$(rss)
        [[ -n ${RSS_LOG:-} ]] && echo "$1,$waited,$r" >>"$RSS_LOG"
        ((waited >= 60)) && [[ -z $rss_first ]] && rss_first=$r
        ((r > rss_max)) && rss_max=$r
    done
    rss_last=$(rss)
}

if has local; then
start "$work/local.db"
run_for local
stop
n=$(probes_in "$work/local.db")
printf '%-8s %8s %10s %14.1f   RSS %s KiB at 1 min, %s at the end, max %s\n' local "$secs" "$n" \
    "$(echo "$n / $secs" | bc -l)" "${rss_first:-?}" "$rss_last" "$rss_max"
fi

if has shared; then
start "$work/shared.db" "$store"
run_for shared
pending=$(gauge cadence_watch_shared_pending_probes)
stop
n=$(probes_in "$work/shared.db")
printf '%-8s %8s %10s %14.1f   pending at the end: %s; in the store: %s; RSS %s KiB at 1 min, %s at the end, max %s\n' \
    shared "$secs" "$n" "$(echo "$n / $secs" | bc -l)" "$pending" "$(shared_rows)" \
    "${rss_first:-?}" "$rss_last" "$rss_max"
fi
has backlog || exit 0

psql "$store" -qc "TRUNCATE watch_probes CASCADE" >/dev/null
start "$work/backlog.db" "host=$work user=cadence dbname=none"
sleep "$secs"
stop
n=$(probes_in "$work/backlog.db")
t0=$(date +%s.%N)
start "$work/backlog.db" "$store"
while :; do
    p=$(gauge cadence_watch_shared_pending_probes)
    up=$(gauge cadence_watch_shared_up)
    [[ $up == 1 && $p == 0 ]] && break
    sleep 0.05
done
t1=$(date +%s.%N)
stop
drain=$(echo "$t1 - $t0" | bc -l)
printf '%-8s %8s %10s %14s   backlog shipped in %.1f s (%.0f probes/s, while probing on); in the store: %s\n' \
    backlog "$secs" "$n" - "$drain" "$(echo "$n / $drain" | bc -l)" "$(shared_rows)"
