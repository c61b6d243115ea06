#!/usr/bin/env bash
# The test command: installs the programs the tests drive (when missing), checks the
# deploy kit's Prometheus rules, then runs every test of the workspace. Needs only the
# Rust toolchain and a Debian-family system; CI runs it after fmt and clippy.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh accounting      # extra arguments go to `cargo test` (here a name filter)
#
# The real engine (llama-server, built once and cached by scripts/real-engine.sh) is
# exported as CADENCE_REAL_ENGINE for the tests that measure it.
# Debian packages: `prometheus` (the proxy's integration test scrapes it with a real
# Prometheus server; its `promtool` checks the deploy kit's rules) and `chromium` (the
# HTML report test opens a report in a real headless browser) and `tmux` (the dashboard
# test runs `cadence bench --tui` in a real terminal and reads its screen) and
# `postgresql` (the watchers' shared store is tested against a real server, started by
# scripts/postgres.sh on a Unix socket of its own and exported as CADENCE_TEST_POSTGRES).
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }

missing=()
if ! { have "${PROMETHEUS:-prometheus}" && have promtool; }; then
    missing+=(prometheus)
fi
if ! { have chromium || have chromium-browser || have google-chrome; }; then
    missing+=(chromium)
fi

if ! have tmux; then
    missing+=(tmux)
fi

have_postgres() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
if ! have_postgres; then
    missing+=(postgresql)
fi
# scripts/postgres.sh makes the test server's TLS certificates with openssl.
if ! have openssl; then
    missing+=(openssl)
fi
# The tracing test reads Phoenix's API with curl; scripts/phoenix.sh makes a venv.
if ! have curl; then
    missing+=(curl)
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing+=(python3-venv)
fi

if ((${#missing[@]})); then
    echo "== installing Debian packages the tests need: ${missing[*]}"
    install_cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    if ! have apt-get; then
        echo "error: ${missing[*]} missing and apt-get not found; install them with your" \
            "package manager (prometheus, promtool, chromium, tmux and a PostgreSQL server must be on" \
            "PATH), then run this script again" >&2
        exit 1
    fi
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif have sudo && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "error: ${missing[*]} missing, and installing needs root; run" >&2
        echo "    sudo sh -c '$install_cmd'" >&2
        echo "then run this script again" >&2
        exit 1
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    for bin in "${PROMETHEUS:-prometheus}" promtool; do
        have "$bin" || { echo "error: $bin still not on PATH after the install" >&2; exit 1; }
    done
    have chromium || have chromium-browser || have google-chrome ||
        { echo "error: chromium still not on PATH after the install" >&2; exit 1; }
    have tmux || { echo "error: tmux still not on PATH after the install" >&2; exit 1; }
    have_postgres || { echo "error: no PostgreSQL server after the install" >&2; exit 1; }
    have openssl || { echo "error: openssl still not on PATH after the install" >&2; exit 1; }
fi

echo "== promtool: deploy kit rules"
promtool check rules deploy/prometheus/cadence-rules.yml
(cd deploy/prometheus && promtool test rules cadence-rules.test.yml)
promtool check rules deploy/prometheus/cadence-watch-rules.yml
(cd deploy/prometheus && promtool test rules cadence-watch-rules.test.yml)

# The real engine the integration tests measure (llama.cpp's llama-server and a tiny
# model), built once into a cache by scripts/real-engine.sh; every test that needs it
# reads CADENCE_REAL_ENGINE (and skips, saying so, when it is unset).
echo "== real engine: scripts/real-engine.sh"
CADENCE_REAL_ENGINE=$(scripts/real-engine.sh)
export CADENCE_REAL_ENGINE

# A real OTLP receiver for the tracing tests: Arize Phoenix from PyPI in a venv cached
# under ~/.cache by scripts/phoenix.sh (about 5 minutes the first time), started by the
# test on ports of its own.
echo "== Arize Phoenix for the tracing tests: scripts/phoenix.sh"
CADENCE_PHOENIX=$(scripts/phoenix.sh)
export CADENCE_PHOENIX

echo "== PostgreSQL for the shared-store tests: scripts/postgres.sh"
pgdir=$(mktemp -d "${TMPDIR:-/tmp}/cadence-pg.XXXXXX")
log=$(mktemp)
trap 'scripts/postgres.sh stop "$pgdir"; rm -f "$log"' EXIT
CADENCE_TEST_POSTGRES=$(scripts/postgres.sh start "$pgdir")
CADENCE_TEST_POSTGRES_TLS=$(cat "$pgdir/tls")
CADENCE_TEST_POSTGRES_CA=$pgdir/ca.pem
export CADENCE_TEST_POSTGRES CADENCE_TEST_POSTGRES_TLS CADENCE_TEST_POSTGRES_CA

# Tests that need a program from outside the repository (llama-server, PostgreSQL,
# Prometheus, Chromium, tmux, Phoenix) are #[ignore]d, so a plain `cargo test` lists them as not
# run; here every one of those programs is present, so they all run.
test_args=("$@")
if [[ " ${test_args[*]} " == *" -- "* ]]; then
    test_args+=(--include-ignored)
else
    test_args+=(-- --include-ignored)
fi
echo "== cargo test --workspace --locked ${test_args[*]}"
cargo test --workspace --locked "${test_args[@]}" 2>&1 | tee "$log"

# The wheel that `pipx install` / `uv tool install` take (pyproject.toml, built by
# scripts/wheel.sh), installed into a fresh venv, its `cadence` run from the venv's bin/.
# Built with the dev profile: it reuses most of the debug artifacts the tests just built
# (the same target directory; about a minute on 2 cores), so CI proves the packaging
# without a second, optimized build (a release wheel is ~7 minutes more). PROFILE=release
# scripts/wheel-check.sh checks that one. Skipped when arguments narrow the test run.
if (($#)); then
    echo "== wheel: skipped (arguments given: $*)"
else
    echo "== wheel: scripts/wheel-check.sh (dev profile)"
    scripts/wheel-check.sh
fi

# cargo prints one result line per test binary, the last often a crate's doc-tests with
# nothing to run: the whole run's count, last.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END {
    printf "tests: %d passed, %d failed\n", p, f
    if (i) { printf "error: %d tests did not run (ignored)\n", i; exit 1 }
}' "$log"
