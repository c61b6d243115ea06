#!/usr/bin/env bash
# The fuzz step CI runs: builds every target of fuzz/ (cargo-fuzz, on the nightly
# toolchain libFuzzer needs) and runs each from its committed corpus for a few seconds
# (CADENCE_FUZZ_SECONDS, default 10). A crash, a failed oracle, a hang (an input over
# 10 s) or memory over 2 GiB fails the step, with the input saved under
# fuzz/artifacts/TARGET/. Installs cargo-fuzz when missing (pinned; ~2 minutes to build
# on 2 cores). Without a nightly toolchain it says that the fuzz step did not run.
#   scripts/fuzz.sh                    every target, CADENCE_FUZZ_SECONDS each
#   scripts/fuzz.sh sse tracker        those targets only
# New inputs the fuzzers find go to a scratch directory, never into fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${CADENCE_FUZZ_SECONDS:-10}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "== fuzz: NOT RUN: no nightly toolchain (rustup toolchain install nightly); the fuzz step did not run"
    exit 0
fi
version=0.13.2
if ! cargo +nightly fuzz --version 2>/dev/null | grep -qF "$version"; then
    echo "== installing cargo-fuzz $version"
    cargo install --locked --quiet cargo-fuzz --version "$version"
fi
# Its own target directory: libFuzzer's instrumentation flags would rebuild the
# workspace's artifacts in a shared one.
export CARGO_TARGET_DIR=${CADENCE_FUZZ_TARGET_DIR:-$root/target/fuzz}
cd fuzz
# No sanitizer: the workspace forbids unsafe code, so AddressSanitizer finds nothing
# libFuzzer's own checks and Rust's do not, and costs build and run time. Overflow
# checks are on (fuzz/Cargo.toml's release profile).
echo "== cargo fuzz build (every target)"
cargo +nightly fuzz build -s none
if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo +nightly fuzz list); fi
failed=()
for t in "${targets[@]}"; do
    scratch=$(mktemp -d)
    mkdir -p "artifacts/$t"
    echo "== fuzz $t (${seconds}s from fuzz/corpus/$t, $(ls "corpus/$t" | wc -l) inputs)"
    if ! cargo +nightly fuzz run -s none "$t" "$scratch" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 2>"$scratch.log"; then
        tail -40 "$scratch.log"
        failed+=("$t")
    else
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$scratch.log" | tr '\n' ' '
        echo
    fi
    rm -rf "$scratch" "$scratch.log"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "== fuzz FAILED: ${failed[*]} (inputs under fuzz/artifacts/; reproduce with: cd fuzz && cargo +nightly fuzz run -s none TARGET artifacts/TARGET/FILE)"
    exit 1
fi
echo "== fuzz: ${#targets[@]} targets ran ${seconds}s each without a failure"
