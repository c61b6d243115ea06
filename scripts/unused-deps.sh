#!/usr/bin/env bash
# The unused-dependency check CI holds: cargo-machete reads every crate's manifest and
# sources and fails on a dependency that no source names. Installs cargo-machete from
# crates.io when missing (pinned; ~1 minute to build on 2 cores).
# A dependency used only through a macro or a feature can be listed, with the reason,
# under the crate's [package.metadata.cargo-machete] ignored = [...].
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.9.2
if ! cargo machete --version 2>/dev/null | grep -qF "$version"; then
    echo "== installing cargo-machete $version"
    cargo install --locked --quiet cargo-machete --version "$version"
fi
cargo machete
