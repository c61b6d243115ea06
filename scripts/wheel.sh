#!/usr/bin/env bash
# The `cadence` binary as a Python wheel (maturin, `bindings = "bin"` in pyproject.toml),
# for `pipx install WHEEL` or `uv tool install WHEEL`, which put `cadence` on PATH.
#
#   scripts/wheel.sh                  # the release profile (thin LTO), as `cargo build --release`
#   scripts/wheel.sh --profile dev    # unoptimized: reuses a debug build's artifacts
#   scripts/wheel.sh --profile dist   # fat LTO, one codegen unit: the build for a published wheel
#   scripts/wheel.sh --out DIR        # where the wheel goes (default: target/wheels, or
#                                     # $CARGO_TARGET_DIR/wheels when that is set)
#
# PROFILE=dev and WHEEL_DIR=DIR do the same as the flags. Prints the wheel's path (the
# only line on stdout; maturin's output goes to stderr). Needs python3 with venv and the
# Rust toolchain: maturin, pinned, is installed from PyPI once into a venv of its own,
# ~/.cache/cadence-maturin (CADENCE_MATURIN_VENV=DIR for another), so later runs need
# no network. MATURIN=PATH uses another maturin instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
maturin_version=1.16.0

profile=${PROFILE:-release}
out=${WHEEL_DIR:-${CARGO_TARGET_DIR:-$root/target}/wheels}
while (($#)); do
  case $1 in
    --profile) profile=${2:?--profile needs dev, release or dist}; shift 2 ;;
    --profile=*) profile=${1#*=}; shift ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "wheel: unknown argument '$1' (see scripts/wheel.sh --help)" >&2; exit 2 ;;
  esac
done
case $profile in
  release) profile_args=(--release) ;;
  dev | dist) profile_args=(--profile "$profile") ;;
  *) echo "wheel: unknown profile '$profile' (dev, release or dist)" >&2; exit 2 ;;
esac

if [ -n "${MATURIN:-}" ]; then
  maturin=$MATURIN
else
  venv=${CADENCE_MATURIN_VENV:-$HOME/.cache/cadence-maturin}
  maturin=$venv/bin/maturin
  if ! [ -x "$maturin" ] || [ "$("$maturin" --version 2>/dev/null)" != "maturin $maturin_version" ]; then
    echo "wheel: installing maturin $maturin_version from PyPI into $venv" >&2
    if ! [ -x "$venv/bin/python" ]; then
      python3 -m venv "$venv" >&2 || {
        echo "wheel: python3 -m venv $venv failed (Debian: apt-get install python3-venv)" >&2
        exit 1
      }
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      "maturin==$maturin_version" >&2 || {
      echo "wheel: pip could not install maturin==$maturin_version into $venv" >&2
      exit 1
    }
  fi
fi

# Built into a directory of its own, then moved into place: the one wheel found there is
# this build's, whatever else $out holds.
mkdir -p "$out"
out=$(cd "$out" && pwd)
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
echo "wheel: maturin build ${profile_args[*]} (profile $profile) into $out" >&2
(cd "$root" && "$maturin" build --locked "${profile_args[@]}" --out "$staging") >&2 || {
  echo "wheel: maturin build failed (profile $profile)" >&2
  exit 1
}
wheels=("$staging"/*.whl)
if [ "${#wheels[@]}" -ne 1 ] || ! [ -f "${wheels[0]}" ]; then
  echo "wheel: expected one wheel from maturin in $staging, found: ${wheels[*]}" >&2
  exit 1
fi
mv -f "${wheels[0]}" "$out/"
echo "$out/$(basename "${wheels[0]}")"
