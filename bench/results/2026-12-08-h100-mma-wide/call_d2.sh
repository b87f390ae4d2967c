#!/usr/bin/env bash
# Device call D2 (2026-12-08): main (71fe9f8 + claim_piece) JIT-compiled from compute_86 / compute_80 PTX
# (CUDA_FORCE_PTX_JIT=1): attention --small and attention_policies (86); racecheck / memcheck / initcheck on
# attention --small (80); then the opt-in tail pieces on this GPU (--policies at 16 x 64K, ragged).
# build_carry/d2b: jit86/{kvtile_device_attention,kvtile_device_attention_policies}, jit80/kvtile_device_attention;
# kvtile_bench_attention (90a-real).
set -u
O=$OUT; t0=$SECONDS; C=build_carry/d2b; B=$C/kvtile_bench_attention
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="compute-sanitizer --error-exitcode 1"
run() { local n=$1; shift; timeout 330 stdbuf -o0 -e0 "$@" > $O/$n.log 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -E 'passed, .* failed' $O/$n.log | tail -1 | tr -s ' ') $(grep -E 'SUMMARY' $O/$n.log | tail -1 | cut -c10-) $((SECONDS-t0)) s" | tee -a $O/call.txt; }
(
export CUDA_FORCE_PTX_JIT=1
CUDA_CACHE_PATH=/tmp/cc86a run jit86_att_small $C/jit86/kvtile_device_attention --small &
CUDA_CACHE_PATH=/tmp/cc86b run jit86_pol $C/jit86/kvtile_device_attention_policies &
for t in racecheck memcheck initcheck; do CUDA_CACHE_PATH=/tmp/cc80$t run jit80_${t}_att $S --tool $t $C/jit80/kvtile_device_attention --small & done
wait
)
for f in $O/jit*.log; do grep -q "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f && { echo "== $f"; grep -n -B2 "FAIL\|Race reported\|========= Error\|Barrier error\|Uninitialized" $f | cut -c1-200 | head -8; }; done | tee -a $O/call.txt
echo "verification $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 120 $B --policies --shape 16,32,8,128,65536 --iters 50 > $O/p1.log 2>&1; echo "p1 rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
awk '/^summary/{s=1} s' $O/p1.log | grep -E '^(kernel|fp16_baseline|k4v2_g128|k4v2_g128_(mq2|fp16s|sink|sm80_bulk|sm80|sm86|sm120|bf16q|fused)(_tails)?|k2v2_g128(_tails)?|k4v2_g128_tails|k4v4_g128) ' | tee -a $O/call.txt
for sh in ragged32 ragged64; do timeout 60 $B --shape $sh --kernel k4v2_g128 --iters 50 > $O/r$sh.log 2>&1; echo "$sh rc=$? $(awk '/^summary/{s=1} s' $O/r$sh.log | grep '^k4v2_g128 ' | tr -s ' ')" | tee -a $O/call.txt; done
(cd $O && tar czf logs.tgz *.log && rm -f *.log)
echo "total $((SECONDS-t0)) s" | tee -a $O/call.txt
