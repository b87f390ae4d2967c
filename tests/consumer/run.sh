#!/usr/bin/env bash
# Packaging proof: kvtile used three ways, each building and running quickstart.
#   0. cmake --install of a default configuration (tests and tools ON) that
#      was configured but never built: installs the headers and the package
#      files (the tool is optional in the install rules), nothing else needed
#   1. header-only install: a configuration with tests, examples, benches and
#      tools off, cmake --install into a temporary prefix, then
#      find_package(kvtile CONFIG)
#   2. add_subdirectory() of the source tree
#   3. a plain compiler call with only -std=c++17 -I include
# Usage: tests/consumer/run.sh            (KVTILE_QUICKSTART=file overrides the source)
# Exits non-zero on the first failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/tests/consumer"
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtile-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

quickstart=${KVTILE_QUICKSTART:-}
if [[ -z $quickstart ]]; then
  for cand in "$root/examples/quickstart.cpp" "$root/examples/quickstart/main.cpp"; do
    if [[ -f $cand ]]; then quickstart=$cand; break; fi
  done
fi
if [[ -z $quickstart ]]; then
  echo "consumer: WARNING: examples/quickstart.cpp not found; using a generated stand-in" >&2
  quickstart="$work/quickstart.cpp"
  printf '%s\n' '#include <kvtile/version.hpp>' '#include <cstdio>' \
    'int main() { std::printf("kvtile %d.%d.%d\n", kvtile::version_major, kvtile::version_minor, kvtile::version_patch); return 0; }' \
    >"$quickstart"
fi
echo "consumer: quickstart = $quickstart"

step() { echo; echo "=== consumer: $* ==="; }

step "install of a default configuration before any build"
cmake -S "$root" -B "$work/kvtile-default" "${gen[@]}" -DKVTILE_ENABLE_CUDA=OFF -DKVTILE_REQUIRE_DEPS=OFF >/dev/null
cmake --install "$work/kvtile-default" --prefix "$work/prefix-default" >/dev/null
[[ -f $work/prefix-default/include/kvtile/kvtile.hpp && -f $work/prefix-default/share/cmake/kvtile/kvtileConfig.cmake ]] ||
  { echo "consumer: the default configuration's install lacks the headers or the package files" >&2; exit 1; }

step "header-only install into a temporary prefix (tests and tools off)"
cmake -S "$root" -B "$work/kvtile-build" "${gen[@]}" \
  -DKVTILE_BUILD_TESTS=OFF -DKVTILE_BUILD_EXAMPLES=OFF -DKVTILE_BUILD_BENCH=OFF \
  -DKVTILE_BUILD_TOOLS=OFF -DKVTILE_ENABLE_CUDA=OFF >/dev/null
cmake --build "$work/kvtile-build"
cmake --install "$work/kvtile-build" --prefix "$work/prefix" >/dev/null
for f in include/kvtile/version.hpp share/cmake/kvtile/kvtileConfig.cmake \
         share/cmake/kvtile/kvtileConfigVersion.cmake share/cmake/kvtile/kvtileTargets.cmake; do
  [[ -f $work/prefix/$f ]] || { echo "consumer: missing installed file $f" >&2; exit 1; }
done
want=$(cd "$root/include" && find kvtile -name '*.hpp' -o -name '*.cuh' | sort)
have=$(cd "$work/prefix/include" && find kvtile -type f | sort)
if [[ $want != "$have" ]]; then
  echo "consumer: installed headers differ from include/kvtile:" >&2
  diff <(echo "$want") <(echo "$have") >&2 || true
  exit 1
fi
if grep -rqF "$root" "$work/prefix/share/cmake/kvtile"; then
  echo "consumer: the installed package refers to the source tree" >&2; exit 1
fi

step "find_package(kvtile CONFIG)"
cmake -S "$here/find_package" -B "$work/fp" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DKVTILE_QUICKSTART="$quickstart"
cmake --build "$work/fp"
"$work/fp/quickstart_consumer"

step "add_subdirectory(kvtile)"
cmake -S "$here/add_subdirectory" -B "$work/as" "${gen[@]}" \
  -DKVTILE_SOURCE_DIR="$root" -DKVTILE_QUICKSTART="$quickstart"
cmake --build "$work/as"
"$work/as/quickstart_consumer"

step "plain -std=c++17 -I include"
for cxx in g++ clang++; do
  command -v "$cxx" >/dev/null 2>&1 || continue
  "$cxx" -std=c++17 -I "$root/include" "$quickstart" -o "$work/quickstart-$cxx"
  "$work/quickstart-$cxx"
done

echo
echo "consumer: all packaging checks passed"
