#!/usr/bin/env bash
# tools/kvtile-eval/cuda/run_gpu_check.sh: builds kvtile-eval with CUDA (plain
# nvcc/g++, no CMake) and checks `--device cuda` against the host codec with
# `--compare-devices` (records and decoded K/V of every (tile, KV
# head) must be bit-identical) on the embedded generator (D = 128, 64, 256)
# and on tests/data/kvtile-eval/*.npy; then times --device cpu vs cuda.
#
#   tools/kvtile-eval/cuda/run_gpu_check.sh              # build + checks
#   tools/kvtile-eval/cuda/run_gpu_check.sh --build-only # compile only (no GPU needed)
#   tools/kvtile-eval/cuda/run_gpu_check.sh --no-build   # checks with the binary already built
#
# Logs and the summary go to ${OUT:-/tmp}/kvtile-eval-gpu/. Header-only deps
# (CLI11, nlohmann_json) come from <repo>/.deps/include (cmake/stage-deps.sh
# fills it; carry .deps to a machine without the Debian packages) or
# /usr/include. Environment: NVCC (nvcc), CXX (g++), CUDA_ARCH (90a),
# BUILD (<repo>/build/kvtile-eval-gpu), JOBS (parallel compiles, nproc).
# Exit status: 0 all checks passed, 1 a check failed, 2 build failed, 3 no usable GPU.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null || NVCC=/usr/local/cuda/bin/nvcc
CXX=${CXX:-g++}
ARCH=${CUDA_ARCH:-90a}
BUILD=${BUILD:-$root/build/kvtile-eval-gpu}
LOG=${OUT:-/tmp}/kvtile-eval-gpu
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$BUILD" "$LOG"

deps=""
for d in "$root/.deps/include" /usr/include; do
  if [[ -f $d/CLI/CLI.hpp && -f $d/nlohmann/json.hpp ]]; then deps=$d; break; fi
done
if [[ -z $deps ]]; then
  echo "run_gpu_check: CLI11 / nlohmann_json headers not found; run cmake/stage-deps.sh on a machine that has them" \
       "and carry .deps" >&2
  exit 2
fi

# ---- build (the .cu and .cpp files in parallel: one TU per head_dim each); --no-build reuses $BUILD/kvtile-eval
if [[ ${1:-} == --no-build && -x $BUILD/kvtile-eval ]]; then
  echo "run_gpu_check: using $BUILD/kvtile-eval (--no-build)"
else
defs=(-DKVTILE_EVAL_HAVE_CUDA=1)
nvflags=(-std=c++17 -O2 --expt-relaxed-constexpr "-gencode=arch=compute_${ARCH},code=sm_${ARCH}" -I include "${defs[@]}")
cxxflags=(-std=c++17 -O2 -I include -isystem "$deps" "${defs[@]}")
echo "run_gpu_check: building into $BUILD (nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_${ARCH}, deps $deps, $JOBS jobs)"
t0=$(date +%s)
# The GPU codec, the library kvtile_eval_core's sources (src/*.cpp but the
# no-CUDA stand-in src/device_codec_none.cpp) and main.cpp (tools/CMakeLists.txt).
srcs=(tools/kvtile-eval/cuda/*.cu)
for s in tools/kvtile-eval/src/*.cpp; do [[ $s == */device_codec_none.cpp ]] || srcs+=("$s"); done
fail=0
compile() {  # compile <src> <obj>
  local s=$1 o=$2 t=$(date +%s)
  if [[ $s == *.cu ]]; then "$NVCC" "${nvflags[@]}" -c "$s" -o "$o"; else "$CXX" "${cxxflags[@]}" -c "$s" -o "$o"; fi
  local rc=$?
  echo "  $s: $(( $(date +%s) - t )) s (rc $rc)"
  return $rc
}
objs=()
running=0
for s in "${srcs[@]}" tools/kvtile-eval/main.cpp; do
  o="$BUILD/$(basename "${s%.*}").o"
  objs+=("$o")
  compile "$s" "$o" > "$LOG/build-$(basename "$s").log" 2>&1 &
  if (( ++running >= JOBS )); then wait -n || fail=1; running=$((running - 1)); fi
done
while (( running > 0 )); do wait -n || fail=1; running=$((running - 1)); done
cat "$LOG"/build-*.log
if (( fail )); then echo "run_gpu_check: BUILD FAILED (logs in $LOG/build-*.log)" >&2; exit 2; fi
"$NVCC" -o "$BUILD/kvtile-eval" "${objs[@]}" -lpthread || { echo "run_gpu_check: LINK FAILED" >&2; exit 2; }
echo "run_gpu_check: built $BUILD/kvtile-eval in $(( $(date +%s) - t0 )) s"
fi
[[ ${1:-} == --build-only ]] && exit 0

# ---- checks
eval_bin="$BUILD/kvtile-eval"
if ! msg=$("$eval_bin" --device cuda --gen-tokens 128 --gen-kv-heads 1 --gen-q-heads 1 -m k4v2_g128+fp8 --no-table \
             --quiet 2>&1); then
  echo "run_gpu_check: --device cuda is not usable here: $msg" | tee "$LOG/summary.txt" >&2
  exit 3
fi
status=0
summary="$LOG/summary.txt"
: > "$summary"
check() {  # check <name> <args...>: --device cuda --compare-devices, must print "device vs host: N tiles, 0 mismatches"
  local name=$1; shift
  local t=$(date +%s)
  "$eval_bin" --device cuda --compare-devices --no-progress --json "$LOG/$name.json" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local line
  line=$(grep -h "^device vs host:" "$LOG/$name.log" || true)
  printf '%-22s rc %d  %3d s  %s\n' "$name" "$rc" "$(( $(date +%s) - t ))" "${line:-$(tail -n 1 "$LOG/$name.log")}" | tee -a "$summary"
  if (( rc != 0 )) || [[ -z $line ]]; then status=1; fi
}
check gen-d128 --gen-tokens 4096 --gen-layers 2
check gen-d64 --gen-tokens 2048 --gen-head-dim 64 --gen-kv-heads 4 --gen-q-heads 16
check gen-d256 --gen-tokens 2048 --gen-head-dim 256 --gen-kv-heads 4 --gen-q-heads 8
check gen-d128-tail --gen-tokens 1000 --gen-kv-heads 3 --gen-q-heads 6   # partial tiles, odd head count
d=tests/data/kvtile-eval
check tinylm-npy -k $d/tinylm_w0_l0_256_k.npy -v $d/tinylm_w0_l0_256_v.npy -q $d/tinylm_w0_l0_256_q.npy

# ---- speed: the embedded default (8192 tokens x 8 KV heads x D=128), host vs GPU codec
for dev in cpu cuda; do
  t=$(date +%s)
  "$eval_bin" --device $dev --no-progress --json "$LOG/default-$dev.json" > "$LOG/default-$dev.log" 2> "$LOG/default-$dev.err"
  rc=$?
  printf '%-22s rc %d  %3d s  (%s)\n' "default-$dev" "$rc" "$(( $(date +%s) - t ))" \
    "$(grep -h -m1 'threads,' "$LOG/default-$dev.log" | sed 's/^ *//')" | tee -a "$summary"
  (( rc == 0 )) || status=1
done
# the same table from both devices (the metrics are computed from bit-identical tensors)
if cmp -s <(sed -n '/^method/,$p' "$LOG/default-cpu.log") <(sed -n '/^method/,$p' "$LOG/default-cuda.log"); then
  echo "default tables (cpu vs cuda): identical" | tee -a "$summary"
else
  echo "default tables (cpu vs cuda): DIFFER (see $LOG/default-*.log)" | tee -a "$summary"
  status=1
fi
echo "run_gpu_check: $([[ $status == 0 ]] && echo PASS || echo FAIL); logs in $LOG"
exit $status
