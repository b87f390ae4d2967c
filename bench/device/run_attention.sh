#!/usr/bin/env bash
# bench/device/run_attention.sh: build (binaries already in build_attn/ are
# reused, e.g. built on a CPU machine and carried over), test, sanitize and
# benchmark the decode-attention kernels on the GPU machine; logs go to $OUT
# (or ./attn_out). Order: API test + example, benchmarks (alone on the GPU),
# PyTorch SDPA, then the accuracy sweeps and compute-sanitizer memcheck +
# racecheck (small case) concurrently (correctness only, no timing).
#   bash bench/device/run_attention.sh            # ITERS=50 by default (median of >= 50)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-attn_out}
ITERS=${ITERS:-50}
mkdir -p "$OUT" build_attn
NVCC=${NVCC:-nvcc}
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I include -I .deps"
T0=$(date +%s)
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
build() {  # name source
  if [ ! -x "build_attn/$1" ]; then
    echo "== build $1"
    $NVCC $FLAGS "$2" -o "build_attn/$1" > "build_attn/$1.buildlog" 2>&1 || { cat "build_attn/$1.buildlog"; return 1; }
  fi
}
SWEEPS="attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
pids=()
for t in $SWEEPS; do build $t tests/device/$t.cu & pids+=($!); done
build attention tests/device/attention.cu & a1=$!
build bench_attention bench/device/attention.cu & a2=$!
build paged_decode examples/paged_decode/main.cu & a3=$!
wait $a1 $a2 $a3
rc=0
run_test() {
  echo "== test $1"
  ./build_attn/$1 2>&1 | tee -a "$OUT/tests.log"; local r=${PIPESTATUS[0]}
  echo "exit $r" | tee -a "$OUT/tests.log"; [ "$r" = 0 ] || rc=1
}
stamp start
run_test attention
echo "== example"; ./build_attn/paged_decode 2>&1 | tee "$OUT/example.log" || rc=1
stamp "== bench"
./build_attn/bench_attention --json "$OUT/attention.json" --iters "$ITERS" 2>&1 | tee "$OUT/bench.log"
stamp "== sdpa"
PYTHONUNBUFFERED=1 timeout 90 python3 bench/device/sdpa_bench.py --json "$OUT/sdpa.json" --iters "$ITERS" 2>&1 | tee "$OUT/sdpa.log"
stamp "== sweeps + compute-sanitizer (concurrent)"
for p in "${pids[@]}"; do wait "$p"; done
spids=()
for t in $SWEEPS; do (./build_attn/$t > "$OUT/sweep_$t.log" 2>&1; echo "exit $?" >> "$OUT/sweep_$t.log") & spids+=($!); done
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    (timeout 100 compute-sanitizer --tool $tool --error-exitcode 3 ./build_attn/attention --small > "$OUT/sanitizer_$tool.log" 2>&1
     echo "exit $?" >> "$OUT/sanitizer_$tool.log") & spids+=($!)
  done
fi
for p in "${spids[@]}"; do wait "$p"; done
for t in $SWEEPS; do
  echo "== test $t" | tee -a "$OUT/tests.log"; cat "$OUT/sweep_$t.log" >> "$OUT/tests.log"
  tail -n 3 "$OUT/sweep_$t.log"; grep -q "^exit 0$" "$OUT/sweep_$t.log" || rc=1
done
for tool in memcheck racecheck; do echo "== compute-sanitizer $tool (attention --small)"; tail -n 4 "$OUT/sanitizer_$tool.log" 2>/dev/null; done
grep -hE "passed|max relative|rel err vs unquantized|FAILED" "$OUT/tests.log" | tail -n 60 > "$OUT/tests_summary.log"
# Optional: compile-time variants of the benchmark (build_attn/bench_attention_<variant>, built with
# -DKVTILE_ATTENTION_QK_UNROLL=... or -DKVTILE_ATTENTION_PAIR=0), for comparison in the same run.
for v in build_attn/bench_attention_*; do
  [ -x "$v" ] || continue
  n=${v#build_attn/bench_attention_}
  stamp "== bench variant $n"
  "$v" --json "$OUT/variant_$n.json" --iters "$ITERS" > "$OUT/variant_$n.log" 2>&1
  grep -E "^(fp16_baseline|k4v2_g128 |k4v4_g128 |k2v2_g128 )" "$OUT/variant_$n.log" | tail -n 24
done
# Optional analysis (PROFILE=1): SASS opcode histogram of the k4v2_g128 fp8 D128 kernel and one
# Nsight Compute profile of it at a large-batch shape.
if [ "${PROFILE:-0}" = 1 ]; then
  K='quant_decode_kernelINS_11tile_configILi128ELi128ELi4ELi2EEENS_10fp8_scalesENS_6half_tELi8ELi2EEE'
  if command -v cuobjdump >/dev/null; then
    stamp "== sass"
    cuobjdump -sass build_attn/bench_attention 2>/dev/null | awk -v k="$K" '/Function :/ {on = index($0, k) > 0} on' > "$OUT/k4v2_d128.sass"
    wc -l "$OUT/k4v2_d128.sass"
    grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+' "$OUT/k4v2_d128.sass" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30
  fi
  if command -v ncu >/dev/null; then
    stamp "== ncu"
    timeout 90 ncu --kernel-name "regex:$K" --launch-skip 170 --launch-count 1 --section SpeedOfLight \
      --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy \
      --section MemoryWorkloadAnalysis ./build_attn/bench_attention --iters 50 > "$OUT/ncu.txt" 2>&1
    grep -vE "^(fp16_baseline|k[0-9]v|==PROF==)" "$OUT/ncu.txt" | tail -n 120
  fi
fi
stamp "done rc=$rc"
exit $rc
