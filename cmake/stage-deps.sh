#!/usr/bin/env bash
# Copies the header-only test/tool dependencies (doctest, Eigen, CLI11,
# nlohmann_json) from this machine's Debian packages into <repo>/.deps, laid
# out as an install prefix, so a machine without them (the GPU machine) can
# build with them: the top-level CMakeLists.txt adds .deps to
# CMAKE_PREFIX_PATH when it exists. .deps is git-ignored: pass it as a
# carried path. A bare .deps/doctest/doctest.h (no package files) also works
# for doctest alone. Google Benchmark is compiled code and is not staged; use the
# `gpu` preset there (KVTILE_REQUIRE_DEPS=OFF skips host benchmarks).
#   cmake/stage-deps.sh [prefix=/usr]
set -euo pipefail
src=${1:-/usr}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dst="$root/.deps"
copy() {  # copy <path relative to prefix>; replaces only that path in .deps
  [[ -e $src/$1 ]] || { echo "stage-deps: $src/$1 not found" >&2; exit 1; }
  rm -rf "${dst:?}/$1"
  mkdir -p "$dst/$(dirname "$1")"
  cp -a "$src/$1" "$dst/$1"
}
copy include/doctest;  copy lib/cmake/doctest
copy include/eigen3;   copy share/eigen3/cmake
copy include/CLI;      copy share/cmake/CLI11
copy include/nlohmann; copy share/cmake/nlohmann_json
# Debian's doctest package hard-codes its prefix; make it relative like the others.
sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$dst/lib/cmake/doctest/doctestTargets.cmake"
du -sh "$dst"
