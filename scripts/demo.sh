#!/usr/bin/env bash
# The README's demo command: installs what it needs on Debian 12, builds
# kvtile-eval (host only, Release) and runs it on its embedded LLM-like K/V:
# the table of every preset goes to stdout, the Pareto plot to kvtile-eval.png.
# Extra arguments are passed to kvtile-eval (e.g. --k my_k.npy --v my_v.npy).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev gnuplot-nox)
bash scripts/install-deps.sh "${packages[@]}"

cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVTILE_BUILD_TESTS=OFF -DKVTILE_BUILD_EXAMPLES=OFF -DKVTILE_BUILD_BENCH=OFF \
  -DKVTILE_BUILD_TOOLS=ON -DKVTILE_ENABLE_CUDA=OFF -DKVTILE_WERROR=OFF >/dev/null
cmake --build build/demo --target kvtile-eval
exec ./build/demo/tools/kvtile-eval "$@"
