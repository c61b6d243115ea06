#!/usr/bin/env bash
# Installs Arize Phoenix (an OpenTelemetry receiver people use for LLM traces: it stores
# OTLP spans and serves them back over its REST API) from PyPI into a venv cached under
# ~/.cache, once, and prints the path of its `phoenix` command. The tracing tests start
# it on ports of their own (tests/otlp_phoenix.rs) and read spans back through its API.
#
#   scripts/phoenix.sh            # prints e.g. /root/.cache/cadence/phoenix-20.26.1/bin/phoenix
set -euo pipefail

version=${PHOENIX_VERSION:-20.26.1}
venv=${CADENCE_CACHE:-$HOME/.cache/cadence}/phoenix-$version
bin=$venv/bin/phoenix

if [[ ! -x $bin ]]; then
    echo "== installing arize-phoenix $version into $venv (once)" >&2
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "arize-phoenix==$version" >&2
    echo "== arize-phoenix installed in $(($(date +%s) - start)) s" >&2
fi
[[ -x $bin ]] || { echo "error: $bin missing after the install" >&2; exit 1; }
echo "$bin"
