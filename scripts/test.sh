#!/usr/bin/env bash
# The README's test command (CI runs exactly this, from .ci/run): installs the
# build dependencies on Debian 12, then configures, builds everything (CUDA
# targets compile only, when nvcc is present) and runs the test suite with
# `cmake --workflow --preset default`, or `--preset nogpu` where no GPU is
# visible (nvidia-smi): there the device tests, benchmarks and tools, which
# cannot run, compile to compute_90a PTX without ptxas (CMakePresets.json).
# Device tests print "SKIPPED: no CUDA device" and count as skipped without a GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake ninja-build g++ clang doctest-dev libeigen3-dev libcli11-dev
          nlohmann-json3-dev libbenchmark-dev gnuplot-nox python3)
bash scripts/install-deps.sh "${packages[@]}"

# nvcc is usually not on PATH; CMake reads CUDACXX. Without nvcc the CUDA
# targets are left out at configure time.
if [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
preset=default
if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  preset=nogpu
  echo "scripts/test.sh: no GPU visible: preset nogpu (tests, benchmarks, tools as compute_90a PTX)"
fi
cmake --workflow --preset "$preset"
