#!/usr/bin/env bash
# GPU machine: builds kvtile_ops (CMake, all cores) and the Python extension
# against it, runs the C test, the pytest suites and the tinylm end-to-end
# table. Logs and results go to $OUT (default ./out-python).
#   KVTILE_TINYLM=<model dir> scripts/gpu_python.sh
# STAGES (default "ops_build ext_build pytest e2e") picks the stages; *_LIMIT
# their time limits in seconds. Stages are timed; a failing stage does not stop
# the later ones (exit 1 at the end).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$root/out-python}
mkdir -p "$OUT"
cd "$root"
rc=0
STAGES=${STAGES:-ops_build ext_build pytest e2e}
stage() {  # stage <name> <seconds> <command...>
  local name=$1 limit=$2; shift 2
  [[ " $STAGES " == *" $name "* ]] || { echo "stage $name: skipped (STAGES)" | tee -a "$OUT/stages.txt"; return 0; }
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local s=$?
  echo "stage $name: exit $s, $((SECONDS - t0)) s" | tee -a "$OUT/stages.txt"
  [[ $s == 0 ]] || rc=1
  return $s
}
gen=Ninja; command -v ninja > /dev/null || gen="Unix Makefiles"
stage ops_build ${OPS_LIMIT:-150} bash -c "cmake -S . -B build/ops -G '$gen' -DCMAKE_BUILD_TYPE=Release -DKVTILE_REQUIRE_DEPS=OFF \
  -DKVTILE_BUILD_BENCH=OFF -DKVTILE_BUILD_TOOLS=OFF -DKVTILE_BUILD_EXAMPLES=OFF -DKVTILE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build/ops --target kvtile_ops kvtile_ops_c99_test -j $(nproc) && build/ops/ops/kvtile_ops_c99_test"
lib=$(ls build/ops/ops/libkvtile_ops.so 2> /dev/null)
stage ext_build ${EXT_LIMIT:-90} bash -c "cd python && KVTILE_OPS_LIB=$root/$lib MAX_JOBS=$(nproc) python3 setup.py build_ext --inplace"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
# -v: each test's name before it runs (a crash names its test).
stage pytest ${PYTEST_LIMIT:-240} python3 -m pytest -v --tb=short tests/python -p no:cacheprovider -rs
stage e2e ${E2E_LIMIT:-150} python3 examples/torch/tinylm_e2e.py --model "${KVTILE_TINYLM:-../shared/data/tinylm-model}" \
  --json "$OUT/e2e.json" --md "$OUT/e2e.md" ${E2E_ARGS:-}
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$OUT/pytest.log" | tail -60
cat "$OUT/e2e.md" 2> /dev/null
cat "$OUT/stages.txt"
exit $rc
