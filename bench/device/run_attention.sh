#!/usr/bin/env bash
# bench/device/run_attention.sh: build (binaries already in build_attn/ are
# reused), test, sanitize and benchmark the decode-attention kernels on the GPU
# machine; logs go to $OUT (or ./attn_out). The accuracy sweeps build in the
# background while the benchmarks run.
#   bash bench/device/run_attention.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-attn_out}
mkdir -p "$OUT" build_attn
NVCC=${NVCC:-nvcc}
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I include -I .deps"
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
run_test attention
echo "== example"; ./build_attn/paged_decode 2>&1 | tee "$OUT/example.log" || rc=1
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool (attention --small)"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 ./build_attn/attention --small > "$OUT/sanitizer_$tool.log" 2>&1
    echo "exit $?" >> "$OUT/sanitizer_$tool.log"; tail -n 4 "$OUT/sanitizer_$tool.log"
  done
fi
echo "== bench"
./build_attn/bench_attention --json "$OUT/attention.json" --iters 50 2>&1 | tee "$OUT/bench.log"
echo "== sdpa"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/device/sdpa_bench.py --json "$OUT/sdpa.json" --iters 50 2>&1 | tee "$OUT/sdpa.log"
for p in "${pids[@]}"; do wait "$p"; done
for t in $SWEEPS; do run_test $t; done
grep -hE "passed|max relative|rel err vs unquantized|FAILED" "$OUT/tests.log" | tail -n 60 > "$OUT/tests_summary.log"
exit $rc
