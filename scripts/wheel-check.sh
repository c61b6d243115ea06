#!/usr/bin/env bash
# Installs the `cadence` wheel into a fresh virtual environment, as `pipx install` would,
# and runs the `cadence` it puts in the venv's bin/: `cadence --version`, then a
# two-request bench against the built-in simulator (no network).
#
#   scripts/wheel-check.sh            # builds the wheel first: scripts/wheel.sh --profile dev
#   scripts/wheel-check.sh WHEEL      # checks a wheel already built (any profile)
#
# PROFILE=release (or dist) builds that profile instead of dev. scripts/test.sh runs it
# after the cargo tests. Needs python3 with venv; the wheel is installed from its file
# alone (pip --no-index), so only scripts/wheel.sh's first install of maturin uses the
# network. Everything it makes is in a temporary directory, removed on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() {
  echo "wheel-check: $*" >&2
  exit 1
}
(($# <= 1)) || fail "usage: scripts/wheel-check.sh [WHEEL]"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if (($#)); then
  wheel=$1
  [ -f "$wheel" ] || fail "no wheel at $wheel"
else
  wheel=$("$root/scripts/wheel.sh" --profile "${PROFILE:-dev}" --out "$tmp/wheels") ||
    fail "scripts/wheel.sh could not build the wheel (profile ${PROFILE:-dev})"
fi
name=$(basename "$wheel")
# A wheel's name is DIST-VERSION-PYTAG-ABITAG-PLATFORM.whl.
version=$(cut -d- -f2 <<<"$name")

python3 -m venv "$tmp/venv" ||
  fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
  "$wheel" || fail "pip could not install $name into a fresh venv"
bin=$tmp/venv/bin/cadence
[ -x "$bin" ] ||
  fail "$name put no executable cadence in the venv's bin/ (it has: $(ls "$tmp/venv/bin" | tr '\n' ' '))"

# As a user would run it: `cadence` found on PATH, from the venv.
export PATH="$tmp/venv/bin:$PATH"
[ "$(command -v cadence)" = "$bin" ] || fail "cadence on PATH is $(command -v cadence), not $bin"
got=$(cadence --version) || fail "cadence --version failed (exit $?)"
[ "$got" = "cadence $version" ] ||
  fail "cadence --version printed '$got', not 'cadence $version' (the wheel's version)"
report=$(timeout 120 cadence bench -n 2 -c 1 --max-tokens 3 --quiet 2>&1) ||
  fail "cadence bench -n 2 -c 1 --max-tokens 3 --quiet (built-in simulator) failed (exit $?):
$report"
grep -q '2 sent, 2 succeeded' <<<"$report" ||
  fail "cadence bench did not report 2 of 2 requests succeeded:
$report"
echo "wheel-check: ok: $name installs \`cadence\` into a fresh venv; \`cadence --version\` is $version and a 2-request bench against the built-in simulator succeeded"
