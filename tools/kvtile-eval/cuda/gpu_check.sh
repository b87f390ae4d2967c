#!/usr/bin/env bash
# tools/kvtile-eval/cuda/gpu_check.sh: checks a CUDA build of kvtile-eval (the
# CMake target kvtile-eval, with tools/kvtile-eval/cuda/*.cu compiled in):
# `--device cuda --compare-devices` against the host codec (records and
# decoded K/V of every (tile, KV head) must be bit-identical) on the embedded
# generator (D = 128, 64, 256) and on tests/data/kvtile-eval/*.npy; then the
# embedded default on --device cpu and cuda (timed; same table from both).
#
#   tools/kvtile-eval/cuda/gpu_check.sh <kvtile-eval binary> [log dir]
#
# Logs and summary.txt go to the log dir (default: ./kvtile-eval-gpu-check).
# Exit status: 0 all checks passed, 1 a check failed, 2 usage,
# 77 --device cuda is not usable here (no GPU, or a build without CUDA).
set -uo pipefail
if [[ $# -lt 1 || ! -x $1 ]]; then
  echo "usage: $0 <kvtile-eval binary> [log dir]" >&2
  exit 2
fi
eval_bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
LOG=${2:-kvtile-eval-gpu-check}
mkdir -p "$LOG"
summary="$LOG/summary.txt"

if ! msg=$("$eval_bin" --device cuda --gen-tokens 128 --gen-kv-heads 1 --gen-q-heads 1 -m k4v2_g128+fp8 --no-table \
             --quiet 2>&1); then
  echo "SKIPPED: --device cuda is not usable here: $msg" | tee "$summary"
  exit 77
fi
status=0
: > "$summary"
check() {  # check <name> <args...>: --device cuda --compare-devices, must print "device vs host: N tiles, 0 mismatches"
  local name=$1; shift
  local t=$SECONDS
  "$eval_bin" --device cuda --compare-devices --no-progress --json "$LOG/$name.json" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local line
  line=$(grep -h "^device vs host:" "$LOG/$name.log" || true)
  printf '%-22s rc %d  %3d s  %s\n' "$name" "$rc" "$((SECONDS - t))" "${line:-$(tail -n 1 "$LOG/$name.log")}" | tee -a "$summary"
  if (( rc != 0 )) || [[ -z $line ]]; then status=1; fi
}
check gen-d128 --gen-tokens 4096 --gen-layers 2
check gen-d64 --gen-tokens 2048 --gen-head-dim 64 --gen-kv-heads 4 --gen-q-heads 16
check gen-d256 --gen-tokens 2048 --gen-head-dim 256 --gen-kv-heads 4 --gen-q-heads 8
check gen-d128-tail --gen-tokens 1000 --gen-kv-heads 3 --gen-q-heads 6   # partial tiles, odd head count
d=$root/tests/data/kvtile-eval
check tinylm-npy -k "$d/tinylm_w0_l0_256_k.npy" -v "$d/tinylm_w0_l0_256_v.npy" -q "$d/tinylm_w0_l0_256_q.npy"

# ---- speed: the embedded default (8192 tokens x 8 KV heads x D=128), host vs GPU codec
for dev in cpu cuda; do
  t=$SECONDS
  "$eval_bin" --device $dev --no-progress --json "$LOG/default-$dev.json" > "$LOG/default-$dev.log" 2> "$LOG/default-$dev.err"
  rc=$?
  printf '%-22s rc %d  %3d s  (%s)\n' "default-$dev" "$rc" "$((SECONDS - t))" \
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
echo "gpu_check: $([[ $status == 0 ]] && echo PASS || echo FAIL); logs in $LOG"
exit $status
