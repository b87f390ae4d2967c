#!/usr/bin/env bash
# call P6 (2026-12-07): wgmma prototype with the tile in two 64-token passes (wg_half, 3 CTAs per SM): checks, timings, memcheck
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
timeout 300 $C/wg/wg_proto > $O/wg_proto.txt 2>&1; echo "wg_proto rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
cat $O/wg_proto.txt
row() { $C/w6/kvtile_bench_attention --shape "$1" --kernel "$2" --iters 50 2>/dev/null |
        awk -v k="$2" '/^summary/{s=1} s && $1==k {printf "%s us (%s chunks)", $9, $8}'; }
for k in k4v2_g128 k4v2_g128_mq4 k4v2_g128_mq8; do
  echo "main 16,32,8,128,65536 $k: $(row 16,32,8,128,65536 $k)" | tee -a $O/call.txt; done
echo "main 8,128,8,128,32768 k4v2_g128: $(row 8,128,8,128,32768 k4v2_g128)" | tee -a $O/call.txt
timeout 120 compute-sanitizer --tool memcheck $C/wg/wg_proto 2 8 1 > $O/wg_memcheck.txt 2>&1; echo "memcheck rc=$? $(grep SUMMARY $O/wg_memcheck.txt)" | tee -a $O/call.txt
timeout 120 compute-sanitizer --tool racecheck $C/wg/wg_proto 2 8 1 > $O/wg_racecheck.txt 2>&1; echo "racecheck rc=$? $(grep SUMMARY $O/wg_racecheck.txt)" | tee -a $O/call.txt
