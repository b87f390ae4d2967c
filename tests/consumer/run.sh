#!/usr/bin/env bash
# Packaging proof: kvtile used three ways, each building and running quickstart.
#   0. cmake --install of a default configuration (tests, tools and the C ABI
#      library ON; CUDA on when nvcc is found, as a user's first configure)
#      that was configured but never built: installs the headers and the
#      package files, nothing else needed; the same with CUDA off
#   1. header-only install: a configuration with tests, examples, benches and
#      tools off, cmake --install into a temporary prefix, then
#      find_package(kvtile CONFIG); with nvcc, also a CUDA consumer of the
#      installed .cuh headers
#   2. add_subdirectory() of the source tree
#   3. a plain compiler call with only -std=c++17 -I include
#   4. the C ABI library (install component "ops"): a CPU-only kvtile_ops built
#      here (its ctest, then cmake --install --component ops), and the CUDA one
#      of KVTILE_CONSUMER_OPS_BUILD (default build/default or build/nogpu,
#      the first whose libkvtile_ops is built: CI's earlier stage), each installed and used
#      through find_package(kvtile CONFIG COMPONENTS ops) by a C program,
#      without LIBRARY_PATH
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

nvcc=${CUDACXX:-}
if [[ -z $nvcc ]]; then nvcc=$(command -v nvcc || true); fi
if [[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
# The C ABI library and its consumers must link without the toolkit's stubs on
# the linker's search path (the CUDA layout of a plain install).
unset LIBRARY_PATH

for cuda in ON OFF; do
  if [[ $cuda == ON && -z $nvcc ]]; then
    echo "consumer: no nvcc: the install of a configuration with CUDA is not tested here" >&2
    continue
  fi
  step "install of a default configuration before any build (KVTILE_ENABLE_CUDA=$cuda)"
  d="$work/kvtile-default-$cuda"
  cuda_args=(-DKVTILE_ENABLE_CUDA=$cuda)
  if [[ $cuda == ON ]]; then cuda_args+=(-DCMAKE_CUDA_COMPILER="$nvcc"); fi
  cmake -S "$root" -B "$d" "${gen[@]}" "${cuda_args[@]}" -DKVTILE_REQUIRE_DEPS=OFF >"$d.log" ||
    { cat "$d.log" >&2; exit 1; }
  if [[ $cuda == ON ]] && ! grep -q "cuda=ON" "$d.log"; then
    echo "consumer: nvcc $nvcc was found but the configuration has no CUDA" >&2; cat "$d.log" >&2; exit 1
  fi
  cmake --install "$d" --prefix "$work/prefix-default-$cuda" >"$d.install.log" || { cat "$d.install.log" >&2; exit 1; }
  [[ -f $work/prefix-default-$cuda/include/kvtile/kvtile.hpp &&
     -f $work/prefix-default-$cuda/share/cmake/kvtile/kvtileConfig.cmake ]] ||
    { echo "consumer: the default configuration's install lacks the headers or the package files" >&2; exit 1; }
  [[ ! -e $work/prefix-default-$cuda/lib && ! -e $work/prefix-default-$cuda/share/cmake/kvtile/kvtileOpsTargets.cmake ]] ||
    { echo "consumer: the default (header-only) install installed the unbuilt C ABI library" >&2; exit 1; }
  grep -q "cmake --install .* --component ops" "$d.install.log" ||
    { echo "consumer: the header-only install does not say how to install kvtile_ops" >&2; exit 1; }
done

step "header-only install into a temporary prefix (tests and tools off)"
cmake -S "$root" -B "$work/kvtile-build" "${gen[@]}" \
  -DKVTILE_BUILD_TESTS=OFF -DKVTILE_BUILD_EXAMPLES=OFF -DKVTILE_BUILD_BENCH=OFF \
  -DKVTILE_BUILD_TOOLS=OFF -DKVTILE_BUILD_OPS=OFF -DKVTILE_ENABLE_CUDA=OFF >/dev/null
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

step "find_package(kvtile CONFIG)${nvcc:+, with a CUDA consumer}"
cmake -S "$here/find_package" -B "$work/fp" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DKVTILE_QUICKSTART="$quickstart" \
  ${nvcc:+-DKVTILE_CONSUMER_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"}
cmake --build "$work/fp"
"$work/fp/quickstart_consumer"
if [[ -n $nvcc ]]; then "$work/fp/cuda_consumer"; fi

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

# An installed kvtile_ops (component "ops") used from C through find_package.
ops_consumer() {  # <build tree with kvtile_ops built> <name>
  local build=$1 name=$2
  cmake --install "$build" --prefix "$work/prefix-$name" >/dev/null
  cmake --install "$build" --prefix "$work/prefix-$name" --component ops >/dev/null
  cmake -S "$here/ops" -B "$work/ops-consumer-$name" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix-$name"
  cmake --build "$work/ops-consumer-$name"
  "$work/ops-consumer-$name/ops_consumer"
}

step "CPU-only kvtile_ops: build, ctest, install (component ops), find_package(kvtile COMPONENTS ops)"
cmake -S "$root" -B "$work/ops-cpu" "${gen[@]}" -DKVTILE_ENABLE_CUDA=OFF -DKVTILE_BUILD_OPS=ON \
  -DKVTILE_BUILD_TESTS=ON -DKVTILE_BUILD_EXAMPLES=OFF -DKVTILE_BUILD_BENCH=OFF -DKVTILE_BUILD_TOOLS=OFF \
  -DKVTILE_REQUIRE_DEPS=OFF -DKVTILE_WERROR=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/ops-cpu" --target kvtile_ops kvtile_ops_cpu_only_test
(cd "$work/ops-cpu" && ctest --output-on-failure -R '^ops/')
ops_consumer "$work/ops-cpu" cpu

ops_build=${KVTILE_CONSUMER_OPS_BUILD:-}
for b in default nogpu; do
  if [[ -z $ops_build && -n $nvcc ]] && compgen -G "$root/build/$b/ops/libkvtile_ops.so*" >/dev/null; then
    ops_build=$root/build/$b
  fi
done
if [[ -n $ops_build ]]; then
  step "kvtile_ops of $ops_build: install (component ops), find_package(kvtile COMPONENTS ops)"
  ops_consumer "$ops_build" built
else
  echo "consumer: no built CUDA kvtile_ops (build/default, build/nogpu or KVTILE_CONSUMER_OPS_BUILD): its install is not tested here" >&2
fi

echo
echo "consumer: all packaging checks passed"
