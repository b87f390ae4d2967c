#!/usr/bin/env bash
# CI (no GPU): builds the CPU-only kvtile Python package in place against
# Debian's python3-torch (1.13) and runs tests/python; the GPU tests skip with
# a message. Needs: python3-torch libtorch-dev python3-pytest python3-numpy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-/usr/bin/python3}
cd "$root/python"
mkdir -p "$root/build"
KVTILE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py build_ext --inplace > "$root/build/python-cpu-build.log" 2>&1 ||
  { tail -n 40 "$root/build/python-cpu-build.log"; exit 1; }
cd "$root"
"$py" -m pytest -q -rs -p no:cacheprovider tests/python
