#!/usr/bin/env bash
# scripts/gpu_run.sh: one GPU run of kvtile, its logs and results packed into
# one tarball. Everything it builds and runs is a CMake preset (CMakePresets.json)
# or the Python package's own build; docs/gpu.md says which preset runs what.
#
#   scripts/gpu_run.sh [-o OUT] [-b PRESET]... [-t PRESET]... [-p] [-- CTEST-ARGS...]
#
#   -b PRESET  configure and build: cmake --preset PRESET && cmake --build --preset PRESET
#              (leave out to run binaries built elsewhere and carried)
#   -t PRESET  ctest --preset PRESET [CTEST-ARGS] (e.g. gpu, gpu-sanitize, gpu-bench,
#              gpu-jit80); output in OUT/ctest-PRESET.log, OUT/ctest-PRESET.xml (JUnit)
#   -p         the Python package: pip install ./python from a fresh copy of the
#              tree (git ls-files, or everything but build outputs), then pytest
#              tests/python against the installed package (KVTILE_TEST_PACKAGE=installed;
#              KVTILE_CUDA_ARCHS, MAX_JOBS, KVTILE_TINYLM are passed through); with
#              KVTILE_TINYLM (a model directory) also the end-to-end examples
#              examples/torch/tinylm_e2e.py and spec_bench.py, their tables in
#              OUT/results/python/{e2e,spec_bench}.{json,md}
#   -o OUT     where logs go (default build/gpu-run)
#
# Steps run in this order: every -b, every -t, -p. At the end OUT/gpu-run.tar.gz
# holds OUT's logs and every build directory's benchmark results (KVTILE_BENCH_OUT
# of build/*/CMakeCache.txt, copied to OUT/results/<build dir>/). Exit status: 0
# when every step passed.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
root=$PWD
out=build/gpu-run
builds=() tests=() python=0
usage() { sed -n '2,21p' "$0" >&2; exit 2; }
while getopts "o:b:t:ph" opt; do
  case $opt in
    o) out=$OPTARG ;;
    b) builds+=("$OPTARG") ;;
    t) tests+=("$OPTARG") ;;
    p) python=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
(( ${#builds[@]} + ${#tests[@]} + python > 0 )) || usage
mkdir -p "$out" && out=$(cd "$out" && pwd)
summary=$out/summary.txt
: > "$summary"
rc=0
say() { echo "[$(date -u +%T)] $*" | tee -a "$summary"; }
step() {  # step <name> <log> <command...>: runs it, logs, records the exit status
  local name=$1 log=$2; shift 2
  local t=$SECONDS
  "$@" > "$log" 2>&1
  local r=$?
  say "$name: exit $r ($((SECONDS - t)) s)"
  (( r == 0 )) || rc=1
  return $r
}

command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1

for p in "${builds[@]}"; do
  step "configure $p" "$out/configure-$p.log" cmake --preset "$p" &&
    step "build $p" "$out/build-$p.log" cmake --build --preset "$p"
done

for p in "${tests[@]}"; do
  step "ctest $p" "$out/ctest-$p.stdout" \
    ctest --preset "$p" --output-log "$out/ctest-$p.log" --output-junit "$out/ctest-$p.xml" "$@"
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run" "$out/ctest-$p.stdout" | tee -a "$summary"
done

if (( python )); then
  fresh=$(mktemp -d)
  if git ls-files > /dev/null 2>&1; then
    git ls-files -z | xargs -0 cp --parents -t "$fresh"
  else
    tar --exclude=./build --exclude='./build_*' --exclude=./.deps --exclude='./python/kvtile/*.so' -cf - . |
      tar -xf - -C "$fresh"
  fi
  (cd "$fresh" &&
    step "pip install ./python" "$out/pip.log" python3 -m pip install --no-build-isolation ./python &&
    step "pytest tests/python" "$out/pytest.log" \
      env KVTILE_TEST_PACKAGE=installed python3 -m pytest -rs -q -p no:cacheprovider tests/python) || rc=1
  tail -n 2 "$out/pytest.log" 2> /dev/null | tee -a "$summary"
  rm -rf "$fresh"
  if [[ -n ${KVTILE_TINYLM:-} ]]; then
    mkdir -p "$out/results/python"
    for ex in tinylm_e2e:e2e spec_bench:spec_bench; do
      step "examples/torch/${ex%%:*}.py" "$out/${ex#*:}.log" python3 "examples/torch/${ex%%:*}.py" \
        --model "$KVTILE_TINYLM" --json "$out/results/python/${ex#*:}.json" --md "$out/results/python/${ex#*:}.md"
    done
  fi
fi

# the benchmark results of every configured build directory, as OUT/results/<build dir>/
for cache in "$root"/build/*/CMakeCache.txt; do
  [[ -f $cache ]] || continue
  dir=$(sed -n 's/^KVTILE_BENCH_OUT:[A-Z]*=//p' "$cache")
  if [[ -n $dir && -d $dir && -n $(ls -A "$dir") ]]; then
    mkdir -p "$out/results/$(basename "$(dirname "$cache")")"
    cp -r "$dir"/. "$out/results/$(basename "$(dirname "$cache")")/"
  fi
done
say "done rc=$rc"
tar -czf "$out.tar.gz" -C "$out" --exclude=./gpu-run.tar.gz . && mv "$out.tar.gz" "$out/gpu-run.tar.gz"
exit $rc
