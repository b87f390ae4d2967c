#!/usr/bin/env bash
# call P5 (2026-12-07): wgmma prototype with the descriptors made once per CTA: checks, timings, Nsight Compute on R=32 F=0
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
S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section ComputeWorkloadAnalysis"
N="ncu --clock-control none"
timeout 120 $N --kernel-name regex:wg_kernel --launch-skip 3 --launch-count 1 $S $C/wg/wg_proto 128 512 1 prof > $O/ncu_wg_r32.txt 2>&1
echo "ncu r32 rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 120 $N --kernel-name regex:wg_kernel --launch-skip 3 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $C/wg/wg_proto 128 512 1 prof > $O/src.csv 2>&1
python3 scripts/sass_histogram.py $O/src.csv > $O/hist_wg_r32.txt 2>&1; echo "hist r32 rc=$? $(head -1 $O/hist_wg_r32.txt)" | tee -a $O/call.txt
rm -f $O/src.csv
