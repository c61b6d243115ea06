#!/usr/bin/env bash
# Regenerates the real-tool fixtures of tests/fixtures/import/: each tool is installed
# from PyPI into a throwaway virtual environment and run against `cadence sim` on this
# machine. Not run by CI (it needs the network and minutes per tool); run it by hand
# when a tool's output format changes, then update tests/fixtures/import/README.md.
#
#   scripts/import-fixtures.sh [aiperf] [guidellm]     # default: both
#
# Needs python3 with venv, a release build (cargo build --release) and a local Hugging
# Face tokenizer directory (TOKENIZER, default: the real-engine kit's), since neither
# tool can download one here.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=tests/fixtures/import
WORK=$(mktemp -d)
TOKENIZER=${TOKENIZER:-$HOME/.cache/cadence-real-engine/model/hf}
PORT=${PORT:-18777}
CADENCE=${CADENCE:-target/release/cadence}
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(aiperf guidellm)

"$CADENCE" sim --addr 127.0.0.1:$PORT --ttft normal:20ms,3ms --itl normal:8ms,2ms \
    --stall-probability 0.02 --stall 60ms --model tiny >"$WORK/sim.log" 2>&1 &
SIM=$!
trap 'kill $SIM 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 1

# name package -> path of a venv with the package: $NAME_VENV (e.g. GUIDELLM_VENV) when
# set, else a fresh one in the work directory (the install bounded at 10 minutes;
# GuideLLM pulls in torch: about 6 GB).
venv() {
    local given
    given=$(printenv "${1^^}_VENV" || true)
    if [ -n "$given" ]; then echo "$given"; return; fi
    python3 -m venv "$WORK/$1"
    timeout 600 "$WORK/$1/bin/pip" install -q "$2" >&2
    echo "$WORK/$1"
}

for tool in "${tools[@]}"; do
    case $tool in
    aiperf)
        v=$(venv aiperf aiperf)
        "$v/bin/aiperf" profile --model tiny --url http://127.0.0.1:$PORT --endpoint-type chat \
            --streaming --tokenizer "$TOKENIZER" --concurrency 4 --request-count 12 \
            --synthetic-input-tokens-mean 32 --output-tokens-mean 24 --random-seed 1 \
            --artifact-dir "$WORK/aip" --ui none >/dev/null
        mkdir -p "$OUT/aiperf"
        cp "$WORK/aip/profile_export.jsonl" "$WORK/aip/profile_export_aiperf.json" "$OUT/aiperf/"
        "$v/bin/aiperf" --version
        ;;
    guidellm)
        v=$(venv guidellm guidellm)
        (cd "$WORK" && HF_HUB_OFFLINE=1 "$v/bin/guidellm" run \
            --backend kind=openai_http,target=http://127.0.0.1:$PORT,model="$TOKENIZER" \
            --profile kind=concurrent,streams=4 --constraint kind=max_requests,count=8 \
            --data kind=synthetic_text,prompt_tokens=32,output_tokens=24 \
            --output kind=json,path="$WORK/benchmarks.json" --disable-console >/dev/null)
        cp "$WORK/benchmarks.json" "$OUT/guidellm-benchmarks.json"
        "$v/bin/guidellm" --version
        ;;
    *) echo "unknown tool $tool (aiperf, guidellm)" >&2; exit 2 ;;
    esac
done
