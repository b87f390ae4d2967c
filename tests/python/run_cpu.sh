#!/usr/bin/env bash
# CI (no GPU): the CPU-only kvtile Python package against Debian's python3-torch
# (1.13), tested both ways a user gets it (the GPU tests skip with a message):
#   1. built in place (setup.py build_ext --inplace), pytest tests/python
#      (KVTILE_TEST_PACKAGE=inplace)
#   2. installed (docs/python.md): a venv with --system-site-packages (it
#      sees Debian's torch), `python -m pip install --no-build-isolation
#      ./python`, then pytest run from outside the source tree with
#      KVTILE_TEST_PACKAGE=installed: the installed package, never the
#      sources (the in-place build of step 1 is still there: it must not
#      shadow the installed one). pip compiles the extension again (about
#      1 min of one core), while step 1 builds and tests.
# Needs: python3-torch libtorch-dev python3-pytest python3-numpy python3-venv.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$root/build"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvtile-python.XXXXXX")
trap 'kill "${install:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# The venv and its install (pip compiles the extension again, in python/build/)
# run beside the in-place build (its objects in build/python-inplace-temp/) and
# its tests.
(
  "$py" -m venv --system-site-packages "$work/venv" &&
    KVTILE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} "$work/venv/bin/python" -m pip install --no-build-isolation --no-index \
      --disable-pip-version-check -q "$root/python"
) > "$root/build/python-cpu-install.log" 2>&1 &
install=$!

echo "=== python: in-place build ==="
cd "$root/python"
KVTILE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py build_ext --inplace --build-temp "$root/build/python-inplace-temp" \
  > "$root/build/python-cpu-build.log" 2>&1 ||
  { tail -n 40 "$root/build/python-cpu-build.log"; exit 1; }
cd "$root"
KVTILE_TEST_PACKAGE=inplace "$py" -m pytest -rs -p no:cacheprovider tests/python

echo "=== python: installed into a venv (--system-site-packages), tested from outside the source tree ==="
wait "$install" || { tail -n 40 "$root/build/python-cpu-install.log"; exit 1; }
cd "$work"
KVTILE_TEST_PACKAGE=installed "$work/venv/bin/python" -m pytest -rs -p no:cacheprovider "$root/tests/python" \
  | tee "$work/pytest.log"
grep -q "kvtile under test (installed): $work/venv/lib/" "$work/pytest.log" ||
  { echo "run_cpu.sh: pytest did not test the venv's kvtile" >&2; exit 1; }
