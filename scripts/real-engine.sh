#!/usr/bin/env bash
# A real inference engine for the integration tests: llama.cpp's `llama-server` and a
# tiny random-weight model, built once into a cache directory by the kit in
# ../shared/real-engine/ (a first build takes ~6 min on 2 cores; later calls are instant).
#
#   scripts/real-engine.sh [DIR]     # DIR defaults to $CADENCE_REAL_ENGINE or
#                                    # ~/.cache/cadence-real-engine
#
# Prints DIR on success. DIR then holds bin/llama-server, model/tiny-llama.gguf and
# model/hf/tokenizer.json. Tests that need the engine read CADENCE_REAL_ENGINE=DIR
# (scripts/test.sh exports it); without it they say so and skip.
# Needs cmake, ninja-build and python3 with venv; installs the first two from Debian's
# packages when run as root (or through `sudo -n`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kit=${CADENCE_ENGINE_KIT:-$here/../../shared/real-engine}
dir=${1:-${CADENCE_REAL_ENGINE:-$HOME/.cache/cadence-real-engine}}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [ -x "$dir/bin/llama-server" ] && [ -f "$dir/model/tiny-llama.gguf" ] &&
  [ -f "$dir/model/hf/tokenizer.json" ]; then
  echo "$dir"
  exit 0
fi
[ -f "$kit/build-llama-server.sh" ] || {
  echo "real-engine: the engine kit is not at $kit (set CADENCE_ENGINE_KIT)" >&2
  exit 1
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif sudo -n true 2>/dev/null; then sudo -n "$@"; else
    echo "real-engine: needs root to run: $*" >&2
    return 1
  fi
}
if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  echo "real-engine: installing cmake and ninja-build" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q cmake ninja-build >&2 ||
    { as_root apt-get update -q >&2 && as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q cmake ninja-build >&2; }
fi

# Build into a temporary name and move into place, so an interrupted build is redone.
if [ ! -x "$dir/bin/llama-server" ]; then
  echo "real-engine: building llama-server (about 6 minutes on 2 cores)" >&2
  rm -rf "$dir/bin.tmp"
  bash "$kit/build-llama-server.sh" "$dir/bin.tmp" >&2
  rm -rf "$dir/bin" && mv "$dir/bin.tmp" "$dir/bin"
fi
if [ ! -f "$dir/model/tiny-llama.gguf" ] || [ ! -f "$dir/model/hf/tokenizer.json" ]; then
  echo "real-engine: making the tiny model" >&2
  [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install -q gguf tokenizers numpy >&2
  rm -rf "$dir/model.tmp"
  "$dir/venv/bin/python" "$kit/make-tiny-model.py" --out "$dir/model.tmp" >&2
  rm -rf "$dir/model" && mv "$dir/model.tmp" "$dir/model"
fi
echo "$dir"
