# Client CPU per chunk for fleet sizing: `cadence bench` against a separate `cadence sim`
# (20 ms flat ITL, 200 tokens per request), the bench's user+sys (getrusage) / chunks.
# Usage: python3 benchsuite/fleet-cpu-per-chunk.py target/release/cadence STREAMS DURATION
import json, resource, subprocess, sys, time, tempfile, os
B = sys.argv[1]; C = sys.argv[2]; D = sys.argv[3]
sim = subprocess.Popen([B, "sim", "--addr", "127.0.0.1:0", "--itl", "fixed:20ms", "--ttft", "fixed:20ms"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = sim.stdout.readline().strip().split("listening on ")[1]
out = tempfile.mktemp(suffix=".json")
before = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.time()
subprocess.run([B, "bench", url, "--model", "m", "-c", C, "-d", D, "--max-tokens", "200", "--quiet", "--json", out], stdout=subprocess.DEVNULL)
wall = time.time() - t
after = resource.getrusage(resource.RUSAGE_CHILDREN)
sim.kill(); sim.wait()
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
r = json.load(open(out))["levels"][0]
chunks = r["itl"]["count"] + r["requests"]["succeeded"]
print(f"c={C} d={D}: {chunks} chunks in {wall:.1f}s wall, client user+sys {cpu:.2f}s, {cpu/chunks*1e6:.1f} us/chunk, {chunks/cpu:.0f} chunks per CPU-second; itl p50 {r['itl']['p50_ms']:.2f} p99 {r['itl']['p99_ms']:.2f}")
