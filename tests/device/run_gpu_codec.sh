#!/usr/bin/env bash
# tests/device/run_gpu_codec.sh: build, test, sanitize and benchmark the GPU codec
# (block_tile_codec, paged append/prefill/decode). Run from the repository root.
#   tests/device/run_gpu_codec.sh [build] [test] [sanitize] [bench]   (default: all four)
# Binaries go to build/gpu-codec/ (reused when present and newer than the
# sources; delete them or set REBUILD=1 to force). Logs and bench results go
# to $OUT (default build/gpu-codec/out): gpu_codec.log, sanitizer.log,
# <date>-gpu-codec.{json,md}. Exit status: 0 when every stage run passed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/gpu-codec/out}
B=build/gpu-codec
mkdir -p "$B" "$OUT"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
FLAGS="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I include -I .deps"
STAGES=${*:-build test sanitize bench}
LOG="$OUT/gpu_codec.log"
rc=0
say() { echo "== $*" | tee -a "$LOG"; }

build_one() {  # name source
  local name=$1 src=$2
  if [ -z "${REBUILD:-}" ] && [ -x "$B/$name" ] && [ "$B/$name" -nt "$src" ] &&
     [ -z "$(find include/kvtile tests/device/*.cuh -newer "$B/$name" -name '*.*h*' 2>/dev/null | head -1)" ]; then
    echo "up to date: $B/$name"
    return 0
  fi
  echo "nvcc $src"
  $NVCC $FLAGS -o "$B/$name" "$src"
}

if [[ " $STAGES " == *" build "* ]]; then
  say "build $(date -u +%FT%TZ) $($NVCC --version | tail -1)"
  pids=()
  for n in block_codec_d64 block_codec_d128 block_codec_d256 paged_cache; do
    build_one "$n" "tests/device/$n.cu" >>"$LOG" 2>&1 & pids+=($!)
  done
  build_one gpu_codec_bench bench/device/gpu_codec.cu >>"$LOG" 2>&1 & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || { rc=1; say "BUILD FAILED"; }; done
fi

if [[ " $STAGES " == *" test "* ]]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
  for n in ${TESTS:-block_codec_d64 block_codec_d128 block_codec_d256 paged_cache}; do
    [ -x "$B/$n" ] || { say "test $n MISSING (not built)"; rc=1; continue; }
    say "test $n"
    t0=$SECONDS; "$B/$n" 2>&1 | tee -a "$LOG"
    r=${PIPESTATUS[0]}
    say "test $n exit $r ($((SECONDS - t0)) s)"
    [ "$r" = 0 ] || rc=1
  done
fi

if [[ " $STAGES " == *" sanitize "* ]]; then
  CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  SLOG="$OUT/sanitizer.log"
  for spec in "memcheck block_codec_d64 --quick" "memcheck block_codec_d128 --quick" "memcheck block_codec_d256 --tiles 1" "memcheck paged_cache --quick" \
              "racecheck block_codec_d64 --tiles 1" "racecheck paged_cache --quick" "synccheck block_codec_d64 --tiles 1"; do
    set -- $spec
    tool=$1; shift; bin=$1; shift
    [ -x "$B/$bin" ] || { say "sanitizer $tool $bin MISSING (not built)"; continue; }
    say "compute-sanitizer --tool $tool $bin $*"
    timeout ${SAN_TIMEOUT:-100} "$CS" --tool "$tool" --error-exitcode 9 "$B/$bin" "$@" >"$OUT/san_tmp.log" 2>&1
    r=$?
    cat "$OUT/san_tmp.log" >>"$SLOG"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|TOTAL" "$OUT/san_tmp.log" | tee -a "$LOG"
    say "sanitizer $tool $bin exit $r"
    [ "$r" = 0 ] || rc=1
  done
  rm -f "$OUT/san_tmp.log"
fi

if [[ " $STAGES " == *" bench "* ]]; then
  say "bench"
  "$B/gpu_codec_bench" --out "$OUT" --iters 15 --command "tests/device/run_gpu_codec.sh bench" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
say "done rc=$rc"
exit $rc
