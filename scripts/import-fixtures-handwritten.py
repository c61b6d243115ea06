#!/usr/bin/env python3
"""Writes the hand-written import fixtures (vllm-detailed.json, llmperf/,
inference-perf-per-request.json, genai-bench-run.json) from a Cadence
records file (`cadence bench --records`): the vLLM and LLMPerf layouts as documented,
with each tool's summary figures computed here under the tool's own definitions and
statistics (numpy: linear percentiles, population std; pandas: linear quantiles,
sample std), since neither tool could be installed on the machine that made them.
Not run by CI.

    scripts/import-fixtures-handwritten.py RECORDS.jsonl tests/fixtures/import
"""
import json, math, os, sys

def pct(xs, p):
    s = sorted(xs)
    k = p / 100 * (len(s) - 1)
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)

def mean(xs): return sum(xs) / len(xs)

def std(xs, ddof):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))

recs, run = [], None
for line in open(sys.argv[1]):
    v = json.loads(line)
    if "cadence_run" in v: run = v["cadence_run"]["run"]
    elif "index" in v: recs.append(v)
recs.sort(key=lambda r: r["sent_ns"])
out = sys.argv[2]
ok = [r for r in recs if r["outcome"] == "succeeded"]
# Every request's values in seconds, from send.
rows = []
for r in ok:
    t = [c[0] for c in r["chunks"]]
    sent = r["sent_ns"]
    rows.append({
        "start": sent / 1e9,
        "ttft": (t[0] - sent) / 1e9,
        "itl": [(b - a) / 1e9 for a, b in zip(t, t[1:])],
        "last": (t[-1] - sent) / 1e9,
        "end": (r["end_ns"] - sent) / 1e9,
        "tokens": r["output_tokens"]["count"],
        "prompt": r.get("input_tokens") or 0,
    })

# inference-perf: per_request_lifecycle_metrics.json, the layout of recent versions
# (content chunk times kept beside the time of every SSE line), plus one timeout.
ip = []
for r in recs:
    sent = r["sent_ns"] / 1e9 + 1000.0  # a monotonic clock's origin
    t = [sent + (c[0] - r["sent_ns"]) / 1e9 for c in r["chunks"]]
    end = sent + (r["end_ns"] - r["sent_ns"]) / 1e9
    lines = [x for c in t for x in (c, c)] + [end]
    ip.append({
        "start_time": sent, "end_time": end, "request": "{}", "response": "",
        "info": {
            "request_metrics": {"text": {"input_tokens": r.get("input_tokens") or 0}},
            "response_metrics": {"output_tokens": r["output_tokens"]["count"],
                                 "server_usage": None, "response_chunks": [],
                                 "chunk_times": t, "output_token_times": lines},
            "input_tokens": r.get("input_tokens") or 0,
        },
        "error": None,
    })
last = ip[-1]
ip.append({"start_time": last["end_time"], "end_time": last["end_time"] + 0.5,
           "request": "{}", "response": "",
           "info": {"request_metrics": {"text": {"input_tokens": 20}},
                    "response_metrics": {"output_tokens": 0, "chunk_times": [], "output_token_times": []},
                    "input_tokens": 20},
           "error": {"error_type": "TimeoutError", "error_msg": ""}})
json.dump(ip, open(os.path.join(out, "inference-perf-per-request.json"), "w"), indent=1)

dur = (max(r["end_ns"] for r in recs) - min(r["sent_ns"] for r in recs)) / 1e9

# genai-bench: per request TTFT, TPOT, E2E (to the end of the response) in seconds;
# numpy statistics over the succeeded requests (a TPOT of an output under 10 ms or
# over 1000 tok/s left out), throughputs over the run's duration; one failure.
gb = []
for x, r in zip(rows, ok):
    e2e = x["end"]
    outl = e2e - x["ttft"]
    tpot = outl / (x["tokens"] - 1) if x["tokens"] > 1 else None
    gb.append({"ttft": x["ttft"], "tpot": tpot, "e2e_latency": e2e, "output_latency": outl,
               "output_inference_speed": 1 / tpot if tpot else None,
               "num_input_tokens": x["prompt"], "num_output_tokens": x["tokens"],
               "total_tokens": x["prompt"] + x["tokens"],
               "input_throughput": x["prompt"] / x["ttft"], "output_throughput": x["tokens"] / outl,
               "error_code": None, "error_message": None})
gb.append({"ttft": None, "tpot": None, "e2e_latency": 0.004, "output_latency": None,
           "output_inference_speed": None, "num_input_tokens": 20, "num_output_tokens": None,
           "total_tokens": None, "input_throughput": None, "output_throughput": None,
           "error_code": 503, "error_message": "Service Unavailable"})
stats = {}
for key in ["ttft", "tpot", "e2e_latency", "output_latency", "num_output_tokens"]:
    xs = [g[key] for g in gb if not g["error_code"] and g[key] is not None]
    if key == "tpot":
        xs = [g["tpot"] for g in gb if not g["error_code"] and g["tpot"] is not None
              and g["output_latency"] >= 0.01 and g["output_inference_speed"] <= 1000]
    stats[key] = {"min": min(xs), "max": max(xs), "mean": mean(xs), "stddev": std(xs, 0),
                  "sum": sum(xs), **{f"p{q}": pct(xs, q) for q in [25, 50, 75, 90, 95, 99]}}
done = [g for g in gb if not g["error_code"]]
genai = {
    "aggregated_metrics": {
        "scenario": "D(32,24)", "num_concurrency": 4, "iteration_type": "num_concurrency",
        "run_duration": dur, "num_requests": len(gb), "num_completed_requests": len(done),
        "num_error_requests": 1, "error_rate": 1 / len(gb),
        "requests_per_second": len(done) / dur,
        "mean_output_throughput_tokens_per_s": sum(g["num_output_tokens"] for g in done) / dur,
        "stats": stats,
    },
    "individual_request_metrics": gb,
    "_time_unit": "s",
}
json.dump(genai, open(os.path.join(out, "genai-bench-run.json"), "w"), indent=4)

# vLLM: latency = last chunk - send; TPOT = (latency - TTFT) / (tokens - 1); ITL pooled.
dur = (max(r["end_ns"] for r in recs) - min(r["sent_ns"] for r in recs)) / 1e9
ttft = [x["ttft"] * 1e3 for x in rows]
e2el = [x["last"] * 1e3 for x in rows]
tpot = [(x["last"] - x["ttft"]) / (x["tokens"] - 1) * 1e3 for x in rows if x["tokens"] > 1]
itl = [g * 1e3 for x in rows for g in x["itl"]]
total_out = sum(x["tokens"] for x in rows)
total_in = sum(x["prompt"] for x in rows)
v = {
    "date": "fixture", "endpoint_type": "openai-chat", "backend": "openai-chat",
    "label": None, "model_id": run["model"], "tokenizer_id": run["model"],
    "num_prompts": len(recs), "request_rate": "inf", "burstiness": 1.0,
    "max_concurrency": 4,
    "duration": dur, "completed": len(rows), "failed": len(recs) - len(rows),
    "total_input_tokens": total_in, "total_output_tokens": total_out,
    "request_throughput": len(rows) / dur, "request_goodput": None,
    "output_throughput": total_out / dur,
    "total_token_throughput": (total_in + total_out) / dur,
}
for name, xs in [("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)]:
    v[f"mean_{name}_ms"] = mean(xs)
    v[f"median_{name}_ms"] = pct(xs, 50)
    v[f"std_{name}_ms"] = std(xs, 0)
    v[f"p99_{name}_ms"] = pct(xs, 99)
v.update({
    "input_lens": [x["prompt"] for x in rows],
    "output_lens": [x["tokens"] for x in rows],
    "ttfts": [x["ttft"] for x in rows],
    "itls": [x["itl"] for x in rows],
    "start_times": [x["start"] for x in rows],
    "generated_texts": ["" for _ in rows],
    "errors": ["" for _ in rows],
})
json.dump(v, open(os.path.join(out, "vllm-detailed.json"), "w"), indent=1)

# LLMPerf: no send or chunk times; ITL = (TTFT + every chunk gap) / tokens = last / tokens.
os.makedirs(os.path.join(out, "llmperf"), exist_ok=True)
resp = [{
    "error_code": None, "error_msg": "",
    "inter_token_latency_s": x["last"] / x["tokens"],
    "ttft_s": x["ttft"], "end_to_end_latency_s": x["last"],
    "request_output_throughput_token_per_s": x["tokens"] / x["last"],
    "number_total_tokens": x["tokens"] + x["prompt"],
    "number_output_tokens": x["tokens"], "number_input_tokens": x["prompt"],
} for x in rows]
resp.append({"error_code": 500, "error_msg": "Internal Server Error",
             "inter_token_latency_s": 0, "ttft_s": 0, "end_to_end_latency_s": 0.004,
             "request_output_throughput_token_per_s": 0, "number_total_tokens": 0,
             "number_output_tokens": 0, "number_input_tokens": 0})
prefix = os.path.join(out, "llmperf", "tiny_32_24")
json.dump(resp, open(prefix + "_individual_responses.json", "w"), indent=1)
summary = {"model": run["model"], "num_concurrent_requests": 4}
for key in ["inter_token_latency_s", "ttft_s", "end_to_end_latency_s",
            "request_output_throughput_token_per_s", "number_input_tokens", "number_output_tokens"]:
    xs = [r[key] for r in resp if r["error_code"] is None]
    for q in [25, 50, 75, 90, 95, 99]:
        summary[f"results_{key}_quantiles_p{q}"] = pct(xs, q)
    summary[f"results_{key}_mean"] = mean(xs)
    summary[f"results_{key}_min"] = min(xs)
    summary[f"results_{key}_max"] = max(xs)
    summary[f"results_{key}_stddev"] = std(xs, 1)
summary["results_num_requests_started"] = len(resp)
summary["results_error_rate"] = 1 / len(resp)
summary["results_number_errors"] = 1
summary["results_mean_output_throughput_token_per_s"] = total_out / dur
summary["results_num_completed_requests"] = len(rows)
json.dump(summary, open(prefix + "_summary.json", "w"), indent=1)
