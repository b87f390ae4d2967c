#!/usr/bin/env bash
# call P1 (2026-12-07): wgmma multi-query prototype (bench/results/2026-12-07-wgmma-mq/wg_proto.cu), the same shapes
# through main's kernels, then main's device code (19c6760) from compute_86 PTX JIT-compiled
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
timeout 240 $C/wg/wg_proto > $O/wg_proto.txt 2>&1; echo "wg_proto rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
cat $O/wg_proto.txt
row() { $C/w6/kvtile_bench_attention --shape "$1" --kernel "$2" --iters 50 2>/dev/null |
        awk -v k="$2" '/^summary/{s=1} s && $1==k {printf "%s us (%s chunks)", $9, $8}'; }
for k in k4v2_g128 k4v2_g128_mq2 k4v2_g128_mq4 k4v2_g128_mq8; do
  echo "main 16,32,8,128,65536 $k: $(row 16,32,8,128,65536 $k)" | tee -a $O/call.txt; done
echo "main 8,128,8,128,32768 k4v2_g128: $(row 8,128,8,128,32768 k4v2_g128)" | tee -a $O/call.txt
export CUDA_FORCE_PTX_JIT=1
timeout 200 $C/jit86/kvtile_device_attention > $O/jit86_att.log 2>&1; echo "jit86 att rc=$? $(grep -E 'passed, .* failed' $O/jit86_att.log | tail -1) $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 200 $C/jit86/kvtile_device_attention_policies > $O/jit86_pol.log 2>&1; echo "jit86 pol rc=$? $(grep -E 'passed, .* failed' $O/jit86_pol.log | tail -1) $((SECONDS-t0)) s" | tee -a $O/call.txt
gzip $O/jit86_*.log
