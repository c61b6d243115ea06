#!/usr/bin/env bash
# Why this exists: the integration tests measure a real inference engine, and the
# repository must build it itself from registry packages alone. llama.cpp's source is
# vendored inside the llama-cpp-python source package on PyPI, so this fetches that one
# pinned sdist with pip (checking its sha256), and builds only `llama-server` (OpenAI-
# compatible, SSE streaming, continuous batching over parallel slots) for this CPU.
#
#   scripts/real-engine/build-llama-server.sh OUT_DIR     # -> OUT_DIR/llama-server
#
# Needs python3 with pip, cmake (>= 3.14), ninja and a C++ compiler on PATH
# (scripts/real-engine.sh puts pinned cmake and ninja from PyPI on PATH first).
# About 6 minutes on 2 cores. Nothing is fetched during the build itself: the web UI's
# prebuilt download and HTTPS support are turned off.
set -euo pipefail

# llama-cpp-python 0.3.36 vendors llama.cpp at commit 0c1e570 (2026-10-01).
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

die() { echo "build-llama-server: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: build-llama-server.sh OUT_DIR"
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (scripts/real-engine.sh installs it from PyPI)"
done
command -v c++ >/dev/null || command -v g++ >/dev/null ||
  die "no C++ compiler on PATH (Debian: apt-get install g++)"
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip"
out=$(mkdir -p "$1" && cd "$1" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Only this package as a source archive; its build backend's own dependencies come as
# wheels (with `--no-binary :all:` pip would compile CMake from source just to read the
# package's metadata).
echo "build-llama-server: fetching llama-cpp-python $version (source) from PyPI" >&2
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
  --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work/dl" >&2 ||
  die "pip could not download llama-cpp-python==$version"
sdist="$work/dl/llama_cpp_python-$version.tar.gz"
[ -f "$sdist" ] || die "pip did not leave $sdist"
echo "$sha256  $sdist" | sha256sum -c --quiet - ||
  die "llama-cpp-python $version's archive does not have the pinned sha256"

tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/tools/server/CMakeLists.txt" ] || die "no llama.cpp server source in $sdist"

echo "build-llama-server: building llama-server (output in $work/build.log)" >&2
{
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF &&
    cmake --build "$work/build" --target llama-server -j "$(nproc)"
} >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  die "the llama-server build failed (last lines above)"
}
cp "$work/build/bin/llama-server" "$out/llama-server"
"$out/llama-server" --version >&2 || die "the built llama-server does not run"
echo "$out/llama-server"
