#!/usr/bin/env bash
# call P4 (2026-12-07): Nsight Compute on the wgmma prototype (R=32 F=0, R=16 F=1) and on main's one-token and mq8
# kernels at 16 x 64K; then main's device code (19c6760) from compute_89 PTX, JIT-compiled
set -u
C=build_carry; O=$OUT; t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/call.txt
S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
N="ncu --clock-control none"
for k in r32:3 r16:7; do n=${k%%:*}; sk=${k##*:}
  timeout 120 $N --kernel-name regex:wg_kernel --launch-skip $sk --launch-count 1 $S $C/wg/wg_proto 128 512 1 prof > $O/ncu_wg_$n.txt 2>&1
  echo "ncu wg $n rc=$? $((SECONDS-t0)) s" | tee -a $O/call.txt
  timeout 120 $N --kernel-name regex:wg_kernel --launch-skip $sk --launch-count 1 --section SourceCounters --page source --print-source sass --csv $C/wg/wg_proto 128 512 1 prof > $O/src_wg_$n.csv 2>&1
  python3 scripts/sass_histogram.py $O/src_wg_$n.csv > $O/hist_wg_$n.txt 2>&1; echo "hist wg $n rc=$? $(head -2 $O/hist_wg_$n.txt | tr '\n' ' ')" | tee -a $O/call.txt
done
for k in k4v2_g128 k4v2_g128_mq8; do
  timeout 150 $N --kernel-name regex:quant_decode_kernel --launch-skip 10 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $C/w6/kvtile_bench_attention --iters 20 --shape 16,32,8,128,65536 --kernel $k > $O/src_main_$k.csv 2>&1
  python3 scripts/sass_histogram.py $O/src_main_$k.csv > $O/hist_main_$k.txt 2>&1; echo "hist main $k rc=$? $(head -2 $O/hist_main_$k.txt | tr '\n' ' ') $((SECONDS-t0)) s" | tee -a $O/call.txt
done
gzip $O/src_*.csv
export CUDA_FORCE_PTX_JIT=1
timeout 150 $C/jit89/kvtile_device_attention --small > $O/jit89_att_small.log 2>&1; echo "jit89 att --small rc=$? $(grep -E 'passed, .* failed' $O/jit89_att_small.log | tail -1) $((SECONDS-t0)) s" | tee -a $O/call.txt
timeout 280 $C/jit89/kvtile_device_attention_policies > $O/jit89_pol.log 2>&1; echo "jit89 pol rc=$? $(grep -E 'passed, .* failed' $O/jit89_pol.log | tail -1) $((SECONDS-t0)) s" | tee -a $O/call.txt
gzip $O/jit89_*.log
unset CUDA_FORCE_PTX_JIT
timeout 60 $C/rs2/kvtile_device_ring_sync > $O/rs2.txt 2>&1; echo "ring_sync rc=$? $(tail -1 $O/rs2.txt)" | tee -a $O/call.txt
for t in synccheck racecheck; do
  timeout 60 compute-sanitizer --error-exitcode 1 --tool $t $C/rs2/kvtile_device_ring_sync > $O/rs2_$t.txt 2>&1
  echo "ring_sync $t rc=$? $(grep SUMMARY $O/rs2_$t.txt | cut -c10-)" | tee -a $O/call.txt
done
