#!/usr/bin/env bash
# call JIT (2026-12-07): main 2bbabad's attention and attention_policies built from compute_80 PTX only,
# JIT-compiled by the driver (CUDA_FORCE_PTX_JIT=1): full suites, and synccheck / racecheck / memcheck on --small.
set -u
C=build_carry/jit; O=$OUT; t0=$SECONDS
export CUDA_FORCE_PTX_JIT=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run() { local n=$1; shift; timeout 360 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/suites.txt; }
for t in synccheck racecheck memcheck; do
  run ${t}_att $S --tool $t $C/kvtile_device_attention --small &
  run ${t}_pol $S --tool $t $C/kvtile_device_attention_policies --small &
done
run att $C/kvtile_device_attention &
run pol $C/kvtile_device_attention_policies &
wait
for f in $O/*.log; do grep -q "Race reported\|========= Error\|Barrier error" $f && { echo "== $f"; grep -n -B2 "Race reported\|========= Error\|Barrier error" $f | cut -c1-200 | head -8; }; done
