#!/usr/bin/env bash
# The judged `cadence watch` scenario at full length: a 90 s watch of the built-in
# simulator whose ITL doubles for 30 s ([builtin] slow_at 30s, slow_for 30s,
# slow_factor 2), probed every ~2 s against `itl.p50<=6ms` (the simulator's engine
# gives ~4.2 ms; doubled, ~8.4 ms), with a local webhook receiver and /metrics read
# every second. Prints the checks: probes reported vs in the database, ITL p50
# before/during/after the window, the incident's span, the webhook posts, and the
# SLO gauge's states over the run. Exit 1 when a check fails.
#
#   cargo build -p cadence            # or --release
#   benchsuite/watch-fault.sh target/debug/cadence [OUTDIR]
#
# Env: DURATION_S (90), SLOW_AT_S (30), SLOW_FOR_S (30), FACTOR (2.0), INTERVAL (2s),
# SLO (itl.p50<=6ms). Needs python3 (the receiver and the database checks).
set -euo pipefail
BIN=$(realpath "${1:?usage: watch-fault.sh CADENCE_BINARY [OUTDIR]}")
OUT=${2:-$(mktemp -d /tmp/watch-fault.XXXXXX)}
DUR=${DURATION_S:-90}
AT=${SLOW_AT_S:-30}
FOR=${SLOW_FOR_S:-30}
FACTOR=${FACTOR:-2.0}
INTERVAL=${INTERVAL:-2s}
SLO=${SLO:-itl.p50<=6ms}
mkdir -p "$OUT"
cd "$OUT"
rm -f w.db w.db-wal w.db-shm hook.jsonl gauge.txt watch.err
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# The webhook receiver: each POST's body, one line each, in hook.jsonl.
python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        open("hook.jsonl", "ab").write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()' >hook.port &
PIDS+=($!)
for _ in $(seq 50); do [ -s hook.port ] && break; sleep 0.1; done
HOOK="http://127.0.0.1:$(cat hook.port)/hook"

cat >watch.toml <<EOF
[builtin]
slow_at = "${AT}s"
slow_for = "${FOR}s"
slow_factor = $FACTOR
[[target]]
name = "sim"
url = "builtin"
slo = ["$SLO"]
[target.probe]
interval = "$INTERVAL"
jitter = "200ms"
requests = 4
max_tokens = 32
prompt_tokens = 16
deadline = "10s"
EOF

START_MS=$(date +%s%3N)
"$BIN" watch watch.toml --db w.db --listen 127.0.0.1:0 --webhook "$HOOK" 2>watch.err &
WATCH=$!
PIDS+=($WATCH)
ADDR=
for _ in $(seq 100); do
    ADDR=$(sed -n 's|.*page at http://\([^/]*\)/.*|\1|p' watch.err)
    [ -n "$ADDR" ] && break
    sleep 0.1
done
[ -n "$ADDR" ] || { cat watch.err; exit 1; }
LISTEN_MS=$(date +%s%3N)
END=$((START_MS + DUR * 1000))
while [ "$(date +%s%3N)" -lt "$END" ]; do
    v=$(python3 -c "import urllib.request,sys; t=urllib.request.urlopen('http://$ADDR/metrics').read().decode(); print(next((l.split()[-1] for l in t.splitlines() if l.startswith('cadence_watch_slo_ok{target=\"sim\"}')), '-'))" 2>/dev/null || echo '?')
    echo "$(( $(date +%s%3N) - START_MS )) $v" >>gauge.txt
    sleep 1
done
kill -INT "$WATCH"
wait "$WATCH" || { echo "the watcher exited $?"; exit 1; }

python3 - "$START_MS" "$LISTEN_MS" "$AT" "$FOR" <<'EOF'
import json, sqlite3, statistics, sys
start, listen, at, dur = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) * 1000, int(sys.argv[4]) * 1000
ok = True
def check(cond, text):
    global ok
    ok &= bool(cond)
    print(("ok   " if cond else "FAIL ") + text)
reported = sum(1 for l in open("watch.err") if l.startswith("cadence watch: sim probe:"))
db = sqlite3.connect("file:w.db?mode=ro", uri=True)
rows = db.execute("SELECT started_ms, ended_ms, sent, succeeded, itl_p50_ms, slo_ok FROM probes ORDER BY started_ms").fetchall()
reqs = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
check(len(rows) == reported and reqs == sum(r[2] for r in rows),
      f"probes: {reported} reported, {len(rows)} in the database with {reqs} requests")
# Before/during/after: probes wholly on one side of an edge (the simulator started
# between the watcher's start and its page's).
before = [r[4] for r in rows if r[1] <= start + at]
during = [r[4] for r in rows if r[0] >= listen + at and r[1] <= start + at + dur]
after = [r[4] for r in rows if r[0] >= listen + at + dur]
med = lambda v: statistics.median(v) if v else float("nan")
b, d, a = med(before), med(during), med(after)
check(1.6 <= d / b <= 2.5 and 0.8 <= a / b <= 1.25,
      f"ITL p50 (median of probes) before {b:.2f} ms ({len(before)}), during {d:.2f} ms ({len(during)}), after {a:.2f} ms ({len(after)}): x{d / b:.2f}")
# Incidents: runs of breaching probes; each ends at the next passing probe's start.
spans, open_at, n = [], None, 0
for r in rows:
    if not r[5] and open_at is None:
        open_at, n = r[0], 0
    if not r[5]:
        n += 1
    if r[5] and open_at is not None:
        spans.append((open_at, r[0], n)); open_at = None
if open_at is not None:
    spans.append((open_at, None, n))
desc = ", ".join(f"{(s - start) / 1000:.1f}-{'open' if e is None else f'{(e - start) / 1000:.1f}'} s ({k} probes)" for s, e, k in spans)
check(len(spans) == 1 and spans[0][1] is not None, f"incidents: {len(spans)}: {desc} after the watcher's start (window {at / 1000:.0f}-{(at + dur) / 1000:.0f} s)")
posts = [json.loads(l)["event"] for l in open("hook.jsonl")] if __import__("os").path.exists("hook.jsonl") else []
check(posts == ["incident_start", "incident_end"], f"webhook: {len(posts)} posts: {', '.join(posts)}")
states, changes = [], []
for l in open("gauge.txt"):
    t, v = l.split()
    if v in "01" and (not states or states[-1] != v):
        states.append(v); changes.append(f"{v} from {int(t) / 1000:.0f} s")
check(states == ["1", "0", "1"], "cadence_watch_slo_ok: " + ", ".join(changes))
sys.exit(0 if ok else 1)
EOF
