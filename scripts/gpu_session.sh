#!/usr/bin/env bash
# scripts/gpu_session.sh: everything kvtile runs on the GPU machine, in one call.
#
#   STAGES="build test soak eval sanitize bench profile" scripts/gpu_session.sh
#
# Stages (default: all but profile, in this order):
#   build     every device binary in parallel (nvcc, sm_90a; unsupported_arch: sm_86 only): the GPU-codec tests
#             and benchmark (build/gpu-codec/), the attention tests, sweeps,
#             benchmark and example (build_attn/), the soak test and the numeric
#             test (build/gpu/), kvtile-eval with CUDA (build/kvtile-eval-gpu/).
#             Binaries already present and newer than every source are reused.
#   test      GPU-codec identity tests, paged cache, launch setup, multi-GPU and
#             sequence packing, unsupported_arch (an sm_86-only binary), ring_sync (the
#             16-row ring's stage synchronization alone), attention API + plan test,
#             example, the six attention accuracy sweeps, numeric test.
#   soak      the paged-cache soak test (full run).
#   eval      tools/kvtile-eval/cuda/run_gpu_check.sh --no-build.
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck, synccheck over
#             every device test (reduced sizes), concurrently (no timing here);
#             SAN_TOOLS picks the tools, SAN_TIMEOUT bounds each run (s).
#   bench     GPU-codec benchmark, attention benchmark, PyTorch SDPA (alone on
#             the GPU, before anything concurrent); the attention report
#             (bench/device/attention_report.py) as $OUT/attention_report.{json,md}.
#   profile   Nsight Compute on the prefill encode, decode-to-fp16 and the
#             decode attention rows named by PROFILE_ATTN ("<shape>:<kernel> ...",
#             bench_attention --shape/--kernel; default: k4v2_g128 at 16 x 64K,
#             ragged32 and 2 x 32K GQA 8, k4v2_g128_mq8), with executed
#             instructions per opcode.
#   jit80     the codec and paged device tests (block_codec_d*, paged_cache,
#             launch_setup, multi_gpu, unsupported_arch with -DKVTILE_TEST_PTX80:
#             paged launchers and decode attention succeed; the attention suite
#             from PTX: CMake presets gpu-jit80/86/89, docs/attention.md)
#             and the GPU-codec benchmark built as
#             compute_80 PTX only (-gencode=arch=compute_80,code=compute_80,
#             build/jit80/), run with CUDA_FORCE_PTX_JIT=1: the driver compiles
#             the sm_80 code path for this GPU, so the sm_80 forms of every
#             codec and paged kernel are tested here; the benchmark reports
#             their speed (JSON + Markdown under $OUT/jit80). JIT80_PREBUILT=DIR
#             takes the binaries from DIR instead (built elsewhere with the same
#             flags). Runs only when named in STAGES.
#   attnjit   the decode-attention suite (attention, attention_policies, the six
#             accuracy sweeps) from PTX only, for each architecture of JIT_ARCHS
#             (default "80 86 89"): binaries built with
#             -gencode=arch=compute_NN,code=compute_NN --compress-mode=none into
#             $ATTN_JIT_DIR/jitNN/ (default build/jit-attn; ATTN_JIT_PREBUILT=1 takes
#             them as they are, e.g. built on a CPU machine with STAGES=attnjit
#             ATTN_JIT_BUILD_ONLY=1 and carried; --compress-mode=none because
#             uncompressed PTX packs about 2x smaller with xz), all run at once with
#             CUDA_FORCE_PTX_JIT=1 (the driver compiles the PTX for this GPU; the
#             policy that the image's PTX version selects runs: decode_policy_sm80 for
#             all three on a 227 KB GPU), then compute-sanitizer (SAN_TOOLS, default
#             memcheck racecheck synccheck) on the --small runs of JIT_SAN ("NN:test",
#             default: every test of jit80, attention and attention_policies of the
#             others). JIT_BENCH=1: the attention benchmark's compute_80 PTX is
#             JIT-compiled meanwhile, into the cache that the bench stage's
#             JIT80_BENCH run then reads. Runs only when named.
#   python    a fresh copy of the tree (git ls-files when .git travels, else
#             everything but build outputs) in /tmp/kvtile-fresh: `python3 -m pip
#             install --no-build-isolation ./python` (KVTILE_CUDA_ARCHS, default
#             90a-real: this GPU only; MAX_JOBS 16), then `python3 -m pytest -rs
#             tests/python` against the installed package (KVTILE_TEST_PACKAGE=
#             installed, KVTILE_TINYLM=$TINYLM), then (SPEC_BENCH=1, alone on the
#             GPU) examples/torch/spec_bench.py -> $OUT/spec_bench.{json,md}.
#             Meanwhile (CTEST_TARGETS, default the paged-cache and soak device tests
#             and the C ABI's C99 test) a `cmake --preset gpu` build (sm_90a) and
#             ctest of those. Runs only when named.
# Prebuilt binaries: nvcc needs no GPU, so the build stage can run on a CPU
# machine (`STAGES=build FILTER=... scripts/gpu_session.sh`, then carry a
# tarball of build/gpu-codec build_attn build/gpu build/jit80); on the GPU
# machine, after unpacking, REUSE=1 takes every existing binary as up to date
# (a copy does not keep the modification times that the freshness check reads).
# Logs: $OUT/<stage>/... ; at the end everything is packed into
# $OUT/logs.tar.gz (the device tool returns at most 8 files) and
# $OUT/summary.txt. DEADLINE (seconds, default 560) skips stages that would
# start after it. FILTER (an extended regex, default: everything) limits every
# stage to the binaries whose path matches it (e.g. FILTER=attn for the
# attention kernels only); the eval and soak stages match "kvtile-eval" and
# "soak". Exit status: 0 when every stage run passed.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-session}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
STAGES=${STAGES:-build test soak eval sanitize bench}
DEADLINE=${DEADLINE:-560}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I include -I .deps"
SUMMARY=$OUT/summary.txt
T0=$SECONDS
rc=0
say() { echo "[$((SECONDS - T0))s] $*" | tee -a "$SUMMARY"; }
want() { [[ " $STAGES " == *" $1 "* ]] && { (( SECONDS - T0 < DEADLINE )) || { say "SKIP $1 (deadline)"; return 1; }; }; }
mkdir -p build/gpu-codec build_attn build/gpu

# ---------------------------------------------------------------- build
fresh() {  # fresh <binary> <source>: binary exists and is newer than the source and every header
  [ -x "$1" ] && [ "$1" -nt "$2" ] &&
    [ -z "$(find include tests/device bench/device examples -newer "$1" \( -name '*.cuh' -o -name '*.hpp' \) 2>/dev/null | head -1)" ]
}
sel() { [[ $1 =~ ${FILTER:-.} ]]; }
nv() {  # nv <binary> <source> [extra flags]
  local b=$1 s=$2; shift 2
  sel "$b" || return 0
  if [ -z "${REBUILD:-}" ] && { [ -n "${REUSE:-}" ] && [ -x "$b" ] || fresh "$b" "$s"; }; then echo "up to date: $b"; return 0; fi
  local t=$SECONDS
  $NVCC "$@" $FLAGS -o "$b" "$s" > "$b.buildlog" 2>&1; local r=$?  # extra flags first: a variant -I wins
  echo "built $b in $((SECONDS - t)) s (rc $r)"; [ $r = 0 ] || cat "$b.buildlog"
  return $r
}
# nv_variants "<name:-DFLAG=1,-Ipath ...>" <binary prefix> <source>: one build of
# <source> per variant, <prefix>_<name>, in the background (pids collected)
nv_variants() {
  local v
  for v in $1; do
    nv "$2_${v%%:*}" "$3" $(echo "${v#*:}" | tr ',' ' ') > "$OUT/build/$(basename "$2")_${v%%:*}.log" 2>&1 & pids+=($!)
  done
}
# the device tests of build/gpu-codec/ (built and run by the build and test stages)
CODEC_TESTS="block_codec_d64 block_codec_d128 block_codec_d256 paged_cache launch_setup multi_gpu ring_sync"
# jit80 binaries: compute_80 PTX only (see the jit80 stage)
JIT80_TESTS="block_codec_d64 block_codec_d128 block_codec_d256 paged_cache launch_setup multi_gpu"
JIT80_FLAGS=${FLAGS/-gencode=arch=compute_90a,code=sm_90a/-gencode=arch=compute_80,code=compute_80}
jit80_build() {  # in the background, pids appended to pids[]
  mkdir -p build/jit80 "$OUT/jit80"
  local n
  for n in $JIT80_TESTS; do
    FLAGS=$JIT80_FLAGS nv build/jit80/$n tests/device/$n.cu > "$OUT/jit80/build_$n.log" 2>&1 & pids+=($!)
  done
  FLAGS=$JIT80_FLAGS nv build/jit80/gpu_codec_bench bench/device/gpu_codec.cu > "$OUT/jit80/build_gpu_codec_bench.log" 2>&1 & pids+=($!)
  # paged launchers and decode attention succeed from compute_80 PTX
  FLAGS=$JIT80_FLAGS nv build/jit80/unsupported_arch tests/device/unsupported_arch.cu -DKVTILE_TEST_PTX80 \
    > "$OUT/jit80/build_unsupported_arch.log" 2>&1 & pids+=($!)
}
if want build; then
  say "build start ($($NVCC --version | tail -1))"
  mkdir -p "$OUT/build"
  pids=()
  for n in $CODEC_TESTS; do
    nv build/gpu-codec/$n tests/device/$n.cu > "$OUT/build/$n.log" 2>&1 & pids+=($!)
  done
  # sm_86 machine code only (no PTX, no sm_90a): the launchers must answer unsupported_arch on this GPU
  FLAGS=${FLAGS/-gencode=arch=compute_90a,code=sm_90a/-gencode=arch=compute_86,code=sm_86} \
    nv build/gpu-codec/unsupported_arch tests/device/unsupported_arch.cu > "$OUT/build/unsupported_arch.log" 2>&1 & pids+=($!)
  nv build/gpu-codec/gpu_codec_bench bench/device/gpu_codec.cu > "$OUT/build/gpu_codec_bench.log" 2>&1 & pids+=($!)
  # CODEC_VARIANTS="name:-DFLAG=1,...": the GPU-codec benchmark with other flags (run with CODEC_VARIANT_ARGS,
  # default --decode-only; --encode-only times the prefill rows)
  nv_variants "${CODEC_VARIANTS:-}" build/gpu-codec/gpu_codec_bench bench/device/gpu_codec.cu
  # CODEC_TEST_VARIANTS="name:-DFLAG=1,...": the paged-cache and D = 128 block-codec identity tests with other flags
  for n in paged_cache block_codec_d128; do
    nv_variants "${CODEC_TEST_VARIANTS:-}" build/gpu-codec/$n tests/device/$n.cu
  done
  for t in attention attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256 attention_policies; do
    nv build_attn/$t tests/device/$t.cu > "$OUT/build/$t.log" 2>&1 & pids+=($!)
  done
  nv build_attn/bench_attention bench/device/attention.cu > "$OUT/build/bench_attention.log" 2>&1 & pids+=($!)
  # ATTN_VARIANTS="name:-DFLAG=1,-DOTHER=2 ...": extra attention benchmarks, run after the main one
  nv_variants "${ATTN_VARIANTS:-}" build_attn/bench_attention bench/device/attention.cu
  # ATTN_TEST_VARIANTS="name:-DFLAG=1 ...": the attention API test built with other flags too
  nv_variants "${ATTN_TEST_VARIANTS:-}" build_attn/attention tests/device/attention.cu
  nv build_attn/paged_decode examples/paged_decode/main.cu > "$OUT/build/paged_decode.log" 2>&1 & pids+=($!)
  nv build/gpu/soak tests/device/soak.cu > "$OUT/build/soak.log" 2>&1 & pids+=($!)
  nv build/gpu/numeric tests/device/numeric.cu > "$OUT/build/numeric.log" 2>&1 & pids+=($!)
  nv build/gpu/speculative tests/device/speculative.cu > "$OUT/build/speculative.log" 2>&1 & pids+=($!)
  if sel abi; then  # tests/abi: two differently tuned builds of one TU linked into one executable
    ( mkdir -p build/gpu/abi &&
      $NVCC $FLAGS -DABI_VARIANT=a -c tests/abi/variant.cu -o build/gpu/abi/a.o &&
      $NVCC $FLAGS -DABI_VARIANT=b -c tests/abi/variant.cu -o build/gpu/abi/b.o &&
      $NVCC $FLAGS -o build/gpu/abi_static tests/abi/main.cpp build/gpu/abi/a.o build/gpu/abi/b.o &&
      echo "built build/gpu/abi_static" ) > "$OUT/build/abi.log" 2>&1 & pids+=($!)
  fi
  [[ " $STAGES " == *" jit80 "* && -z "${JIT80_PREBUILT:-}" ]] && jit80_build
  if sel kvtile-eval; then
    (JOBS=3 OUT=$OUT/build tools/kvtile-eval/cuda/run_gpu_check.sh --build-only) > "$OUT/build/kvtile-eval.log" 2>&1 & pids+=($!)
  fi
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$OUT"/build/*.log | grep -E "^built|FAILED|error" | tee -a "$SUMMARY"
  say "build done rc=$rc"
fi

run_logged() {  # run_logged <log> <cmd...>: appends "exit N" (skipped unless the binary matches FILTER)
  local log=$1; shift
  sel "$1" || { echo "skipped (FILTER)" > "$log"; echo "exit 0" >> "$log"; return 0; }
  timeout "${TEST_TIMEOUT:-300}" "$@" > "$log" 2>&1; local r=$?  # 124: TEST_TIMEOUT (s) passed
  echo "exit $r" >> "$log"
  return $r
}

# ---------------------------------------------------------------- bench (alone on the GPU)
if want bench; then
  say "bench"
  mkdir -p "$OUT/bench"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/bench/gpu.txt" 2>&1
  if sel build/gpu-codec/gpu_codec_bench; then
    build/gpu-codec/gpu_codec_bench --out "$OUT/bench" --iters ${BENCH_ITERS:-15} --command "scripts/gpu_session.sh (bench)" \
      > "$OUT/bench/gpu_codec.log" 2>&1 || rc=1
  fi
  grep -E "^(prefill|decode|copy|identity check)|append .* 64 |FAILED" "$OUT/bench/gpu_codec.log" | head -26 | tee -a "$SUMMARY"
  for v in ${CODEC_VARIANTS:-}; do
    n=${v%%:*}
    build/gpu-codec/gpu_codec_bench_$n ${CODEC_VARIANT_ARGS:---decode-only} --out "$OUT/bench" --stem "gpu_codec_$n" \
      --iters 15 --command "gpu_codec_bench_$n ${CODEC_VARIANT_ARGS:---decode-only} (${v#*:})" \
      > "$OUT/bench/gpu_codec_$n.log" 2>&1 || rc=1
    echo "codec variant $n (${v#*:}):" >> "$SUMMARY"
    grep -E "^(prefill|decode|copy|identity check)|FAILED" "$OUT/bench/gpu_codec_$n.log" >> "$SUMMARY"
  done
  if sel build_attn/bench_attention; then
    timeout "${BENCH_TIMEOUT:-300}" build_attn/bench_attention --policies --json "$OUT/bench/attention.json" --iters 50 > "$OUT/bench/attention.log" 2>&1 || rc=1
  fi
  sed -n '/^summary/,$p' "$OUT/bench/attention.log" | grep -E "^(fp16_baseline|k4v2_g128 |k4v2_g128_sm)" | head -80 | tee -a "$SUMMARY"
  # PREV_BENCH=<binary> (PREV_NAME=<revision>): another build's bench_attention, same call (the report's
  # "Architectures" section compares the Hopper policy with it row by row)
  if [ -n "${PREV_BENCH:-}" ]; then
    timeout "${BENCH_TIMEOUT:-300}" "$PREV_BENCH" --json "$OUT/bench/attention_previous.json" --iters 50 \
      > "$OUT/bench/attention_previous.log" 2>&1 || rc=1
  fi
  # JIT80_BENCH=<binary>: bench_attention built as compute_80 PTX only, run with CUDA_FORCE_PTX_JIT=1
  # (the sm80 policy from PTX; the attnjit stage with JIT_BENCH=1 fills the JIT cache beforehand)
  if [ -n "${JIT80_BENCH:-}" ]; then
    CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_PATH=/tmp/kvtile-jit-cache CUDA_CACHE_MAXSIZE=4294967296 \
      timeout "${BENCH_TIMEOUT:-300}" "$JIT80_BENCH" --json "$OUT/bench/attention_jit80.json" --iters 50 \
      > "$OUT/bench/attention_jit80.log" 2>&1 || rc=1
  fi
  for v in ${ATTN_VARIANTS:-}; do
    n=${v%%:*}
    build_attn/bench_attention_$n --quick --json "$OUT/bench/attention_$n.json" --iters 50 > "$OUT/bench/attention_$n.log" 2>&1 || rc=1
    echo "variant $n (${v#*:}):" >> "$SUMMARY"
    grep -E "^(fp16_baseline|k4v2_g128 )" "$OUT/bench/attention_$n.log" | head -14 >> "$SUMMARY"
  done
  if sel sdpa; then
    PYTHONUNBUFFERED=1 timeout 120 python3 bench/device/sdpa_bench.py --json "$OUT/bench/sdpa.json" --iters 50 \
      > "$OUT/bench/sdpa.log" 2>&1 || say "sdpa failed (see bench/sdpa.log)"
  fi
  # bench/results-style JSON + Markdown of the attention rows with SDPA's (same call): $OUT/attention_report.*
  if [ -f "$OUT/bench/attention.json" ]; then
    python3 bench/device/attention_report.py --attention "$OUT/bench/attention.json" \
      $([ -f "$OUT/bench/sdpa.json" ] && echo --sdpa "$OUT/bench/sdpa.json") --date "$(date -u +%F)" \
      $([ -f "$OUT/bench/attention_jit80.json" ] && echo --jit80 "$OUT/bench/attention_jit80.json") \
      $([ -f "$OUT/bench/attention_previous.json" ] && echo --previous "$OUT/bench/attention_previous.json" --previous-name "${PREV_NAME:-previous}") \
      --gpu "$(sed -n 2p "$OUT/bench/gpu.txt" | cut -d, -f1)" --command "${BENCH_COMMAND:-scripts/gpu_session.sh (bench)}" \
      --out "$OUT/attention_report" > "$OUT/bench/report.log" 2>&1 && sed -n '/^Targets (issue 28)/,$p' "$OUT/attention_report.md" | tee -a "$SUMMARY"
  fi
  say "bench done"
fi

# ---------------------------------------------------------------- profile
if want profile; then
  say "profile"
  mkdir -p "$OUT/profile"
  SEC="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
  sel build/gpu-codec/gpu_codec_bench && timeout 120 "$NCU" --kernel-name regex:prefill_kernel --launch-count 2 $SEC --section SourceCounters \
    build/gpu-codec/gpu_codec_bench --out /tmp/ncu_codec --iters 1 > "$OUT/profile/ncu_prefill.txt" 2>&1
  sel build/gpu-codec/gpu_codec_bench && timeout 60 "$NCU" --kernel-name regex:dequantize_pages_kernel --launch-count 2 $SEC \
    build/gpu-codec/gpu_codec_bench --out /tmp/ncu_codec --iters 1 > "$OUT/profile/ncu_decode.txt" 2>&1
  # PROFILE_ATTN="<shape>:<kernel> ...": bench_attention --shape/--kernel runs only that row; its 6th
  # decode + merge kernel pair is profiled (the first are warm-up), then per-SASS-line counters of the
  # same launches -> executed warp instructions per opcode (both kernels together).
  for pk in ${PROFILE_ATTN:-16,32,8,128,65536:k4v2_g128 ragged32:k4v2_g128 16,32,8,128,65536:k4v2_g128_mq8 2,8,1,128,32768:k4v2_g128}; do
    sel build_attn/bench_attention || break
    sh=${pk%%:*} kn=${pk#*:} tag=$(echo "${pk}" | tr -c 'a-z0-9_\n' '_' | tr -d '\n')
    ARGS=(build_attn/bench_attention --iters 50 --policies --shape "$sh" --kernel "$kn")
    NK=(--kernel-name "regex:quant_decode_kernel|combine_kernel" --launch-skip 10 --launch-count 2)
    timeout 90 "$NCU" "${NK[@]}" $SEC --section SourceCounters "${ARGS[@]}" > "$OUT/profile/ncu_$tag.txt" 2>&1
    [ "${PROFILE_SRC:-1}" = 1 ] &&  # PROFILE_SRC=0: no per-SASS-line pass (opcode histogram)
      timeout 90 "$NCU" "${NK[@]}" --section SourceCounters --page source --print-source sass --csv "${ARGS[@]}" \
        > "$OUT/profile/src_$tag.csv" 2>&1 &&
      python3 scripts/sass_histogram.py "$OUT/profile/src_$tag.csv" > "$OUT/profile/opcodes_$tag.txt" 2>&1
    rm -f "$OUT/profile/src_$tag.csv"
    { echo "== profile $pk"; grep -E "^    (Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Grid Size|Block Size)" "$OUT/profile/ncu_$tag.txt";
      sed -n 1,10p "$OUT/profile/opcodes_$tag.txt"; } >> "$SUMMARY" 2>/dev/null
  done
  if sel build_attn/bench_attention && command -v cuobjdump >/dev/null; then
    # SASS of the k4v2_g128 fp8 D=128 attention kernel(s) and an opcode histogram
    cuobjdump -sass build_attn/bench_attention 2>/dev/null |
      awk '/Function :/ {on = ($0 ~ /quant_decode_kernel/ && $0 ~ /tile_configILi128ELi128ELi4ELi2EE/ && $0 ~ /fp8_scales/)} on' \
      > "$OUT/profile/k4v2_d128.sass"
    grep -c "Function :" "$OUT/profile/k4v2_d128.sass" | sed 's/^/k4v2 D128 fp8 attention kernels: /' >> "$SUMMARY"
    grep -oE '^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?[A-Z0-9_.]+' "$OUT/profile/k4v2_d128.sass" | awk '{print $NF}' | sed 's/\..*//' |
      sort | uniq -c | sort -rn | head -40 > "$OUT/profile/k4v2_d128_opcodes.txt"
  fi
  say "profile done"
fi

# ---------------------------------------------------------------- test
if want test; then
  say "test"
  mkdir -p "$OUT/test"
  for n in $CODEC_TESTS unsupported_arch; do
    run_logged "$OUT/test/$n.log" build/gpu-codec/$n || rc=1
    say "$n: $(grep -E 'passed|failed|mismatch|PASS|FAIL' "$OUT/test/$n.log" | tail -n 1) ($(tail -n 1 "$OUT/test/$n.log"))"
  done
  for v in ${CODEC_TEST_VARIANTS:-}; do
    for n in paged_cache block_codec_d128; do
      run_logged "$OUT/test/${n}_${v%%:*}.log" build/gpu-codec/${n}_${v%%:*} || rc=1
      say "${n}_${v%%:*} (${v#*:}): $(grep -E 'passed|failed|mismatch|PASS|FAIL' "$OUT/test/${n}_${v%%:*}.log" | tail -n 1) ($(tail -n 1 "$OUT/test/${n}_${v%%:*}.log"))"
    done
  done
  run_logged "$OUT/test/attention.log" build_attn/attention || rc=1
  say "attention: $(grep -E 'passed' "$OUT/test/attention.log" | tail -n 1) ($(tail -n 1 "$OUT/test/attention.log"))"
  for v in ${ATTN_TEST_VARIANTS:-}; do
    run_logged "$OUT/test/attention_${v%%:*}.log" build_attn/attention_${v%%:*} || rc=1
    say "attention_${v%%:*} (${v#*:}): $(grep -E 'passed' "$OUT/test/attention_${v%%:*}.log" | tail -n 1)"
  done
  run_logged "$OUT/test/example.log" build_attn/paged_decode || rc=1
  say "example: $(tail -n 1 "$OUT/test/example.log")"
  spids=()
  for t in attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256 attention_policies; do
    run_logged "$OUT/test/$t.log" build_attn/$t & spids+=($!)
  done
  run_logged "$OUT/test/numeric.log" build/gpu/numeric & spids+=($!)
  run_logged "$OUT/test/speculative.log" build/gpu/speculative & spids+=($!)
  run_logged "$OUT/test/abi.log" build/gpu/abi_static & spids+=($!)
  for p in "${spids[@]}"; do wait "$p" || rc=1; done
  for t in attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256 attention_policies numeric speculative abi; do
    say "$t: $(grep -E 'passed' "$OUT/test/$t.log" | tail -n 1) ($(tail -n 1 "$OUT/test/$t.log"))"
  done
  grep -h -A20 "error vs unquantized" "$OUT"/test/attention_*.log | grep -E "rel err vs|error vs" >> "$SUMMARY"
fi

# ---------------------------------------------------------------- soak
if want soak && sel build/gpu/soak; then
  say "soak"
  mkdir -p "$OUT/soak"
  run_logged "$OUT/soak/soak.log" timeout 300 build/gpu/soak || rc=1
  tail -n 25 "$OUT/soak/soak.log" >> "$SUMMARY"
fi

# ---------------------------------------------------------------- eval
if want eval && sel kvtile-eval; then
  say "eval"
  mkdir -p "$OUT/eval"
  OUT=$OUT/eval timeout 300 tools/kvtile-eval/cuda/run_gpu_check.sh --no-build > "$OUT/eval/run_gpu_check.log" 2>&1 || rc=1
  tail -n 12 "$OUT/eval/run_gpu_check.log" >> "$SUMMARY"
fi

# ---------------------------------------------------------------- sanitize
if want sanitize; then
  say "sanitize"
  mkdir -p "$OUT/sanitize"
  san() {  # san <tool> <binary> [args...]
    local tool=$1 bin=$2; shift 2
    sel "$bin" || return 0
    local log="$OUT/sanitize/${tool}_$(basename "$bin")$(echo "$*" | tr -c 'a-z0-9\n' '_' | tr -d '\n').log"
    local left=$(( ${BUDGET:-590} - (SECONDS - T0) - 20 ))
    (( left > ${SAN_TIMEOUT:-240} )) && left=${SAN_TIMEOUT:-240}
    timeout $left "$CS" --tool "$tool" --error-exitcode 9 "$bin" "$@" > "$log" 2>&1
    echo "exit $?" >> "$log"
  }
  spids=()
  throttle() { while (( $(jobs -rp | wc -l) >= ${SAN_JOBS:-12} )); do wait -n; done; }
  C=build/gpu-codec A=build_attn
  for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
    throttle
    san $tool $C/block_codec_d64 --tiles 1 & spids+=($!)
    throttle
    san $tool $C/block_codec_d128 --tiles 1 & spids+=($!)
    throttle
    san $tool $C/block_codec_d256 --tiles 1 & spids+=($!)
    throttle
    san $tool $C/paged_cache --quick & spids+=($!)
    throttle
    san $tool $C/multi_gpu & spids+=($!)  # (launch_setup provokes API errors on purpose: not run here)
    throttle
    san $tool $C/ring_sync & spids+=($!)  # the 16-row ring's stage synchronization alone (racecheck)
    throttle
    san $tool $A/attention --small & spids+=($!)
    throttle
    san $tool build/gpu/soak --small & spids+=($!)
    throttle
    san $tool build/gpu/numeric --host-stride 4096 & spids+=($!)
    throttle
    san $tool build/gpu/speculative & spids+=($!)
  done
  throttle
  san memcheck $C/block_codec_d128 --quick & spids+=($!)
  for t in attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256 attention_policies; do
    for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
      throttle
      san $tool $A/$t --small & spids+=($!)
    done
  done
  for p in "${spids[@]}"; do wait "$p"; done
  for f in "$OUT"/sanitize/*.log; do
    s=$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tail -n 1)
    e=$(tail -n 1 "$f")
    printf '%-60s %-45s %s\n' "$(basename "$f" .log)" "${s:-no summary}" "$e" | tee -a "$SUMMARY"
    [ "$e" = "exit 0" ] || rc=1
  done
fi

# ---------------------------------------------------------------- jit80
if want jit80; then
  say "jit80 (compute_80 PTX only, JIT-compiled by the driver)"
  mkdir -p "$OUT/jit80"
  J=${JIT80_PREBUILT:-build/jit80}
  if [ -z "${JIT80_PREBUILT:-}" ]; then
    pids=()
    jit80_build  # up to date when the build stage built them
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    cat "$OUT"/jit80/build_*.log | grep -E "^built|error" | sed 's/^/jit80 /' | tee -a "$SUMMARY"
  fi
  # The PTX-only binaries hold no SASS: cuobjdump lists what they carry.
  for n in $JIT80_TESTS gpu_codec_bench; do
    printf '%s: %s\n' "$n" "$(cuobjdump --list-ptx --list-elf "$J/$n" 2>&1 | tr '\n' ' ')" >> "$OUT/jit80/contents.txt"
  done
  export CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_PATH=/tmp/kvtile-jit-cache CUDA_CACHE_MAXSIZE=4294967296
  jpids=()
  for n in $JIT80_TESTS unsupported_arch; do
    (t=$SECONDS; run_logged "$OUT/jit80/$n.log" "$J/$n"; r=$?; echo "wall $((SECONDS - t)) s (JIT included)" >> "$OUT/jit80/$n.log"; exit $r) & jpids+=($!)
  done
  # The benchmark's JIT runs meanwhile (one untimed iteration fills the JIT cache).
  sel "$J/gpu_codec_bench" && { "$J/gpu_codec_bench" --out /tmp/kvtile-jit-warm --iters 1 > "$OUT/jit80/bench_warm.log" 2>&1 & jpids+=($!); }
  for p in "${jpids[@]}"; do wait "$p" || rc=1; done
  for n in $JIT80_TESTS unsupported_arch; do
    say "jit80 $n: $(grep -E 'passed|failed|mismatch|PASS|FAIL' "$OUT/jit80/$n.log" | tail -n 1) ($(tail -n 2 "$OUT/jit80/$n.log" | tr '\n' ' '))"
  done
  if (( SECONDS - T0 < DEADLINE )) && sel "$J/gpu_codec_bench"; then
    "$J/gpu_codec_bench" --out "$OUT/jit80" --stem gpu_codec_jit80 --iters ${BENCH_ITERS:-15} \
      --command "scripts/gpu_session.sh (jit80: compute_80 PTX, CUDA_FORCE_PTX_JIT=1)" > "$OUT/jit80/gpu_codec.log" 2>&1 || rc=1
    grep -E "^(prefill|decode|copy)|append .* 64 " "$OUT/jit80/gpu_codec.log" | head -20 | sed 's/^/jit80 /' | tee -a "$SUMMARY"
  else
    say "SKIP jit80 benchmark (deadline)"
  fi
  unset CUDA_FORCE_PTX_JIT
fi

# ---------------------------------------------------------------- attnjit
ATTN_SUITE="attention attention_policies attention_fp8_d128 attention_fp16s_d128 attention_fp8_d64 attention_fp16s_d64 attention_fp8_d256 attention_fp16s_d256"
if want attnjit; then
  say "attnjit (the attention suite from compute_{${JIT_ARCHS:-80 86 89}} PTX, JIT-compiled by the driver)"
  JD=${ATTN_JIT_DIR:-build/jit-attn}
  mkdir -p "$OUT/attnjit"
  if [ -z "${ATTN_JIT_PREBUILT:-}" ]; then
    pids=()
    for a in ${JIT_ARCHS:-80 86 89}; do
      mkdir -p "$JD/jit$a"
      for t in $ATTN_SUITE; do
        FLAGS="${FLAGS/-gencode=arch=compute_90a,code=sm_90a/-gencode=arch=compute_$a,code=compute_$a} --compress-mode=none" \
          nv "$JD/jit$a/$t" "tests/device/$t.cu" > "$OUT/attnjit/build_${a}_$t.log" 2>&1 & pids+=($!)
      done
      [ "$a" = 80 ] && { FLAGS="${FLAGS/-gencode=arch=compute_90a,code=sm_90a/-gencode=arch=compute_80,code=compute_80} --compress-mode=none" \
        nv "$JD/jit80/bench_attention" bench/device/attention.cu > "$OUT/attnjit/build_80_bench.log" 2>&1 & pids+=($!); }
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    cat "$OUT"/attnjit/build_*.log | grep -E "^built|error" | tee -a "$SUMMARY"
  fi
  if [ -z "${ATTN_JIT_BUILD_ONLY:-}" ]; then
    export CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_PATH=/tmp/kvtile-jit-cache CUDA_CACHE_MAXSIZE=4294967296
    jpids=()
    # the benchmark's PTX is JIT-compiled (and cached for the bench stage) meanwhile: no row matches --shape warm
    [ -n "${JIT_BENCH:-}" ] && { "$JD/jit80/bench_attention" --shape warm > "$OUT/attnjit/bench80_warm.log" 2>&1 & jpids+=($!); }
    for a in ${JIT_ARCHS:-80 86 89}; do
      for t in $ATTN_SUITE; do
        (s=$SECONDS; run_logged "$OUT/attnjit/${a}_$t.log" "$JD/jit$a/$t"; r=$?
         echo "wall $((SECONDS - s)) s (JIT included)" >> "$OUT/attnjit/${a}_$t.log"; exit $r) & jpids+=($!)
      done
    done
    for p in "${jpids[@]}"; do wait "$p" || rc=1; done
    for a in ${JIT_ARCHS:-80 86 89}; do
      for t in $ATTN_SUITE; do
        say "jit$a $t: $(grep -E 'passed|PASS|FAIL' "$OUT/attnjit/${a}_$t.log" | tail -n 1) ($(tail -n 2 "$OUT/attnjit/${a}_$t.log" | tr '\n' ' '))"
      done
    done
    grep -h "policy" "$OUT"/attnjit/80_attention.log | head -5 >> "$SUMMARY"
    sj=()
    jsan=${JIT_SAN:-$(for t in $ATTN_SUITE; do echo "80:$t"; done) 86:attention 86:attention_policies 89:attention 89:attention_policies}
    for at in $jsan; do
      a=${at%%:*} t=${at#*:}
      for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
        while (( $(jobs -rp | wc -l) >= ${SAN_JOBS:-12} )); do wait -n; done
        ( log="$OUT/attnjit/san_${tool}_${a}_$t.log"
          timeout "${SAN_TIMEOUT:-240}" "$CS" --tool "$tool" --error-exitcode 9 "$JD/jit$a/$t" --small > "$log" 2>&1
          echo "exit $?" >> "$log" ) & sj+=($!)
      done
    done
    for p in "${sj[@]}"; do wait "$p"; done
    for f in "$OUT"/attnjit/san_*.log; do
      s=$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tail -n 1)
      e=$(tail -n 1 "$f")
      printf '%-50s %-45s %s\n' "$(basename "$f" .log)" "${s:-no summary}" "$e" | tee -a "$SUMMARY"
      [ "$e" = "exit 0" ] || rc=1
    done
    unset CUDA_FORCE_PTX_JIT
  fi
fi

# ---------------------------------------------------------------- python
if want python; then
  say "python (fresh copy, pip install, pytest)"
  mkdir -p "$OUT/python"
  F=/tmp/kvtile-fresh
  TL=${TINYLM:-$(cd .. && pwd)/shared/data/tinylm-model}
  rm -rf "$F" && mkdir -p "$F"
  if [ -d .git ]; then git ls-files -z | xargs -0 cp --parents -t "$F"; else
    tar --exclude=./build --exclude='./build_*' --exclude=./.deps --exclude='./python/kvtile/*.so' -cf - . | tar -xf - -C "$F"; fi
  ( cd "$F" && s=$SECONDS && KVTILE_CUDA_ARCHS=${KVTILE_CUDA_ARCHS:-90a-real} MAX_JOBS=${MAX_JOBS:-16} \
      python3 -m pip install --no-build-isolation ./python > "$OUT/python/pip.log" 2>&1; r=$?
    echo "pip install: exit $r, $((SECONDS - s)) s" | tee -a "$SUMMARY"; exit $r ) & ppid=$!
  cpid=
  if [ -n "${CTEST_TARGETS-x}" ]; then
    CT=${CTEST_TARGETS:-kvtile_device_paged_cache kvtile_device_soak kvtile_ops_c99_test}
    ( s=$SECONDS
      cmake --preset gpu -DKVTILE_CUDA_ARCHITECTURES=90a-real -DKVTILE_BUILD_BENCH=OFF -DKVTILE_BUILD_TOOLS=OFF \
        > "$OUT/python/cmake.log" 2>&1 &&
        cmake --build build/gpu -j 8 --target $CT >> "$OUT/python/cmake.log" 2>&1; r=$?
      echo "cmake build ($CT): exit $r, $((SECONDS - s)) s" | tee -a "$SUMMARY"; exit $r ) & cpid=$!
  fi
  wait $ppid || rc=1
  ( cd "$F" && KVTILE_TEST_PACKAGE=installed KVTILE_TINYLM=$TL \
      timeout ${PYTEST_TIMEOUT:-400} python3 -m pytest -rs -q -p no:cacheprovider tests/python > "$OUT/python/pytest.log" 2>&1
    echo "exit $?" >> "$OUT/python/pytest.log" )
  tail -n 2 "$OUT/python/pytest.log" | tee -a "$SUMMARY"
  grep -E "^SKIPPED|FAILED|ERROR" "$OUT/python/pytest.log" | head -20 >> "$SUMMARY"
  [ "$(tail -n 1 "$OUT/python/pytest.log")" = "exit 0" ] || rc=1
  if [ -n "$cpid" ]; then
    wait $cpid || rc=1
    ( cd build/gpu && timeout 300 ctest --output-on-failure -R "${CTEST_REGEX:-device/paged_cache|device/soak|ops/c99}" \
        > "$OUT/python/ctest.log" 2>&1; echo "exit $?" >> "$OUT/python/ctest.log" )
    grep -E "tests passed|tests failed|Test +#" "$OUT/python/ctest.log" | tee -a "$SUMMARY"
    [ "$(tail -n 1 "$OUT/python/ctest.log")" = "exit 0" ] || rc=1
  fi
  if [ -n "${SPEC_BENCH:-}" ] && (( SECONDS - T0 < DEADLINE )); then
    ( cd "$F" && PYTHONUNBUFFERED=1 timeout ${SPEC_TIMEOUT:-240} python3 examples/torch/spec_bench.py \
        --model "$TL" --json "$OUT/spec_bench.json" --md "$OUT/spec_bench.md" \
        > "$OUT/python/spec_bench.log" 2>&1; echo "exit $?" >> "$OUT/python/spec_bench.log" )
    tail -n 3 "$OUT/python/spec_bench.log" | tee -a "$SUMMARY"
  fi
fi

say "done rc=$rc"
tar -C "$OUT" -czf /tmp/logs.tar.gz --exclude=logs.tar.gz . && mv /tmp/logs.tar.gz "$OUT/logs.tar.gz"
for d in "$OUT"/*/; do rm -rf "$d"; done
exit $rc
