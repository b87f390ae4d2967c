#!/usr/bin/env bash
# bench/device/run_attention.sh: build, test, benchmark and sanitize the decode
# attention on the GPU machine in one call; logs and results go to $OUT (or
# ./attn_out). Order: build everything in parallel; the API + plan test and the
# example; the kvtile benchmark and PyTorch SDPA (alone on the GPU); then the
# accuracy sweeps and compute-sanitizer (memcheck, racecheck, synccheck,
# initcheck on the --small runs) concurrently (correctness only, no timing);
# last the report (bench/results-style JSON + Markdown under $OUT/report.*).
#   bash bench/device/run_attention.sh     # ITERS=50 (median of >= 50); STAGES="test bench sdpa sweep sanitize"
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-attn_out}
ITERS=${ITERS:-50}
STAGES=${STAGES:-test bench sdpa sweep sanitize}
mkdir -p "$OUT" build_attn
NVCC=${NVCC:-nvcc}
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I include -I .deps"
T0=$(date +%s)
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
DEADLINE=${DEADLINE:-600}  # seconds: a stage that would start later is skipped
want() { [[ " $STAGES " == *" $1 "* ]] && { (( $(date +%s) - T0 < DEADLINE )) || { stamp "SKIP $1 (deadline)"; return 1; }; }; }
build() {  # name source
  if [ ! -x "build_attn/$1" ]; then
    $NVCC $FLAGS "$2" -o "build_attn/$1" > "build_attn/$1.buildlog" 2>&1 || { echo "BUILD FAILED $1"; cat "build_attn/$1.buildlog"; return 1; }
  fi
}
SWEEPS="attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
stamp "build"
pids=()
for t in $SWEEPS; do build $t tests/device/$t.cu & pids+=($!); done
build attention tests/device/attention.cu & a1=$!
build bench_attention bench/device/attention.cu & a2=$!
build paged_decode examples/paged_decode/main.cu & a3=$!
wait $a1 $a2 $a3
stamp "built"
rc=0
run_test() {
  echo "== test $1 ${2:-}"
  ./build_attn/$1 ${2:-} > "$OUT/test_$1.log" 2>&1; local r=$?
  echo "exit $r" >> "$OUT/test_$1.log"; tail -n 4 "$OUT/test_$1.log"; grep FAILED "$OUT/test_$1.log" | head -20
  [ "$r" = 0 ] || rc=1
}
if want test; then
  run_test attention
  echo "== example"; ./build_attn/paged_decode > "$OUT/example.log" 2>&1; echo "exit $?" >> "$OUT/example.log"; tail -n 3 "$OUT/example.log"
fi
if want bench; then
  stamp "== bench"
  ./build_attn/bench_attention --json "$OUT/attention.json" --iters "$ITERS" > "$OUT/bench.log" 2>&1 || rc=1
  sed -n '/^summary/,$p' "$OUT/bench.log"
fi
if want sdpa; then
  stamp "== sdpa"
  PYTHONUNBUFFERED=1 timeout 100 python3 bench/device/sdpa_bench.py --json "$OUT/sdpa.json" --iters "$ITERS" > "$OUT/sdpa.log" 2>&1
  tail -n 28 "$OUT/sdpa.log"
fi
stamp "== sweeps + compute-sanitizer (concurrent)"
for p in "${pids[@]}"; do wait "$p"; done
spids=()
if want sweep; then
  for t in $SWEEPS; do (./build_attn/$t > "$OUT/sweep_$t.log" 2>&1; echo "exit $?" >> "$OUT/sweep_$t.log") & spids+=($!); done
fi
if want sanitize && command -v compute-sanitizer >/dev/null; then
  for b in attention; do
    for tool in memcheck racecheck synccheck initcheck; do
      (timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 3 ./build_attn/$b --small > "$OUT/sanitizer_${b}_$tool.log" 2>&1
       echo "exit $?" >> "$OUT/sanitizer_${b}_$tool.log") & spids+=($!)
    done
  done
fi
for p in "${spids[@]}"; do wait "$p"; done
for t in $SWEEPS; do
  [ -f "$OUT/sweep_$t.log" ] || continue
  echo "== $t: $(grep -E 'passed' "$OUT/sweep_$t.log" | tail -1) $(tail -n 1 "$OUT/sweep_$t.log")"
  grep -q "^exit 0$" "$OUT/sweep_$t.log" || { rc=1; grep FAILED "$OUT/sweep_$t.log" | head; }
done
for f in "$OUT"/sanitizer_*.log; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f" .log): $(grep -E 'ERROR SUMMARY|passed' "$f" | tr '\n' ' ') $(tail -n 1 "$f")"
done
if [ -f "$OUT/attention.json" ]; then
  python3 bench/device/attention_report.py --attention "$OUT/attention.json" \
    $( [ -f "$OUT/sdpa.json" ] && echo --sdpa "$OUT/sdpa.json" ) --date "$(date -u +%F)" \
    --gpu "$(head -2 "$OUT/gpu.txt" | tail -1 | cut -d, -f1)" --command "bash bench/device/run_attention.sh" \
    --out "$OUT/report" && cat "$OUT/report.md"
fi
stamp "done rc=$rc"
exit $rc
